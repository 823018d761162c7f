package orchestrator

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seedctl/seedctl/envadapters"
	"github.com/seedctl/seedctl/envadapters/agentgym"
)

func agentgymConfig(name string, splits map[string]agentgym.Range) Config {
	c := validConfig()
	c.Algo = AlgoGRPO // the oracle analyzer knows only the built-ins
	c.Env = EnvConfig{Kind: "agentgym", Name: name, URL: "http://127.0.0.1:36001", MaxSteps: 30, Splits: splits}
	return c
}

// Each split's task i is the server's index start+i of its own range:
// defaults from the flavor's data, explicit ranges checked against it.
func TestRemoteSplits(t *testing.T) {
	env, err := OpenEnv(agentgymConfig(agentgym.ALFWorld, nil).Env)
	if err != nil {
		t.Fatal(err)
	}
	if env.Close == nil {
		t.Error("a remote env has nothing to release")
	}
	for _, c := range []struct {
		split      envadapters.Split
		size, from int
	}{{envadapters.Train, 2420, 0}, {envadapters.EvalSeen, 200, 2420}, {envadapters.EvalUnseen, 0, 0}} {
		if n := env.Tasks.SplitSize(c.split); n != c.size {
			t.Errorf("alfworld %s: %d tasks, want %d", c.split, n, c.size)
		}
		if c.size == 0 {
			continue
		}
		tasks, err := env.Tasks.Tasks(c.split, 3)
		if err != nil || tasks[0].Index != c.from || tasks[2].Index != c.from+2 || tasks[1].ID != envadapters.TaskID("alfworld", c.split, c.from+1) {
			t.Errorf("alfworld %s: %+v %v", c.split, tasks, err)
		}
	}
	if _, err := env.Tasks.Tasks(envadapters.EvalSeen, 201); err == nil {
		t.Error("201 tasks of a 200-task split were handed out")
	}
}

// config check and run accept exactly the same AgentGym configs: every
// case of the table either passes both Validate and OpenEnv, or fails both
// with the named field.
func TestConfigCheckAndRunAgreeOnAgentGym(t *testing.T) {
	r := func(start, count int) agentgym.Range { return agentgym.Range{Start: start, Count: count} }
	cases := []struct {
		name string
		cfg  Config
		want string // "" accepted
	}{
		{"alfworld defaults", agentgymConfig(agentgym.ALFWorld, nil), ""},
		{"webshop defaults", agentgymConfig(agentgym.WebShop, nil), ""},
		{"babyai with splits", agentgymConfig(agentgym.BabyAI, map[string]agentgym.Range{"train": r(0, 4000), "eval_seen": r(4000, 200), "eval_unseen": r(8000, 200)}), ""},
		{"textcraft with splits", agentgymConfig(agentgym.TextCraft, map[string]agentgym.Range{"train": r(0, 400), "eval_seen": r(400, 100), "eval_unseen": r(500, 0)}), ""},
		{"sciworld without splits", agentgymConfig(agentgym.SciWorld, nil), "env.splits.train is required"},
		{"babyai without splits", agentgymConfig(agentgym.BabyAI, nil), "env.splits.train is required"},
		{"eval on training games", agentgymConfig(agentgym.ALFWorld, map[string]agentgym.Range{"eval_seen": r(0, 140)}), "share indices"},
		{"textcraft past its 544 goals (wrapping onto training goals)", agentgymConfig(agentgym.TextCraft, map[string]agentgym.Range{"train": r(0, 400), "eval_seen": r(400, 100), "eval_unseen": r(500, 100)}), "indices 0-543"},
		{"textcraft with listed eval goals", agentgymConfig(agentgym.TextCraft, map[string]agentgym.Range{"train": r(0, 400), "eval_seen": {Indices: []int{400, 543, 410}}, "eval_unseen": r(500, 0)}), ""},
		{"listed eval goals among the training goals", agentgymConfig(agentgym.TextCraft, map[string]agentgym.Range{"train": r(0, 400), "eval_seen": {Indices: []int{400, 7}}, "eval_unseen": r(500, 0)}), "share indices"},
		{"a listed goal twice", agentgymConfig(agentgym.TextCraft, map[string]agentgym.Range{"train": r(0, 400), "eval_seen": {Indices: []int{400, 401, 400}}, "eval_unseen": r(500, 0)}), "listed twice"},
		{"a start beside listed goals", agentgymConfig(agentgym.TextCraft, map[string]agentgym.Range{"train": r(0, 400), "eval_seen": {Start: 400, Indices: []int{401}}, "eval_unseen": r(500, 0)}), "leave start out"},
		{"a listed goal past the data", agentgymConfig(agentgym.TextCraft, map[string]agentgym.Range{"train": r(0, 400), "eval_seen": {Indices: []int{400, 544}}, "eval_unseen": r(500, 0)}), "indices 0-543"},
		{"eval_seen and eval_unseen overlap", agentgymConfig(agentgym.TextCraft, map[string]agentgym.Range{"train": r(0, 400), "eval_seen": r(400, 100), "eval_unseen": r(450, 94)}), "would not be distinct"},
		{"past the server's games", agentgymConfig(agentgym.ALFWorld, map[string]agentgym.Range{"eval_seen": r(2420, 300)}), "indices 0-2619"},
		{"negative start", agentgymConfig(agentgym.ALFWorld, map[string]agentgym.Range{"eval_seen": r(-1, 3)}), "must not be negative"},
		{"unknown split", agentgymConfig(agentgym.ALFWorld, map[string]agentgym.Range{"test": r(2420, 3)}), "env.splits.test"},
		{"unknown flavor", agentgymConfig("minigrid", nil), "AgentGym flavors"},
		{"split_sizes", func() Config {
			c := agentgymConfig(agentgym.ALFWorld, nil)
			c.Env.SplitSizes = map[string]int{"train": 3321, "eval_seen": 140, "eval_unseen": 134}
			return c
		}(), "evaluation ran on training tasks"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			verr := tc.cfg.Validate()
			_, oerr := OpenEnv(tc.cfg.Env)
			if (verr == nil) != (oerr == nil) {
				t.Fatalf("config check says %v, run says %v", verr, oerr)
			}
			switch {
			case tc.want == "" && verr != nil:
				t.Fatalf("refused: %v", verr)
			case tc.want != "" && (verr == nil || !strings.Contains(verr.Error(), tc.want)):
				t.Fatalf("want an error saying %q, got %v", tc.want, verr)
			}
		})
	}
	// A split of listed indices hands out exactly those, in order.
	listed := agentgymConfig(agentgym.TextCraft, map[string]agentgym.Range{"train": r(0, 400), "eval_seen": {Indices: []int{420, 401, 543}}, "eval_unseen": r(500, 0)})
	env, err := OpenEnv(listed.Env)
	if err != nil {
		t.Fatal(err)
	}
	tasks, err := env.Tasks.Tasks(envadapters.EvalSeen, 3)
	if err != nil || tasks[0].Index != 420 || tasks[1].Index != 401 || tasks[2].Index != 543 || env.Tasks.SplitSize(envadapters.EvalSeen) != 3 {
		t.Errorf("listed eval_seen: %+v %v", tasks, err)
	}
	if _, err := env.Tasks.Tasks(envadapters.EvalSeen, 4); err == nil {
		t.Error("4 tasks of a 3-index split were handed out")
	}
	// TextCraft has an oracle (agentgym.TextCraftOracle): SEED's stage 1
	// may use it; ALFWorld's server has none.
	seedTC := agentgymConfig(agentgym.TextCraft, map[string]agentgym.Range{"train": r(0, 400), "eval_seen": r(400, 100), "eval_unseen": r(500, 0)})
	seedTC.Algo = AlgoSEED
	if err := seedTC.Validate(); err != nil {
		t.Errorf("seed with the oracle analyzer on agentgym textcraft: %v", err)
	}
	// Only config check knows the step limit a remote env needs.
	c := agentgymConfig(agentgym.ALFWorld, nil)
	c.Env.MaxSteps = 0
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "env.max_steps") {
		t.Errorf("an agentgym env without a step limit: %v", err)
	}
	// A built-in's name is checked as run checks it.
	c = validConfig()
	c.Env.Name = "houshold"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "env.name") {
		t.Errorf("a misspelt built-in: %v", err)
	}
}

// Stage 1 collects with its own temperature, window and step limit where
// set (the public SFT launchers: T = 0.4, history 5, 30 steps), else the
// rollouts'.
func TestStage1RolloutConfig(t *testing.T) {
	c := validConfig()
	c.Rollout.Temperature, c.Rollout.Window, c.Env.MaxSteps = 1, 2, 50
	r := c.stage1RolloutConfig(1)
	if r.Temperature != 1 || r.Window != 2 || r.MaxSteps != 50 {
		t.Errorf("unset stage-1 settings: %+v", r)
	}
	c.Stage1.Temperature, c.Stage1.Window, c.Stage1.MaxSteps = 0.4, 5, 30
	r = c.stage1RolloutConfig(1)
	if r.Temperature != 0.4 || r.Window != 5 || r.MaxSteps != 30 || r.EnvOptions["max_steps"] != "30" {
		t.Errorf("stage-1 settings: %+v", r)
	}
	if it := c.rolloutConfig(1); it.Temperature != 1 || it.Window != 2 || it.MaxSteps != 50 {
		t.Errorf("stage 1's settings leaked into the iterations': %+v", it)
	}
	c.Stage1.Window = -1
	if err := c.Validate(); err == nil {
		t.Error("a negative stage1.window was accepted")
	}
}

// The served folder may not be the model folder under another name: a
// relative path or a symbolic link to it is refused too.
func TestServedDirIsNotTheModelUnderAnotherName(t *testing.T) {
	root := t.TempDir()
	model := filepath.Join(root, "model")
	if err := os.MkdirAll(model, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(root, "served-link")
	if err := os.Symlink(model, link); err != nil {
		t.Fatal(err)
	}
	wd, _ := os.Getwd()
	rel, _ := filepath.Rel(wd, model)
	for _, served := range []string{model, model + "/", link, rel} {
		c := validConfig()
		c.Model = model
		c.Backend = BackendConfig{Kind: "vllm", BaseURL: "http://127.0.0.1:8000", ServedDir: served}
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "must not be the model folder") {
			t.Errorf("served_dir %q: %v", served, err)
		}
	}
	c := validConfig()
	c.Model = model
	c.Backend = BackendConfig{Kind: "vllm", BaseURL: "http://127.0.0.1:8000", ServedDir: filepath.Join(root, "served")}
	if err := c.Validate(); err != nil {
		t.Errorf("a served folder of its own: %v", err)
	}
}

// The publish check's tolerance: tight for the embedded server and for a
// vLLM launched in float32 (where a stale head shows), 0.25 for bf16
// servers; a set value wins.
func TestVerifyTolerance(t *testing.T) {
	for _, c := range []struct {
		b    BackendConfig
		want float64
	}{
		{BackendConfig{Kind: "embedded"}, 1e-3},
		{BackendConfig{Kind: "vllm", Launch: []string{"vllm", "--dtype", "float32"}}, 0.02},
		{BackendConfig{Kind: "vllm", Launch: []string{"vllm", "--dtype=float32"}}, 0.02},
		{BackendConfig{Kind: "vllm", Launch: []string{"vllm", "--dtype", "bfloat16"}}, 0.25},
		{BackendConfig{Kind: "vllm", BaseURL: "http://x"}, 0.25},
		{BackendConfig{Kind: "vllm", Launch: []string{"vllm", "--dtype", "float32"}, VerifyTolerance: 0.5}, 0.5},
	} {
		if got := c.b.verifyTolerance(); got != c.want {
			t.Errorf("%+v: tolerance %v, want %v", c.b, got, c.want)
		}
	}
}

// A damaged state.json is refused with what is wrong, never resumed into
// a panic or a wrong "trained" report.
func TestParseStateRefusesDamage(t *testing.T) {
	for _, c := range []struct{ json, want string }{
		{`{"version": 1, "iteration": -1, "checkpoint": "checkpoints/iter-1"}`, "must not be negative"},
		{`{"version": 1, "iteration": 2, "data_cursor": -5, "checkpoint": "checkpoints/iter-2"}`, "must not be negative"},
	} {
		if _, err := ParseState([]byte(c.json)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", c.json, err, c.want)
		}
	}
	if _, err := ParseState([]byte(`{"version": 1, "iteration": 2, "checkpoint": "checkpoints/iter-2"}`)); err != nil {
		t.Errorf("a sound state: %v", err)
	}
}

// The privileged teacher needs a built-in's expert; its analyzer is made
// once per run, so each task's expert is played once.
func TestPrivilegedSkillAlgo(t *testing.T) {
	c := validConfig()
	c.Algo = AlgoPrivilegedSkill
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if !c.Distills() || c.UsesSFT() || c.UsesStage1Analyzer() {
		t.Errorf("privileged-skill: distils %v, stage 1 %v, stage-1 analyzer %v; want distillation alone", c.Distills(), c.UsesSFT(), c.UsesStage1Analyzer())
	}
	r := &run{cfg: c}
	a1, err := r.iterationAnalyzer(1)
	if err != nil {
		t.Fatal(err)
	}
	a2, _ := r.iterationAnalyzer(2)
	if a1.Name() != "privileged" || a1 != a2 {
		t.Errorf("analyzers %s %p and %p: want one privileged analyzer for the run", a1.Name(), a1, a2)
	}
	remote := agentgymConfig(agentgym.ALFWorld, nil)
	remote.Algo = AlgoPrivilegedSkill
	if err := remote.Validate(); err == nil || !strings.Contains(err.Error(), "privileged-skill") {
		t.Errorf("privileged-skill on an AgentGym env: %v, want an error naming the algo", err)
	}
}
