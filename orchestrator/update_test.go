package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

// stepRecorder is a Learner that records the rows of every Step and
// answers with scripted stats or refusals; the rest is never called.
type stepRecorder struct {
	Learner
	batches [][]string
	refuse  map[int]bool // 0-based call index → refuse
	calls   int
	lrs     []float64
}

func (s *stepRecorder) Step(_ context.Context, rows []Row, lr float64) (StepStats, error) {
	call := s.calls
	s.calls++
	s.lrs = append(s.lrs, lr)
	ids := make([]string, len(rows))
	for i, r := range rows {
		ids[i] = r.ID
	}
	s.batches = append(s.batches, ids)
	if s.refuse[call] {
		return nil, &RefusedError{Err: errors.New("loss is NaN")}
	}
	st := StepStats{"loss": float64(call + 1), "grad_norm": 2}
	if call == 1 {
		st["sparse"] = 5 // a figure only some steps report
	}
	return st, nil
}

// A figure only some steps report is averaged over those steps.
func TestUpdateAveragesSparseFiguresOverTheirSteps(t *testing.T) {
	cfg := Default()
	cfg.RL.MiniBatchRows, cfg.RL.MiniBatches = 0, 3
	r := &run{cfg: cfg, learner: &stepRecorder{}, st: &State{}, log: zerolog.Nop()}
	vals := iterStats{}
	if err := r.update(context.Background(), 1, trainedRows(6), vals); err != nil {
		t.Fatal(err)
	}
	if vals["sparse"] != 5 || vals["loss"] != 2 {
		t.Errorf("sparse %v (want 5, its one step's), loss %v (want 2)", vals["sparse"], vals["loss"])
	}
}

func trainedRows(n int, untrained ...int) []Row {
	rows := make([]Row, n)
	for i := range rows {
		rows[i] = Row{ID: fmt.Sprintf("r%d", i), IDs: []int{1, 2}, Train: []bool{false, !slices.Contains(untrained, i)}}
	}
	return rows
}

// TestUpdateSplitsRowsIntoMiniBatches: MiniBatches optimizer steps, each
// row in exactly one of them, the same seeded split every time, batches
// without a trained token skipped, metrics averaged over the steps made
// and refusals counted (and fatal after MaxRefusals in a row).
func TestUpdateSplitsRowsIntoMiniBatches(t *testing.T) {
	cases := []struct {
		name        string
		rows        []Row
		miniBatches int
		refuse      map[int]bool
		maxRefusals int
		wantCalls   int
		wantSteps   float64
		wantLoss    float64
		wantRefused float64
		wantErr     string
	}{
		{name: "one batch", rows: trainedRows(5), miniBatches: 1, wantCalls: 1, wantSteps: 1, wantLoss: 1},
		{name: "three batches", rows: trainedRows(7), miniBatches: 3, wantCalls: 3, wantSteps: 3, wantLoss: 2},
		{name: "more batches than rows", rows: trainedRows(2), miniBatches: 8, wantCalls: 2, wantSteps: 2, wantLoss: 1.5},
		{name: "untrained batch skipped", rows: trainedRows(2, 0), miniBatches: 2, wantCalls: 1, wantSteps: 1, wantLoss: 1},
		{name: "refused step not averaged", rows: trainedRows(6), miniBatches: 3, refuse: map[int]bool{1: true}, maxRefusals: 3, wantCalls: 3, wantSteps: 2, wantLoss: 2, wantRefused: 1},
		{name: "refusals in a row stop", rows: trainedRows(6), miniBatches: 3, refuse: map[int]bool{0: true, 1: true}, maxRefusals: 2, wantCalls: 2, wantErr: "2 refused steps in a row (last: iteration 4 mini-batch 1)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := Default()
			cfg.Seed = 7
			cfg.RL.MiniBatchRows, cfg.RL.MiniBatches = 0, c.miniBatches
			cfg.RL.MaxRefusals = 3
			if c.maxRefusals > 0 {
				cfg.RL.MaxRefusals = c.maxRefusals
			}
			rec := &stepRecorder{refuse: c.refuse}
			r := &run{cfg: cfg, learner: rec, st: &State{}, log: zerolog.Nop()}
			vals := iterStats{}
			err := r.update(context.Background(), 4, c.rows, vals)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) || !IsRefusal(err) {
					t.Fatalf("err = %v, want one containing %q that is a refusal", err, c.wantErr)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if rec.calls != c.wantCalls {
				t.Fatalf("%d Step calls, want %d (batches %v)", rec.calls, c.wantCalls, rec.batches)
			}
			if c.wantErr != "" {
				return
			}
			// Every trained row is in exactly one batch, and the batches
			// are balanced to within one row.
			seen := map[string]int{}
			lo, hi := len(c.rows), 0
			for _, b := range rec.batches {
				lo, hi = min(lo, len(b)), max(hi, len(b))
				for _, id := range b {
					seen[id]++
				}
			}
			for _, row := range c.rows {
				if anyTrained([]Row{row}) && seen[row.ID] != 1 {
					t.Errorf("row %s is in %d batches, want 1 (batches %v)", row.ID, seen[row.ID], rec.batches)
				}
			}
			if hi-lo > 1 {
				t.Errorf("unbalanced batches %v", rec.batches)
			}
			if vals["optimizer_steps"] != c.wantSteps || vals["loss"] != c.wantLoss || vals["refused_steps"] != c.wantRefused {
				t.Errorf("steps %v loss %v refused %v, want %v %v %v", vals["optimizer_steps"], vals["loss"], vals["refused_steps"], c.wantSteps, c.wantLoss, c.wantRefused)
			}
			if c.wantSteps > 0 && vals["grad_norm"] != 2 {
				t.Errorf("grad_norm averaged to %v, want 2", vals["grad_norm"])
			}
			// The same seed and iteration give the same split.
			again := &stepRecorder{refuse: c.refuse}
			r2 := &run{cfg: cfg, learner: again, st: &State{}, log: zerolog.Nop()}
			if err := r2.update(context.Background(), 4, c.rows, iterStats{}); err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(again.batches) != fmt.Sprint(rec.batches) {
				t.Errorf("split not reproducible: %v then %v", rec.batches, again.batches)
			}
		})
	}
}

// TestStepLR: the stage-2 schedule by (iteration, mini-batch): linear
// warm-up over the run's first mini-batches, then constant or a half
// cosine over the run's iterations down to min_lr_frac.
func TestStepLR(t *testing.T) {
	cfg := validConfig()
	const nb = 2
	cfg.Iterations, cfg.RL.LR = 3, 1e-4
	type kb struct{ k, b int }
	cosAt := func(p, minFrac float64) float64 { return 1e-4 * (minFrac + (1-minFrac)*0.5*(1+math.Cos(math.Pi*p))) }
	cases := []struct {
		name     string
		schedule string
		warmup   int
		minFrac  float64
		want     map[kb]float64
	}{
		{name: "constant", want: map[kb]float64{{1, 0}: 1e-4, {2, 1}: 1e-4, {3, 1}: 1e-4}},
		{name: "warm-up then constant", schedule: LRConstant, warmup: 3, want: map[kb]float64{{1, 0}: 0.25e-4, {1, 1}: 0.5e-4, {2, 0}: 0.75e-4, {2, 1}: 1e-4, {3, 1}: 1e-4}},
		{name: "cosine", schedule: LRCosine, minFrac: 0.1, want: map[kb]float64{{1, 0}: 1e-4, {2, 0}: cosAt(1.0/3, 0.1), {3, 1}: cosAt(2.5/3, 0.1)}},
		{name: "warm-up then cosine", schedule: LRCosine, warmup: 1, want: map[kb]float64{{1, 0}: 0.5e-4, {1, 1}: cosAt(0.5/3, 0), {2, 1}: cosAt(1.5/3, 0)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg.RL.LRSchedule, cfg.RL.WarmupSteps, cfg.RL.MinLRFrac = c.schedule, c.warmup, c.minFrac
			if err := cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			for at, want := range c.want {
				if got := cfg.StepLR(at.k, at.b, nb, (at.k-1)*nb+at.b); math.Abs(got-want) > 1e-12 {
					t.Errorf("iteration %d mini-batch %d: lr %g, want %g", at.k, at.b, got, want)
				}
			}
			prev := math.Inf(1)
			for k := 1; k <= cfg.Iterations; k++ {
				for b := range nb {
					s := (k-1)*nb + b
					lr := cfg.StepLR(k, b, nb, s)
					if s > c.warmup && lr > prev+1e-15 {
						t.Errorf("step %d: lr %g rose after the warm-up (from %g)", s, lr, prev)
					}
					prev = lr
				}
			}
		})
	}
}

// TestUpdateRowMiniBatches: with mini_batch_rows the rows are cut in their
// order into mini-batches of that many (the last one shorter), one step
// each, one pass; Shuffle permutes them first (seeded). The run's
// mini-batch count advances by the iteration's mini-batches.
func TestUpdateRowMiniBatches(t *testing.T) {
	cfg := Default()
	cfg.RL.MiniBatchRows = 3
	rec := &stepRecorder{}
	st := &State{MiniBatchesDone: 5}
	r := &run{cfg: cfg, learner: rec, st: st, log: zerolog.Nop()}
	vals := iterStats{}
	if err := r.update(context.Background(), 2, trainedRows(8), vals); err != nil {
		t.Fatal(err)
	}
	want := "[[r0 r1 r2] [r3 r4 r5] [r6 r7]]"
	if got := fmt.Sprint(rec.batches); got != want {
		t.Errorf("mini-batches %s, want %s", got, want)
	}
	if vals["optimizer_steps"] != 3 || vals["mini_batches"] != 3 || st.MiniBatchesDone != 8 {
		t.Errorf("steps %v, mini-batches %v, run's count %d; want 3, 3, 8", vals["optimizer_steps"], vals["mini_batches"], st.MiniBatchesDone)
	}
	cfg.RL.Shuffle = true
	shuf := &stepRecorder{}
	r = &run{cfg: cfg, learner: shuf, st: &State{}, log: zerolog.Nop()}
	if err := r.update(context.Background(), 2, trainedRows(8), iterStats{}); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, b := range shuf.batches {
		for _, id := range b {
			seen[id] = true
		}
	}
	if len(shuf.batches) != 3 || len(seen) != 8 || fmt.Sprint(shuf.batches) == want {
		t.Errorf("shuffled mini-batches %v: want 3 batches over all 8 rows in another order", shuf.batches)
	}
}

// TestUpdatePassesTheScheduledLR: each Step gets its planned learning rate,
// also when a mini-batch before it was skipped, and the iteration's metrics
// carry the mean of the steps made.
func TestUpdatePassesTheScheduledLR(t *testing.T) {
	cfg := Default()
	cfg.Iterations, cfg.RL.LR, cfg.RL.MiniBatchRows, cfg.RL.MiniBatches, cfg.RL.WarmupSteps = 2, 1e-4, 0, 3, 4
	rec := &stepRecorder{}
	r := &run{cfg: cfg, learner: rec, st: &State{MiniBatchesDone: 3}, log: zerolog.Nop()}
	rows := trainedRows(3)
	rows[0].Train = []bool{false, false} // its batch is skipped
	vals := iterStats{}
	if err := r.update(context.Background(), 2, rows, vals); err != nil {
		t.Fatal(err)
	}
	if len(rec.lrs) != 2 {
		t.Fatalf("%d steps, want 2 (one batch has no trained token): %v", len(rec.lrs), rec.batches)
	}
	// Iteration 2 holds steps 3, 4 and 5 of the plan: 4/5 of lr at step 3
	// (the warm-up's last), then lr. The skipped batch keeps its slot.
	planned := []float64{cfg.StepLR(2, 0, 3, 3), cfg.StepLR(2, 1, 3, 4), cfg.StepLR(2, 2, 3, 5)}
	if math.Abs(planned[0]-0.8e-4) > 1e-15 || planned[1] != 1e-4 || planned[2] != 1e-4 {
		t.Fatalf("planned rates %v", planned)
	}
	// Batch b holds row order[b] (the update's seeded order); row 0's is skipped.
	order := rand.New(rand.NewPCG(uint64(cfg.Seed), 2)).Perm(3)
	var want []float64
	for b := range 3 {
		if order[b] != 0 {
			want = append(want, planned[b])
		}
	}
	if fmt.Sprint(rec.lrs) != fmt.Sprint(want) {
		t.Errorf("learning rates %v, want %v (batches %v, order %v)", rec.lrs, want, rec.batches, order)
	}
	if mean := (rec.lrs[0] + rec.lrs[1]) / 2; math.Abs(vals["lr"]-mean) > 1e-15 {
		t.Errorf("metrics lr %g, want the steps' mean %g", vals["lr"], mean)
	}
}

// The eval protocol: the reference ALFWorld protocol's settings reach the
// eval's rollouts, and the printed protocol names each of them.
func TestEvalProtocol(t *testing.T) {
	cfg := validConfig()
	if got := cfg.EvalProtocol(); !strings.Contains(got, "greedy") || !strings.Contains(got, "at most 20 steps") || !strings.Contains(got, "window prompts (3 past steps)") || !strings.Contains(got, "first 200 tasks") {
		t.Errorf("default protocol: %s", got)
	}
	cfg.Eval = EvalConfig{Episodes: 128, Temperature: 0.4, MaxSteps: 50, Window: 2, Seed: 42}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	rc := cfg.evalRolloutConfig()
	if rc.Temperature != 0.4 || rc.Window != 2 || rc.EnvOptions["max_steps"] != "50" || rc.Seed != 42 || rc.GroupSize != 1 {
		t.Errorf("eval rollout config %+v", rc)
	}
	got := cfg.EvalProtocol()
	for _, want := range []string{"sampled at T=0.4 (seed 42)", "at most 50 steps", "window prompts (2 past steps)", "first 128 tasks", "plain prompts"} {
		if !strings.Contains(got, want) {
			t.Errorf("protocol %q lacks %q", got, want)
		}
	}
	// Training rollouts keep their own settings.
	if tr := cfg.rolloutConfig(1); tr.Window != 3 || tr.EnvOptions["max_steps"] != "20" {
		t.Errorf("training rollout config changed: %+v", tr)
	}
}

// The legacy update is reachable by name and valid; switching back gives
// the default's update.
func TestUseUpdate(t *testing.T) {
	cfg := validConfig()
	if err := cfg.UseUpdate(UpdateLegacy); err != nil {
		t.Fatal(err)
	}
	rl := cfg.RL
	if rl.Advantage != AdvTrajectory || rl.RewardScale != 1 || cfg.Rollout.InvalidPenalty != 0 || rl.MiniBatchRows != 0 || rl.MiniBatches != 1 || rl.ClipRatioC != 0 || rl.EntropyCoef != 0 || rl.DropFlat != DropNoSignal || rl.StepGroupWeight != 0 {
		t.Errorf("legacy update %+v", rl)
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("legacy update invalid: %v", err)
	}
	if err := cfg.UseUpdate(UpdatePublic); err != nil {
		t.Fatal(err)
	}
	// The public code's: the default's update without GiGPO's step-level
	// advantage, with the std normalisation and the 0.1 penalty.
	d := validConfig()
	if d.RL.StepGroupWeight == 0 {
		t.Fatal("the default no longer has GiGPO's term: this test's premise changed")
	}
	d.RL.StepGroupWeight, d.RL.AdvNorm = 0, AdvNormStd
	if fmt.Sprint(cfg.RL) != fmt.Sprint(d.RL) || cfg.Rollout.InvalidPenalty != 0.1 {
		t.Errorf("public update %+v with penalty %v, want %+v with the public code's 0.1", cfg.RL, cfg.Rollout.InvalidPenalty, d.RL)
	}
	if cfg.UseUpdate("fancy") == nil {
		t.Error("unknown update accepted")
	}
}
