package orchestrator

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeRun writes a run directory with the given rollout successes and evals.
func fakeRun(t *testing.T, root, name, algo string, rollout []float64, final *EvalPoint) string {
	t.Helper()
	d := runDir(filepath.Join(root, name))
	cfg := validConfig()
	cfg.Name, cfg.Algo = name, algo
	st := &State{Version: stateVersion, Algo: algo, Iteration: len(rollout), BaseEval: &EvalPoint{Seen: 0.06, Unseen: 0.04, Episodes: 50},
		FinalEval: final, Done: final != nil, Seconds: 1260}
	if err := writeJSON(d.config(), cfg); err != nil {
		t.Fatal(err)
	}
	if err := writeJSON(d.state(), st); err != nil {
		t.Fatal(err)
	}
	var lines []MetricsLine
	for i, v := range rollout {
		lines = append(lines, MetricsLine{Kind: "iteration", Iteration: i + 1, Values: map[string]float64{"success": v}})
		if i == 1 {
			lines = append(lines, MetricsLine{Kind: "eval", Iteration: 2, Split: "eval_seen", Values: map[string]float64{"success": 0.1, "episodes": 50}},
				MetricsLine{Kind: "eval", Iteration: 2, Split: "eval_unseen", Values: map[string]float64{"success": 0.02, "episodes": 50}})
		}
	}
	// A line of an iteration the state has not finished (a killed run).
	lines = append(lines, MetricsLine{Kind: "iteration", Iteration: len(rollout) + 1, Values: map[string]float64{"success": 0.99}})
	if err := appendMetrics(d.metrics(), lines...); err != nil {
		t.Fatal(err)
	}
	return string(d)
}

func TestCompareRuns(t *testing.T) {
	root := t.TempDir()
	g := fakeRun(t, root, "mem8-grpo", AlgoGRPO, []float64{0.016, 0.047, 0.094, 0.14, 0.219, 0.219}, &EvalPoint{Iteration: 6, Seen: 0.08, Unseen: 0.02, Episodes: 50})
	s := fakeRun(t, root, "mem8-seed", AlgoSEED, []float64{0.03, 0.05, 0.06}, nil)
	out := filepath.Join(root, "cmp")
	runs, err := CompareRuns([]string{g, s}, out)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs[1].Rollout) != 3 {
		t.Errorf("the unfinished run has %d rollout points, want the 3 its state finished", len(runs[1].Rollout))
	}
	md, err := os.ReadFile(filepath.Join(out, "compare.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| mem8-grpo | grpo | 6 | 1.6 | 19.3 | 6.0 → 8.0 | 4.0 → 2.0 | 50 | 21 min |",
		// Not finished: its latest eval comes from the metrics lines.
		"| mem8-seed (unfinished) | seed | 3 | 3.0 | 4.7 | 6.0 → 10.0 | 4.0 → 2.0 | 50 | 21 min |",
	} {
		if !strings.Contains(string(md), want) {
			t.Errorf("compare.md lacks %q:\n%s", want, md)
		}
	}
	if fi, err := os.Stat(filepath.Join(out, "compare.png")); err != nil || fi.Size() == 0 {
		t.Errorf("compare.png: %v", err)
	}
	if _, err := CompareRuns([]string{filepath.Join(root, "nope")}, out); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("a missing run: %v", err)
	}
}
