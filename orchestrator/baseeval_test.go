package orchestrator

import (
	"os"
	"testing"

	"github.com/rs/zerolog"

	"github.com/seedctl/seedctl/rollout"
)

func TestBaseEvalKeyNamesWhatTheEvalDependsOn(t *testing.T) {
	base := validConfig()
	base.Rollout.PlacesOrder = rollout.PlacesOrderRoom // the seed does not change the prompts
	base.Eval.SampledTemperature = 0                   // nor draw samples
	same := map[string]func(*Config){
		"seed":        func(c *Config) { c.Seed = 7 },
		"algo":        func(c *Config) { c.Algo = AlgoGRPO },
		"data share":  func(c *Config) { c.DataShare = 0.4 },
		"temperature": func(c *Config) { c.Rollout.Temperature = 0.3 },
		"rl lr":       func(c *Config) { c.RL.LR = 1 },
		"name":        func(c *Config) { c.Name = "other" },
	}
	differ := map[string]func(*Config){
		"model":         func(c *Config) { c.Model = "/models/y" },
		"eval episodes": func(c *Config) { c.Eval.Episodes++ },
		"step limit":    func(c *Config) { c.Env.MaxSteps++ },
		"env option":    func(c *Config) { c.Env.Options = map[string]string{"rooms": "3"} },
		"mode":          func(c *Config) { c.Rollout.Mode = "chat" },
		"window":        func(c *Config) { c.Rollout.Window++ },
		"max tokens":    func(c *Config) { c.Rollout.MaxTokens++ },
		"backend":       func(c *Config) { c.Backend.Kind = "vllm" },
		"sampled eval":  func(c *Config) { c.Eval.SampledTemperature = 1 },
	}
	// With the places line in an order per episode, the eval seed picks
	// the orders: the base model reads other prompts under another seed.
	episode := base
	episode.Rollout.PlacesOrder = rollout.PlacesOrderEpisode
	for name, change := range map[string]func(*Config){
		"seed":      func(c *Config) { c.Seed = 7 },
		"eval seed": func(c *Config) { c.Eval.Seed = 9 },
	} {
		c := episode
		change(&c)
		if c.BaseEvalKey() == episode.BaseEvalKey() {
			t.Errorf("places order per episode: changing the %s kept the base-eval key", name)
		}
		// A sampled eval draws with the eval seed whatever the order.
		s := base
		s.Eval.SampledTemperature = 1
		c = s
		change(&c)
		if c.BaseEvalKey() == s.BaseEvalKey() {
			t.Errorf("sampled eval: changing the %s kept the base-eval key", name)
		}
	}
	for name, change := range same {
		c := base
		change(&c)
		if c.BaseEvalKey() != base.BaseEvalKey() {
			t.Errorf("changing the %s changed the base-eval key", name)
		}
	}
	for name, change := range differ {
		c := base
		change(&c)
		if c.BaseEvalKey() == base.BaseEvalKey() {
			t.Errorf("changing the %s kept the base-eval key", name)
		}
	}
}

// A run takes a base evaluation measured under its own key, with its
// metrics lines and provenance, and refuses one measured otherwise.
func TestReuseBaseEvalChecksTheKey(t *testing.T) {
	cfg := validConfig()
	first := t.TempDir() // where it was measured
	if err := writeJSON(runDir(first).config(), cfg); err != nil {
		t.Fatal(err)
	}
	be := &BaseEval{From: first, Key: cfg.BaseEvalKey(), Point: EvalPoint{Seen: 0.25, Unseen: 0.125, Episodes: 8},
		Metrics: []MetricsLine{{Kind: "eval", Split: "eval_seen", Values: map[string]float64{"success": 0.25}}, {Kind: "eval", Split: "eval_unseen", Values: map[string]float64{"success": 0.125}}}}
	newRun := func(be *BaseEval) *run {
		d := runDir(t.TempDir())
		if err := writeJSON(d.config(), cfg); err != nil {
			t.Fatal(err)
		}
		return &run{cfg: cfg, deps: Deps{BaseEval: be}, dir: d, st: &State{Version: stateVersion}, log: zerolog.Nop()}
	}

	other := *be
	other.Key = "0000"
	r := newRun(&other)
	if ok, err := r.reuseBaseEval(); ok || err != nil || r.st.BaseEval != nil {
		t.Fatalf("a base eval with another key was taken (%v, %v)", ok, err)
	}
	if _, err := os.Stat(r.dir.metrics()); err == nil {
		t.Error("a refused base eval wrote metrics")
	}

	r = newRun(be)
	if ok, err := r.reuseBaseEval(); !ok || err != nil {
		t.Fatalf("reuse: %v, %v", ok, err)
	}
	if r.st.BaseEval.Seen != 0.25 || r.st.BaseEvalFrom != first {
		t.Errorf("state after reuse: %+v from %q", r.st.BaseEval, r.st.BaseEvalFrom)
	}
	got, err := ReadBaseEval(string(r.dir))
	if err != nil {
		t.Fatal(err)
	}
	// Read back from the reusing run, it still names where it was measured.
	if got.From != first || got.Key != be.Key || len(got.Metrics) != 2 || got.Point.Unseen != 0.125 {
		t.Errorf("read back %+v", got)
	}
}

// A base evaluation passed on by a run that reused it keeps the key of
// the run where it was measured: a run made before the key named the eval
// seed took the first seed's evaluation under the second seed's config,
// and read back under its own key it would be offered to that seed's
// later runs as theirs. Where it was measured can no longer be read: not
// offered at all.
func TestReadBaseEvalKeysAReusedOneByWhereItWasMeasured(t *testing.T) {
	seed1 := validConfig()
	seed1.Rollout.PlacesOrder = rollout.PlacesOrderEpisode
	seed2 := seed1
	seed2.Seed = 2
	if seed1.BaseEvalKey() == seed2.BaseEvalKey() {
		t.Fatal("the two seeds share a base-eval key: the test needs them apart")
	}
	first, second := t.TempDir(), t.TempDir()
	if err := writeJSON(runDir(first).config(), seed1); err != nil {
		t.Fatal(err)
	}
	point := EvalPoint{Seen: 0.2, Unseen: 0.085, Episodes: 200}
	lines := []MetricsLine{{Kind: "eval", Split: "eval_seen", Values: map[string]float64{"success": 0.2}}}
	// The second seed's run as the old bench left it: the first seed's
	// evaluation in its state, its own config beside it.
	if err := writeJSON(runDir(second).config(), seed2); err != nil {
		t.Fatal(err)
	}
	if err := writeJSON(runDir(second).state(), State{Version: stateVersion, BaseEval: &point, BaseEvalFrom: first}); err != nil {
		t.Fatal(err)
	}
	if err := appendMetrics(runDir(second).metrics(), lines...); err != nil {
		t.Fatal(err)
	}
	got, err := ReadBaseEval(second)
	if err != nil {
		t.Fatal(err)
	}
	if got == nil || got.Key != seed1.BaseEvalKey() || got.From != first {
		t.Fatalf("read back %+v: want the first seed's key and origin", got)
	}
	if err := os.RemoveAll(first); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadBaseEval(second); got != nil || err != nil {
		t.Errorf("origin gone: read back %+v, %v; want nothing to reuse", got, err)
	}
}
