// Package benchmarks reproduces the paper's tables on whatever a config
// points at (the embedded default here, Qwen models on GPUs elsewhere):
// experiment grids of algorithms × data shares × seeds run through the
// orchestrator, resumable and bounded by a time budget, summarised as
// Markdown tables, PNG plots and a JSON of every figure.
package benchmarks

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"time"

	"github.com/rs/zerolog"

	"github.com/seedctl/seedctl/internal/dirlock"
	"github.com/seedctl/seedctl/orchestrator"
)

// Experiment is one training run of the grid.
type Experiment struct {
	Algo      string  `json:"algo"`
	DataShare float64 `json:"data_share"`
	Seed      int64   `json:"seed"`
	// Lambda and Beta, when set, replace the base config's λ and β: the
	// points of the sweep (Spec.Lambdas, Spec.Betas). Zero keeps the base's.
	Lambda float64 `json:"lambda,omitempty"`
	Beta   float64 `json:"beta,omitempty"`
}

// Name is the experiment's run folder name.
func (e Experiment) Name() string {
	n := fmt.Sprintf("%s-share%03d-seed%d", e.Algo, int(e.DataShare*100+0.5), e.Seed)
	if e.Lambda != 0 {
		n += fmt.Sprintf("-lambda%g", e.Lambda)
	}
	if e.Beta != 0 {
		n += fmt.Sprintf("-beta%g", e.Beta)
	}
	return n
}

// Swept is whether the experiment is a sweep point rather than a cell of
// the tables T1–T7.
func (e Experiment) Swept() bool { return e.Lambda != 0 || e.Beta != 0 }

// Spec is a benchmark: a base run config and the grid.
type Spec struct {
	Base   orchestrator.Config `json:"base"`
	Algos  []string            `json:"algos"`  // T1 rows (data share 1)
	Shares []float64           `json:"shares"` // T2 columns
	// ShareAlgos are the methods run at the shares below 1 (nil: GRPO and
	// SEED). The quick grid runs SEED alone there: the claim it tests is
	// SEED with part of the tasks against GRPO with all of them.
	ShareAlgos []string `json:"share_algos,omitempty"`
	Seeds      []int64  `json:"seeds"`
	// Lambdas and Betas are the sweep (T8): SEED with all the tasks and the
	// first seed, once per value of λ (β as the base's) and once per value
	// of β (λ as the base's), beside the grid's own SEED run at the base's
	// values. A value equal to the base's is that run.
	Lambdas []float64 `json:"sweep_lambdas,omitempty"`
	Betas   []float64 `json:"sweep_betas,omitempty"`
	// Budget stops starting new experiments once exceeded (0: none).
	Budget time.Duration `json:"budget"`
	// ReportOnly starts and resumes nothing: the tables are written from the
	// experiments already finished.
	ReportOnly bool `json:"report_only,omitempty"`
}

// compared are the two methods T2 and T3 compare, and the default
// methods of the T2 columns below 100%.
var compared = []string{orchestrator.AlgoGRPO, orchestrator.AlgoSEED}

// shareAlgos are the methods of the T2 columns below 100%.
func (s Spec) shareAlgos() []string {
	if s.ShareAlgos != nil {
		return s.ShareAlgos
	}
	return compared
}

// hasShareRuns is whether the grid runs methods at shares below 1.
func (s Spec) hasShareRuns() bool {
	if len(s.shareAlgos()) == 0 {
		return false
	}
	for _, sh := range s.Shares {
		if sh < 1 {
			return true
		}
	}
	return false
}

// Experiments lists the grid: every algorithm at share 1, then the share
// methods (GRPO and SEED unless narrowed) at each share below 1, for every
// seed.
func (s Spec) Experiments() []Experiment {
	var out []Experiment
	seen := map[string]bool{}
	add := func(e Experiment) {
		if !seen[e.Name()] {
			seen[e.Name()] = true
			out = append(out, e)
		}
	}
	for _, seed := range s.Seeds {
		for _, a := range s.Algos {
			add(Experiment{Algo: a, DataShare: 1, Seed: seed})
		}
		for _, sh := range s.Shares {
			if sh == 1 {
				continue // the full-data rows are the selected methods'
			}
			for _, a := range s.shareAlgos() {
				add(Experiment{Algo: a, DataShare: sh, Seed: seed})
			}
		}
	}
	if (len(s.Lambdas) > 0 || len(s.Betas) > 0) && len(s.Seeds) > 0 {
		seed := s.Seeds[0]
		add(Experiment{Algo: orchestrator.AlgoSEED, DataShare: 1, Seed: seed})
		for _, l := range s.Lambdas {
			if l != s.Base.RL.Lambda {
				add(Experiment{Algo: orchestrator.AlgoSEED, DataShare: 1, Seed: seed, Lambda: l})
			}
		}
		for _, b := range s.Betas {
			if b != s.Base.RL.Beta {
				add(Experiment{Algo: orchestrator.AlgoSEED, DataShare: 1, Seed: seed, Beta: b})
			}
		}
	}
	return out
}

// config is the base config with the experiment's settings.
func (s Spec) config(e Experiment, runsDir string) orchestrator.Config {
	c := s.Base
	c.Algo, c.DataShare, c.Seed, c.Name, c.RunsDir = e.Algo, e.DataShare, e.Seed, e.Name(), runsDir
	if e.Lambda != 0 {
		c.RL.Lambda = e.Lambda
	}
	if e.Beta != 0 {
		c.RL.Beta = e.Beta
	}
	return c
}

// Validate checks the grid and the base config.
func (s Spec) Validate() error {
	if len(s.Seeds) == 0 {
		return errors.New("bench spec: at least one seed")
	}
	if len(s.Algos) == 0 && !s.hasShareRuns() {
		return errors.New("bench spec: nothing to run: no algorithm, and no data share below 1 with a method to run there")
	}
	for _, sh := range s.Shares {
		if sh <= 0 || sh > 1 {
			return fmt.Errorf("bench spec: data share %v must be in (0, 1]", sh)
		}
	}
	for _, l := range s.Lambdas {
		if l <= 0 {
			return fmt.Errorf("bench spec: swept λ %v must be > 0 (λ = 0 is GRPO: --algos grpo)", l)
		}
	}
	for _, b := range s.Betas {
		if b <= 0 {
			return fmt.Errorf("bench spec: swept β %v must be > 0", b)
		}
	}
	for _, a := range s.ShareAlgos {
		if !slices.Contains(compared, a) {
			return fmt.Errorf("bench spec: the data-share columns compare GRPO and SEED; %q is neither", a)
		}
	}
	c := s.Base
	for _, a := range slices.Concat(s.Algos, s.ShareAlgos) {
		c.Algo = a
		if err := c.Validate(); err != nil {
			return fmt.Errorf("bench spec, algo %s: %w", a, err)
		}
	}
	return nil
}

// Quick is the reduced grid `just bench-quick` runs on 2 CPU cores within
// about 20 minutes: GRPO and SEED with all training tasks and SEED with 40%
// of them (the paper's headline: SEED with part of the data against GRPO
// with all of it), one seed. GRPO at 40% would add a quarter of the time
// and answer a question the headline does not ask.
func Quick(base orchestrator.Config) Spec {
	return Spec{Base: base, Algos: []string{orchestrator.AlgoGRPO, orchestrator.AlgoSEED}, Shares: []float64{0.4},
		ShareAlgos: []string{orchestrator.AlgoSEED}, Seeds: []int64{1}, Budget: 20 * time.Minute}
}

// EmbeddedEvalEpisodes is the tasks per eval split of the bench's runs on
// the embedded default (a single run evaluates on 200): the grid has dozens
// of runs and its tables average seeds, and the committed results were
// measured so.
const EmbeddedEvalEpisodes = 50

// EmbeddedIterations is the stage-2 iterations of the bench's runs on the
// embedded default (a single run makes 8): the full grid's 39 runs take
// about 4 hours of a 2-core CPU at 4, `just bench-quick` about 20 minutes,
// and the committed results were measured so.
const EmbeddedIterations = 4

// Embedded is the base config of a bench on the embedded default: the
// single run's config (orchestrator.Default, with its model) with the
// bench's iterations and eval size.
func Embedded(run orchestrator.Config) orchestrator.Config {
	run.Iterations = EmbeddedIterations
	run.Eval.Episodes = EmbeddedEvalEpisodes
	return run
}

// Full is the paper's grid: all methods and baselines, five data shares,
// three seeds.
func Full(base orchestrator.Config) Spec {
	// The paper's method and baselines; the mechanism ladder's
	// privileged-skill and oracle-other-skill arms are run on their own
	// (seedctl report --arm).
	var algos []string
	for _, a := range orchestrator.Algos {
		if a != orchestrator.AlgoPrivilegedSkill && a != orchestrator.AlgoTransferSkill {
			algos = append(algos, a)
		}
	}
	return Spec{Base: base, Algos: algos, Shares: []float64{0.2, 0.4, 0.6, 0.8}, Seeds: []int64{1, 2, 3}}
}

// Select narrows or widens the grid: each non-nil argument replaces the
// spec's algorithms (T1 rows), data shares (T2 columns; {1} runs none
// besides the full-data rows), the methods run at those shares, or seeds. Experiments already finished in a
// results folder are reused whatever grid a later call selects, so a grid
// can be grown a sitting at a time: `--seeds 1` today, `--seeds 1,2,3`
// tomorrow runs only seeds 2 and 3.
func (s Spec) Select(algos []string, shares []float64, shareAlgos []string, seeds []int64) Spec {
	if algos != nil {
		s.Algos = slices.Clone(algos) // an empty, non-nil selection stays empty
	}
	if shares != nil {
		s.Shares = slices.Clone(shares)
	}
	if shareAlgos != nil {
		s.ShareAlgos = slices.Clone(shareAlgos)
	}
	if seeds != nil {
		s.Seeds = slices.Clone(seeds)
	}
	return s
}

// Outcome is one finished (or skipped) experiment.
type Outcome struct {
	Experiment
	Dir     string                  `json:"dir"`
	Done    bool                    `json:"done"`
	Skipped string                  `json:"skipped,omitempty"`
	Base    *orchestrator.EvalPoint `json:"base,omitempty"`
	Final   *orchestrator.EvalPoint `json:"final,omitempty"`
	// Seconds is the run's wall time (State.Seconds: pauses between a kill
	// and its resume do not count).
	Seconds float64                    `json:"seconds,omitempty"`
	Metrics []orchestrator.MetricsLine `json:"-"`
	// FromLedger is whether the outcome was read from the results folder's
	// ledger (LedgerFile) because its run folder is gone.
	FromLedger bool `json:"from_ledger,omitempty"`
}

// Run executes the grid into out/runs: finished experiments are reused,
// interrupted ones resumed, and none is started after the budget is spent.
// Then it writes the tables, plots and figures into out.
func Run(ctx context.Context, spec Spec, out string, deps orchestrator.Deps, progress io.Writer, log zerolog.Logger) ([]Outcome, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	if spec.Base.TrainTasks == 0 {
		// The training set is what a full-share run consumes: each of its
		// tasks once, so a 40% run sees fewer distinct tasks (each 2.5 times)
		// at the same compute. Left at the whole split, every share above
		// the consumed fraction would train on the same tasks.
		spec.Base.TrainTasks = spec.Base.Iterations * spec.Base.TasksPerIteration
	}
	// One bench per results folder: two would run the same experiments
	// and overwrite each other's ledger.
	unlock, err := dirlock.Lock(out, "bench.lock", "bench results folder")
	if err != nil {
		return nil, err
	}
	defer unlock()
	runs := filepath.Join(out, "runs")
	start := time.Now()
	exps := spec.Experiments()
	var outs []Outcome
	// The base policy's evaluation is the same for every experiment of the
	// grid with the same eval prompts (same model, tasks and greedy
	// decoding; with the places line in an order per episode, the same
	// seed): measured by the first of each BaseEvalKey, reused by the rest
	// (orchestrator.Deps.BaseEval checks the key).
	baseEvals := map[string]*orchestrator.BaseEval{}
	ledger, err := readLedger(out)
	if err != nil {
		return nil, err
	}
	weights := weightsDigest(spec.Base.Model)
	for i, e := range exps {
		o := Outcome{Experiment: e, Dir: filepath.Join(runs, e.Name())}
		d := deps
		key := spec.config(e, runs).BaseEvalKey()
		d.BaseEval = baseEvals[key]
		st, err := readState(o.Dir)
		if rec, ok := ledger[e.Name()]; ok && errors.Is(err, os.ErrNotExist) {
			if sameModel(rec.Model, rec.Weights, spec.Base.Model, weights) {
				log.Info().Str("experiment", e.Name()).Msg("bench: its run folder is gone; reusing its record in " + LedgerFile)
				outs = append(outs, rec.outcome())
				continue
			}
			log.Warn().Str("experiment", e.Name()).Str("recorded_model", rec.Model).Str("recorded_weights", rec.Weights).Str("model", spec.Base.Model).Str("weights", weights).
				Msg("bench: the ledger's record of this experiment was made on another base model; running it again")
		}
		switch {
		case err == nil && st.Done:
			// finished earlier
		case spec.ReportOnly:
			o.Skipped = "not finished (report only)"
			outs = append(outs, o)
			continue
		case spec.Budget > 0 && time.Since(start) > spec.Budget:
			o.Skipped = fmt.Sprintf("time budget %s spent", spec.Budget)
			outs = append(outs, o)
			continue
		case err == nil:
			fmt.Fprintf(progress, "bench %d/%d: resuming %s\n", i+1, len(exps), e.Name())
			if _, err := orchestrator.Resume(ctx, o.Dir, d); err != nil {
				return outs, fmt.Errorf("bench %s: %w", e.Name(), err)
			}
		default:
			fmt.Fprintf(progress, "bench %d/%d: %s (%s elapsed)\n", i+1, len(exps), e.Name(), time.Since(start).Round(time.Second))
			if _, err := orchestrator.Start(ctx, spec.config(e, runs), d); err != nil {
				return outs, fmt.Errorf("bench %s: %w", e.Name(), err)
			}
		}
		st, err = readState(o.Dir)
		if err != nil {
			return outs, err
		}
		if baseEvals[key] == nil {
			if baseEvals[key], err = orchestrator.ReadBaseEval(o.Dir); err != nil {
				return outs, err
			}
		}
		o.Done, o.Base, o.Final = st.Done, st.BaseEval, st.FinalEval
		o.Seconds = runSeconds(o.Dir, st)
		if o.Metrics, err = orchestrator.ReadMetrics(filepath.Join(o.Dir, "metrics.jsonl")); err != nil {
			return outs, err
		}
		outs = append(outs, o)
		log.Info().Str("experiment", e.Name()).Float64("seen", o.Final.Seen).Msg("bench experiment finished")
		// Recorded as each finishes: a machine lost mid-grid keeps what ran.
		if err := writeLedger(out, spec.Base.Model, weights, outs, ledger); err != nil {
			return outs, err
		}
	}
	sort.SliceStable(outs, func(a, b int) bool { return outs[a].Name() < outs[b].Name() })
	return outs, WriteResults(out, spec, outs, time.Since(start))
}

// runSeconds is the wall time a run spent: the state's own count, or for
// runs saved before it kept one, from config.json's write to the last save.
func runSeconds(dir string, st *orchestrator.State) float64 {
	if st.Seconds > 0 {
		return st.Seconds
	}
	if fi, err := os.Stat(filepath.Join(dir, "config.json")); err == nil && st.Updated.After(fi.ModTime()) {
		return st.Updated.Sub(fi.ModTime()).Seconds()
	}
	return 0
}

func readState(dir string) (*orchestrator.State, error) {
	b, err := os.ReadFile(filepath.Join(dir, "state.json"))
	if err != nil {
		return nil, err
	}
	return orchestrator.ParseState(b)
}
