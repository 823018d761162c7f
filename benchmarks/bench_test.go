package benchmarks

import (
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/seedctl/seedctl/orchestrator"
)

func outcome(algo string, share float64, seed int64, seen, unseen, iterS float64) Outcome {
	vals := map[string]float64{"success": seen, "iteration_s": iterS, "rollout_s": iterS / 2}
	if algo == "seed" {
		for k, v := range map[string]float64{"skill_share": 0.5, "skill_parse_ok": 0.25, "gate_mean": 0.47, "positive_shift": 0.4, "mean_shift": -0.1, "opd_loss": 0.02, "analysis_tokens": 900,
			"decision_share": 0.1, "decision_gate_mean": 0.62, "decision_positive_shift": 0.7, "decision_mean_shift": 0.3,
			"decision_mean_shift_pos_adv": 0.5} {
			vals[k] = v
		}
	}
	lines := []orchestrator.MetricsLine{{Kind: "iteration", Iteration: 1, Values: vals}}
	if algo != "static-skill" { // runs from before the metric have none
		vals["first_action_agreement"] = 0.9
		last := map[string]float64{}
		for k, v := range vals {
			last[k] = v
		}
		last["first_action_agreement"], last["success"] = 0.8, seen+0.1
		lines = append(lines, orchestrator.MetricsLine{Kind: "iteration", Iteration: 2, Values: last})
	}
	return Outcome{Experiment: Experiment{Algo: algo, DataShare: share, Seed: seed}, Done: true, Seconds: 60,
		Base:    &orchestrator.EvalPoint{Seen: 0.1, Unseen: 0.05},
		Final:   &orchestrator.EvalPoint{Seen: seen, Unseen: unseen, UnseenByFamily: map[string]float64{"heat": unseen}},
		Metrics: lines}
}

func TestSummarizeTables(t *testing.T) {
	outs := []Outcome{
		outcome("grpo", 1, 1, 0.50, 0.30, 10), outcome("grpo", 1, 2, 0.60, 0.40, 10),
		outcome("seed", 1, 1, 0.70, 0.50, 13), outcome("seed", 1, 2, 0.80, 0.60, 13),
		outcome("seed", 0.4, 1, 0.56, 0.3, 13), outcome("seed", 0.4, 2, 0.56, 0.3, 13),
		outcome("grpo", 0.4, 1, 0.30, 0.2, 10), outcome("static-skill", 1, 1, 0.40, 0.2, 10),
		{Experiment: Experiment{Algo: "grpo", DataShare: 0.4, Seed: 2}, Skipped: "time budget 1m spent"},
	}
	f := Summarize(outs)
	if s := f.Main["seed"]["seen"]; math.Abs(s.Mean-75) > 1e-9 || math.Abs(s.Std-math.Sqrt(50)) > 1e-9 || s.N != 2 {
		t.Errorf("SEED seen %+v, want 75 ± 7.07 over 2 seeds", s)
	}
	if p := f.Main["prompting-only"]["seen"]; p.N != 2 || math.Abs(p.Mean-10) > 1e-9 {
		t.Errorf("prompting-only counted %d times, mean %v (want once per seed, 10)", p.N, p.Mean)
	}
	// GRPO at 100% scores 55; SEED reaches 56 with 40% of the tasks.
	if f.ShareNeeded != "40%" {
		t.Errorf("share needed %q, want 40%%", f.ShareNeeded)
	}
	if math.Abs(f.CostRatio-1.3) > 1e-9 {
		t.Errorf("cost ratio %v, want 1.3", f.CostRatio)
	}
	if f.RunsTotal != "8m0s" || f.HasScore {
		t.Errorf("runs total %q (want 8m0s, eight finished runs of a minute), has score %v (household reports none)", f.RunsTotal, f.HasScore)
	}
	if _, ok := f.Exploration["static-skill"]; ok {
		t.Errorf("static-skill's runs have no first-action agreement, yet T7 has a row: %v", f.Exploration["static-skill"])
	}
	if _, ok := f.Diagnostics["grpo"]; ok {
		t.Errorf("GRPO has distillation diagnostics: %v", f.Diagnostics["grpo"])
	}
	// The share runs have their own T6 and T7 rows, and stay out of T4.
	if d := f.Diagnostics["seed @40%"]["gate_mean"]; d.N != 4 { // 2 runs × 2 iterations
		t.Errorf("T6 row of SEED with 40%% of the tasks: %+v", f.Diagnostics["seed @40%"])
	}
	if e := f.Exploration["grpo @40%"]["agreement_first"]; e.N != 1 {
		t.Errorf("T7 row of GRPO with 40%% of the tasks: %+v", f.Exploration["grpo @40%"])
	}
	if c := f.Cost["seed"]["iteration_s"]; c.N != 4 { // the 2 full-share runs × 2 iterations
		t.Errorf("T4 counts the share runs: %+v", c)
	}
	if len(f.Skipped) != 1 {
		t.Errorf("skipped %v", f.Skipped)
	}
	dir := t.TempDir()
	spec := Spec{Base: orchestrator.Default(), Algos: []string{"grpo", "seed", "static-skill"}, Shares: []float64{0.4}, Seeds: []int64{1, 2}}
	spec.Base.Eval.Episodes = EmbeddedEvalEpisodes
	if err := WriteResults(dir, spec, outs, 0); err != nil {
		t.Fatal(err)
	}
	md, _ := os.ReadFile(filepath.Join(dir, "results.md"))
	for _, want := range []string{"| seed | 75.0 ± 7.1 | 55.0 ± 7.1 |", "**40%**", "| heat | 35.0 ± 7.1 | 55.0 ± 7.1 |", "**1.30**", "time budget 1m spent",
		"| static-skill | 40.0 (1 of 2 seeds) | 20.0 (1 of 2 seeds) |",
		"| seed | 0.90 ± 0.00 | 0.80 ± 0.00 | 75.0 ± 7.1 | 85.0 ± 7.1 |", "| grpo | 0.90 ± 0.00 | 0.80 ± 0.00 | 55.0 ± 7.1 | 65.0 ± 7.1 |",
		"| seed | 50.0 ± 0.0 | 25.0 ± 0.0 | 0.47 ± 0.00 | 40.0 ± 0.0 | -0.100 ± 0.000 | 0.020 ± 0.000 | 10.0 ± 0.0 | 0.62 ± 0.00 | 70.0 ± 0.0 | 0.300 ± 0.000 | 0.500 ± 0.000 | — |",
		"| seed | 6.5 ± 0.0 | 0.0 ± 0.0 | 0.0 ± 0.0 | 0.0 ± 0.0 | 0.0 ± 0.0 | 13.0 ± 0.0 | 900.0 ± 0.0 |"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("results.md lacks %q:\n%s", want, md)
		}
	}
	// T1 means 55 (GRPO), 75 (SEED), 40 (static) and 10 (base) → p = 45%; the
	// bench's evals have 50 tasks: √(0.45·0.55/50) = 7.0 points.
	if !strings.Contains(string(md), "standard error of about 7.0 points at the table's mean success (45%)") {
		t.Errorf("results.md lacks the eval noise line:\n%s", md)
	}
	if strings.Contains(string(md), "| score |") || !strings.Contains(string(md), "wall time of the finished runs 8m0s") {
		t.Errorf("results.md shows a score column without scores, or lacks the runs' wall time:\n%s", md)
	}
	for _, f := range []string{"figures.json", "learning_curves.png", "data_share.png"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
	// `--shares 1` (T1 alone): T2 has the one 100% column.
	t1 := spec
	t1.Shares = []float64{1}
	if strings.Contains(string(md), "this invocation") {
		t.Errorf("a rewrite that ran nothing reports its own time:\n%s", md)
	}
	if err := WriteResults(dir, t1, outs[:4], 90*time.Second); err != nil {
		t.Fatal(err)
	}
	md, _ = os.ReadFile(filepath.Join(dir, "results.md"))
	if !strings.Contains(string(md), "(this invocation 1m30s)") {
		t.Errorf("the invocation's time is missing:\n%s", md)
	}
	if !strings.Contains(string(md), "| method | 100% |\n|---|---|\n| grpo | 55.0 ± 7.1 |") {
		t.Errorf("T2 with share 1 alone:\n%s", md)
	}
}

// The bench on the embedded default changes only its runs' iterations and
// eval size, so its runs stay comparable with the committed results.
func TestEmbeddedBase(t *testing.T) {
	run := orchestrator.Default()
	run.Model = "/cache/household-tiny"
	got := Embedded(run)
	if got.Iterations != 4 || got.Eval.Episodes != 50 {
		t.Errorf("bench runs: %d iterations, %d eval tasks; want 4 and 50", got.Iterations, got.Eval.Episodes)
	}
	if run.Iterations == got.Iterations || run.Eval.Episodes == got.Eval.Episodes {
		t.Errorf("a single run (%d iterations, %d eval tasks) is no longer larger than the bench's", run.Iterations, run.Eval.Episodes)
	}
	got.Iterations, got.Eval.Episodes = run.Iterations, run.Eval.Episodes
	if !reflect.DeepEqual(got, run) {
		t.Errorf("Embedded changed more than iterations and eval size:\n%+v\nwant\n%+v", got, run)
	}
}

func TestGridAndValidate(t *testing.T) {
	base := orchestrator.Default()
	base.Model = "/m"
	q := Quick(base)
	names := map[string]bool{}
	for _, e := range q.Experiments() {
		names[e.Name()] = true
	}
	for _, want := range []string{"grpo-share100-seed1", "seed-share100-seed1", "seed-share040-seed1"} {
		if !names[want] {
			t.Errorf("quick grid lacks %s: %v", want, names)
		}
	}
	if len(names) != 3 {
		t.Errorf("quick grid has %d experiments (GRPO and SEED at 100%%, SEED at 40%%): %v", len(names), names)
	}
	if both := q.Select(nil, nil, []string{"grpo", "seed"}, nil); len(both.Experiments()) != 4 {
		t.Errorf("quick grid with GRPO at 40%% too: %d experiments, want 4", len(both.Experiments()))
	}
	if n := len(Full(base).Experiments()); n != 3*(5+2*4) {
		t.Errorf("full grid has %d experiments, want %d", n, 3*(5+2*4))
	}
	sel := q.Select([]string{"seed", "grpo"}, []float64{1}, nil, []int64{1, 2, 3})
	if got := len(sel.Experiments()); got != 6 {
		t.Errorf("grpo and seed × 3 seeds with no T2 shares: %d experiments, want 6", got)
	}
	if len(q.Seeds) != 1 || len(q.Shares) != 1 {
		t.Errorf("Select changed the spec it was called on: %+v", q)
	}
	if kept := q.Select(nil, nil, nil, []int64{7}); len(kept.Algos) != 2 || kept.Shares[0] != 0.4 || len(kept.ShareAlgos) != 1 || kept.Seeds[0] != 7 {
		t.Errorf("nil arguments must keep the grid: %+v", kept)
	}
	// --algos none: the share columns alone.
	only := q.Select([]string{}, []float64{0.2}, []string{"grpo"}, []int64{1, 2})
	if err := only.Validate(); err != nil {
		t.Errorf("GRPO at 20%% alone: %v", err)
	}
	var onlyNames []string
	for _, e := range only.Experiments() {
		onlyNames = append(onlyNames, e.Name())
	}
	if !reflect.DeepEqual(onlyNames, []string{"grpo-share020-seed1", "grpo-share020-seed2"}) {
		t.Errorf("GRPO at 20%% alone runs %v", onlyNames)
	}
	for name, s := range map[string]Spec{
		"nothing to run":           q.Select([]string{}, []float64{1}, nil, nil),
		"no method at the shares":  q.Select([]string{}, []float64{0.2}, []string{}, nil),
		"unknown algorithm":        q.Select([]string{"ppo"}, nil, nil, nil),
		"no seeds":                 q.Select(nil, nil, nil, []int64{}),
		"share 0":                  q.Select(nil, []float64{0}, nil, nil),
		"baseline at a data share": q.Select(nil, nil, []string{"static-skill"}, nil),
	} {
		if s.Validate() == nil {
			t.Errorf("%s accepted", name)
		}
	}
	bad := q
	bad.Shares = []float64{1.5}
	if bad.Validate() == nil {
		t.Error("share 1.5 accepted")
	}
	if err := q.Validate(); err != nil {
		t.Error(err)
	}
}

func TestSweepIsItsOwnTable(t *testing.T) {
	base := orchestrator.Default()
	base.RL.Lambda, base.RL.Beta = 0.01, 5
	spec := Spec{Base: base, Algos: []string{"grpo", "seed"}, Shares: []float64{1}, Seeds: []int64{7, 8},
		Lambdas: []float64{0.01, 0.2}, Betas: []float64{2, 5}}
	var names []string
	for _, e := range spec.Experiments() {
		names = append(names, e.Name())
	}
	// The base's λ and β are the grid's own SEED run; the sweep is on the first seed only.
	want := []string{"grpo-share100-seed7", "seed-share100-seed7", "grpo-share100-seed8", "seed-share100-seed8",
		"seed-share100-seed7-lambda0.2", "seed-share100-seed7-beta2"}
	if !reflect.DeepEqual(names, want) {
		t.Fatalf("experiments %v, want %v", names, want)
	}
	if c := spec.config(Experiment{Algo: "seed", DataShare: 1, Seed: 7, Beta: 2}, "r"); c.RL.Beta != 2 || c.RL.Lambda != 0.01 || c.Name != "seed-share100-seed7-beta2" {
		t.Errorf("β point's config: λ %v β %v name %q", c.RL.Lambda, c.RL.Beta, c.Name)
	}
	bad := spec
	bad.Lambdas = []float64{0}
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "λ = 0 is GRPO") {
		t.Errorf("λ = 0 in the sweep: %v", err)
	}

	wins := func(n, k int) string { return strings.Repeat("1", k) + strings.Repeat("0", n-k) }
	o := func(e Experiment, seen float64, w string, gate float64) Outcome {
		r := outcome(e.Algo, 1, e.Seed, seen, 0.1, 10)
		r.Experiment, r.Final.SeenWins = e, w
		for _, l := range r.Metrics {
			if e.Algo == "seed" {
				l.Values["gate_mean"] = gate
			}
		}
		return r
	}
	outs := []Outcome{
		o(Experiment{Algo: "grpo", DataShare: 1, Seed: 7}, 0.5, wins(10, 5), 0),
		o(Experiment{Algo: "seed", DataShare: 1, Seed: 7}, 0.6, wins(10, 6), 0.5),
		o(Experiment{Algo: "seed", DataShare: 1, Seed: 7, Lambda: 0.2}, 0.9, wins(10, 9), 0.7),
		o(Experiment{Algo: "seed", DataShare: 1, Seed: 7, Beta: 2}, 0.3, wins(10, 3), 0.4),
	}
	f := Summarize(outs)
	// The swept runs stay out of T1: SEED's row is the base run alone.
	if s := f.Main["seed"]["seen"]; s.N != 1 || math.Abs(s.Mean-60) > 1e-9 {
		t.Errorf("T1 SEED %+v, want the base run's 60 alone", s)
	}
	if ci := f.SeedMinusGRPO["100%"]; ci.Seeds != 1 || math.Abs(ci.Diff-10) > 1e-9 {
		t.Errorf("SEED − GRPO %+v, want +10 from the base run alone", ci)
	}
	rows := sweepRows(spec, outs)
	if len(rows) != 3 || !rows[0].Base || rows[1].Lambda != 0.01 || rows[1].Beta != 2 || rows[2].Lambda != 0.2 || rows[2].Beta != 5 {
		t.Fatalf("sweep rows %+v: want base, then (0.01, 2), then (0.2, 5)", rows)
	}
	if rows[2].VsGRPO == nil || math.Abs(rows[2].VsGRPO.Diff-40) > 1e-9 || math.Abs(rows[2].Gate-0.7) > 1e-9 {
		t.Errorf("λ 0.2 row %+v (vs GRPO %+v), want +40 and gate 0.70", rows[2], rows[2].VsGRPO)
	}
	dir := t.TempDir()
	if err := WriteResults(dir, spec, outs, 0); err != nil {
		t.Fatal(err)
	}
	md, _ := os.ReadFile(filepath.Join(dir, "results.md"))
	for _, w := range []string{"## T8 λ and β sweep (SEED, all the training tasks, seed 7)", "| 0.01 (base) | 5 | 60.0 | 10.0 | +10.0 [", "| 0.2 | 5 | 90.0 | 10.0 | +40.0 [", "| 0.01 | 2 | 30.0 |"} {
		if !strings.Contains(string(md), w) {
			t.Errorf("results.md lacks %q:\n%s", w, md)
		}
	}
}
