package orchestrator

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/seedctl/seedctl/envadapters"
	"github.com/seedctl/seedctl/inference"
	"github.com/seedctl/seedctl/rollout"
	"github.com/seedctl/seedctl/skills"
)

// rule is one check of a config: key is the field it is about, as config
// files spell it (rl.beta), and check says what is wrong with it (nil:
// nothing). id tells rules about the same key apart ("" : the key).
// Every rule has a case in TestEveryValidationRuleHasACase, which fails
// for a rule without one.
type rule struct {
	key, id string
	check   func() error
}

func (r rule) name() string {
	if r.id != "" {
		return r.key + "/" + r.id
	}
	return r.key
}

// joinRules runs rules and joins what they report: every bad field is
// named, not only the first.
func joinRules(rules []rule) error {
	var errs []error
	for _, r := range rules {
		if err := r.check(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// bad formats one rule's message: the key, its value, what it must be.
func bad(key string, value any, want string) error {
	if s, ok := value.(string); ok {
		value = strconv.Quote(s)
	}
	return fmt.Errorf("config: %s %v: %s", key, value, want)
}

// when returns err if cond holds.
func when(cond bool, err func() error) error {
	if cond {
		return err()
	}
	return nil
}

// Validate reports every bad field of the config, one message each
// (errors.Join), naming the field and its value.
func (c Config) Validate() error { return joinRules(c.rules()) }

// rules are the config's checks: each section's own, then those that
// span sections.
func (c Config) rules() []rule {
	var rs []rule
	rs = append(rs, c.topRules()...)
	rs = append(rs, c.Env.rules()...)
	rs = append(rs, c.Backend.rules(c.Model)...)
	rs = append(rs, c.Stage1.rules(c.UsesSFT())...)
	rs = append(rs, c.RL.rules()...)
	rs = append(rs, c.Eval.rules()...)
	rs = append(rs, c.crossRules()...)
	return rs
}

func (c Config) topRules() []rule {
	return []rule{
		{key: "algo", check: func() error {
			return when(!slices.Contains(Algos, c.Algo), func() error { return bad("algo", c.Algo, fmt.Sprintf("want one of %v", Algos)) })
		}},
		{key: "name", check: func() error {
			return when(c.Name == "", func() error { return errors.New("config: name must be set") })
		}},
		{key: "runs_dir", check: func() error {
			return when(c.RunsDir == "", func() error { return errors.New("config: runs_dir must be set") })
		}},
		{key: "model", check: func() error {
			return when(c.Model == "", func() error { return errors.New("config: model (a Hugging Face checkpoint folder) must be set") })
		}},
		{key: "iterations", check: func() error {
			return when(c.Iterations < 0, func() error { return bad("iterations", c.Iterations, "must be >= 0") })
		}},
		{key: "tasks_per_iteration", check: func() error {
			return when(c.TasksPerIteration < 1, func() error { return bad("tasks_per_iteration", c.TasksPerIteration, "must be >= 1") })
		}},
		{key: "data_share", check: func() error {
			return when(c.DataShare <= 0 || c.DataShare > 1, func() error { return bad("data_share", c.DataShare, "must be in (0, 1]") })
		}},
		{key: "train_tasks", check: func() error {
			return when(c.TrainTasks < 0, func() error { return bad("train_tasks", c.TrainTasks, "must be >= 0 (0: the whole train split)") })
		}},
		{key: "rollout.group_size", check: func() error {
			return when(c.Rollout.GroupSize < 2, func() error {
				return bad("rollout.group_size", c.Rollout.GroupSize, "must be at least 2 (GRPO groups)")
			})
		}},
		{key: "rollout.temperature", check: func() error {
			return when(!(c.Rollout.Temperature > 0), func() error {
				return bad("rollout.temperature", c.Rollout.Temperature, "must be positive (greedy groups are identical, and the trainer scores tokens at the sampling temperature)")
			})
		}},
		{key: "skill_mode", check: func() error {
			_, err := skills.ParseMode(c.SkillMode)
			return when(err != nil, func() error { return fmt.Errorf("config: skill_mode: %w", err) })
		}},
		{key: "critical_steps", check: func() error {
			return when(c.CriticalSteps != CriticalReturnVariance && c.CriticalSteps != CriticalLLM, func() error {
				return bad("critical_steps", c.CriticalSteps, fmt.Sprintf("want %q or %q", CriticalReturnVariance, CriticalLLM))
			})
		}},
		{key: "rescore_max_tokens", check: func() error {
			return when(c.RescoreMaxTokens < 2, func() error { return bad("rescore_max_tokens", c.RescoreMaxTokens, "must be >= 2") })
		}},
		{key: "max_step_skills", check: func() error {
			return when(c.MaxStepSkills < 0, func() error { return bad("max_step_skills", c.MaxStepSkills, "must be >= 0") })
		}},
		{key: "gamma", check: func() error {
			return when(c.Gamma <= 0 || c.Gamma > 1, func() error { return bad("gamma", c.Gamma, "must be in (0, 1]") })
		}},
		{key: "analysis_max_tokens", check: func() error {
			return when(c.AnalysisTokens < 16, func() error { return bad("analysis_max_tokens", c.AnalysisTokens, "must be >= 16") })
		}},
		{key: "analysis_min_skill_words", check: func() error {
			return when(c.AnalysisMinWords < 0, func() error {
				return bad("analysis_min_skill_words", c.AnalysisMinWords, "must be >= 0 (0: 5 words, 1: any non-empty skill)")
			})
		}},
	}
}

// Validate reports every bad field of the environment section.
func (e EnvConfig) Validate() error { return joinRules(e.rules()) }

func (e EnvConfig) rules() []rule {
	agentgym := e.Kind == "agentgym"
	return []rule{
		{key: "env.name", check: func() error {
			return when(e.Name == "", func() error { return errors.New("config: env.name must be set") })
		}},
		{key: "env.name", id: "builtin", check: func() error {
			if e.Kind != "builtin" || e.Name == "" {
				return nil
			}
			if _, err := envadapters.Lookup(e.Name); err != nil {
				return fmt.Errorf("config: env.name: %w", err)
			}
			return nil
		}},
		{key: "env.kind", check: func() error {
			return when(e.Kind != "builtin" && e.Kind != "agentgym", func() error { return bad("env.kind", e.Kind, "want builtin or agentgym") })
		}},
		{key: "env.goals_file", check: func() error {
			switch {
			case e.GoalsFile == "":
				return nil
			case !agentgym:
				return errors.New("config: env.goals_file is for agentgym envs (a built-in's tasks are its own)")
			}
			if _, err := readGoals(e.GoalsFile); err != nil {
				return fmt.Errorf("config: env.goals_file: %w", err)
			}
			return nil
		}},
		{key: "env.url", check: func() error {
			return when(agentgym && e.URL == "", func() error { return errors.New("config: an agentgym env needs env.url (its server)") })
		}},
		{key: "env.max_steps", check: func() error {
			return when(agentgym && e.MaxSteps < 1, func() error {
				return errors.New("config: an agentgym env needs env.max_steps: no AgentGym server ends an episode at a step limit, the rollout does")
			})
		}},
		{key: "env.max_steps", id: "options", check: func() error {
			o := e.Options["max_steps"]
			return when(o != "" && e.MaxSteps > 0 && o != strconv.Itoa(e.MaxSteps), func() error {
				return fmt.Errorf("config: env.options.max_steps %q conflicts with env.max_steps %d: the step limit is env.max_steps (seedctl run --max-steps)", o, e.MaxSteps)
			})
		}},
		{key: "env.splits", check: func() error {
			if !agentgym {
				return nil
			}
			_, err := e.RemoteSplits()
			return err
		}},
	}
}

// Validate reports every bad field of the backend section (model: the
// policy's folder, which no served folder may be).
func (b BackendConfig) Validate(model string) error { return joinRules(b.rules(model)) }

func (b BackendConfig) rules(model string) []rule {
	remote := b.Kind != "embedded"
	return []rule{
		{key: "backend.kind", check: func() error {
			return when(b.Kind != "embedded" && b.Kind != "vllm" && b.Kind != "sglang", func() error {
				return bad("backend.kind", b.Kind, "want embedded, vllm or sglang")
			})
		}},
		{key: "backend.base_url", check: func() error {
			return when(remote && b.BaseURL == "" && len(b.Endpoints) == 0 && len(b.Launch) == 0, func() error {
				return fmt.Errorf("config: backend.base_url (a running server), backend.endpoints (several) or backend.launch (seedctl starts one) is required for %s", b.Kind)
			})
		}},
		{key: "backend.launch", check: func() error {
			return when(len(b.Launch) > 0 && b.BaseURL != "", func() error {
				return errors.New("config: backend.launch starts the server on a free port; backend.base_url (a running server) goes without it")
			})
		}},
		{key: "backend.endpoints", check: func() error { return b.validateEndpoints(model) }},
		{key: "backend.served_dir", check: func() error {
			return when(b.Kind == "vllm" && b.VLLMPublish != "lora" && b.ServedDir == "" && len(b.Endpoints) == 0, func() error {
				return errors.New("config: backend.served_dir is required for vllm reload publishing (a scratch copy of the base checkpoint that vLLM serves from)")
			})
		}},
		{key: "backend.served_dir", id: "model", check: func() error {
			return when(b.ServedDir != "" && inference.SameDir(b.ServedDir, model), func() error {
				return bad("backend.served_dir", b.ServedDir, "must not be the model folder (publishing overwrites its weights)")
			})
		}},
	}
}

// validateEndpoints checks the several-servers settings.
func (b BackendConfig) validateEndpoints(model string) error {
	if len(b.Endpoints) == 0 {
		if len(b.ServedDirs) > 0 {
			return errors.New("config: backend.served_dirs goes with backend.endpoints (one server: backend.served_dir)")
		}
		return nil
	}
	switch {
	case b.Kind == "embedded":
		return errors.New("config: backend.endpoints lists running vllm or sglang servers; the embedded backend starts its own")
	case b.BaseURL != "":
		return errors.New("config: set backend.base_url (one server) or backend.endpoints (several), not both")
	case len(b.Launch) > 0:
		return errors.New("config: backend.launch starts one server; with backend.endpoints start them yourself (one per GPU) and list their URLs")
	case b.ServedDir != "":
		return errors.New("config: several endpoints cannot share backend.served_dir (each publish rewrites it); give each its own in backend.served_dirs")
	case b.Kind == "vllm" && b.VLLMPublish != "lora" && len(b.ServedDirs) != len(b.Endpoints):
		return fmt.Errorf("config: vllm reload publishing with %d endpoints needs %d backend.served_dirs (one per endpoint, in order), got %d", len(b.Endpoints), len(b.Endpoints), len(b.ServedDirs))
	case b.Kind != "vllm" && len(b.ServedDirs) > 0:
		return fmt.Errorf("config: backend.served_dirs is for vllm reload publishing, not %s", b.Kind)
	}
	seen := map[string]bool{}
	for i, u := range b.Endpoints {
		if u == "" || seen[u] {
			return fmt.Errorf("config: backend.endpoints[%d] %q is empty or listed twice", i, u)
		}
		seen[u] = true
	}
	dirs := map[string]bool{}
	for i, d := range b.ServedDirs {
		d = filepath.Clean(d)
		if d == "." || dirs[d] || inference.SameDir(d, model) {
			return fmt.Errorf("config: backend.served_dirs[%d] %q is empty, listed twice or the model folder", i, b.ServedDirs[i])
		}
		dirs[d] = true
	}
	return nil
}

// Validate reports every bad field of the stage-1 section (sft: the
// algorithm runs stage 1; its training settings are checked only then).
func (s Stage1Config) Validate(sft bool) error { return joinRules(s.rules(sft)) }

func (s Stage1Config) rules(sft bool) []rule {
	a := s.Analyzer
	return []rule{
		{key: "stage1.episodes", check: func() error {
			return when(sft && s.Episodes < 1, func() error {
				return bad("stage1.episodes", s.Episodes, "must be positive for an algorithm with stage 1")
			})
		}},
		{key: "stage1.analyzer.kind", check: func() error {
			return when(a.Kind != "oracle" && a.Kind != "external", func() error { return bad("stage1.analyzer.kind", a.Kind, "want oracle or external") })
		}},
		{key: "stage1.analyzer.base_url", check: func() error {
			return when(a.Kind == "external" && (a.BaseURL == "" || a.Model == ""), func() error {
				return errors.New("config: an external analyzer needs stage1.analyzer.base_url and .model")
			})
		}},
		{key: "stage1.epochs", check: func() error {
			return when(sft && !(s.Epochs > 0), func() error { return bad("stage1.epochs", s.Epochs, "must be positive") })
		}},
		{key: "stage1.lr", check: func() error {
			return when(sft && !(s.LR > 0), func() error { return bad("stage1.lr", s.LR, "must be positive") })
		}},
		{key: "stage1.max_len", check: func() error {
			return when(sft && s.MaxLen < 2, func() error { return bad("stage1.max_len", s.MaxLen, "must be at least 2") })
		}},
		{key: "stage1.batch_tokens", check: func() error {
			return when(sft && s.BatchTokens < s.MaxLen, func() error {
				return bad("stage1.batch_tokens", s.BatchTokens, fmt.Sprintf("must hold one example of stage1.max_len %d", s.MaxLen))
			})
		}},
		{key: "stage1.targets", check: func() error {
			return when(sft && s.Targets != TargetsAll && s.Targets != TargetsEpisode, func() error {
				return bad("stage1.targets", s.Targets, fmt.Sprintf("want %q or %q", TargetsAll, TargetsEpisode))
			})
		}},
		{key: "stage1.held_out", check: func() error {
			return when(s.HeldOut < 0 || (sft && s.HeldOut > 0 && s.HeldOut >= s.Episodes), func() error {
				return bad("stage1.held_out", s.HeldOut, fmt.Sprintf("must be >= 0 and below stage1.episodes (%d): some trajectories must be trained on", s.Episodes))
			})
		}},
		{key: "stage1.optimizer", check: func() error {
			return when(s.Optimizer != "" && s.Optimizer != Stage1OptimizerOurs && s.Optimizer != Stage1OptimizerPublic, func() error {
				return bad("stage1.optimizer", s.Optimizer, fmt.Sprintf("want %q or %q", Stage1OptimizerOurs, Stage1OptimizerPublic))
			})
		}},
		{key: "stage1.batch_sequences", check: func() error {
			return when(s.BatchSequences < 0, func() error { return bad("stage1.batch_sequences", s.BatchSequences, "must be >= 0 (0: 8)") })
		}},
		{key: "stage1.acting_replay", check: func() error {
			return when(s.ActingReplay < 0, func() error { return bad("stage1.acting_replay", s.ActingReplay, "must be >= 0") })
		}},
		{key: "stage1.temperature", check: func() error {
			return when(s.Temperature < 0, func() error { return bad("stage1.temperature", s.Temperature, "must be >= 0 (0: the rollout's)") })
		}},
		{key: "stage1.window", check: func() error {
			return when(s.Window < 0, func() error { return bad("stage1.window", s.Window, "must be >= 0 (0: the rollout's)") })
		}},
		{key: "stage1.max_steps", check: func() error {
			return when(s.MaxSteps < 0, func() error { return bad("stage1.max_steps", s.MaxSteps, "must be >= 0 (0: env.max_steps)") })
		}},
	}
}

// Validate reports every bad field of the RL section.
func (r RLConfig) Validate() error { return joinRules(r.rules()) }

func (r RLConfig) rules() []rule {
	oneOf := func(key, v string, allowed ...string) rule {
		return rule{key: key, check: func() error {
			return when(!slices.Contains(allowed, v), func() error { return bad(key, v, fmt.Sprintf("want one of %q", allowed)) })
		}}
	}
	atLeast := func(key string, v, lo float64, want string) rule {
		return rule{key: key, check: func() error { return when(!(v >= lo), func() error { return bad(key, v, want) }) }}
	}
	return []rule{
		atLeast("rl.lambda", r.Lambda, 0, "must be >= 0"),
		{key: "rl.beta", check: func() error {
			return when(!(r.Beta > 0), func() error { return bad("rl.beta", r.Beta, "must be positive") })
		}},
		atLeast("rl.kl_coef", r.KLCoef, 0, "must be >= 0"),
		atLeast("rl.kl_clamp", r.KLClamp, 0, "must be >= 0 (0: no cap)"),
		{key: "rl.clip_eps", check: func() error {
			return when(!(r.ClipEps > 0 && r.ClipEps < 1), func() error { return bad("rl.clip_eps", r.ClipEps, "must be in (0, 1)") })
		}},
		{key: "rl.lr", check: func() error { return when(!(r.LR > 0), func() error { return bad("rl.lr", r.LR, "must be positive") }) }},
		atLeast("rl.weight_decay", r.WeightDecay, 0, "must be >= 0"),
		atLeast("rl.clip_norm", r.ClipNorm, 0, "must be >= 0 (0: no clipping)"),
		oneOf("rl.lr_schedule", r.LRSchedule, "", LRConstant, LRCosine),
		{key: "rl.warmup_steps", check: func() error {
			return when(r.WarmupSteps < 0, func() error { return bad("rl.warmup_steps", r.WarmupSteps, "must be >= 0") })
		}},
		{key: "rl.min_lr_frac", check: func() error {
			return when(!(r.MinLRFrac >= 0 && r.MinLRFrac <= 1), func() error { return bad("rl.min_lr_frac", r.MinLRFrac, "must be in [0, 1]") })
		}},
		{key: "rl.mini_batch_rows", check: func() error {
			return when(r.MiniBatchRows < 0 || (r.MiniBatchRows == 0 && r.MiniBatches < 1), func() error {
				return bad("rl.mini_batch_rows", r.MiniBatchRows, "want rows per mini-batch (>= 1), or 0 with rl.mini_batches >= 1")
			})
		}},
		{key: "rl.micro_batch_tokens", check: func() error {
			return when(r.MicroBatchTokens < 2, func() error { return bad("rl.micro_batch_tokens", r.MicroBatchTokens, "must be at least 2") })
		}},
		oneOf("rl.agg", r.Agg, "", "token_mean", "verl"),
		{key: "rl.micro_batch_rows", id: "verl", check: func() error {
			return when(r.Agg == "verl" && r.MicroBatchRows < 1, func() error {
				return bad("rl.micro_batch_rows", r.MicroBatchRows, "rl.agg \"verl\" needs rl.micro_batch_rows >= 1 (verl's ppo_micro_batch_size_per_gpu)")
			})
		}},
		oneOf("rl.recompute", r.Recompute, "", "on", "off"),
		oneOf("rl.dtype", r.DType, "", "float32", "bfloat16"),
		{key: "rl.max_refusals", check: func() error {
			return when(r.MaxRefusals < 1, func() error { return bad("rl.max_refusals", r.MaxRefusals, "must be >= 1") })
		}},
		oneOf("rl.advantage", r.Advantage, AdvStepRows, AdvTrajectory),
		{key: "rl.reward_scale", check: func() error {
			return when(!(r.RewardScale > 0), func() error { return bad("rl.reward_scale", r.RewardScale, "must be positive") })
		}},
		oneOf("rl.outcome", r.Outcome, OutcomeSuccess, OutcomeEnv),
		{key: "rl.adv_eps", check: func() error {
			return when(!(r.AdvEps > 0), func() error { return bad("rl.adv_eps", r.AdvEps, "must be positive") })
		}},
		oneOf("rl.adv_norm", r.AdvNorm, "", AdvNormStd, AdvNormNone),
		{key: "rl.clip_ratio_c", check: func() error {
			return when(r.ClipRatioC != 0 && !(r.ClipRatioC > 1), func() error { return bad("rl.clip_ratio_c", r.ClipRatioC, "must be 0 (off) or above 1") })
		}},
		atLeast("rl.entropy_coef", r.EntropyCoef, 0, "must be >= 0"),
		atLeast("rl.rejected_cost", r.RejectedCost, 0, "must be >= 0"),
		atLeast("rl.step_group_weight", r.StepGroupWeight, 0, "must be >= 0"),
		oneOf("rl.step_group_key", r.StepGroupKey, "", StepKeyObservation, StepKeyState),
		atLeast("rl.step_rejected_cost", r.StepRejectedCost, 0, "must be >= 0"),
		{key: "rl.step_group_weight", id: "options", check: func() error {
			// The key and the charge only shape GiGPO's step term: without
			// it they would be accepted and do nothing.
			return when(r.StepGroupWeight == 0 && (r.StepGroupKey == StepKeyState || r.StepRejectedCost > 0), func() error {
				return bad("rl.step_group_weight", r.StepGroupWeight, "rl.step_group_key \"state\" and rl.step_rejected_cost act only through the step-level term: set rl.step_group_weight > 0 or leave them out")
			})
		}},
		oneOf("rl.drop_flat", r.DropFlat, "", DropZeroAdvantage, DropNoSignal),
		oneOf("rl.distill_form", r.DistillForm, "", "gated_nll", "signed", DistillFull),
		{key: "rl.distill_topk", check: func() error {
			return when(r.DistillTopK < 0 || r.DistillTopK > 0 && r.DistillForm != DistillFull, func() error {
				return bad("rl.distill_topk", r.DistillTopK, "must be >= 0 and is read by rl.distill_form \"full\" only")
			})
		}},
		{key: "rl.jsd_beta", check: func() error {
			return when(!(r.JSDBeta >= 0 && r.JSDBeta <= 1) || r.JSDBeta != 1 && r.DistillForm != DistillFull, func() error {
				return bad("rl.jsd_beta", r.JSDBeta, "must be in [0, 1] (1: reverse KL, 0: forward KL) and is read by rl.distill_form \"full\" only")
			})
		}},
		{key: "rl.pg_coef", check: func() error {
			return when(!(r.PGCoef >= 0) || math.IsInf(r.PGCoef, 0), func() error { return bad("rl.pg_coef", r.PGCoef, "must be a number >= 0 (1: the paper's)") })
		}},
		oneOf("rl.teacher_context", r.TeacherContext, "", TeacherContextSkill, TeacherContextPlain),
		{key: "rl.teacher_context", id: "model", check: func() error {
			return when(r.TeacherContext == TeacherContextPlain && r.TeacherModel == "", func() error {
				return bad("rl.teacher_context", r.TeacherContext, "a plain teacher context needs rl.teacher_model: the policy scoring its own plain context teaches nothing")
			})
		}},
		atLeast("rl.delta_clip", r.DeltaClip, 0, "must be >= 0 (0: 5 nats)"),
		oneOf("rl.distill_baseline", r.DistillBaseline, "", DistillBaselineShuffled),
		{key: "rl.term_grads_every", check: func() error {
			return when(r.TermGradsEvery < 0, func() error { return bad("rl.term_grads_every", r.TermGradsEvery, "must be >= 0 (0: off)") })
		}},
	}
}

// Validate reports every bad field of the eval section.
func (e EvalConfig) Validate() error { return joinRules(e.rules()) }

func (e EvalConfig) rules() []rule {
	nonNeg := func(key string, v float64) rule {
		return rule{key: key, check: func() error { return when(!(v >= 0), func() error { return bad(key, v, "must be >= 0") }) }}
	}
	return []rule{
		nonNeg("eval.every", float64(e.Every)),
		nonNeg("eval.episodes", float64(e.Episodes)),
		nonNeg("eval.temperature", e.Temperature),
		nonNeg("eval.sampled_temperature", e.SampledTemperature),
		nonNeg("eval.max_steps", float64(e.MaxSteps)),
		nonNeg("eval.window", float64(e.Window)),
		{key: "eval.plateau_patience", check: func() error {
			return when(e.PlateauPatience < 0 || e.PlateauPatience > 0 && (e.Every < 1 || e.Episodes < 1), func() error {
				return fmt.Errorf("config: eval.plateau_patience %d needs eval.every and eval.episodes above 0 (got %d and %d)", e.PlateauPatience, e.Every, e.Episodes)
			})
		}},
	}
}

// crossRules span sections: the algorithm against the environment, the
// sampling temperature against the update, the rollout settings as the
// rollout and the environment check them.
func (c Config) crossRules() []rule {
	rc := c.rolloutConfig(0)
	return []rule{
		{key: "algo", id: "transfer", check: func() error {
			return when(c.Algo == AlgoTransferSkill && c.Env.Kind != "builtin", func() error {
				return fmt.Errorf("config: algo %s needs a built-in environment (its advice comes from the built-in's scripted expert), not env.kind %q", AlgoTransferSkill, c.Env.Kind)
			})
		}},
		{key: "rl.teacher_context", id: "algo", check: func() error {
			return when(c.RL.TeacherContext == TeacherContextPlain && c.Algo != AlgoSEEDNoSFT, func() error {
				return fmt.Errorf("config: rl.teacher_context \"plain\" distils without skills; algo %s writes skills for the teacher's context (use algo seed-no-sft)", c.Algo)
			})
		}},
		{key: "algo", id: "privileged", check: func() error {
			return when(c.Algo == AlgoPrivilegedSkill && c.Env.Kind != "builtin", func() error {
				return fmt.Errorf("config: algo %s needs a built-in environment (its teacher is the built-in's scripted expert), not env.kind %q", AlgoPrivilegedSkill, c.Env.Kind)
			})
		}},
		{key: "stage1.analyzer.kind", id: "oracle", check: func() error {
			if _, err := envadapters.Lookup(c.Env.Name); err != nil && c.Env.Kind != "agentgym" {
				return nil // env.name's rule says it
			}
			_, known := envadapters.OracleFor(c.Env.Name)
			return when(c.Stage1.Analyzer.Kind == "oracle" && !known && c.UsesStage1Analyzer(), func() error {
				return fmt.Errorf("config: stage1.analyzer.kind \"oracle\": there is no oracle for env %s (the built-ins and agentgym textcraft have one); use an external analyzer", c.Env.Name)
			})
		}},
		{key: "rl.server_old_logp", check: func() error {
			return when(c.RL.ServerOldLogP && c.Rollout.Temperature != 1, func() error {
				return fmt.Errorf("config: rl.server_old_logp needs rollout.temperature 1, not %v: servers return log-probs of the unscaled distribution, the trainer's are at the sampling temperature", c.Rollout.Temperature)
			})
		}},
		{key: "rollout", check: func() error {
			if err := rc.Validate(); err != nil {
				return fmt.Errorf("config: rollout: %w", err)
			}
			return nil
		}},
		{key: "rollout.places_line", id: "env", check: func() error {
			// The environment knows its own turn styles.
			if _, err := rollout.TemplateFor(c.Env.Name).WithPlacesLine(c.Rollout.PlacesLine); err != nil {
				return fmt.Errorf("config: rollout.places_line for env %s: %w", c.Env.Name, err)
			}
			return nil
		}},
		{key: "env.options", check: func() error {
			// The environment checks its own options (names and values).
			if c.Env.Kind != "builtin" {
				return nil
			}
			b, err := envadapters.Lookup(c.Env.Name)
			if err != nil {
				return nil // env.name/builtin says so
			}
			e, err := b.New(rc.EnvOptions)
			if err != nil {
				return fmt.Errorf("config: env.options: %w", err)
			}
			e.Close()
			return nil
		}},
	}
}
