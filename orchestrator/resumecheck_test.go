package orchestrator

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/seedctl/seedctl/internal/ckpthash"
	"github.com/seedctl/seedctl/rollout"
	"github.com/seedctl/seedctl/skills"
)

// fakeRunFolder writes a run folder as the loop leaves it after two
// iterations of algo (stage 1 first when the algo has one), without
// training: config.json, state.json with its config and file records,
// the checkpoints and metrics.jsonl. It returns the folder.
func fakeRunFolder(t *testing.T, algo string) string {
	t.Helper()
	root := t.TempDir()
	base := filepath.Join(root, "base")
	os.MkdirAll(base, 0o755)
	os.WriteFile(filepath.Join(base, "model.safetensors"), []byte("base weights"), 0o644)
	cfg := Default()
	cfg.Algo, cfg.Model, cfg.Name, cfg.RunsDir = algo, base, "r", root
	d := runDir(filepath.Join(root, "r"))
	os.MkdirAll(string(d), 0o755)
	if err := writeJSON(d.config(), cfg); err != nil {
		t.Fatal(err)
	}
	st := &State{Version: stateVersion, Algo: algo, Seed: 1, Iteration: 2, Checkpoint: "checkpoints/iter-2", Reference: base, Updated: time.Now(),
		BaseEval: &EvalPoint{Seen: 0.2, Episodes: 10}}
	if cfg.UsesSFT() {
		st.Stage1Done, st.Reference = true, "checkpoints/stage1"
		os.MkdirAll(d.checkpoint("stage1"), 0o755)
		os.WriteFile(filepath.Join(d.checkpoint("stage1"), "model.safetensors"), []byte("stage1 weights"), 0o644)
	}
	os.MkdirAll(d.checkpoint("iter-2"), 0o755)
	os.WriteFile(filepath.Join(d.checkpoint("iter-2"), "model.safetensors"), []byte("iter-2 weights"), 0o644)
	if h, err := ckpthash.Weights(base); err == nil {
		st.BaseWeights = h
	}
	if err := recordConfig(d, st); err != nil {
		t.Fatal(err)
	}
	rels := []string{st.Checkpoint}
	if st.Stage1Done {
		rels = append(rels, st.Reference)
	}
	sums, err := sumFiles(d, rels...)
	if err != nil {
		t.Fatal(err)
	}
	st.Files = sums
	if err := writeJSON(d.state(), st); err != nil {
		t.Fatal(err)
	}
	lines := []MetricsLine{{Kind: "eval", Iteration: 0, Split: "eval_seen", Values: map[string]float64{"success": 0.2}}}
	for k := 1; k <= 2; k++ {
		lines = append(lines, MetricsLine{Kind: "iteration", Iteration: k, Values: map[string]float64{"success": 0.1 * float64(k)}})
	}
	if err := appendMetrics(d.metrics(), lines...); err != nil {
		t.Fatal(err)
	}
	return string(d)
}

// unwired is the error a sound folder reaches once every check passed:
// the test's dependencies have no learner.
const unwired = "NewLearner and OpenBackend must be wired"

func editJSONFile(t *testing.T, path string, edit func(m map[string]any)) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	edit(m)
	out, _ := json.MarshalIndent(m, "", "  ")
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
}

// A resume trusts nothing in the folder it can check ([hardening-2] 2):
// each damaged folder is refused with what is wrong, before anything is
// loaded, trained or deleted; the sound one goes on.
func TestResumeRefusesWhatItCannotTrust(t *testing.T) {
	deps := Deps{Log: zerolog.Nop()}
	state := func(edit func(m map[string]any)) func(d string) {
		return func(d string) { editJSONFile(t, filepath.Join(d, "state.json"), edit) }
	}
	for _, c := range []struct {
		name, algo, want string
		damage           func(d string)
	}{
		{"sound", AlgoGRPO, unwired, func(string) {}},
		{"sound with stage 1", AlgoSEED, unwired, func(string) {}},
		{"checkpoint outside the folder", AlgoGRPO, "not this run's", state(func(m map[string]any) { m["checkpoint"] = "../../other/checkpoints/stage1" })},
		{"checkpoint another model", AlgoGRPO, "not this run's", state(func(m map[string]any) { m["checkpoint"] = "/models/other" })},
		{"checkpoint back to stage 1", AlgoSEED, "not this run's", state(func(m map[string]any) { m["checkpoint"] = "checkpoints/stage1" })},
		{"iteration below the checkpoint's", AlgoGRPO, "not this run's", state(func(m map[string]any) { m["iteration"] = 1 })},
		{"stage 1 undone after iterations", AlgoSEED, "fine-tune stage 1 again", state(func(m map[string]any) { m["stage1_done"] = false })},
		{"stage 1 done without one", AlgoGRPO, "has none", state(func(m map[string]any) { m["stage1_done"] = true })},
		{"reference elsewhere", AlgoSEED, "reference", state(func(m map[string]any) { m["reference"] = "checkpoints/iter-2" })},
		{"no file sums", AlgoGRPO, "no file sums", state(func(m map[string]any) { m["files"] = map[string]any{} })},
		{"base weights changed", AlgoGRPO, "changed since the run started (weights", func(d string) {
			os.WriteFile(filepath.Join(filepath.Dir(d), "base", "model.safetensors"), []byte("other weights"), 0o644)
		}},
		{"base weights changed after stage 1", AlgoSEED, unwired, func(d string) { // no longer in use
			os.WriteFile(filepath.Join(filepath.Dir(d), "base", "model.safetensors"), []byte("other weights"), 0o644)
		}},
		{"base checkpoint before training", AlgoGRPO, "inside the run folder", state(func(m map[string]any) { m["iteration"] = 0; m["checkpoint"] = "checkpoints/iter-2" })},
		{"config changed", AlgoGRPO, "keys rl.lr", func(d string) {
			editJSONFile(t, filepath.Join(d, "config.json"), func(m map[string]any) { m["rl"].(map[string]any)["lr"] = 1e-3 })
		}},
		{"algo and seed changed", AlgoGRPO, "keys algo, seed", func(d string) {
			editJSONFile(t, filepath.Join(d, "config.json"), func(m map[string]any) { m["algo"], m["seed"] = AlgoSEEDNoSFT, 7 })
		}},
		{"config only re-indented", AlgoGRPO, unwired, func(d string) {
			b, _ := os.ReadFile(filepath.Join(d, "config.json"))
			os.WriteFile(filepath.Join(d, "config.json"), []byte(strings.ReplaceAll(string(b), "  ", "\t")), 0o644)
		}},
		{"metrics line dropped", AlgoGRPO, "iterations 2 (0 lines)", func(d string) {
			b, _ := os.ReadFile(filepath.Join(d, "metrics.jsonl"))
			ls := strings.SplitAfter(string(b), "\n")
			os.WriteFile(filepath.Join(d, "metrics.jsonl"), []byte(strings.Join(ls[:2], "")), 0o644)
		}},
		{"metrics line repeated", AlgoGRPO, "iterations 1 (2 lines)", func(d string) {
			b, _ := os.ReadFile(filepath.Join(d, "metrics.jsonl"))
			ls := strings.SplitAfter(string(b), "\n")
			os.WriteFile(filepath.Join(d, "metrics.jsonl"), []byte(ls[0]+ls[1]+ls[1]+ls[2]), 0o644)
		}},
		{"metrics line torn in the middle", AlgoGRPO, "metrics.jsonl", func(d string) {
			b, _ := os.ReadFile(filepath.Join(d, "metrics.jsonl"))
			ls := strings.SplitAfter(string(b), "\n")
			os.WriteFile(filepath.Join(d, "metrics.jsonl"), []byte(ls[0]+ls[1][:len(ls[1])/2]+"\n"+ls[2]), 0o644)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := fakeRunFolder(t, c.algo)
			c.damage(d)
			_, err := Resume(context.Background(), d, deps)
			t.Log(err)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("resume said %v, want an error saying %q", err, c.want)
			}
			for _, ck := range []string{"iter-2"} {
				if _, err := os.Stat(filepath.Join(d, "checkpoints", ck, "model.safetensors")); err != nil {
					t.Errorf("the checkpoint %s is gone after the resume: %v", ck, err)
				}
			}
		})
	}
}

// A changed config.json resumes only when the flag names exactly the
// changed keys; the change is then recorded, and the next resume sees
// the new file as the run's.
func TestResumeAcceptsANamedConfigChange(t *testing.T) {
	d := fakeRunFolder(t, AlgoGRPO)
	editJSONFile(t, filepath.Join(d, "config.json"), func(m map[string]any) { m["rl"].(map[string]any)["lr"] = 1e-3 })
	for _, accept := range [][]string{{"rl.clip_eps"}, {"rl.lr", "seed"}} {
		if _, err := Resume(context.Background(), d, Deps{Log: zerolog.Nop(), AcceptConfigChange: accept}); err == nil || !strings.Contains(err.Error(), "--accept-config-change rl.lr") {
			t.Errorf("accepting %v: %v, want a refusal naming rl.lr", accept, err)
		}
	}
	if _, err := Resume(context.Background(), d, Deps{Log: zerolog.Nop(), AcceptConfigChange: []string{"rl.lr"}}); err == nil || !strings.Contains(err.Error(), unwired) {
		t.Fatalf("accepting rl.lr: %v", err)
	}
	st, err := readState(runDir(d))
	if err != nil {
		t.Fatal(err)
	}
	if len(st.ConfigChanges) != 1 || st.ConfigChanges[0].AfterIteration != 2 || strings.Join(st.ConfigChanges[0].Keys, ",") != "rl.lr" {
		t.Errorf("recorded changes %+v", st.ConfigChanges)
	}
	if _, err := Resume(context.Background(), d, Deps{Log: zerolog.Nop()}); err == nil || !strings.Contains(err.Error(), unwired) {
		t.Errorf("the next resume, nothing changed since: %v", err)
	}
}

// stage1.held_out keeps whole groups, the last ones, out of stage 1's
// training, and never every group.
func TestSplitHeldOut(t *testing.T) {
	var trajs []*rollout.Trajectory
	var recs []skills.Record
	for g := range 3 {
		for s := range 2 {
			id := fmt.Sprintf("t%d-%d", g, s)
			trajs = append(trajs, &rollout.Trajectory{ID: id, Group: g})
			recs = append(recs, skills.Record{TrajectoryID: id})
		}
	}
	for _, c := range []struct{ n, held int }{{0, 0}, {1, 2}, {2, 2}, {3, 4}, {6, 4}, {99, 4}} {
		keepRecs, keep, h := splitHeldOut(recs, trajs, c.n)
		if len(h.trajs) != c.held || len(h.recs) != c.held || len(keep) != 6-c.held || len(keepRecs) != 6-c.held {
			t.Errorf("n %d: held %d trajectories and %d records, kept %d and %d; want %d held", c.n, len(h.trajs), len(h.recs), len(keep), len(keepRecs), c.held)
			continue
		}
		for _, x := range h.trajs {
			if x.Group == 0 {
				t.Errorf("n %d: the first group is held out too", c.n)
			}
		}
	}
}
