package benchmarks

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seedctl/seedctl/orchestrator"
)

func TestPairedBootstrap(t *testing.T) {
	ones, zeros := strings.Repeat("1", 50), strings.Repeat("0", 50)
	// Identical runs: no difference and no width.
	ci, err := pairedBootstrap([]string{ones[:25] + zeros[:25], zeros}, []string{ones[:25] + zeros[:25], zeros})
	if err != nil || ci.Diff != 0 || ci.Lo != 0 || ci.Hi != 0 || ci.Seeds != 2 || ci.Tasks != 50 {
		t.Errorf("identical runs: %+v %v", ci, err)
	}
	// SEED wins everything GRPO loses: +100 exactly.
	if ci, _ := pairedBootstrap([]string{ones}, []string{zeros}); ci.Diff != 100 || ci.Lo != 100 || ci.Hi != 100 {
		t.Errorf("all against nothing: %+v", ci)
	}
	// By hand: seed 1 differs on 2 of 4 tasks (+1, +1), seed 2 on one (-1):
	// (2 - 1) / 8 = +12.5 points.
	if ci, _ := pairedBootstrap([]string{"1100", "0000"}, []string{"0000", "0010"}); ci.Diff != 12.5 || ci.Lo > ci.Diff || ci.Hi < ci.Diff {
		t.Errorf("by hand: %+v, want diff 12.5 inside the interval", ci)
	}
	// Random outcomes: the interval holds the difference and narrows with
	// more tasks.
	r := rand.New(rand.NewPCG(1, 2))
	gen := func(n int, p float64) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = '0'
			if r.Float64() < p {
				b[i] = '1'
			}
		}
		return string(b)
	}
	small, _ := pairedBootstrap([]string{gen(50, 0.4), gen(50, 0.4), gen(50, 0.4)}, []string{gen(50, 0.3), gen(50, 0.3), gen(50, 0.3)})
	large, _ := pairedBootstrap([]string{gen(800, 0.4), gen(800, 0.4), gen(800, 0.4)}, []string{gen(800, 0.3), gen(800, 0.3), gen(800, 0.3)})
	for _, c := range []PairedCI{small, large} {
		if c.Lo > c.Diff || c.Hi < c.Diff || c.Lo >= c.Hi {
			t.Errorf("interval %v does not hold its difference", c)
		}
	}
	if large.Hi-large.Lo >= small.Hi-small.Lo {
		t.Errorf("800 tasks gave %v, 50 gave %v: no narrower", large, small)
	}
	if large.Lo < 0 || large.Hi > 20 {
		t.Errorf("true difference +10 on 800 tasks × 3 seeds: %v", large)
	}
	for _, bad := range [][2][]string{{{}, {}}, {{"11"}, {"1"}}, {{"1"}, {"1", "0"}}, {{""}, {""}}} {
		if _, err := pairedBootstrap(bad[0], bad[1]); err == nil {
			t.Errorf("%q vs %q: no error", bad[0], bad[1])
		}
	}
}

func TestSeedVsGRPO(t *testing.T) {
	out := func(algo string, share float64, seed int64, wins string) Outcome {
		return Outcome{Experiment: Experiment{Algo: algo, DataShare: share, Seed: seed}, Done: true, Final: &orchestrator.EvalPoint{SeenWins: wins}}
	}
	outs := []Outcome{
		out(orchestrator.AlgoGRPO, 1, 1, "0000"), out(orchestrator.AlgoGRPO, 1, 2, "1000"),
		out(orchestrator.AlgoGRPO, 0.4, 1, "1111"), // GRPO at a share is not the reference
		out(orchestrator.AlgoSEED, 1, 1, "1100"), out(orchestrator.AlgoSEED, 1, 2, "1100"),
		out(orchestrator.AlgoSEED, 0.4, 1, "1000"),
		out(orchestrator.AlgoSEED, 0.4, 3, "1111"), // no GRPO run with seed 3
		out(orchestrator.AlgoSEED, 0.2, 1, ""),     // a run without per-task outcomes
	}
	got := seedVsGRPO(outs)
	if c := got["100%"]; c.Seeds != 2 || c.Diff != 37.5 {
		t.Errorf("100%%: %+v, want 2 seeds, +37.5", c)
	}
	if c := got["40%"]; c.Seeds != 1 || c.Diff != 25 {
		t.Errorf("40%%: %+v, want 1 seed, +25", c)
	}
	if _, ok := got["20%"]; ok {
		t.Error("a share without per-task outcomes got an interval")
	}
	// The control: SEED − GRPO at 40% (seed 1 only: 1000 − 1111), GRPO at
	// 40% − GRPO at 100% (1111 − 0000); no 100% row in either.
	same, control := seedVsGRPOSameShare(outs), grpoShareVsFull(outs)
	if c := same["40%"]; len(same) != 1 || c.Seeds != 1 || c.Diff != -75 {
		t.Errorf("SEED − GRPO at the same share: %+v, want only 40%%: 1 seed, −75", same)
	}
	if c := control["40%"]; len(control) != 1 || c.Seeds != 1 || c.Diff != 100 {
		t.Errorf("GRPO@share − GRPO@100%%: %+v, want only 40%%: 1 seed, +100", control)
	}
	if m := grpoShareVsFull(outs[:2]); m != nil {
		t.Errorf("no GRPO below 100%%: %+v, want none", m)
	}
	dir := t.TempDir()
	spec := Spec{Base: orchestrator.Default(), Algos: []string{"grpo", "seed"}, Shares: []float64{0.2, 0.4}, Seeds: []int64{1, 2, 3}}
	if err := WriteResults(dir, spec, outs, 0); err != nil {
		t.Fatal(err)
	}
	md, _ := os.ReadFile(filepath.Join(dir, "results.md"))
	if !strings.Contains(string(md), "| 40% | -75.0 [-100.0, -25.0] | 1 × 4 | +100.0 [+100.0, +100.0] | 1 × 4 |") {
		t.Errorf("results.md lacks the control's row:\n%s", md)
	}
}

// The interval resamples seeds: two seeds that disagree completely (one
// +100 on every task, the other −100) have mean 0 but an interval as wide
// as their disagreement; resampling tasks alone would give [0, 0].
func TestPairedBootstrapResamplesSeeds(t *testing.T) {
	ones, zeros := strings.Repeat("1", 40), strings.Repeat("0", 40)
	ci, err := pairedBootstrap([]string{ones, zeros}, []string{zeros, ones})
	if err != nil {
		t.Fatal(err)
	}
	if ci.Diff != 0 || ci.Lo > -99 || ci.Hi < 99 {
		t.Errorf("seeds at +100 and −100: %v, want 0 within about [−100, +100]", ci)
	}
	// And tasks: one seed, half the tasks +100 and half −100.
	ci, _ = pairedBootstrap([]string{ones[:20] + zeros[:20]}, []string{zeros[:20] + ones[:20]})
	if ci.Diff != 0 || ci.Lo > -20 || ci.Hi < 20 {
		t.Errorf("tasks at +100 and −100: %v, want 0 within a wide interval", ci)
	}
}
