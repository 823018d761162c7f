package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/seedctl/seedctl/envadapters"
	"github.com/seedctl/seedctl/inference"
	"github.com/seedctl/seedctl/internal/ckpthash"
	"github.com/seedctl/seedctl/internal/procmem"
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

// EvalPoint is one evaluation of a policy on eval-seen and eval-unseen.
type EvalPoint struct {
	Iteration      int                `json:"iteration"`
	Seen           float64            `json:"seen_success"`
	Unseen         float64            `json:"unseen_success"`
	SeenScore      float64            `json:"seen_score"`
	UnseenScore    float64            `json:"unseen_score"`
	Episodes       int                `json:"episodes"`
	SeenByFamily   map[string]float64 `json:"seen_by_family"`
	UnseenByFamily map[string]float64 `json:"unseen_by_family"`
	// SeenWins and UnseenWins are the per-task outcomes, one character per
	// eval task in split order ('1' won, '0' not): what paired comparisons
	// between runs on the same tasks (benchmarks' bootstrap intervals)
	// resample.
	SeenWins   string `json:"seen_wins,omitempty"`
	UnseenWins string `json:"unseen_wins,omitempty"`
	// SampledTemperature and SeenSampled: eval_seen played again sampled
	// at that temperature (Eval.SampledTemperature; 0: not played).
	SampledTemperature float64 `json:"sampled_temperature,omitempty"`
	SeenSampled        float64 `json:"seen_sampled_success,omitempty"`
}

// BaseName is how runs name their base policy: "weights sha256 <12 hex
// digits>", or "weights unhashed" when the run did not record them.
func (st *State) baseName() string {
	if len(st.BaseWeights) < 12 {
		return "weights unhashed"
	}
	return "weights sha256 " + st.BaseWeights[:12]
}

// sampledString is ", T=1 eval-seen 12.5%" when the point has a sampled
// evaluation, else "".
func (p *EvalPoint) sampledString() string {
	if p == nil || p.SampledTemperature == 0 {
		return ""
	}
	return fmt.Sprintf(", eval-seen sampled at T=%g %.1f%%", p.SampledTemperature, 100*p.SeenSampled)
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
const probeText = "You are in the middle of a room. Your task is to: put a clean mug in cabinet. You arrive at cabinet 1. The cabinet 1 is closed."

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

// evaluate plays Eval.Episodes tasks of eval-seen and eval-unseen greedily
// with plain prompts and records them.
func (r *run) evaluate(ctx context.Context, k int) (*EvalPoint, error) {
	n := r.cfg.Eval.Episodes
	ep := &EvalPoint{Iteration: k, Episodes: n}
	if n == 0 {
		return ep, nil
	}
	var lines []MetricsLine
	for _, split := range []envadapters.Split{envadapters.EvalSeen, envadapters.EvalUnseen} {
		m := min(n, r.env.Tasks.SplitSize(split))
		if m == 0 {
			// A remote server with no such split (AgentGym's ALFWorld has
			// no unseen games): nothing to evaluate.
			continue
		}
		tasks, err := r.env.Tasks.Tasks(split, m)
		if err != nil {
			return nil, fmt.Errorf("eval: listing %s tasks: %w", split, err)
		}
		runner, err := rollout.NewRunner(r.cfg.evalRolloutConfig(), r.env.Name, r.env.Factory, r.policy, r.log)
		if err != nil {
			return nil, err
		}
		start := time.Now()
		trajs, err := runner.Run(ctx, tasks, k, r.progress(fmt.Sprintf("eval %s (iteration %d)", split, k)))
		if err != nil {
			return nil, fmt.Errorf("eval on %s: %w", split, err)
		}
		met := rollout.Summarize(trajs, time.Since(start))
		wins := winString(tasks, trajs)
		if split == envadapters.EvalSeen {
			ep.Seen, ep.SeenScore, ep.SeenByFamily, ep.SeenWins = met.Success, met.MeanScore, met.SuccessByFamily, wins
		} else {
			ep.Unseen, ep.UnseenScore, ep.UnseenByFamily, ep.UnseenWins = met.Success, met.MeanScore, met.SuccessByFamily, wins
		}
		lines = append(lines, MetricsLine{Kind: "eval", Iteration: k, Time: time.Now(), Split: string(split), PerFamily: met.SuccessByFamily,
			Values: map[string]float64{"success": met.Success, "score": met.MeanScore, "mean_steps": met.MeanSteps, "invalid_rate": met.InvalidRate, "rejected_rate": met.RejectedRate, "episodes": float64(met.Episodes)}})
	}
	if t := r.cfg.Eval.SampledTemperature; t > 0 {
		line, err := r.evaluateSampled(ctx, k, n)
		if err != nil {
			return nil, err
		}
		if line != nil {
			ep.SampledTemperature, ep.SeenSampled = t, line.Values["success"]
			lines = append(lines, *line)
		}
	}
	if k == 0 && len(r.st.BaseWeights) >= 12 {
		for i := range lines {
			lines[i].Base = r.st.BaseWeights[:12]
		}
	}
	if err := appendMetrics(r.dir.metrics(), lines...); err != nil {
		return nil, err
	}
	r.log.Info().Int("iteration", k).Float64("seen", ep.Seen).Float64("unseen", ep.Unseen).Msg("eval")
	return ep, nil
}

// evaluateSampled plays n tasks of eval_seen once each at
// Eval.SampledTemperature: its metrics line (kind "eval_sampled"), or nil
// when the environment has no eval_seen tasks.
func (r *run) evaluateSampled(ctx context.Context, k, n int) (*MetricsLine, error) {
	m := min(n, r.env.Tasks.SplitSize(envadapters.EvalSeen))
	if m == 0 {
		return nil, nil
	}
	tasks, err := r.env.Tasks.Tasks(envadapters.EvalSeen, m)
	if err != nil {
		return nil, fmt.Errorf("sampled eval: listing eval_seen tasks: %w", err)
	}
	rc := r.cfg.sampledEvalRolloutConfig()
	runner, err := rollout.NewRunner(rc, r.env.Name, r.env.Factory, r.policy, r.log)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	trajs, err := runner.Run(ctx, tasks, k, r.progress(fmt.Sprintf("eval eval_seen at T=%g (iteration %d)", rc.Temperature, k)))
	if err != nil {
		return nil, fmt.Errorf("sampled eval on eval_seen at T=%g: %w", rc.Temperature, err)
	}
	met := rollout.Summarize(trajs, time.Since(start))
	return &MetricsLine{Kind: "eval_sampled", Iteration: k, Time: time.Now(), Split: string(envadapters.EvalSeen), PerFamily: met.SuccessByFamily,
		Values: map[string]float64{"success": met.Success, "score": met.MeanScore, "mean_steps": met.MeanSteps, "invalid_rate": met.InvalidRate, "rejected_rate": met.RejectedRate,
			"episodes": float64(met.Episodes), "temperature": rc.Temperature}}, nil
}

// winString is EvalPoint.SeenWins for tasks: '1' where a trajectory of
// the task won.
func winString(tasks []envadapters.Task, trajs []*rollout.Trajectory) string {
	won := map[string]bool{}
	for _, t := range trajs {
		won[t.Task.ID] = won[t.Task.ID] || t.Won
	}
	b := make([]byte, len(tasks))
	for i, t := range tasks {
		b[i] = '0'
		if won[t.ID] {
			b[i] = '1'
		}
	}
	return string(b)
}

// progress prints rollout or analysis progress at most every 2 s, with an
// ETA bounded by the episode step limit when the config sets one.
func (r *run) progress(label string) rollout.Progress {
	return rollout.ProgressLine(r.deps.Progress, label, r.cfg.Env.MaxSteps, 2*time.Second)
}

// stage1 collects with the base policy, analyzes with the stage-1
// analyzer, fine-tunes the policy to write those skills and publishes it.
func (r *run) stage1(ctx context.Context) error {
	start := time.Now()
	g := r.cfg.Rollout.GroupSize
	nTasks := max(1, (r.cfg.Stage1.Episodes+g-1)/g)
	tasks := make([]envadapters.Task, nTasks)
	for j := range tasks {
		tasks[j] = r.pool[j%len(r.pool)]
	}
	rc := r.cfg.stage1RolloutConfig(r.cfg.Seed + 7_000_000)
	runner, err := rollout.NewRunner(rc, r.env.Name, r.env.Factory, r.policy, r.log)
	if err != nil {
		return err
	}
	trajs, err := runner.Run(ctx, tasks, 0, r.progress("stage 1 collect"))
	if err != nil {
		return fmt.Errorf("collecting: %w", err)
	}
	if err := rollout.WriteJSONL(r.dir.path("trajectories", "stage1.jsonl"), trajs); err != nil {
		return err
	}
	an, err := r.stage1Analyzer()
	if err != nil {
		return err
	}
	recs, err := r.analyze(ctx, an, trajs, "stage1", 0)
	if err != nil {
		return fmt.Errorf("analyzing: %w", err)
	}
	if err := skills.WriteStore(r.dir.path("skills", "stage1.jsonl"), recs); err != nil {
		return err
	}
	trainRecs, trainTrajs, held := splitHeldOut(recs, trajs, r.cfg.Stage1.HeldOut)
	data, err := r.sftExamples(trainRecs)
	if err != nil {
		return err
	}
	if len(data) == 0 {
		return errors.New("the analyzer wrote no usable skill for any stage-1 trajectory")
	}
	if n := int(r.cfg.Stage1.ActingReplay * float64(len(data))); n > 0 {
		acting := actingExamples(trainTrajs, n, r.cfg.Seed, r.cfg.Stage1.MaxLen)
		r.log.Info().Int("skill_examples", len(data)).Int("acting_examples", len(acting)).Msg("stage-1 data")
		data = append(data, acting...)
	}
	vals := map[string]float64{}
	var heldData []SFTExample
	if len(held.trajs) > 0 {
		if heldData, err = r.sftExamples(held.recs); err != nil {
			return err
		}
		// What the policy writes before stage 1 (the server holds it).
		if err := r.heldOutAnalysis(ctx, held.trajs, "before", vals); err != nil {
			return err
		}
	}
	if err := r.releaseServer(ctx, "stage-1 fine-tuning"); err != nil {
		return err
	}
	l, err := r.deps.NewLearner(r.cfg.learnerSpec(r.dir.abs(r.st.Checkpoint), r.dir.abs(r.st.Reference)))
	if err != nil {
		return err
	}
	defer l.Close()
	if len(heldData) > 0 {
		if vals["held_out_nll_before"], err = skillNLL(ctx, l, heldData); err != nil {
			return fmt.Errorf("held-out skill NLL before stage 1: %w", err)
		}
	}
	s1 := r.cfg.Stage1
	var lastLoss float64
	lastPrint := time.Time{}
	err = l.SFT(ctx, data, s1.sftOptions(r.cfg.Seed),
		func(step, steps int, loss float64) {
			lastLoss = loss
			if time.Since(lastPrint) > 2*time.Second || step == steps {
				lastPrint = time.Now()
				r.printf("stage 1 SFT: step %d/%d, loss %.3f\n", step, steps, loss)
			}
		})
	if err != nil {
		return fmt.Errorf("fine-tuning: %w", err)
	}
	ck := r.dir.checkpoint("stage1")
	if err := l.Save(ctx, ck); err != nil {
		return err
	}
	served := false
	if len(held.trajs) > 0 {
		if len(heldData) > 0 {
			if vals["held_out_nll_after"], err = skillNLL(ctx, l, heldData); err != nil {
				return fmt.Errorf("held-out skill NLL after stage 1: %w", err)
			}
		}
		if err := r.serve(ctx, ck); err != nil {
			return err
		}
		served = true
		if err := r.heldOutAnalysis(ctx, held.trajs, "after", vals); err != nil {
			return err
		}
		vals["held_out"] = float64(len(held.trajs))
		r.printf("stage 1 held-out (%d trajectories): skill NLL %.3f -> %.3f per token; own analyses parsed %.0f%% -> %.0f%%, with a skill %.0f%% -> %.0f%%\n",
			len(held.trajs), vals["held_out_nll_before"], vals["held_out_nll_after"], 100*vals["held_out_parse_ok_before"], 100*vals["held_out_parse_ok_after"],
			100*vals["held_out_skill_share_before"], 100*vals["held_out_skill_share_after"])
	}
	withSkill := 0
	for _, rec := range recs {
		if rec.Skill != nil {
			withSkill++
		}
	}
	maps.Copy(vals, map[string]float64{
		"episodes": float64(len(trajs)), "skills": float64(withSkill), "sft_examples": float64(len(data)), "sft_final_loss": lastLoss,
		"seconds": time.Since(start).Seconds(), "success": rollout.Summarize(trajs, 0).Success})
	if err := appendMetrics(r.dir.metrics(), MetricsLine{Kind: "stage1", Time: time.Now(), Values: vals}); err != nil {
		return err
	}
	rel, _ := filepath.Rel(string(r.dir), ck)
	r.st.Stage1Done, r.st.Checkpoint, r.st.Reference = true, rel, rel
	if err := r.recordFiles(); err != nil {
		return err
	}
	if err := r.saveState(); err != nil {
		return err
	}
	r.printf("stage 1: %d trajectories, %d skills, SFT on %d examples (final loss %.3f) in %s\n", len(trajs), withSkill, len(data), lastLoss, time.Since(start).Round(time.Second))
	if served {
		return nil
	}
	return r.serve(ctx, ck)
}

// heldOut is stage 1's held-out part: trajectories and their records.
type heldOut struct {
	recs  []skills.Record
	trajs []*rollout.Trajectory
}

// splitHeldOut keeps the last whole groups of trajs, at least n
// trajectories, out of stage 1's training (stage1.held_out): what is
// trained on, and what is held out. n 0 holds nothing out; at least one
// group is always trained on.
func splitHeldOut(recs []skills.Record, trajs []*rollout.Trajectory, n int) ([]skills.Record, []*rollout.Trajectory, heldOut) {
	if n <= 0 {
		return recs, trajs, heldOut{}
	}
	groups := skills.Groups(trajs)
	ids := map[string]bool{}
	var h heldOut
	for gi := len(groups) - 1; gi >= 1 && len(h.trajs) < n; gi-- {
		for _, t := range groups[gi] {
			ids[t.ID] = true
		}
		h.trajs = append(slices.Clone(groups[gi]), h.trajs...)
	}
	var keepRecs []skills.Record
	for _, rec := range recs {
		if ids[rec.TrajectoryID] {
			h.recs = append(h.recs, rec)
		} else {
			keepRecs = append(keepRecs, rec)
		}
	}
	var keep []*rollout.Trajectory
	for _, t := range trajs {
		if !ids[t.ID] {
			keep = append(keep, t)
		}
	}
	return keepRecs, keep, h
}

// heldOutAnalysis has the served policy analyze the held-out trajectories
// as stage 2 would (greedy, its own analyzer), keeps the analyses in
// skills/stage1-held-out-<when>.jsonl and records the share whose analysis
// parsed and the share that gave a skill, under held_out_parse_ok_<when>
// and held_out_skill_share_<when>.
func (r *run) heldOutAnalysis(ctx context.Context, trajs []*rollout.Trajectory, when string, vals map[string]float64) error {
	an := &skills.SelfAnalyzer{Policy: r.policy, MaxTokens: r.cfg.AnalysisTokens, Temperature: 0, K: r.cfg.MaxStepSkills, Snapshot: "stage1-" + when, NoRepair: !r.cfg.AnalysisRepair, MinWords: r.cfg.analysisMinWords()}
	recs, err := r.analyze(ctx, an, trajs, "stage 1 held-out ("+when+")", 0)
	if err != nil {
		return fmt.Errorf("stage-1 held-out analysis %s fine-tuning: %w", when, err)
	}
	if err := skills.WriteStore(r.dir.path("skills", "stage1-held-out-"+when+".jsonl"), recs); err != nil {
		return err
	}
	withSkill := 0
	for _, rec := range recs {
		if rec.Skill != nil && !rec.Skill.Empty() {
			withSkill++
		}
	}
	vals["held_out_parse_ok_"+when] = parseShare(recs)
	vals["held_out_skill_share_"+when] = float64(withSkill) / float64(max(1, len(trajs)))
	return nil
}

// parseShare is the share of analyses that were written and parsed.
func parseShare(recs []skills.Record) float64 {
	parsed := 0
	for _, rec := range recs {
		if rec.ParseError == "" && rec.Raw != "" {
			parsed++
		}
	}
	return float64(parsed) / float64(max(1, len(recs)))
}

// skillNLL is the mean NLL per trained token of examples under l's
// current weights.
func skillNLL(ctx context.Context, l Learner, examples []SFTExample) (float64, error) {
	seqs := make([][]int, len(examples))
	for i, ex := range examples {
		seqs[i] = ex.IDs
	}
	lps, err := l.Rescore(ctx, seqs)
	if err != nil {
		return 0, err
	}
	sum, n := 0.0, 0
	for i, ex := range examples {
		for k := 1; k < len(ex.IDs) && k < len(lps[i]); k++ {
			if ex.Loss[k] {
				sum -= float64(lps[i][k])
				n++
			}
		}
	}
	if n == 0 {
		return 0, errors.New("no trained tokens")
	}
	return sum / float64(n), nil
}

func (r *run) stage1Analyzer() (skills.Analyzer, error) {
	if r.deps.Analyzer != nil {
		return r.deps.Analyzer, nil
	}
	a := r.cfg.Stage1.Analyzer
	switch a.Kind {
	case "oracle":
		return &skills.OracleAnalyzer{K: r.cfg.MaxStepSkills}, nil
	case "external":
		cc := inference.DefaultChatConfig(a.BaseURL, a.Model)
		cc.APIKeyEnv = a.APIKeyEnv
		client, err := inference.NewChatClient(cc, r.log)
		if err != nil {
			return nil, fmt.Errorf("stage-1 analyzer: %w", err)
		}
		return &skills.ExternalAnalyzer{Client: client, K: r.cfg.MaxStepSkills, MaxTokens: max(a.MaxTokens, 256), Model: a.Model}, nil
	}
	return nil, fmt.Errorf("stage-1 analyzer kind %q", a.Kind)
}

// analyzeAt runs an analyzer over requests and stamps its records with
// the iteration k they belong to.
func analyzeAt(ctx context.Context, an skills.Analyzer, reqs []skills.Request, k int) ([]skills.Record, error) {
	recs, err := an.Analyze(ctx, reqs)
	for i := range recs {
		recs[i].Iteration = k
	}
	return recs, err
}

// analyze runs an analyzer over trajectories with their critical-step
// candidates, in chunks, with progress.
func (r *run) analyze(ctx context.Context, an skills.Analyzer, trajs []*rollout.Trajectory, label string, k int) ([]skills.Record, error) {
	reqs := r.analysisRequests(trajs)
	prog := r.progress(label + " analysis")
	var recs []skills.Record
	const chunk = 64
	for lo := 0; lo < len(reqs); lo += chunk {
		part, err := analyzeAt(ctx, an, reqs[lo:min(lo+chunk, len(reqs))], k)
		if err != nil {
			return nil, err
		}
		recs = append(recs, part...)
		prog(rollout.Status{Done: len(recs), Total: len(reqs)})
	}
	return recs, nil
}

// analysisRequests are the analyzer's requests for trajs, group by group:
// every step a candidate when the analyzer chooses the critical steps,
// else the steps CriticalSteps picks by comparing the group's samples.
func (r *run) analysisRequests(trajs []*rollout.Trajectory) []skills.Request {
	cc := skills.DefaultCriticalConfig()
	cc.Gamma, cc.K = r.cfg.Gamma, r.cfg.MaxStepSkills
	var reqs []skills.Request
	if r.cfg.SkillMode == string(skills.EpisodeOnly) {
		// The public code's episode_only analysis: summary and episode
		// skill alone, no critical steps to choose.
		for _, t := range trajs {
			reqs = append(reqs, skills.Request{Traj: t, EpisodeOnly: true})
		}
		return reqs
	}
	for _, g := range skills.Groups(trajs) {
		if r.cfg.CriticalSteps == CriticalLLM {
			for _, t := range g {
				all := make([]int, len(t.Steps))
				for i := range all {
					all[i] = i
				}
				reqs = append(reqs, skills.Request{Traj: t, Candidates: all, ChooseSteps: true})
			}
			continue
		}
		crit := skills.CriticalSteps(g, cc)
		for _, t := range g {
			reqs = append(reqs, skills.Request{Traj: t, Candidates: crit[t.ID]})
		}
	}
	return reqs
}

// analysisPipe analyzes each task's group as soon as its rollouts have all
// ended, while the other groups still play: the hindsight requests share
// the server's batches with the rollout's last turns instead of waiting
// for them. Records come out in group order, as analyze gives them.
type analysisPipe struct {
	r      *run
	an     skills.Analyzer
	k      int
	ctx    context.Context
	cancel context.CancelFunc
	sem    chan struct{}
	wg     sync.WaitGroup
	mu     sync.Mutex
	recs   map[int][]skills.Record // by group
	err    error
}

// pipeGroups bounds the groups analyzed at once (each G requests).
const pipeGroups = 8

func (r *run) pipeAnalysis(ctx context.Context, an skills.Analyzer, k int) *analysisPipe {
	ctx, cancel := context.WithCancel(ctx)
	return &analysisPipe{r: r, an: an, k: k, ctx: ctx, cancel: cancel, sem: make(chan struct{}, pipeGroups), recs: map[int][]skills.Record{}}
}

// groupDone starts the analysis of one finished group (nil-safe: runs
// without SEED's analysis pass nil).
func (p *analysisPipe) groupDone(g int, trajs []*rollout.Trajectory) {
	if p == nil {
		return
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		p.sem <- struct{}{}
		defer func() { <-p.sem }()
		if p.ctx.Err() != nil {
			return
		}
		recs, err := analyzeAt(p.ctx, p.an, p.r.analysisRequests(trajs), p.k)
		p.mu.Lock()
		defer p.mu.Unlock()
		if err != nil {
			if p.err == nil {
				p.err = fmt.Errorf("group %d: %w", g, err)
				p.cancel()
			}
			return
		}
		p.recs[g] = recs
	}()
}

// wait returns every group's records in group order, once all are in;
// a group never handed over (a rollout that failed) is analyzed now.
func (p *analysisPipe) wait(trajs []*rollout.Trajectory, label string) ([]skills.Record, error) {
	p.wg.Wait()
	defer p.cancel()
	if p.err != nil {
		return nil, p.err
	}
	prog := p.r.progress(label + " analysis")
	var out []skills.Record
	groups := skills.Groups(trajs)
	for _, g := range groups {
		recs, ok := p.recs[g[0].Group]
		if !ok {
			var err error
			if recs, err = analyzeAt(p.ctx, p.an, p.r.analysisRequests(g), p.k); err != nil {
				return nil, err
			}
		}
		out = append(out, recs...)
	}
	prog(rollout.Status{Done: len(out), Total: len(out)})
	return out, nil
}

// abandon stops the analyses in flight (the rollout failed).
func (p *analysisPipe) abandon() {
	if p != nil {
		p.cancel()
		p.wg.Wait()
	}
}

// sftExamples turns analyzer records into stage-1 sequences: the analysis
// prompt exactly as self-analysis will send it, then the skill JSON and
// EOS (trained on).
func (r *run) sftExamples(recs []skills.Record) ([]SFTExample, error) {
	var out []SFTExample
	for _, rec := range recs {
		if rec.Skill == nil || rec.Prompt == "" {
			continue
		}
		prompt, err := r.policy.StartIDs("", rec.Prompt)
		if err != nil {
			return nil, fmt.Errorf("stage-1 prompt of %s: %w", rec.TrajectoryID, err)
		}
		var want any = rec.Skill
		if r.cfg.Stage1.Targets == TargetsEpisode {
			// The public code's stage-1 targets: no step skills.
			want = struct {
				EpisodeSummary string `json:"episode_summary"`
				EpisodeSkill   string `json:"episode_skill"`
			}{rec.Skill.EpisodeSummary, rec.Skill.EpisodeSkill}
		}
		js, err := json.Marshal(want)
		if err != nil {
			return nil, err
		}
		target, err := r.policy.Tok.Encode(string(js))
		if err != nil {
			return nil, err
		}
		ids := append(append(prompt, target...), r.policy.EOS)
		if len(ids) > r.cfg.Stage1.MaxLen {
			r.log.Warn().Str("trajectory", rec.TrajectoryID).Int("tokens", len(ids)).Int("max_len", r.cfg.Stage1.MaxLen).Msg("stage-1 example longer than max_len: skipped")
			continue
		}
		loss := make([]bool, len(ids))
		for i := len(prompt); i < len(ids); i++ {
			loss[i] = true
		}
		out = append(out, SFTExample{IDs: ids, Loss: loss})
	}
	return out, nil
}

// actingExamples samples n of the trajectories' turns as SFT examples:
// the prompt the policy saw and the reply it sampled (trained on), so
// stage 1 keeps the policy's acting distribution while it learns skills.
func actingExamples(trajs []*rollout.Trajectory, n int, seed int64, maxLen int) []SFTExample {
	var all []SFTExample
	for _, t := range trajs {
		rows, err := plainRows(t, nil)
		if err != nil {
			continue
		}
		for _, row := range rows {
			if len(row.IDs) <= maxLen {
				all = append(all, SFTExample{IDs: row.IDs, Loss: row.Train})
			}
		}
	}
	rng := rand.New(rand.NewPCG(uint64(seed), 0xac7))
	rng.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	return all[:min(n, len(all))]
}

// iterStats accumulates an iteration's metrics.
type iterStats map[string]float64

// iterate is one stage-2 iteration. Everything the next one needs is
// written before state.json records it as finished.
func (r *run) iterate(ctx context.Context, k int) error {
	t0 := time.Now()
	vals := iterStats{}
	tasks := r.tasksFor(k)
	runner, err := r.rolloutRunner(r.cfg.Seed*1_000_003+int64(k), r.cfg.Rollout.GroupSize, r.cfg.Rollout.Temperature)
	if err != nil {
		return err
	}
	// SEED's hindsight analysis starts on each group as it ends (analysisPipe).
	var pipe *analysisPipe
	if r.cfg.Distills() && r.cfg.RL.TeacherContext != TeacherContextPlain {
		an, err := r.iterationAnalyzer(k)
		if err != nil {
			return err
		}
		pipe = r.pipeAnalysis(ctx, an, k)
	}
	trajs, err := runner.RunNotify(ctx, tasks, k, r.progress(fmt.Sprintf("iteration %d/%d rollout", k, r.cfg.Iterations)), pipe.groupDone)
	if err != nil {
		pipe.abandon()
		return fmt.Errorf("rollout: %w", err)
	}
	met := rollout.Summarize(trajs, time.Since(t0))
	if err := rollout.WriteJSONL(r.dir.trajs(k), trajs); err != nil {
		return err
	}
	vals["rollout_s"] = time.Since(t0).Seconds()
	r.phase(k, "rollout")

	// The plain rows and their log-probs need no skills: they are scored
	// while SEED's analysis finishes (for GRPO, right away).
	t1 := time.Now()
	plainCtx, stopPlain := context.WithCancel(ctx)
	plainCh := r.startPlain(plainCtx, trajs)
	plainTaken := false
	defer func() {
		stopPlain()
		if !plainTaken {
			<-plainCh // the learner is not left busy behind an error
		}
	}()

	// Skills.
	var recs []skills.Record
	sks := map[string]*skills.Skill{}
	if pipe != nil {
		if recs, err = pipe.wait(trajs, fmt.Sprintf("iteration %d/%d", k, r.cfg.Iterations)); err != nil {
			return fmt.Errorf("analysis: %w", err)
		}
		if r.cfg.Algo == AlgoRandomSkill {
			list := make([]*skills.Skill, len(recs))
			for i := range recs {
				list[i] = recs[i].Skill
			}
			list = skills.Shuffle(list, uint64(r.cfg.Seed)*7919+uint64(k))
			for i := range recs {
				recs[i].Skill = list[i]
			}
		}
		if err := skills.WriteStore(r.dir.skills(k), recs); err != nil {
			return err
		}
		mode, _ := skills.ParseMode(r.cfg.SkillMode)
		for _, rec := range recs {
			if rec.Skill != nil && !rec.Skill.Empty() {
				sks[rec.TrajectoryID] = mode.Apply(rec.Skill)
			}
		}
		vals["skill_share"] = float64(len(sks)) / float64(max(1, len(trajs)))
		vals["skill_parse_ok"] = parseShare(recs)
		gen, prompt, err := r.analysisTokens(recs)
		if err != nil {
			return err
		}
		vals["analysis_tokens"], vals["analysis_prompt_tokens"] = float64(gen), float64(prompt)
	}
	vals["analysis_s"] = time.Since(t1).Seconds()
	r.phase(k, "analysis")

	// Rows, teacher contexts and rescoring. rescore_s is what this phase
	// adds after the analysis; plain_rescore_s the plain rows' scoring
	// wherever it ran.
	t2 := time.Now()
	plain := <-plainCh
	plainTaken = true
	if plain.err != nil {
		return fmt.Errorf("plain rows: %w", plain.err)
	}
	vals["plain_rescore_s"] = plain.set.took.Seconds()
	rows, err := r.buildRows(ctx, trajs, plain.set, sks, vals)
	if err != nil {
		return err
	}
	vals["rescore_s"] = time.Since(t2).Seconds()
	r.phase(k, "rescore")

	// Update.
	t3 := time.Now()
	if len(rows) > 0 {
		if err := r.releaseServer(ctx, "the update"); err != nil {
			return err
		}
		if err := r.update(ctx, k, rows, vals); err != nil {
			return err
		}
	}
	vals["update_s"] = time.Since(t3).Seconds()
	r.phase(k, "update")

	// Checkpoint and publish.
	t4 := time.Now()
	name := fmt.Sprintf("iter-%d", k)
	ck := r.dir.checkpoint(name)
	if err := r.learner.Save(ctx, ck); err != nil {
		return fmt.Errorf("saving checkpoint: %w", err)
	}
	if err := r.serve(ctx, ck); err != nil {
		return err
	}
	vals["publish_s"] = time.Since(t4).Seconds()
	r.phase(k, "checkpoint")

	vals["success"], vals["mean_return"], vals["mean_steps"], vals["invalid_rate"] = met.Success, met.MeanReturn, met.MeanSteps, met.InvalidRate
	vals["rejected_rate"] = met.RejectedRate
	vals["score"], vals["tokens_generated"], vals["episodes"] = met.MeanScore, float64(met.TokensGenerated), float64(met.Episodes)
	vals["first_action_agreement"], vals["first_places"] = met.FirstActionAgreement, met.FirstPlaces
	vals["iteration_s"] = time.Since(t0).Seconds()
	// This process's resident set (the embedded server and the learner
	// live in it unless they run elsewhere): now, and its peak so far.
	if u, err := procmem.Read(); err == nil {
		vals["rss_gb"], vals["rss_peak_gb"] = float64(u.Resident)/1e9, float64(u.Peak)/1e9
	}
	lines := []MetricsLine{{Kind: "iteration", Iteration: k, Time: time.Now(), Values: vals, PerFamily: met.SuccessByFamily}}
	if err := appendMetrics(r.dir.metrics(), lines...); err != nil {
		return err
	}
	prev := r.st.Checkpoint
	r.st.Iteration, r.st.Checkpoint, r.st.DataCursor = k, filepath.Join("checkpoints", name), k*r.cfg.TasksPerIteration
	if err := r.recordFiles(); err != nil {
		return err
	}
	if err := r.saveState(); err != nil {
		return err
	}
	// The previous iteration's checkpoint is no longer needed (stage 1's
	// stays: it is the reference).
	// Never the folder just written, whatever the state said before.
	if filepath.Base(prev) != "stage1" && !filepath.IsAbs(prev) && prev != r.st.Reference && filepath.Clean(prev) != filepath.Clean(r.st.Checkpoint) {
		os.RemoveAll(r.dir.abs(prev))
	}
	ev := r.log.Info().Int("iteration", k).Str("algo", r.cfg.Algo)
	for _, key := range []string{"success", "mean_return", "invalid_rate", "skill_share", "loss", "grpo_loss", "opd_loss", "kl", "gate_mean", "positive_shift", "clip_frac", "grad_norm", "entropy", "iteration_s"} {
		ev = ev.Float64(key, vals[key])
	}
	ev.Msg("iteration finished")
	el := time.Since(r.loopStart)
	done := k - r.firstIter + 1
	eta := time.Duration(float64(el) / float64(done) * float64(r.cfg.Iterations-k))
	upd := fmt.Sprintf("loss %.4f on %.0f rows", vals["loss"], vals["rows"])
	switch {
	case vals["refused_steps"] > 0 && vals["optimizer_steps"] == 0:
		upd = fmt.Sprintf("update refused (%.0f non-finite steps)", vals["refused_steps"])
	case vals["optimizer_steps"] == 0:
		upd = "no update (no row with signal)"
	}
	r.printf("iteration %d/%d: rollout success %.1f%%, return %.2f, invalid %.1f%% | skills %.0f%%, gate %.2f, Δ>0 %.0f%% | %s | %s (rollout %.0fs, analysis %.0fs, rescore %.0fs, update %.0fs) ETA %s\n",
		k, r.cfg.Iterations, 100*met.Success, met.MeanReturn, 100*met.InvalidRate, 100*vals["skill_share"], vals["gate_mean"], 100*vals["positive_shift"], upd,
		time.Since(t0).Round(time.Second), vals["rollout_s"], vals["analysis_s"], vals["rescore_s"], vals["update_s"], eta.Round(time.Second))
	if ev := r.cfg.Eval.Every; ev > 0 && k%ev == 0 && k < r.cfg.Iterations {
		ep, err := r.evaluate(ctx, k)
		if err != nil {
			return err
		}
		r.lastEval = ep
		if p := r.cfg.Eval.PlateauPatience; p > 0 {
			lines, err := ReadMetrics(r.dir.metrics())
			if err != nil {
				return err
			}
			if why := plateaued(lines, p); why != "" {
				r.st.Stopped = why
				return r.saveState()
			}
		}
	}
	return nil
}

// plateaued says why training should stop (or ""): eval-seen success in
// the metrics has not beaten its best for patience evaluations in a row.
func plateaued(lines []MetricsLine, patience int) string {
	best, bestAt, since := -1.0, 0, 0
	for _, l := range lines {
		if l.Kind != "eval" || l.Split != string(envadapters.EvalSeen) {
			continue
		}
		if v := l.Values["success"]; v > best {
			best, bestAt, since = v, l.Iteration, 0
		} else {
			since++
		}
	}
	if since < patience {
		return ""
	}
	return fmt.Sprintf("eval-seen success has not beaten its best, %.1f%% after iteration %d, in %d evaluations", 100*best, bestAt, since)
}

// analysisTokens counts what the analyzer wrote (first answers and repair
// answers) and read (prompts), in the policy's tokens: the cost of
// self-analysis for T4, whichever analyzer ran.
func (r *run) analysisTokens(recs []skills.Record) (gen, prompt int, err error) {
	count := func(s string) (int, error) {
		if s == "" {
			return 0, nil
		}
		ids, err := r.policy.Tok.Encode(s)
		if err != nil {
			return 0, fmt.Errorf("counting analysis tokens: %w", err)
		}
		return len(ids), nil
	}
	for _, rec := range recs {
		for _, s := range []string{rec.Raw, rec.RepairRaw} {
			n, err := count(s)
			if err != nil {
				return 0, 0, err
			}
			gen += n
		}
		n, err := count(rec.Prompt)
		if err != nil {
			return 0, 0, err
		}
		prompt += n
	}
	return gen, prompt, nil
}

func (r *run) iterationAnalyzer(k int) (skills.Analyzer, error) {
	switch r.cfg.Algo {
	case AlgoStaticSkill:
		return r.stage1Analyzer()
	case AlgoPrivilegedSkill:
		if r.privileged == nil {
			b, err := envadapters.Lookup(r.cfg.Env.Name)
			if err != nil {
				return nil, fmt.Errorf("privileged teacher: %w", err)
			}
			r.privileged = &skills.PrivilegedAnalyzer{Env: b, Options: r.cfg.rolloutConfig(0).EnvOptions}
		}
		return r.privileged, nil
	case AlgoTransferSkill:
		if r.transfer == nil {
			b, err := envadapters.Lookup(r.cfg.Env.Name)
			if err != nil {
				return nil, fmt.Errorf("transfer teacher: %w", err)
			}
			r.transfer = &skills.TransferAnalyzer{Env: b, Options: r.cfg.rolloutConfig(0).EnvOptions}
		}
		return r.transfer, nil
	default:
		return &skills.SelfAnalyzer{Policy: r.policy, MaxTokens: r.cfg.AnalysisTokens, Temperature: 0, K: r.cfg.MaxStepSkills, Snapshot: fmt.Sprintf("iter-%d", k-1), NoRepair: !r.cfg.AnalysisRepair, MinWords: r.cfg.analysisMinWords()}, nil
	}
}

// plainSet is what the training rows need that skills do not change: each
// trajectory's plain rows with their advantages and, for the rows sure to
// be trained, the current policy's and the reference's log-probs. SEED
// computes it while the hindsight analysis still decodes on the inference
// server (startPlain), so the trainer's forward passes run beside the
// server's instead of after them.
type plainSet struct {
	rows [][]Row // by trajectory of the rollout; nil for a broken environment's episode
	gs   GroupStats
	gap  float64 // the largest |ℓold(server) − ℓold(trainer)| of a scored trained token
	took time.Duration
}

// scoredEarly says whether startPlain scores a row: every row unless flat
// rows may be dropped (those are scored once it is known they stay).
func (r *run) scoredEarly(row *Row) bool {
	return r.cfg.RL.DropFlat == "" || !row.flat()
}

// startPlain builds and scores the plain rows of trajs in the background;
// the channel yields one result. The learner is busy until it does.
func (r *run) startPlain(ctx context.Context, trajs []*rollout.Trajectory) <-chan plainResult {
	ch := make(chan plainResult, 1)
	go func() {
		p, err := r.scorePlain(ctx, trajs)
		ch <- plainResult{p, err}
	}()
	return ch
}

type plainResult struct {
	set *plainSet
	err error
}

func (r *run) scorePlain(ctx context.Context, trajs []*rollout.Trajectory) (*plainSet, error) {
	t0 := time.Now()
	adv, gs := StepAdvantages(trajs, r.cfg.advantageParams())
	p := &plainSet{rows: make([][]Row, len(trajs)), gs: gs}
	var early []*Row
	for i, t := range trajs {
		if t.EnvError != "" {
			continue // a broken environment's episode is not evidence
		}
		tr, err := plainRows(t, adv[t.ID])
		if err != nil {
			return nil, err
		}
		p.rows[i] = tr
		for k := range tr {
			if r.scoredEarly(&tr[k]) {
				early = append(early, &tr[k])
			}
		}
	}
	gap, err := r.scoreRows(ctx, early)
	if err != nil {
		return nil, err
	}
	p.gap, p.took = gap, time.Since(t0)
	return p, nil
}

// scoreRows fills rows' sampling log-probs as the trainer computes them
// (unless the server's are kept) and the reference's (with a KL term),
// and returns the largest gap between the server's and the trainer's
// log-prob of a trained token.
func (r *run) scoreRows(ctx context.Context, rows []*Row) (float64, error) {
	if len(rows) == 0 {
		return 0, nil
	}
	seqs := make([][]int, len(rows))
	for i, row := range rows {
		seqs[i] = row.IDs
	}
	gap := 0.0
	if !r.cfg.RL.ServerOldLogP {
		cur, err := r.learner.Rescore(ctx, seqs)
		if err != nil {
			return 0, fmt.Errorf("recomputing sampling log-probs: %w", err)
		}
		for i, row := range rows {
			for k, tr := range row.Train {
				if tr {
					gap = math.Max(gap, math.Abs(float64(cur[i][k]-row.OldLogP[k])))
				}
			}
			row.OldLogP = cur[i]
		}
	}
	if r.cfg.RL.KLCoef > 0 {
		ref, err := r.learner.RescoreRef(ctx, seqs)
		if err != nil {
			return 0, fmt.Errorf("reference rescoring: %w", err)
		}
		for i, row := range rows {
			row.RefLogP = ref[i]
		}
	}
	return gap, nil
}

// buildRows makes the training rows from the plain set: teacher log-probs
// on distilled tokens, flat rows dropped where configured, and the
// log-probs of the rows startPlain left unscored.
func (r *run) buildRows(ctx context.Context, trajs []*rollout.Trajectory, p *plainSet, sks map[string]*skills.Skill, vals iterStats) ([]Row, error) {
	vals["flat_group_share"], vals["flat_failing_share"], vals["flat_winning_share"] = p.gs.Flat, p.gs.FlatFailing, p.gs.FlatWinning
	if r.cfg.RL.StepGroupWeight > 0 {
		vals["step_grouped_share"], vals["step_group_size"] = p.gs.StepGrouped, p.gs.StepGroupSize
	}
	mode, _ := skills.ParseMode(r.cfg.SkillMode)
	tmpl, err := rollout.TemplateFor(r.env.Name).WithPlacesLine(r.cfg.Rollout.PlacesLine)
	tmpl.SkillSections = r.cfg.Rollout.SkillFormat == rollout.SkillFormatSections
	if err != nil {
		return nil, fmt.Errorf("building rows: %w", err)
	}
	var rows []Row
	type pending struct {
		row  int
		pair skills.SeqPair
		base *skills.SeqPair // the contrastive baseline's pair, or nil
	}
	var teacherSeqs, baseSeqs [][]int
	var pend []pending
	fallbacks, unpaired := 0, 0
	contrast := r.cfg.RL.DistillBaseline == DistillBaselineShuffled
	var donors []int
	if contrast && len(trajs) > 0 {
		task, has := make([]string, len(trajs)), make([]bool, len(trajs))
		for i, t := range trajs {
			task[i], has[i] = t.Task.ID, sks[t.ID] != nil && t.EnvError == ""
		}
		donors = skills.Donors(task, has, uint64(r.cfg.Seed)*7919+uint64(trajs[0].Iteration)+1)
	}
	for i, t := range trajs {
		if t.EnvError != "" {
			continue // no rows (scorePlain)
		}
		tr := p.rows[i]
		if r.cfg.RL.TeacherContext == TeacherContextPlain && r.cfg.Distills() {
			// Standard on-policy distillation: the teacher model reads
			// the plain context and scores every trained token.
			for j := range tr {
				row := &tr[j]
				row.Distill = slices.Clone(row.Train)
				n := len(row.IDs)
				pend = append(pend, pending{row: len(rows) + j, pair: skills.SeqPair{Plain: row.IDs, Teacher: row.IDs, Spans: []skills.Span{{PlainStart: 0, TeacherStart: 0, Len: n, Distill: true}}}})
				teacherSeqs = append(teacherSeqs, row.IDs)
			}
			rows = append(rows, tr...)
			continue
		}
		sk := sks[t.ID]
		var base *skills.TeacherContext
		if sk != nil && contrast {
			var donor *skills.Skill
			if donors[i] >= 0 {
				donor = sks[trajs[donors[i]].ID]
			}
			if bs := skills.Transplant(sk, donor); bs == nil {
				unpaired++
				sk = nil // no contrast, no distillation
			} else if base, err = skills.BuildTeacher(t, bs, mode, tmpl, r.policy); err != nil {
				return nil, fmt.Errorf("contrastive baseline of %s (skill of %s): %w", t.ID, trajs[donors[i]].ID, err)
			}
		}
		if sk != nil {
			tc, err := skills.BuildTeacher(t, sk, mode, tmpl, r.policy)
			if err != nil {
				return nil, fmt.Errorf("teacher context of %s: %w", t.ID, err)
			}
			fallbacks += tc.Fallbacks
			seqs, err := attachTeacher(tr, tc)
			if err != nil {
				return nil, err
			}
			if base != nil {
				if err := sameSpans(tc, base); err != nil {
					return nil, err
				}
			}
			for i, s := range seqs {
				if s != nil {
					pd := pending{row: len(rows) + i, pair: tc.Pairs[i]}
					if base != nil {
						pd.base = &base.Pairs[i]
						baseSeqs = append(baseSeqs, base.Pairs[i].Teacher)
					}
					pend = append(pend, pd)
					teacherSeqs = append(teacherSeqs, s)
				}
			}
		}
		rows = append(rows, tr...)
	}
	if contrast {
		vals["contrast_unpaired"] = float64(unpaired)
	}
	if len(teacherSeqs) > 0 {
		all := append(teacherSeqs, baseSeqs...)
		var want [][]bool
		if r.cfg.RL.DistillForm == DistillFull {
			// The teacher's distribution at every distilled token (the
			// baseline's log-probs stay sampled-token only).
			want = make([][]bool, len(all))
			for i, p := range pend {
				want[i] = teacherPositions(&rows[p.row], p.pair)
			}
			for i := len(pend); i < len(all); i++ {
				want[i] = make([]bool, len(all[i]))
			}
		}
		lps, dists, err := r.learner.RescoreTeacher(ctx, all, want, r.cfg.RL.DistillTopK)
		if err != nil {
			return nil, fmt.Errorf("teacher rescoring: %w", err)
		}
		nb := 0
		for i, p := range pend {
			fillTeacher(&rows[p.row], p.pair, lps[i])
			if dists != nil {
				rows[p.row].TeacherDist = scatterDists(len(rows[p.row].IDs), p.pair, dists[i])
			}
			if p.base != nil {
				rows[p.row].BaselineLogP = scatterSpans(len(rows[p.row].IDs), *p.base, lps[len(teacherSeqs)+nb])
				nb++
			}
		}
	}
	if r.cfg.RL.DropFlat != "" {
		n := len(rows)
		rows = dropFlat(rows, r.cfg.RL.DropFlat == DropNoSignal)
		vals["flat_rows_dropped"] = float64(n - len(rows))
	}
	vals["adv_token_mean"], vals["zero_adv_row_share"], vals["adv_abs_mean"] = advantageFigures(rows)
	if len(rows) == 0 {
		return nil, nil
	}
	// Rows kept for a distilled token though flat were not scored early.
	var late []*Row
	for i := range rows {
		if !r.scoredEarly(&rows[i]) {
			late = append(late, &rows[i])
		}
	}
	gap, err := r.scoreRows(ctx, late)
	if err != nil {
		return nil, err
	}
	if !r.cfg.RL.ServerOldLogP {
		vals["old_logp_max_gap"] = max(p.gap, gap)
	}
	vals["rows"] = float64(len(rows))
	vals["teacher_sequences"] = float64(len(teacherSeqs))
	// Turns whose skill went before the action request or to the turn's
	// end because the turn had no task line (or no request).
	vals["skill_fallback_placements"] = float64(fallbacks)
	return rows, nil
}

// miniBatches cuts the iteration's rows into mini-batches (indexes into
// rows): MiniBatchRows rows each, in order or in a seeded order with
// Shuffle, one pass; or, with MiniBatchRows 0, MiniBatches interleaved
// parts of a seeded shuffle.
func (c Config) miniBatches(n, k int) [][]int {
	rng := rand.New(rand.NewPCG(uint64(c.Seed), uint64(k)))
	var out [][]int
	if c.RL.MiniBatchRows == 0 {
		order := rng.Perm(n)
		nb := min(c.RL.MiniBatches, n)
		for b := 0; b < nb; b++ {
			var mb []int
			for i := b; i < n; i += nb {
				mb = append(mb, order[i])
			}
			out = append(out, mb)
		}
		return out
	}
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	if c.RL.Shuffle {
		order = rng.Perm(n)
	}
	for lo := 0; lo < n; lo += c.RL.MiniBatchRows {
		out = append(out, order[lo:min(lo+c.RL.MiniBatchRows, n)])
	}
	return out
}

// update runs the iteration's optimizer steps, one per mini-batch,
// averaging their metrics into vals.
func (r *run) update(ctx context.Context, k int, rows []Row, vals iterStats) error {
	mbs := r.cfg.miniBatches(len(rows), k)
	sum, count := map[string]float64{}, map[string]int{}
	steps := 0
	defer func() { r.st.MiniBatchesDone += len(mbs) }()
	for b, idx := range mbs {
		batch := make([]Row, len(idx))
		for i, j := range idx {
			batch[i] = rows[j]
		}
		if !anyTrained(batch) {
			continue
		}
		lr := r.cfg.StepLR(k, b, len(mbs), r.st.MiniBatchesDone+b)
		st, err := r.learner.Step(ctx, batch, lr)
		if IsRefusal(err) {
			r.st.Refusals++
			r.log.Warn().Int("iteration", k).Int("mini_batch", b).Int("in_a_row", r.st.Refusals).Err(err).Msg("step refused (non-finite loss or gradient)")
			vals["refused_steps"]++
			if r.st.Refusals >= r.cfg.RL.MaxRefusals {
				return fmt.Errorf("%d refused steps in a row (last: iteration %d mini-batch %d): %w", r.st.Refusals, k, b, err)
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("update mini-batch %d: %w", b, err)
		}
		r.st.Refusals = 0
		steps++
		sum["lr"] += lr
		count["lr"]++
		for name, v := range st {
			sum[name] += v
			count[name]++
		}
	}
	keys := make([]string, 0, len(sum))
	for name := range sum {
		keys = append(keys, name)
	}
	sort.Strings(keys)
	// Each figure is the mean over the steps that reported it (some, like
	// the decision shift by advantage sign, are absent from a step without
	// such tokens).
	for _, name := range keys {
		vals[name] = sum[name] / float64(max(1, count[name]))
	}
	vals["optimizer_steps"] = float64(steps)
	vals["mini_batches"] = float64(len(mbs))
	return nil
}

// advantage is row position k's advantage.
func (row *Row) advantage(k int) float64 {
	if row.Advantages != nil {
		return float64(row.Advantages[k])
	}
	return row.Advantage
}

// flat says whether every trained token of the row has advantage 0.
func (row *Row) flat() bool {
	for k, tr := range row.Train {
		if tr && row.advantage(k) != 0 {
			return false
		}
	}
	return true
}

// advantageFigures are the token-weighted mean advantage over trained
// tokens (negative: the update pushes sampled tokens down on the whole),
// the share of rows with no advantage anywhere, and the token-weighted
// mean |A| (the size of GRPO's per-token signal, against which λ·gate
// weighs the distillation's).
func advantageFigures(rows []Row) (tokenMean, zeroRows, absMean float64) {
	sum, abs, n, zero := 0.0, 0.0, 0, 0
	for i := range rows {
		row := &rows[i]
		for k, tr := range row.Train {
			if tr {
				a := row.advantage(k)
				sum += a
				abs += math.Abs(a)
				n++
			}
		}
		if row.flat() {
			zero++
		}
	}
	if n > 0 {
		tokenMean, absMean = sum/float64(n), abs/float64(n)
	}
	if len(rows) > 0 {
		zeroRows = float64(zero) / float64(len(rows))
	}
	return tokenMean, zeroRows, absMean
}

// dropFlat keeps the rows with a nonzero advantage somewhere (in place),
// whatever the method, so GRPO and SEED lose the same rows; with
// keepDistilled, rows with a distilled token are kept too (the legacy
// update's asymmetric rule).
func dropFlat(rows []Row, keepDistilled bool) []Row {
	kept := rows[:0]
	for i := range rows {
		if !rows[i].flat() || (keepDistilled && slices.Contains(rows[i].Distill, true)) {
			kept = append(kept, rows[i])
		}
	}
	return kept
}

func anyTrained(rows []Row) bool {
	for _, r := range rows {
		for _, t := range r.Train {
			if t {
				return true
			}
		}
	}
	return false
}
