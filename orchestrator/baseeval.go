package orchestrator

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"

	"github.com/seedctl/seedctl/rollout"
)

// BaseEval is a finished evaluation of a base policy that other runs of the
// same base policy, environment and evaluation settings take instead of
// replaying it. Evaluation is greedy on the first tasks of each eval split,
// so it does not depend on the run's seed, algorithm or data share: a
// benchmark grid measures it once, not once per experiment.
type BaseEval struct {
	// From is the run directory it was measured in.
	From string
	// Key is the BaseEvalKey of that run's config.
	Key   string
	Point EvalPoint
	// Metrics are its eval lines (iteration 0), copied into the reusing
	// run's metrics.jsonl so its curves start at the same point.
	Metrics []MetricsLine
}

// baseEvalInputs are the config fields a base evaluation depends on.
type baseEvalInputs struct {
	Model     string        `json:"model"`
	Env       EnvConfig     `json:"env"`
	Backend   BackendConfig `json:"backend"`
	Episodes  int           `json:"episodes"`
	Mode      string        `json:"mode"`
	Window    int           `json:"window"`
	MaxTokens int           `json:"max_tokens"`
	// PlacesLine is left out when empty, so keys of older runs hold.
	PlacesLine string `json:"places_line,omitempty"`
	// PlacesOrder likewise ("" and "room" are the same prompts).
	PlacesOrder string `json:"places_order,omitempty"`
	// EvalSeed keys the places line's order per episode (places order
	// "episode"): under another seed the base model reads other prompts.
	// Left out for the other orders, where greedy evaluation does not
	// depend on it.
	EvalSeed int64 `json:"eval_seed,omitempty"`
	// SampledTemperature: the second, sampled eval_seen pass (left out
	// when there is none).
	SampledTemperature float64 `json:"sampled_temperature,omitempty"`
}

// BaseEvalKey identifies what the base evaluation of a run with this config
// measures: the base model, the environment with its options and step
// limit, the backend, the number of eval tasks and the prompt layout, and
// the eval seed where it orders the places line per episode. Algorithm,
// data share, sampling temperature and every training setting are left
// out (evaluation decodes greedily), as is the seed otherwise.
func (c Config) BaseEvalKey() string {
	in := baseEvalInputs{Model: c.Model, Env: c.Env, Backend: c.Backend, Episodes: c.Eval.Episodes,
		Mode: c.Rollout.Mode, Window: c.Rollout.Window, MaxTokens: c.Rollout.MaxTokens, PlacesLine: c.Rollout.PlacesLine, PlacesOrder: placesOrderKey(c.Rollout.PlacesOrder),
		SampledTemperature: c.Eval.SampledTemperature}
	if c.Rollout.PlacesOrder == rollout.PlacesOrderEpisode || c.Eval.SampledTemperature > 0 {
		in.EvalSeed = c.evalRolloutConfig().Seed
	}
	b, _ := json.Marshal(in)
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:8])
}

// placesOrderKey is order as it enters BaseEvalKey: the default order
// ("" or "room") leaves the key of older runs unchanged.
func placesOrderKey(order string) string {
	if order == rollout.PlacesOrderRoom {
		return ""
	}
	return order
}

// ReadBaseEval reads the base evaluation of the run in dir, for another run
// to reuse; nil (and no error) when the run has not finished one yet, or
// when it reused one from a run that can no longer be read.
//
// Its key is that of the run where it was measured, under today's
// definition of the key: a run that reused an evaluation carries it under
// its own config, which may read other prompts (runs made before the key
// named the eval seed took the first seed's evaluation for every seed), so
// its own key would pass the measurement on to runs it does not describe.
func ReadBaseEval(dir string) (*BaseEval, error) {
	d := runDir(dir)
	st, err := readState(d)
	if err != nil {
		return nil, fmt.Errorf("reading the base evaluation of %s: %w", dir, err)
	}
	if st.BaseEval == nil {
		return nil, nil
	}
	from, measured := dir, d
	if st.BaseEvalFrom != "" {
		from = st.BaseEvalFrom // reused itself: name where it was measured
		measured = runDir(from)
	}
	cfg, err := Load(measured.config())
	if errors.Is(err, fs.ErrNotExist) && measured != d {
		return nil, nil // where it came from is unknown: not passed on
	}
	if err != nil {
		return nil, fmt.Errorf("reading the base evaluation of %s (measured in %s): %w", dir, from, err)
	}
	lines, err := ReadMetrics(d.metrics())
	if err != nil {
		return nil, fmt.Errorf("reading the base evaluation of %s: %w", dir, err)
	}
	be := &BaseEval{From: from, Key: cfg.BaseEvalKey(), Point: *st.BaseEval}
	for _, l := range lines {
		if (l.Kind == "eval" || l.Kind == "eval_sampled") && l.Iteration == 0 {
			be.Metrics = append(be.Metrics, l)
		}
	}
	if len(be.Metrics) == 0 && st.BaseEval.Episodes > 0 {
		return nil, errors.New("reading the base evaluation of " + dir + ": state has one but metrics.jsonl has no iteration-0 eval lines")
	}
	return be, nil
}

// reuseBaseEval takes deps.BaseEval as this run's base evaluation when it
// was measured under the same key; it reports whether it did.
func (r *run) reuseBaseEval() (bool, error) {
	be := r.deps.BaseEval
	if be == nil {
		return false, nil
	}
	if key := r.cfg.BaseEvalKey(); be.Key != key {
		r.log.Info().Str("from", be.From).Str("key", be.Key).Str("want", key).Msg("not reusing a base evaluation measured under other settings")
		return false, nil
	}
	// Metrics first: a kill before the state is saved leaves lines that
	// Resume trims (no base eval in the state), so nothing is doubled.
	if err := appendMetrics(r.dir.metrics(), be.Metrics...); err != nil {
		return false, err
	}
	p := be.Point
	r.st.BaseEval, r.st.BaseEvalFrom = &p, be.From
	if err := r.saveState(); err != nil {
		return false, err
	}
	r.log.Info().Str("from", be.From).Float64("seen", p.Seen).Float64("unseen", p.Unseen).Msg("base evaluation reused")
	return true, nil
}
