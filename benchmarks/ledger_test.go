package benchmarks

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/seedctl/seedctl/internal/dirlock"
	"github.com/seedctl/seedctl/orchestrator"
)

func TestLedgerRoundTrip(t *testing.T) {
	out := t.TempDir()
	a := outcome("grpo", 1, 1, 0.3, 0.1, 100)
	a.Final.SeenWins = "0110"
	b := outcome("seed", 0.4, 2, 0.35, 0.12, 150)
	skipped := Outcome{Experiment: Experiment{Algo: "seed", DataShare: 1, Seed: 3}, Skipped: "time budget"}
	old := map[string]record{"rft-share100-seed1": {Experiment: Experiment{Algo: "rft", DataShare: 1, Seed: 1}, Model: "/x/m", Final: &orchestrator.EvalPoint{Seen: 0.2}}}
	if err := writeLedger(out, "/cache/base-models/tiny-v12-abc", "0612af9baf770cf0", []Outcome{a, b, skipped}, old); err != nil {
		t.Fatal(err)
	}
	got, err := readLedger(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("ledger has %d records, want the 2 finished and the earlier one: %v", len(got), got)
	}
	r := got[a.Name()]
	if r.Model != "/cache/base-models/tiny-v12-abc" || r.Weights != "0612af9baf770cf0" || r.Final.SeenWins != "0110" || r.Seconds != a.Seconds || !reflect.DeepEqual(r.Metrics, a.Metrics) {
		t.Errorf("record of %s: %+v", a.Name(), r)
	}
	if o := got[b.Name()].outcome(); !o.Done || !o.FromLedger || o.Final.Seen != 0.35 || o.DataShare != 0.4 {
		t.Errorf("outcome from the record: %+v", o)
	}
	if _, ok := got["rft-share100-seed1"]; !ok {
		t.Error("an earlier record outside the grid was dropped")
	}
	if _, ok := got[skipped.Name()]; ok {
		t.Error("an unfinished experiment was recorded")
	}

	// A line torn by a kill is dropped; a bad line inside is an error.
	path := filepath.Join(out, LedgerFile)
	full, _ := os.ReadFile(path)
	if err := os.WriteFile(path, append(append([]byte(nil), full...), []byte(`{"algo":"grpo","data_sh`)...), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := readLedger(out); err != nil || len(got) != 3 {
		t.Errorf("torn last line: %d records, %v", len(got), err)
	}
	if err := os.WriteFile(path, append([]byte("{not json}\n"), full...), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readLedger(out); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("bad first line: %v", err)
	}
	if got, err := readLedger(t.TempDir()); err != nil || len(got) != 0 {
		t.Errorf("no ledger: %v %v", got, err)
	}
	for _, tt := range []struct {
		a, wa, b, wb string
		want         bool
	}{
		{"/root/.cache/seedctl/base-models/tiny-v12-abc", "", "/home/u/.cache/seedctl/base-models/tiny-v12-abc/", "", true},
		{"/c/tiny-v12-abc", "", "/c/tiny-v12-def", "", false},
		{"/c/tiny-v12-abc", "0612af9baf770cf0", "/d/tiny-v12-abc", "0612af9baf770cf0", true},
		{"/c/tiny-v12-abc", "0612af9baf770cf0", "/c/tiny-v12-abc", "77aa00bb11cc22dd", false}, // the same recipe built on another CPU
		{"/c/tiny-v12-abc", "0612af9baf770cf0", "/c/tiny-v12-abc", "", true},                  // a record without weights: the name decides
	} {
		if got := sameModel(tt.a, tt.wa, tt.b, tt.wb); got != tt.want {
			t.Errorf("sameModel(%q, %q, %q, %q) = %v", tt.a, tt.wa, tt.b, tt.wb, got)
		}
	}
	dir := t.TempDir()
	if weightsDigest(dir) != "" || weightsDigest("Qwen/Qwen2.5-3B-Instruct") != "" {
		t.Error("a digest without weights")
	}
	if err := os.WriteFile(filepath.Join(dir, "model.safetensors"), []byte("abc"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := weightsDigest(dir); got != "ba7816bf8f01cfea" { // sha256("abc")
		t.Errorf("weightsDigest = %q", got)
	}
}

// A results folder whose run folders are gone (another machine) still
// reports every run its ledger holds, and grows from there.
func TestRunReadsTheLedgerWhenRunFoldersAreGone(t *testing.T) {
	out := t.TempDir()
	model := "/cache/base-models/tiny-v12-abc"
	var outs []Outcome
	for _, seed := range []int64{1, 2} {
		g := outcome("grpo", 1, seed, 0.25, 0.1, 100)
		g.Final.SeenWins = "0101"
		s := outcome("seed", 1, seed, 0.5, 0.1, 150)
		s.Final.SeenWins = "1101"
		outs = append(outs, g, s)
	}
	if err := writeLedger(out, model, "", outs, nil); err != nil {
		t.Fatal(err)
	}
	base := orchestrator.Default()
	base.Model, base.Eval.Episodes = model, 4
	spec := Spec{Base: base, Algos: []string{"grpo", "seed"}, Shares: []float64{1}, Seeds: []int64{1, 2}, ReportOnly: true}
	got, err := Run(context.Background(), spec, out, orchestrator.Deps{}, io.Discard, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 {
		t.Fatalf("%d outcomes, want 4", len(got))
	}
	for _, o := range got {
		if !o.Done || !o.FromLedger || o.Final == nil {
			t.Errorf("%s: %+v", o.Name(), o)
		}
	}
	md, err := os.ReadFile(filepath.Join(out, "results.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"4 of the runs", LedgerFile, "| grpo | 25.0 ± 0.0", "| seed | 50.0 ± 0.0"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("results.md lacks %q:\n%s", want, md)
		}
	}
	// Made on another base model: not reused (a report-only run then has
	// nothing finished).
	spec.Base.Model = "/cache/base-models/tiny-v13-def"
	got, err = Run(context.Background(), spec, out, orchestrator.Deps{}, io.Discard, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range got {
		if o.Done || o.FromLedger {
			t.Errorf("%s reused from a record made on another model", o.Name())
		}
	}
	// and the records stay for the model they were made on.
	if recs, _ := readLedger(out); len(recs) != 4 {
		t.Errorf("ledger lost records: %d", len(recs))
	}
	// The same folder name with other weights (the recipe built on another
	// CPU): not reused either.
	other := filepath.Join(t.TempDir(), "tiny-v12-abc")
	if err := os.MkdirAll(other, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(other, "model.safetensors"), []byte("abc"), 0o644); err != nil {
		t.Fatal(err)
	}
	out2 := t.TempDir()
	if err := writeLedger(out2, model, "0612af9baf770cf0", outs, nil); err != nil {
		t.Fatal(err)
	}
	spec.Base.Model = other
	if got, err = Run(context.Background(), spec, out2, orchestrator.Deps{}, io.Discard, zerolog.Nop()); err != nil {
		t.Fatal(err)
	}
	for _, o := range got {
		if o.FromLedger {
			t.Errorf("%s reused from a record of other weights under the same name", o.Name())
		}
	}
}

// One bench per results folder.
func TestRunRefusesAFolderInUse(t *testing.T) {
	out := t.TempDir()
	unlock, err := dirlock.Lock(out, "bench.lock", "bench results folder")
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	base := orchestrator.Default()
	base.Model = "/m"
	spec := Spec{Base: base, Algos: []string{"grpo"}, Shares: []float64{1}, Seeds: []int64{1}, ReportOnly: true}
	if _, err := Run(context.Background(), spec, out, orchestrator.Deps{}, io.Discard, zerolog.Nop()); !errors.Is(err, dirlock.ErrInUse) {
		t.Errorf("a bench on a folder in use: %v", err)
	}
}
