package benchmarks

import (
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seedctl/seedctl/orchestrator"
)

func TestTInterval(t *testing.T) {
	// By hand: mean 2, sd 1 (n = 3), half-width 4.303 · 1/√3 = 2.484.
	m, lo, hi := TInterval([]float64{1, 2, 3})
	if m != 2 || math.Abs(lo-(2-4.303/math.Sqrt(3))) > 1e-9 || math.Abs(hi-(2+4.303/math.Sqrt(3))) > 1e-9 {
		t.Errorf("TInterval(1,2,3) = %v [%v, %v]", m, lo, hi)
	}
	if m, lo, _ := TInterval([]float64{5}); m != 5 || !math.IsNaN(lo) {
		t.Errorf("one value: %v %v", m, lo)
	}
	if tQuantile975(1) != 12.706 || tQuantile975(5) != 2.571 || tQuantile975(100) != 1.96 {
		t.Error("t quantiles")
	}
}

// Two committed arms (GRPO and SEED, seeds 1 and 2, from the committed
// base): gains, differences on the same seeds and the instruments.
func TestArmsMarkdown(t *testing.T) {
	load := func(name string, runs ...string) Arm {
		var dirs []string
		for _, r := range runs {
			dirs = append(dirs, filepath.Join("testdata", "arms", r))
		}
		a, err := LoadArm(name, dirs)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	grpo := load("grpo", "e7-grpo-fmt01-s2", "e7-grpo-fmt01-s1")
	seed := load("seed", "e7-seed-fmt01-s1", "e7-seed-fmt01-s2")
	if grpo.Runs[0].Seed != 1 || grpo.Runs[0].Base != 22 || math.Abs(grpo.Runs[0].Final-23.5) > 1e-9 || math.Abs(grpo.Runs[1].FinalT1-24.5) > 1e-9 {
		t.Errorf("grpo runs %+v", grpo.Runs)
	}
	md, err := ArmsMarkdown([]Arm{grpo, seed}, "grpo")
	if err != nil {
		t.Fatal(err)
	}
	// GRPO gains +1.5 and +4.0: mean +2.75, t-interval ±12.706·1.25/√2·√2 …
	_, lo, hi := TInterval([]float64{1.5, 4})
	for _, want := range []string{
		"| grpo | 2 | 22.5 → 25.2 | " + fmtCI(2.75, lo, hi),
		// SEED − GRPO on the same seeds: 22.5 − 23.5 and 27 − 27.
		"| seed | 2 | 22.5 → 24.8 |",
		fmtCI(TInterval([]float64{-1, 0})) + " (2)",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("table lacks %q:\n%s", want, md)
		}
	}
	if _, err := ArmsMarkdown([]Arm{grpo}, "ppo"); err == nil {
		t.Error("an unknown reference arm was accepted")
	}
	if _, err := LoadArm("twice", []string{filepath.Join("testdata", "arms", "e7-grpo-fmt01-s1"), filepath.Join("testdata", "arms", "e7-seed-fmt01-s1")}); err == nil || !strings.Contains(err.Error(), "seed 1") {
		t.Errorf("two runs of one seed in an arm: %v", err)
	}
}

// Every metric the benchmark tables read is one the runs write
// (orchestrator.MetricKeys): a renamed or misspelt key fails here instead
// of showing as a column of zeros.
func TestTablesReadCataloguedMetrics(t *testing.T) {
	keys := append([]string{"first_action_agreement", "success"}, diagKeys...)
	keys = append(keys, costKeys...)
	for _, in := range armInstruments {
		keys = append(keys, in.key)
	}
	for _, k := range keys {
		if !orchestrator.IsMetricKey(k) {
			t.Errorf("the tables read %q, which no run writes (orchestrator.MetricKeys)", k)
		}
	}
}
