package orchestrator

import (
	"math"
	"strings"
	"testing"
)

// ruleCases breaks each rule of Config.rules, by rule name (key or
// key/id), starting from validConfig.
var ruleCases = map[string]func(c *Config){
	"algo":               func(c *Config) { c.Algo = "ppo" },
	"algo/privileged":    func(c *Config) { c.Algo, c.Env = AlgoPrivilegedSkill, agentgymConfig("alfworld", nil).Env },
	"algo/transfer":      func(c *Config) { c.Algo, c.Env = AlgoTransferSkill, agentgymConfig("alfworld", nil).Env },
	"rl.distill_topk":    func(c *Config) { c.RL.DistillTopK = 16 }, // without distill_form full
	"rl.pg_coef":         func(c *Config) { c.RL.PGCoef = -1 },
	"rl.jsd_beta":        func(c *Config) { c.RL.JSDBeta = 0.5 }, // without distill_form full
	"rl.teacher_context": func(c *Config) { c.RL.TeacherContext = "hint" },
	"rl.teacher_context/model": func(c *Config) {
		c.Algo, c.RL.TeacherContext = AlgoSEEDNoSFT, TeacherContextPlain
	},
	"rl.teacher_context/algo": func(c *Config) {
		c.RL.TeacherContext, c.RL.TeacherModel = TeacherContextPlain, "teacher"
	},
	"name":                     func(c *Config) { c.Name = "" },
	"runs_dir":                 func(c *Config) { c.RunsDir = "" },
	"model":                    func(c *Config) { c.Model = "" },
	"iterations":               func(c *Config) { c.Iterations = -1 },
	"tasks_per_iteration":      func(c *Config) { c.TasksPerIteration = 0 },
	"data_share":               func(c *Config) { c.DataShare = 1.5 },
	"train_tasks":              func(c *Config) { c.TrainTasks = -3 },
	"rollout.group_size":       func(c *Config) { c.Rollout.GroupSize = 1 },
	"rollout.temperature":      func(c *Config) { c.Rollout.Temperature = 0 },
	"skill_mode":               func(c *Config) { c.SkillMode = "all" },
	"critical_steps":           func(c *Config) { c.CriticalSteps = "random" },
	"rescore_max_tokens":       func(c *Config) { c.RescoreMaxTokens = 1 },
	"max_step_skills":          func(c *Config) { c.MaxStepSkills = -1 },
	"gamma":                    func(c *Config) { c.Gamma = 1.5 },
	"analysis_max_tokens":      func(c *Config) { c.AnalysisTokens = 8 },
	"analysis_min_skill_words": func(c *Config) { c.AnalysisMinWords = -1 },
	"env.name":                 func(c *Config) { c.Env.Name = "" },
	"env.name/builtin":         func(c *Config) { c.Env.Name = "houshold" },
	"env.kind":                 func(c *Config) { c.Env.Kind = "gym" },
	"env.url":                  func(c *Config) { c.Env = agentgymConfig("alfworld", nil).Env; c.Env.URL = "" },
	"env.max_steps":            func(c *Config) { c.Env = agentgymConfig("alfworld", nil).Env; c.Env.MaxSteps = 0 },
	"env.max_steps/options":    func(c *Config) { c.Env.Options = map[string]string{"max_steps": "30"} },
	"env.splits": func(c *Config) {
		c.Env = agentgymConfig("alfworld", nil).Env
		c.Env.SplitSizes = map[string]int{"train": 10}
	},
	"env.options":      func(c *Config) { c.Env.Options = map[string]string{"colour": "red"} },
	"backend.kind":     func(c *Config) { c.Backend.Kind = "tgi" },
	"backend.base_url": func(c *Config) { c.Backend.Kind = "sglang" },
	"backend.launch": func(c *Config) {
		c.Backend = BackendConfig{Kind: "sglang", BaseURL: "http://a:1", Launch: []string{"sglang"}}
	},
	"backend.endpoints":        func(c *Config) { c.Backend.Endpoints = []string{"http://a:1"} },
	"backend.served_dir":       func(c *Config) { c.Backend = BackendConfig{Kind: "vllm", BaseURL: "http://a:1"} },
	"backend.served_dir/model": func(c *Config) { c.Backend = BackendConfig{Kind: "sglang", BaseURL: "http://a:1", ServedDir: c.Model} },
	"stage1.episodes":          func(c *Config) { c.Stage1.Episodes = 0 },
	"stage1.analyzer.kind":     func(c *Config) { c.Stage1.Analyzer.Kind = "gpt" },
	"stage1.analyzer.base_url": func(c *Config) { c.Stage1.Analyzer.Kind = "external" },
	"stage1.analyzer.kind/oracle": func(c *Config) {
		c.Env = agentgymConfig("alfworld", nil).Env // algo seed: stage 1 asks the oracle about a remote env
	},
	"stage1.epochs":          func(c *Config) { c.Stage1.Epochs = 0 },
	"stage1.lr":              func(c *Config) { c.Stage1.LR = math.NaN() },
	"stage1.max_len":         func(c *Config) { c.Stage1.MaxLen = 1 },
	"stage1.batch_tokens":    func(c *Config) { c.Stage1.BatchTokens = c.Stage1.MaxLen - 1 },
	"stage1.targets":         func(c *Config) { c.Stage1.Targets = "steps" },
	"stage1.acting_replay":   func(c *Config) { c.Stage1.ActingReplay = -1 },
	"stage1.held_out":        func(c *Config) { c.Stage1.HeldOut = c.Stage1.Episodes },
	"stage1.optimizer":       func(c *Config) { c.Stage1.Optimizer = "adam" },
	"stage1.batch_sequences": func(c *Config) { c.Stage1.BatchSequences = -1 },
	"stage1.temperature":     func(c *Config) { c.Stage1.Temperature = -0.5 },
	"stage1.window":          func(c *Config) { c.Stage1.Window = -1 },
	"stage1.max_steps":       func(c *Config) { c.Stage1.MaxSteps = -1 },
	"rl.lambda":              func(c *Config) { c.RL.Lambda = -0.1 },
	"rl.beta":                func(c *Config) { c.RL.Beta = 0 },
	"rl.kl_coef":             func(c *Config) { c.RL.KLCoef = -1 },
	"rl.kl_clamp":            func(c *Config) { c.RL.KLClamp = -10 },
	"rl.clip_eps":            func(c *Config) { c.RL.ClipEps = 1 },
	"rl.lr":                  func(c *Config) { c.RL.LR = 0 },
	"rl.weight_decay":        func(c *Config) { c.RL.WeightDecay = -0.01 },
	"rl.clip_norm":           func(c *Config) { c.RL.ClipNorm = -1 },
	"rl.lr_schedule":         func(c *Config) { c.RL.LRSchedule = "linear" },
	"rl.warmup_steps":        func(c *Config) { c.RL.WarmupSteps = -1 },
	"rl.min_lr_frac":         func(c *Config) { c.RL.MinLRFrac = 1.5 },
	"rl.mini_batch_rows":     func(c *Config) { c.RL.MiniBatchRows, c.RL.MiniBatches = 0, 0 },
	"rl.micro_batch_tokens":  func(c *Config) { c.RL.MicroBatchTokens = 1 },
	"rl.agg":                 func(c *Config) { c.RL.Agg = "sum" },
	"rl.micro_batch_rows/verl": func(c *Config) {
		c.RL.Agg, c.RL.MicroBatchRows, c.RL.MiniBatches = "verl", 0, 2
	},
	"rl.recompute":          func(c *Config) { c.RL.Recompute = "auto" },
	"rl.dtype":              func(c *Config) { c.RL.DType = "float16" },
	"rl.max_refusals":       func(c *Config) { c.RL.MaxRefusals = 0 },
	"rl.advantage":          func(c *Config) { c.RL.Advantage = "token" },
	"rl.reward_scale":       func(c *Config) { c.RL.RewardScale = 0 },
	"rl.outcome":            func(c *Config) { c.RL.Outcome = "score" },
	"rl.adv_eps":            func(c *Config) { c.RL.AdvEps = 0 },
	"rl.adv_norm":           func(c *Config) { c.RL.AdvNorm = "max" },
	"rl.clip_ratio_c":       func(c *Config) { c.RL.ClipRatioC = 0.5 },
	"rl.entropy_coef":       func(c *Config) { c.RL.EntropyCoef = -0.001 },
	"rl.rejected_cost":      func(c *Config) { c.RL.RejectedCost = -0.1 },
	"rl.step_group_weight":  func(c *Config) { c.RL.StepGroupWeight = -1 },
	"rl.step_group_key":     func(c *Config) { c.RL.StepGroupKey = "text" },
	"rl.step_rejected_cost": func(c *Config) { c.RL.StepRejectedCost = -1 },
	"rl.step_group_weight/options": func(c *Config) {
		c.RL.StepGroupWeight, c.RL.StepGroupKey = 0, StepKeyState
	},
	"rl.drop_flat":        func(c *Config) { c.RL.DropFlat = "all" },
	"rl.term_grads_every": func(c *Config) { c.RL.TermGradsEvery = -1 },
	"rl.distill_form":     func(c *Config) { c.RL.DistillForm = "forward_kl" },
	"rl.delta_clip":       func(c *Config) { c.RL.DeltaClip = -1 },
	"rl.distill_baseline": func(c *Config) { c.RL.DistillBaseline = "groupmate" },
	"rl.server_old_logp":  func(c *Config) { c.Rollout.Temperature, c.RL.ServerOldLogP = 0.7, true },
	"eval.every":          func(c *Config) { c.Eval.Every = -1 },
	"eval.episodes":       func(c *Config) { c.Eval.Episodes = -1 },
	"eval.temperature":    func(c *Config) { c.Eval.Temperature = -1 },
	"eval.sampled_temperature": func(c *Config) {
		c.Eval.SampledTemperature = math.NaN()
	},
	"eval.max_steps":          func(c *Config) { c.Eval.MaxSteps = -1 },
	"eval.window":             func(c *Config) { c.Eval.Window = -2 },
	"eval.plateau_patience":   func(c *Config) { c.Eval.PlateauPatience = 2 },
	"rollout":                 func(c *Config) { c.Rollout.Mode = "stream" },
	"rollout.places_line/env": func(c *Config) { c.Rollout.PlacesLine = "every" },
	"env.goals_file":          func(c *Config) { c.Env.GoalsFile = "/nonexistent/goals.json" },
}

// TestEveryValidationRuleHasACase: each rule has a case that breaks it,
// the case's error names the rule's key, and the rule itself is what
// fires. A rule added without a case fails here.
func TestEveryValidationRuleHasACase(t *testing.T) {
	base := validConfig()
	if err := base.Validate(); err != nil {
		t.Fatalf("the valid config: %v", err)
	}
	names := map[string]bool{}
	for _, r := range base.rules() {
		n := r.name()
		if names[n] {
			t.Errorf("two rules are named %q: give one an id", n)
		}
		names[n] = true
		edit, ok := ruleCases[n]
		if !ok {
			t.Errorf("rule %q has no case in ruleCases", n)
			continue
		}
		c := validConfig()
		edit(&c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), r.key) {
			t.Errorf("rule %q: the case's error %v does not name %s", n, err, r.key)
			continue
		}
		fired := false
		for _, r2 := range c.rules() {
			if r2.name() == n && r2.check() != nil {
				fired = true
			}
		}
		if !fired {
			t.Errorf("rule %q: its case is refused by other rules (%v), not by it", n, err)
		}
	}
	for n := range ruleCases {
		if !names[n] {
			t.Errorf("ruleCases has %q, which is no rule", n)
		}
	}
}

// Validate reports every bad field at once, one line each naming the key
// and its value.
func TestValidateReportsEveryBadField(t *testing.T) {
	c := validConfig()
	c.RL.Beta, c.Eval.Episodes, c.DataShare, c.Env.Name = 0, -1, 2, "houshold"
	err := c.Validate()
	if err == nil {
		t.Fatal("four bad fields accepted")
	}
	lines := strings.Split(err.Error(), "\n")
	for _, want := range []string{"rl.beta 0", "eval.episodes -1", "data_share 2", "env.name"} {
		n := 0
		for _, l := range lines {
			if strings.Contains(l, want) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%d lines name %q, want 1:\n%v", n, want, err)
		}
	}
	if len(lines) != 4 {
		t.Errorf("%d lines for four bad fields:\n%v", len(lines), err)
	}
	// Each section validates on its own.
	if err := c.RL.Validate(); err == nil || !strings.Contains(err.Error(), "rl.beta") {
		t.Errorf("RLConfig.Validate: %v", err)
	}
	if err := c.Eval.Validate(); err == nil || !strings.Contains(err.Error(), "eval.episodes") {
		t.Errorf("EvalConfig.Validate: %v", err)
	}
	if err := c.Env.Validate(); err == nil || !strings.Contains(err.Error(), "houshold") {
		t.Errorf("EnvConfig.Validate: %v", err)
	}
	if err := validConfig().Backend.Validate("/m"); err != nil {
		t.Errorf("BackendConfig.Validate: %v", err)
	}
	if err := validConfig().Stage1.Validate(true); err != nil {
		t.Errorf("Stage1Config.Validate: %v", err)
	}
}
