package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"github.com/rs/zerolog"

	"github.com/seedctl/seedctl/envadapters"
	"github.com/seedctl/seedctl/inference"
	"github.com/seedctl/seedctl/internal/ckpthash"
	"github.com/seedctl/seedctl/rollout"
	"github.com/seedctl/seedctl/skills"
)

// TaskSource lists a split's tasks (envadapters.Builtin implements it).
type TaskSource interface {
	Tasks(split envadapters.Split, n int) ([]envadapters.Task, error)
	SplitSize(split envadapters.Split) int
}

// Env is the environment a run trains in: its tasks and instances.
type Env struct {
	Name    string
	Tasks   TaskSource
	Factory rollout.EnvFactory
	// Close, when set, releases what the environment holds (a remote
	// server's pooled envs) when the run ends.
	Close func() error
}

// Deps are what a run is wired with.
type Deps struct {
	NewLearner LearnerFactory
	// OpenBackend serves a checkpoint folder (the policy snapshot).
	OpenBackend func(ctx context.Context, modelDir string) (inference.Backend, error)
	// OpenEnv makes the environment (default: OpenEnv(cfg.Env)).
	OpenEnv func(EnvConfig) (Env, error)
	// Analyzer is the stage-1 analyzer (default: from cfg.Stage1.Analyzer).
	Analyzer skills.Analyzer
	Log      zerolog.Logger
	// Progress receives human progress lines (nil: none).
	Progress io.Writer
	// AfterPhase, when set, is called after each phase of an iteration
	// ("rollout", "analysis", "rescore", "update", "checkpoint"); tests use
	// it to interrupt runs at chosen points.
	AfterPhase func(iteration int, phase string)
	// BaseEval, when set and measured under this run's BaseEvalKey, is
	// taken as the run's base evaluation instead of replaying it
	// (benchmarks pass the first experiment's to the others).
	BaseEval *BaseEval
	// AcceptConfigChange lets Resume continue under a config.json that
	// changed since the run started, when it names exactly the changed
	// keys (dotted, e.g. "rl.lr"); the change is recorded in state.json.
	AcceptConfigChange []string
}

// BaseName is how runs name their base policy: "weights sha256 <12 hex
// digits>", or "weights unhashed" when the run did not record them.
func (st *State) baseName() string {
	if len(st.BaseWeights) < 12 {
		return "weights unhashed"
	}
	return "weights sha256 " + st.BaseWeights[:12]
}

// Result is a finished run.
type Result struct {
	Dir string
	// EvalProtocol describes how Base and Final were measured.
	EvalProtocol string
	State        State
	Base         *EvalPoint
	Final        *EvalPoint
	Duration     time.Duration
}

// run is one run in progress.
type run struct {
	cfg     Config
	deps    Deps
	dir     runDir
	st      *State
	env     Env
	backend inference.Backend
	policy  *rollout.Policy
	learner Learner
	// verifyWarned: verifyServed said once why it does not check.
	verifyWarned bool
	// lastEval is the latest periodic evaluation of this process.
	lastEval *EvalPoint
	log      zerolog.Logger
	start    time.Time
	// lastSave is when this process last saved the state (State.Seconds).
	lastSave time.Time
	pool     []envadapters.Task
	// firstIter is the first iteration this process runs (for the ETA).
	firstIter int
	loopStart time.Time
	// privileged is algo privileged-skill's teacher (its skills cached
	// per task across iterations).
	privileged *skills.PrivilegedAnalyzer
	// transfer is algo oracle-other-skill's teacher.
	transfer *skills.TransferAnalyzer
}

// Start begins a new run in cfg.RunsDir/cfg.Name. A folder that already
// holds a run is an error (use Resume).
func Start(ctx context.Context, cfg Config, deps Deps) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	dir := runDir(filepath.Join(cfg.RunsDir, cfg.Name))
	unlock, err := lockRun(dir)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if _, err := os.Stat(dir.state()); err == nil {
		return nil, fmt.Errorf("run directory %s already holds a run: resume it (seedctl run --resume %s) or choose another name", dir, dir)
	}
	abs, err := filepath.Abs(cfg.Model)
	if err != nil {
		return nil, err
	}
	cfg.Model = abs
	if err := writeJSON(dir.config(), cfg); err != nil {
		return nil, err
	}
	st := &State{Version: stateVersion, Algo: cfg.Algo, Seed: cfg.Seed, Checkpoint: cfg.Model, Reference: cfg.Model, Updated: time.Now()}
	if err := recordConfig(dir, st); err != nil {
		return nil, err
	}
	if h, err := ckpthash.Weights(cfg.Model); err == nil {
		st.BaseWeights = h
	}
	if err := writeJSON(dir.state(), st); err != nil {
		return nil, err
	}
	return execute(ctx, cfg, deps, dir, st)
}

// Resume continues the run in dir from its last finished iteration.
func Resume(ctx context.Context, dir string, deps Deps) (*Result, error) {
	d := runDir(dir)
	if _, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("resuming %s: %w", dir, err)
	}
	unlock, err := lockRun(d)
	if err != nil {
		return nil, err
	}
	defer unlock()
	cfg, err := Load(d.config())
	if err != nil {
		return nil, fmt.Errorf("resuming %s: %w", dir, err)
	}
	st, err := readState(d)
	if err != nil {
		return nil, fmt.Errorf("resuming %s: %w", dir, err)
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("resuming %s: %w", dir, err)
	}
	if st.Checkpoint == "" {
		return nil, fmt.Errorf("resuming %s: state.json names no checkpoint: the file is damaged", dir)
	}
	if st.Iteration > cfg.Iterations {
		return nil, fmt.Errorf("resuming %s: state.json says %d iterations are done, the run's config.json has %d: one of the two is damaged or from another run", dir, st.Iteration, cfg.Iterations)
	}
	if err := checkResumable(d, cfg, st); err != nil {
		return nil, fmt.Errorf("resuming %s: %w", dir, err)
	}
	if err := checkFiles(d, st); err != nil {
		return nil, fmt.Errorf("resuming %s: %w", dir, err)
	}
	if changed, err := checkConfigUnchanged(d, st, deps.AcceptConfigChange); err != nil {
		return nil, fmt.Errorf("resuming %s: %w", dir, err)
	} else if len(changed) > 0 {
		deps.Log.Warn().Strs("keys", changed).Int("after_iteration", st.Iteration).Msg("resuming under a changed config.json (recorded in state.json)")
		if err := writeJSON(d.state(), st); err != nil {
			return nil, fmt.Errorf("resuming %s: %w", dir, err)
		}
	}
	if st.Iteration > 0 || st.BaseEval != nil {
		// The history: an empty or missing metrics.jsonl would restart
		// the curves and the report from the middle.
		if lines, err := ReadMetrics(d.metrics()); err != nil || len(lines) == 0 {
			return nil, fmt.Errorf("resuming %s: metrics.jsonl is missing or empty (%v) but state.json records %d iterations and a base evaluation %v: the run's history is lost; restore metrics.jsonl from a copy of the folder, or start a new run", dir, err, st.Iteration, st.BaseEval != nil)
		}
	}
	if err := checkHistory(d, st); err != nil {
		return nil, fmt.Errorf("resuming %s: %w", dir, err)
	}
	// Drop metrics of unfinished work so nothing is counted twice.
	if err := trimMetrics(d.metrics(), func(l MetricsLine) bool {
		switch l.Kind {
		case "stage1":
			return st.Stage1Done
		case "eval", "eval_sampled":
			if l.Iteration == 0 {
				return st.BaseEval != nil
			}
			return l.Iteration <= st.Iteration && (l.Iteration < cfg.Iterations || st.FinalEval != nil)
		}
		return l.Iteration <= st.Iteration
	}); err != nil {
		return nil, fmt.Errorf("resuming %s: %w", dir, err)
	}
	deps.Log.Info().Str("dir", dir).Int("iteration", st.Iteration).Bool("stage1_done", st.Stage1Done).Msg("resuming run")
	return execute(ctx, cfg, deps, d, st)
}

func execute(ctx context.Context, cfg Config, deps Deps, dir runDir, st *State) (res *Result, err error) {
	if deps.NewLearner == nil || deps.OpenBackend == nil {
		return nil, errors.New("run: NewLearner and OpenBackend must be wired")
	}
	if deps.OpenEnv == nil {
		deps.OpenEnv = OpenEnv
	}
	r := &run{cfg: cfg, deps: deps, dir: dir, st: st, log: deps.Log.With().Str("run", string(dir)).Logger(), start: time.Now()}
	r.lastSave = r.start
	if r.env, err = deps.OpenEnv(cfg.Env); err != nil {
		return nil, fmt.Errorf("opening environment %s: %w", cfg.Env.Name, err)
	}
	defer r.close()
	if cfg.Env.Kind == "agentgym" {
		book, err := openGoalBook(dir.path(goalsFile), cfg.Env.GoalsFile)
		if err != nil {
			return nil, fmt.Errorf("opening environment %s: the task goals: %w", cfg.Env.Name, err)
		}
		r.env.Factory = goalChecked{inner: r.env.Factory, book: book}
	}
	if r.pool, err = trainPool(r.env.Tasks, cfg.TrainTasks, cfg.DataShare, cfg.Seed); err != nil {
		return nil, err
	}
	if err := r.serve(ctx, dir.abs(st.Checkpoint)); err != nil {
		return nil, err
	}
	if st.BaseEval == nil {
		reused, err := r.reuseBaseEval()
		if err != nil {
			return nil, err
		}
		from := ""
		if reused {
			from = ", measured in " + st.BaseEvalFrom
		} else {
			ep, err := r.evaluate(ctx, 0)
			if err != nil {
				return nil, err
			}
			st.BaseEval = ep
			if err := r.saveState(); err != nil {
				return nil, err
			}
		}
		ep := st.BaseEval
		seen, unseen := min(ep.Episodes, r.env.Tasks.SplitSize(envadapters.EvalSeen)), min(ep.Episodes, r.env.Tasks.SplitSize(envadapters.EvalUnseen))
		count := fmt.Sprintf("%d episodes each", seen)
		if seen != unseen {
			count = fmt.Sprintf("%d and %d episodes", seen, unseen)
		}
		r.printf("base policy (%s): eval-seen success %.1f%%, eval-unseen %.1f%% (%s%s)%s\n", st.baseName(), 100*ep.Seen, 100*ep.Unseen, count, from, ep.sampledString())
	}
	if cfg.UsesSFT() && !st.Stage1Done {
		if err := r.stage1(ctx); err != nil {
			return nil, fmt.Errorf("stage 1: %w", err)
		}
	}
	if r.learner, err = deps.NewLearner(cfg.learnerSpec(dir.abs(st.Checkpoint), dir.abs(st.Reference))); err != nil {
		return nil, fmt.Errorf("loading the learner: %w", err)
	}
	r.firstIter, r.loopStart = st.Iteration+1, time.Now()
	for k := st.Iteration + 1; k <= cfg.Iterations && st.Stopped == ""; k++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := r.iterate(ctx, k); err != nil {
			return nil, fmt.Errorf("iteration %d (state saved after iteration %d; resume with seedctl run --resume %s): %w", k, st.Iteration, dir, err)
		}
	}
	if st.Stopped != "" {
		r.printf("stopped after iteration %d of %d: %s\n", st.Iteration, cfg.Iterations, st.Stopped)
	}
	if st.FinalEval == nil {
		ep := st.BaseEval
		if r.lastEval != nil && r.lastEval.Iteration == st.Iteration {
			ep = r.lastEval // the plateau's last evaluation is of this checkpoint
		} else if cfg.Iterations > 0 || st.Stage1Done {
			if ep, err = r.evaluate(ctx, st.Iteration); err != nil {
				return nil, err
			}
		}
		st.FinalEval = ep
	}
	st.Done = true
	if err := r.saveState(); err != nil {
		return nil, err
	}
	if err := WriteReport(string(dir)); err != nil {
		return nil, fmt.Errorf("writing the report: %w", err)
	}
	r.printf("trained policy (%s, %d iterations): eval-seen success %.1f%% (base %.1f%%), eval-unseen %.1f%% (base %.1f%%)%s; base %s; report: %s\n",
		cfg.Algo, st.Iteration, 100*st.FinalEval.Seen, 100*st.BaseEval.Seen, 100*st.FinalEval.Unseen, 100*st.BaseEval.Unseen, st.FinalEval.sampledString(), st.baseName(), HTMLReportPath(string(dir)))
	return &Result{Dir: string(dir), State: *st, Base: st.BaseEval, Final: st.FinalEval, Duration: time.Since(r.start), EvalProtocol: r.cfg.EvalProtocol()}, nil
}

func (r *run) close() {
	if r.env.Close != nil {
		if err := r.env.Close(); err != nil {
			r.log.Warn().Err(err).Msg("releasing the environment's server-side envs")
		}
	}
	if r.learner != nil {
		r.learner.Close()
	}
	if r.backend != nil {
		r.backend.Close()
	}
}

func (r *run) printf(format string, args ...any) {
	if r.deps.Progress != nil {
		fmt.Fprintf(r.deps.Progress, format, args...)
	}
}

func (r *run) saveState() error {
	now := time.Now()
	r.st.Seconds += now.Sub(r.lastSave).Seconds()
	r.st.Updated, r.lastSave = now, now
	return writeJSON(r.dir.state(), r.st)
}

func (r *run) phase(k int, name string) {
	if r.deps.AfterPhase != nil {
		r.deps.AfterPhase(k, name)
	}
}

// serve starts the backend on dir (or publishes dir to a running one).
func (r *run) serve(ctx context.Context, dir string) error {
	if r.backend == nil {
		b, err := r.deps.OpenBackend(ctx, dir)
		if err != nil {
			return fmt.Errorf("starting the inference backend on %s: %w", dir, err)
		}
		r.backend = b
	} else if err := r.backend.Publish(ctx, dir, filepath.Base(dir)); err != nil {
		return fmt.Errorf("publishing %s: %w", dir, err)
	} else if err := r.verifyServed(ctx, filepath.Base(dir)); err != nil {
		return err
	}
	if r.policy != nil {
		return nil // checkpoints keep the tokenizer and chat template: no need to re-read them
	}
	p, err := rollout.LoadPolicy(dir, r.backend)
	if err != nil {
		return err
	}
	r.policy = p
	return nil
}

// releaseServer has a server that shares the trainer's accelerators give
// its memory back before training (colocated vLLM sleeps, SGLang releases
// its weights and KV cache; the next publish takes them back, as serve
// does after every update). Other servers do nothing.
func (r *run) releaseServer(ctx context.Context, before string) error {
	if err := r.backend.Release(ctx); err != nil {
		return fmt.Errorf("releasing the inference server's memory before %s: %w", before, err)
	}
	return nil
}

// probeText is what verifyServed scores: any text the tokenizer encodes.
const probeText = "Your task is to: check that the server answers with the trained weights. Step 1: look around; 2 items, 3 places, one goal."

// verifyServed checks that every server serves the learner's current
// weights (BackendConfig.VerifyTolerance): the served log-probs of a probe
// against the learner's own.
func (r *run) verifyServed(ctx context.Context, version string) error {
	tol := r.cfg.Backend.verifyTolerance()
	if tol < 0 || r.learner == nil || r.policy == nil {
		return nil
	}
	if r.cfg.Rollout.Temperature != 1 {
		if !r.verifyWarned {
			r.verifyWarned = true
			r.log.Warn().Float64("temperature", r.cfg.Rollout.Temperature).Msg("published weights are not verified: the trainer scores at the rollout temperature, servers at 1")
		}
		return nil
	}
	probe, err := r.policy.Tok.Encode(probeText)
	if err != nil {
		return fmt.Errorf("verifying %s: encoding the probe: %w", version, err)
	}
	lp, err := r.learner.Rescore(ctx, [][]int{probe})
	if err != nil {
		return fmt.Errorf("verifying %s: the trainer's log-probs: %w", version, err)
	}
	want := make([]float64, len(lp[0]))
	for i, v := range lp[0] {
		want[i] = float64(v)
	}
	check := func(ctx context.Context, name string, b inference.Backend) error {
		if err := inference.VerifyServed(ctx, b, probe, want, tol); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		return nil
	}
	if p, ok := r.backend.(*inference.Pool); ok {
		// A server that fails is dropped; the rest must pass.
		return p.Each(ctx, "verifying "+version, check)
	}
	if err := check(ctx, "the inference server", r.backend); err != nil {
		return fmt.Errorf("after publishing %s: %w", version, err)
	}
	return nil
}

// trainPool is the share of the training set a run may use, in a fixed
// order: the training set is the first size tasks (0: all) of the train
// split shuffled by seed, so pools of smaller shares are prefixes of larger
// ones.
func trainPool(src TaskSource, size int, share float64, seed int64) ([]envadapters.Task, error) {
	n := src.SplitSize(envadapters.Train)
	all, err := src.Tasks(envadapters.Train, n)
	if err != nil {
		return nil, fmt.Errorf("listing training tasks: %w", err)
	}
	rng := rand.New(rand.NewPCG(uint64(seed), 0x5eed))
	rng.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	if size > 0 && size < n {
		n = size
	}
	keep := int(share*float64(n) + 0.5)
	if keep < 1 {
		return nil, fmt.Errorf("data share %v of %d training tasks keeps none", share, n)
	}
	return all[:keep], nil
}

// tasksFor is iteration k's batch: the next B tasks of the pool, cycling.
func (r *run) tasksFor(k int) []envadapters.Task {
	b := r.cfg.TasksPerIteration
	out := make([]envadapters.Task, b)
	for j := range out {
		out[j] = r.pool[((k-1)*b+j)%len(r.pool)]
	}
	return out
}

func (r *run) rolloutRunner(seed int64, group int, temp float64) (*rollout.Runner, error) {
	rc := r.cfg.rolloutConfig(seed)
	rc.GroupSize, rc.Temperature = group, temp
	return rollout.NewRunner(rc, r.env.Name, r.env.Factory, r.policy, r.log)
}

// progress prints rollout or analysis progress at most every 2 s, with an
// ETA bounded by the episode step limit when the config sets one.
func (r *run) progress(label string) rollout.Progress {
	return rollout.ProgressLine(r.deps.Progress, label, r.cfg.Env.MaxSteps, 2*time.Second)
}
