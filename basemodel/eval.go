package basemodel

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/rs/zerolog"

	"github.com/seedctl/seedctl/envadapters"
	"github.com/seedctl/seedctl/inference"
	"github.com/seedctl/seedctl/inference/server"
	"github.com/seedctl/seedctl/rollout"
	"github.com/seedctl/seedctl/skills"
)

// EvalConfig describes one evaluation.
type EvalConfig struct {
	ModelDir string
	Env      string
	Split    envadapters.Split
	Episodes int
	Offset   int
	// Hints: "" (plain), "oracle" (the oracle's skill about the same
	// task) or "oracle-other" (the oracle's skill about a training task of
	// the same family and goal object: knowledge that transfers).
	Hints string
	// Group plays each task this many times (at Temperature; 0 or 1:
	// once), for the group diagnostics of rollout.Metrics.
	Group       int
	Temperature float64
	MaxTokens   int
	Mode        string
	Seed        int64
	MaxSteps    int // 0: the environment's own limit
	// EnvOptions are the environment's options (household's
	// placement_prior); MaxSteps overrides their max_steps.
	EnvOptions envadapters.Options
	// PlacesOrder is the rollout's places-line order ("": one per room;
	// rollout.PlacesOrderEpisode: one per episode).
	PlacesOrder string `json:",omitempty"`
	// DType is the embedded server's serving precision ("": float32, or
	// bfloat16).
	DType string `json:",omitempty"`
	// Source, when set, gives the tasks and environments instead of the
	// built-in named Env (a remote server's; no oracle hints then).
	Source Source `json:"-"`
}

// Source is where Evaluate gets tasks and environments: a built-in
// (envadapters.Builtin) or a remote server's.
type Source interface {
	Name() string
	SplitSize(envadapters.Split) int
	Tasks(envadapters.Split, int) ([]envadapters.Task, error)
	New(envadapters.Options) (envadapters.Env, error)
}

// EvalResult is success overall and per family.
type EvalResult struct {
	Config    EvalConfig        `json:"config"`
	Metrics   rollout.Metrics   `json:"metrics"`
	PerFamily map[string][2]int `json:"per_family"` // wins, episodes
	Elapsed   time.Duration     `json:"elapsed"`
	Hints     map[string]string `json:"-"`
	// Donors maps each task with an "oracle-other" hint to the training
	// task the hint is about.
	Donors map[string]string     `json:"donors,omitempty"`
	Trajs  []*rollout.Trajectory `json:"-"`
}

// OracleHints writes, for each task, the oracle's skill about the expert
// solving that task in an environment with opts (its step limit aside): the
// "useful advice in context" base models must be able to use.
func OracleHints(ctx context.Context, b envadapters.Builtin, tasks []envadapters.Task, opts envadapters.Options) (map[string]string, error) {
	out := map[string]string{}
	for _, t := range tasks {
		s, err := skills.ExpertSkill(ctx, b, t, opts)
		if err != nil {
			return nil, fmt.Errorf("hint for %s: %w", t.ID, err)
		}
		if s != "" {
			out[t.ID] = s
		}
	}
	return out, nil
}

// Evaluate plays Episodes tasks of the split once each with the model
// served by the embedded server (greedy by default).
func Evaluate(ctx context.Context, cfg EvalConfig, log zerolog.Logger, progress rollout.Progress) (*EvalResult, error) {
	var b Source = cfg.Source
	if b == nil {
		bi, err := envadapters.Lookup(cfg.Env)
		if err != nil {
			return nil, err
		}
		b = bi
	}
	if cfg.Episodes < 1 || cfg.Offset < 0 || cfg.Offset+cfg.Episodes > b.SplitSize(cfg.Split) {
		return nil, fmt.Errorf("eval: episodes %d from %d do not fit %s/%s (%d tasks)", cfg.Episodes, cfg.Offset, cfg.Env, cfg.Split, b.SplitSize(cfg.Split))
	}
	all, err := b.Tasks(cfg.Split, cfg.Offset+cfg.Episodes)
	if err != nil {
		return nil, err
	}
	tasks := all[cfg.Offset:]
	scfg := server.DefaultConfig(cfg.ModelDir)
	scfg.MaxModelLen, scfg.DType = 16384, cfg.DType
	srv, err := server.New(scfg, log.With().Str("component", "embedded-server").Logger())
	if err != nil {
		return nil, err
	}
	backend, err := inference.NewEmbedded(ctx, srv, inference.DefaultConfig("embedded"), log)
	if err != nil {
		return nil, err
	}
	defer backend.Close()
	policy, err := rollout.LoadPolicy(cfg.ModelDir, backend)
	if err != nil {
		return nil, err
	}
	rc := rollout.DefaultConfig()
	rc.GroupSize, rc.Temperature, rc.Seed = max(1, cfg.Group), cfg.Temperature, cfg.Seed
	rc.PlacesOrder = cfg.PlacesOrder
	if rec, ok := ReadRecipe(cfg.ModelDir); ok {
		rc.PlacesLine = rec.Corpus.PlacesLine
		if cfg.Mode == "" {
			rc.Mode, rc.Window = rec.Mode, rec.Window // prompt as the model was trained
		}
	}
	if cfg.MaxTokens > 0 {
		rc.MaxTokensPerTurn = cfg.MaxTokens
	}
	rc.EnvOptions = cfg.EnvOptions
	if cfg.MaxSteps > 0 {
		rc.EnvOptions = cfg.EnvOptions.With("max_steps", fmt.Sprint(cfg.MaxSteps))
		rc.MaxSteps = cfg.MaxSteps
	}
	if cfg.Mode != "" {
		rc.Mode = cfg.Mode
	}
	res := &EvalResult{Config: cfg, PerFamily: map[string][2]int{}}
	builtin, isBuiltin := b.(envadapters.Builtin)
	if cfg.Hints != "" && !isBuiltin {
		return nil, fmt.Errorf("eval: hints %q come from a built-in's oracle; %s is not a built-in", cfg.Hints, b.Name())
	}
	switch cfg.Hints {
	case "":
	case "oracle":
		if res.Hints, err = OracleHints(ctx, builtin, tasks, cfg.EnvOptions); err != nil {
			return nil, err
		}
		rc.Hint = func(t envadapters.Task) string { return res.Hints[t.ID] }
	case "oracle-other":
		donors, err := TransferDonors(builtin, tasks)
		if err != nil {
			return nil, err
		}
		var from []envadapters.Task
		res.Donors = map[string]string{}
		for _, t := range tasks {
			if d, ok := donors[t.ID]; ok {
				from = append(from, d)
				res.Donors[t.ID] = d.ID
			}
		}
		byDonor, err := OracleHints(ctx, builtin, from, cfg.EnvOptions)
		if err != nil {
			return nil, err
		}
		res.Hints = map[string]string{}
		for id, d := range res.Donors {
			res.Hints[id] = byDonor[d]
		}
		rc.Hint = func(t envadapters.Task) string { return res.Hints[t.ID] }
	default:
		return nil, fmt.Errorf("eval: hints %q: want oracle, oracle-other or nothing", cfg.Hints)
	}
	runner, err := rollout.NewRunner(rc, b.Name(), b, policy, log)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	trajs, err := runner.Run(ctx, tasks, 0, progress)
	if err != nil {
		return nil, err
	}
	res.Elapsed = time.Since(start)
	res.Metrics = rollout.Summarize(trajs, res.Elapsed)
	res.Trajs = trajs
	for _, t := range trajs {
		c := res.PerFamily[t.Task.Family]
		c[1]++
		if t.Won {
			c[0]++
		}
		res.PerFamily[t.Task.Family] = c
	}
	return res, nil
}

// Save writes the trajectories (trajectories.jsonl) and the result
// (eval.json) into dir.
func (r *EvalResult) Save(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("saving the eval: %w", err)
	}
	if err := rollout.WriteJSONL(filepath.Join(dir, "trajectories.jsonl"), r.Trajs); err != nil {
		return fmt.Errorf("saving the eval's trajectories: %w", err)
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "eval.json"), append(b, '\n'), 0o644)
}

// TransferDonors pairs each task with its transfer donor
// (skills.TransferIndex); tasks without one are left out.
func TransferDonors(b envadapters.Builtin, tasks []envadapters.Task) (map[string]envadapters.Task, error) {
	return skills.TransferDonors(b, tasks)
}

// ReadRecipe reads the recipe a bootstrapped model was built with.
func ReadRecipe(dir string) (Recipe, bool) {
	b, err := os.ReadFile(filepath.Join(dir, "recipe.json"))
	if err != nil {
		return Recipe{}, false
	}
	var r Recipe
	if json.Unmarshal(b, &r) != nil || r.Mode == "" {
		return Recipe{}, false
	}
	return r, true
}

// Families lists the result's families, sorted.
func (r *EvalResult) Families() []string {
	out := make([]string, 0, len(r.PerFamily))
	for f := range r.PerFamily {
		out = append(out, f)
	}
	sort.Strings(out)
	return out
}
