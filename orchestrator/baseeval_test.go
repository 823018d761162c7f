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
	be := &BaseEval{From: "/runs/first", Key: cfg.BaseEvalKey(), Point: EvalPoint{Seen: 0.25, Unseen: 0.125, Episodes: 8},
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
	if r.st.BaseEval.Seen != 0.25 || r.st.BaseEvalFrom != "/runs/first" {
		t.Errorf("state after reuse: %+v from %q", r.st.BaseEval, r.st.BaseEvalFrom)
	}
	got, err := ReadBaseEval(string(r.dir))
	if err != nil {
		t.Fatal(err)
	}
	// Read back from the reusing run, it still names where it was measured.
	if got.From != "/runs/first" || got.Key != be.Key || len(got.Metrics) != 2 || got.Point.Unseen != 0.125 {
		t.Errorf("read back %+v", got)
	}
}
