package main

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seedctl/seedctl/tokenizer"
	"github.com/seedctl/seedctl/trainer"
)

func runApp(t *testing.T, args ...string) (string, error) {
	t.Helper()
	app := newApp()
	var out bytes.Buffer
	app.Writer = &out
	err := app.Run(append([]string{"seedctl", "--log-level", "warn"}, args...))
	return out.String(), err
}

func TestModelInitAndInspect(t *testing.T) {
	dir := t.TempDir()
	corpus := filepath.Join(dir, "corpus.txt")
	var lines []string
	for i := 0; i < 50; i++ {
		lines = append(lines, "You arrive at cabinet 1. On the cabinet 1, you see a mug 2.", "<|im_start|>user\\ngo to fridge 1<|im_end|>")
	}
	if err := os.WriteFile(corpus, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, arch := range []string{"qwen2", "qwen3", "llama"} {
		out := filepath.Join(dir, arch)
		if _, err := runApp(t, "model", "init", "--out", out, "--arch", arch, "--corpus", corpus, "--vocab-size", "300", "--layers", "1"); err != nil {
			t.Fatalf("model init --arch %s: %v", arch, err)
		}
		js, err := runApp(t, "model", "inspect", "--json", out)
		if err != nil {
			t.Fatalf("model inspect: %v", err)
		}
		var rep inspectReport
		if err := json.Unmarshal([]byte(js), &rep); err != nil {
			t.Fatalf("inspect JSON: %v\n%s", err, js)
		}
		if rep.Arch != arch || rep.Layers != 1 || rep.Tokenizer == nil || !rep.Tokenizer.ChatTemplate || len(rep.Problems) > 0 {
			t.Errorf("%s: inspect report %+v, tokenizer %+v", arch, rep, rep.Tokenizer)
		}
		if rep.Vocab != rep.Tokenizer.VocabSize || rep.DTypes["F32"] != rep.Params {
			t.Errorf("%s: vocab %d vs tokenizer %d, dtypes %v", arch, rep.Vocab, rep.Tokenizer.VocabSize, rep.DTypes)
		}
		// The checkpoint is usable end to end: tokenizer → model → decode.
		tok, tcfg, err := tokenizer.Load(out)
		if err != nil {
			t.Fatal(err)
		}
		m, err := trainer.LoadCheckpoint(out, trainer.ModelOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ids, _ := tok.Encode("You arrive at")
		eos, _ := tok.TokenID(tcfg.EOSToken)
		gen, err := m.Greedy(ids, 5, []int{eos}, true)
		if err != nil || len(gen) == 0 {
			t.Fatalf("%s: greedy: %v %v", arch, gen, err)
		}
		if _, err := tok.Decode(gen, tokenizer.DecodeOptions{}); err != nil {
			t.Errorf("%s: decoding generated ids: %v", arch, err)
		}
	}
	text, err := runApp(t, "model", "inspect", filepath.Join(dir, "qwen3"))
	if err != nil || !strings.Contains(text, "Qwen3ForCausalLM") || !strings.Contains(text, "chat template") {
		t.Errorf("inspect text: %v\n%s", err, text)
	}
}

func TestModelCommandErrors(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"model", "init", "--out", filepath.Join(dir, "x"), "--tokenizer", dir, "--corpus", filepath.Join(dir, "c.txt")}, "both given"},
		{[]string{"model", "init", "--out", filepath.Join(dir, "x"), "--corpus", filepath.Join(dir, "missing.txt")}, "--corpus"},
		{[]string{"model", "inspect", dir}, "config.json"},
		{[]string{"model", "inspect"}, "one checkpoint folder"},
	}
	for _, tt := range tests {
		_, err := runApp(t, tt.args...)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: err = %v, want it to mention %q", tt.args, err, tt.want)
		}
	}
	corpus := filepath.Join(dir, "c.txt")
	os.WriteFile(corpus, []byte("hello world\nhello there\n"), 0o644)
	_, err := runApp(t, "model", "init", "--out", filepath.Join(dir, "y"), "--corpus", corpus, "--arch", "gpt2")
	if err == nil || !strings.Contains(err.Error(), "--arch") {
		t.Errorf("bad arch: %v", err)
	}
}

// model refine names what is wrong with its input before any work.
func TestModelRefineRejectsBadInput(t *testing.T) {
	dir := t.TempDir()
	// A folder with a config.json gets past --model's check to refine's own.
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--rounds", "0"}, "rounds must be positive"},
		{[]string{"--keep-agreeing", "2"}, "keep_agreeing"},
		{[]string{}, "no recipe.json"},
	} {
		args := append([]string{"model", "refine", "--model", dir, "--out", filepath.Join(dir, "out")}, c.args...)
		_, err := runApp(t, args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want it to say %q", c.args, err, c.want)
		}
	}
}

// TestModelRealShapeAndMemcheck: model init makes a checkpoint of a
// released shape (here Qwen2.5-0.5B's, shrunk to two layers and a small
// hidden size by flags so the test stays small), and model memcheck runs
// RL steps on it and sets the measured peak beside the plan.
func TestModelRealShapeAndMemcheck(t *testing.T) {
	dir := t.TempDir()
	corpus := filepath.Join(dir, "corpus.txt")
	os.WriteFile(corpus, []byte(strings.Repeat("go to cabinet 1 and take the mug 2\n", 40)), 0o644)
	out := filepath.Join(dir, "m")
	if _, err := runApp(t, "model", "init", "--out", out, "--size", "qwen2.5-0.5b", "--corpus", corpus, "--vocab-size", "300",
		"--layers", "2", "--hidden", "64", "--intermediate", "128", "--heads", "4", "--kv-heads", "2"); err != nil {
		t.Fatalf("model init: %v", err)
	}
	info, err := trainer.InspectCheckpoint(out)
	if err != nil || info.Config.VocabSize != 151936 || info.Config.NumHiddenLayers != 2 || !info.Config.TieWordEmbeddings {
		t.Fatalf("released-shape checkpoint: %+v (%v)", info.Config, err)
	}
	rep, err := runApp(t, "model", "memcheck", "--model", out, "--tokens", "64", "--row", "32")
	if err != nil {
		t.Fatalf("memcheck: %v\n%s", err, rep)
	}
	for _, want := range []string{"LM head logits", "trainer peak", "measured: resident", "measured/predicted peak"} {
		if !strings.Contains(rep, want) {
			t.Errorf("memcheck output lacks %q:\n%s", want, rep)
		}
	}
	if _, err := runApp(t, "model", "memcheck", "--model", out, "--tokens", "16", "--row", "32"); err == nil {
		t.Error("rows longer than the micro-batch were accepted")
	}
}

// TestModelStepbench: model stepbench times the training step of a
// checkpoint (a tiny random one here), reports tokens/s, model FLOP/s,
// MFU against a given peak and the memory plan, as text and as the JSON
// the GPU check's PyTorch peer reads (the model's config included); bad
// input is refused with the flag named.
func TestModelStepbench(t *testing.T) {
	dir := t.TempDir()
	corpus := filepath.Join(dir, "corpus.txt")
	os.WriteFile(corpus, []byte(strings.Repeat("go to cabinet 1 and take the mug 2\n", 40)), 0o644)
	out := filepath.Join(dir, "m")
	if _, err := runApp(t, "model", "init", "--out", out, "--corpus", corpus, "--vocab-size", "300"); err != nil {
		t.Fatalf("model init: %v", err)
	}
	rep, err := runApp(t, "model", "stepbench", "--model", out, "--tokens", "64", "--row", "32", "--steps", "2", "--dtype", "float32", "--peak-tflops", "1", "--json")
	if err != nil {
		t.Fatalf("stepbench: %v\n%s", err, rep)
	}
	var res stepbenchResult
	if err := json.Unmarshal([]byte(rep), &res); err != nil {
		t.Fatalf("stepbench --json: %v\n%s", err, rep)
	}
	info, err := trainer.InspectCheckpoint(out)
	if err != nil {
		t.Fatal(err)
	}
	if res.TokensPerS <= 0 || len(res.Seconds) != 2 || res.FLOPsPerToken <= 0 || res.MFU <= 0 || res.PlanPeak <= res.PlanResident ||
		res.Config == nil || res.Config.VocabSize != info.Config.VocabSize || res.Params != info.Params || res.Tokens != 64 || res.Row != 32 || res.Attention == "" {
		t.Errorf("stepbench result incomplete: %+v", res)
	}
	if want := res.TokensPerS * res.FLOPsPerToken / 1e12; math.Abs(res.TFLOPs-want) > 1e-9*want {
		t.Errorf("model TFLOP/s %g, want tokens/s × FLOPs per token = %g", res.TFLOPs, want)
	}
	text, err := runApp(t, "model", "stepbench", "--model", out, "--tokens", "32", "--steps", "1", "--dtype", "float32")
	if err != nil || !strings.Contains(text, "tokens/s") || !strings.Contains(text, "memory plan") {
		t.Errorf("stepbench text output (%v):\n%s", err, text)
	}
	for _, bad := range [][]string{
		{"--model", out, "--tokens", "48", "--row", "32"}, // rows do not divide the tokens
		{"--size", "qwen9-1b"},
		{"--model", out, "--size", "qwen2.5-0.5b"},
		{"--model", out, "--recompute", "maybe"},
	} {
		if msg, err := runApp(t, append([]string{"model", "stepbench"}, bad...)...); err == nil {
			t.Errorf("stepbench %v accepted:\n%s", bad, msg)
		}
	}
}
