// Package orchestrator runs SEED end to end: stage 1 (collect with the base
// policy, analyze with an external or oracle analyzer, SFT the policy to
// write skills) and stage 2 iterations (publish, rollouts, self-analysis,
// critical steps, teacher contexts, rescoring, GRPO advantages, update,
// checkpoint), with the baselines of docs/algorithm.md, a run directory that
// survives kill -9, periodic evaluation, metrics and a report.
//
// The trainer is reached through the Learner interface declared here;
// cmd/seedctl wires the gotch implementation.
package orchestrator

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"time"

	"github.com/seedctl/seedctl/envadapters"
	"github.com/seedctl/seedctl/envadapters/agentgym"
	"github.com/seedctl/seedctl/rollout"
	"github.com/seedctl/seedctl/skills"
)

// Algorithms (docs/algorithm.md's method and baselines).
const (
	AlgoSEED        = "seed"
	AlgoGRPO        = "grpo"
	AlgoStaticSkill = "static-skill"
	AlgoRandomSkill = "random-skill"
	AlgoSEEDNoSFT   = "seed-no-sft"
	// AlgoPrivilegedSkill distils from a privileged teacher (ours): each
	// trajectory's skill is the oracle's advice about the scripted expert
	// solving the same task (skills.PrivilegedAnalyzer); no stage 1.
	// Built-in environments only: the mechanism ladder's top rung.
	AlgoPrivilegedSkill = "privileged-skill"
	// AlgoTransferSkill distils from transferable advice (ours): each
	// trajectory's skill is the oracle's advice about the scripted expert
	// solving a *different* training task of the same family and goal
	// object (skills.TransferAnalyzer), what `seedctl eval --hints
	// oracle-other` measures. Unlike the privileged teacher's, this
	// advice holds nothing a plain policy could not learn. No stage 1;
	// built-in environments only.
	AlgoTransferSkill = "oracle-other-skill"
)

// Algos lists the accepted --algo values.
var Algos = []string{AlgoSEED, AlgoGRPO, AlgoStaticSkill, AlgoRandomSkill, AlgoSEEDNoSFT, AlgoPrivilegedSkill, AlgoTransferSkill}

// EnvConfig selects the environment.
type EnvConfig struct {
	// Name is a built-in (household, webshop, searchqa) or, with Kind
	// "agentgym", the AgentGym flavor (alfworld, webshop, sciworld, textcraft, babyai).
	Name string `json:"name"`
	Kind string `json:"kind,omitempty"` // "builtin" (default) or "agentgym"
	URL  string `json:"url,omitempty"`  // agentgym server
	// SplitSizes is refused: it numbered every split from index 0, so
	// evaluation ran on training tasks (kept so that such a config gets
	// a clear error, not "unknown field").
	SplitSizes map[string]int `json:"split_sizes,omitempty"`
	// Splits gives an AgentGym env's task index ranges per split (train,
	// eval_seen, eval_unseen): task i of a split is the server's index
	// start+i. Unset splits take the flavor's defaults where its data has
	// a published split (agentgym.Flavors).
	Splits map[string]agentgym.Range `json:"splits,omitempty"`
	// GoalsFile, for an AgentGym env, is a JSON object of task index →
	// goal ({"400": "stone pickaxe", …}) the server must answer with: a
	// committed config carries the goals it was made on, and a server
	// that maps an index to another goal is refused at that reset. Every
	// run also records the goals it met in its folder (env_goals.json)
	// and a resume is held to them.
	GoalsFile string `json:"goals_file,omitempty"`
	// MaxSteps is the episode step limit (training and eval unless
	// eval.max_steps is set); 0: the environment's own.
	MaxSteps int `json:"max_steps,omitempty"`
	// Options are the built-in environment's own settings (seedctl run
	// --env-opt K=V), checked by the environment. The embedded default
	// (no config file) sets household's placement_prior=0.8; a config file
	// states its own.
	Options map[string]string `json:"options,omitempty"`
}

// BackendConfig selects the inference server.
type BackendConfig struct {
	Kind    string `json:"kind"`               // embedded, vllm, sglang
	BaseURL string `json:"base_url,omitempty"` // running server (vllm/sglang)
	// Model is the served model id requests name (vLLM's
	// --served-model-name).
	Model string `json:"served_model,omitempty"`
	// APIKeyEnv names the environment variable holding the server's key;
	// the key itself never appears in configs or logs.
	APIKeyEnv string `json:"api_key_env,omitempty"`
	// Launch, when set, starts the server (vllm/sglang) under supervision
	// with this command line; the checkpoint folder is appended as the model.
	Launch      []string `json:"launch,omitempty"`
	VLLMPublish string   `json:"vllm_publish,omitempty"` // reload or lora
	// ServedDir is the folder a vLLM server (reload publishing) serves
	// from: a scratch copy of the base checkpoint that each published
	// checkpoint's weights are copied into. Never the base model's own
	// folder, which publishing would overwrite.
	ServedDir string `json:"served_dir,omitempty"`
	// Colocated: the server shares the trainer's GPUs, so its memory is
	// released before each update and resumed with the new weights.
	Colocated bool `json:"colocated,omitempty"`
	// MaxInFlight bounds requests sent to the server at once (0: 64).
	MaxInFlight int `json:"max_in_flight,omitempty"`
	// Endpoints, instead of base_url, lists several running servers of
	// the kind (one per GPU, or one per tensor-parallel group) that serve
	// the same policy: requests go to the one with the least outstanding
	// work (a task's group to one server, for its prefix cache), every one
	// is published to before the next iteration, and one that fails after
	// retries is dropped with a log line (the run stops when none is left).
	Endpoints []string `json:"endpoints,omitempty"`
	// ServedDirs are the endpoints' served folders for vLLM reload
	// publishing, one per endpoint, in order (never shared: each publish
	// rewrites its folder). One served_dir with several endpoints is
	// refused.
	ServedDirs []string `json:"served_dirs,omitempty"`
	// VerifyTolerance bounds, after each publish, how far any token's
	// log-prob in a probe sequence as served may be from the trainer's for
	// the weights just saved (inference.VerifyServed, every endpoint): a
	// server that kept old weights (vLLM #32718), serves another folder or
	// restarted on the base model fails the run instead of sampling from
	// the wrong policy. 0: 1e-3 for the embedded server (the trainer's
	// code at the trainer's rl.dtype: measured equal to 1e-6 in float32 and
	// bfloat16), 0.25 for vLLM/SGLang (bf16 kernels); negative: off. Checked only at
	// rollout temperature 1, where the trainer's log-probs are the
	// server's. One update moves a probe's log-probs by less than the
	// remote tolerance, so a server one publish behind can pass; one
	// serving weights many updates old or another model does not.
	VerifyTolerance float64 `json:"verify_tolerance,omitempty"`
}

// verifyTolerance is VerifyTolerance with its default resolved.
func (b BackendConfig) verifyTolerance() float64 {
	switch {
	case b.VerifyTolerance != 0:
		return b.VerifyTolerance
	case b.Kind == "embedded":
		return 1e-3
	case b.Kind == "vllm" && launchDType(b.Launch) == "float32":
		// A launched vLLM serving float32 matched the trainer to 1.6e-4
		// nats (docs/vllm.md): tight enough to see a head a few updates
		// stale (0.011 nats measured), which 0.25 would pass.
		return 0.02
	}
	return 0.25
}

// launchDType is the --dtype of a launch command line ("" when unset).
func launchDType(args []string) string {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--dtype="); ok {
			return v
		}
		if a == "--dtype" && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// URLs lists the backend's servers: base_url, or endpoints.
func (b BackendConfig) URLs() []string {
	if len(b.Endpoints) > 0 {
		return b.Endpoints
	}
	if b.BaseURL != "" {
		return []string{b.BaseURL}
	}
	return nil
}

// AnalyzerConfig is the stage-1 analyzer.
type AnalyzerConfig struct {
	Kind string `json:"kind"` // oracle (built-ins) or external
	// BaseURL of an OpenAI-compatible chat endpoint (external).
	BaseURL string `json:"base_url,omitempty"`
	// Model the endpoint serves (e.g. gpt-4.1).
	Model string `json:"model,omitempty"`
	// APIKeyEnv names the environment variable holding the endpoint's key.
	APIKeyEnv string `json:"api_key_env,omitempty"`
	// MaxTokens bounds each skill answer (at least 256 for external analyzers).
	MaxTokens int `json:"max_tokens,omitempty"`
}

// Stage1Config is hindsight-skill SFT.
type Stage1Config struct {
	Episodes int            `json:"episodes"` // trajectories collected with the base policy (public code: 1,440 on ALFWorld)
	Analyzer AnalyzerConfig `json:"analyzer"`
	// Epochs over the stage-1 examples (public code: 3).
	Epochs float64 `json:"epochs"`
	// LR of stage 1's AdamW.
	LR float64 `json:"lr"`
	// BatchTokens per optimizer step.
	BatchTokens int `json:"batch_tokens"`
	// MicroBatchTokens bounds the padded tokens of one forward (rows of
	// similar length are grouped).
	MicroBatchTokens int `json:"micro_batch_tokens"`
	// MaxLen: longer stage-1 examples are skipped (and logged).
	MaxLen int `json:"max_len"`
	// ActingReplay adds this many of the collected trajectories' own
	// turns (prompt → the policy's sampled reply) per skill example, so
	// learning to write skills does not overwrite acting. Measured on the
	// tiny household model: skill SFT alone took invalid actions from 43%
	// to 100%.
	ActingReplay float64 `json:"acting_replay"`
	// Targets is what stage 1 trains the policy to write: "all" (summary,
	// episode skill and step skills) or "episode" ({episode_summary,
	// episode_skill}: the public SEED code's targets).
	Targets string `json:"targets"`
	// Temperature, Window and MaxSteps of stage 1's collection rollouts
	// (0: rollout.temperature, rollout.window, env.max_steps). The public
	// SFT launchers collect at T = 0.4, history 5, 30 steps.
	Temperature float64 `json:"temperature,omitempty"`
	Window      int     `json:"window,omitempty"`
	MaxSteps    int     `json:"max_steps,omitempty"`
	// HeldOut keeps at least this many collected trajectories (whole
	// groups, the last ones) out of the fine-tuning and measures on them,
	// before and after it, what stage 1 exists to teach: the NLL of the
	// analyzer's skill (per target token) and the share of the policy's
	// own analyses that parse and give a skill (greedy, as in stage 2).
	// 0: no measurement, every trajectory trained on.
	HeldOut int `json:"held_out,omitempty"`
	// Optimizer is stage 1's schedule and batching: "ours" (the default:
	// AdamW β2 0.999, 5% warm-up, cosine to 0.1·lr, length-sorted batches
	// of batch_tokens with one token mean) or "public" (the public SEED
	// code's verl sft_trainer.yaml: β2 0.95, 10% warm-up, cosine to 0,
	// batch_sequences examples per step in shuffled order, the mean of
	// their per-example token means).
	Optimizer string `json:"optimizer,omitempty"`
	// BatchSequences is "public"'s examples per step (0: 8, the public
	// launchers' micro-batch of 8 sequences).
	BatchSequences int `json:"batch_sequences,omitempty"`
}

// Stage-1 optimizers (Stage1Config.Optimizer).
const (
	Stage1OptimizerOurs   = "ours"
	Stage1OptimizerPublic = "public"
)

// sftOptions is stage 1's fine-tuning as the learner takes it.
func (s Stage1Config) sftOptions(seed int64) SFTOptions {
	o := SFTOptions{Epochs: s.Epochs, LR: s.LR, BatchTokens: s.BatchTokens, MicroBatchTokens: s.MicroBatchTokens, MaxLen: s.MaxLen, Seed: uint64(seed),
		Beta2: 0.999, WarmupFrac: 0.05, MinLRFrac: 0.1}
	if s.Optimizer == Stage1OptimizerPublic {
		o.Beta2, o.WarmupFrac, o.MinLRFrac, o.SequenceMean = 0.95, 0.1, 0, true
		o.BatchSequences = cmp.Or(s.BatchSequences, 8)
	}
	return o
}

// Row dropping (RLConfig.DropFlat).
const (
	DropZeroAdvantage = "zero_advantage"
	DropNoSignal      = "no_signal"
)

// DistillBaselineShuffled is RLConfig.DistillBaseline's contrastive gap.
const DistillBaselineShuffled = "shuffled"

// DistillFull is rl.distill_form's full-distribution reverse KL.
const DistillFull = "full"

// Teacher contexts (RLConfig.TeacherContext).
const (
	TeacherContextSkill = "skill"
	TeacherContextPlain = "plain"
)

// Stage-2 updates (UseUpdate).
const (
	// UpdatePublic is the public SEED code's update: the embedded
	// default's without its deviations (GiGPO's step-level advantage),
	// with the std normalisation and the 0.1 invalid-step penalty.
	UpdatePublic = "public"
	// UpdateLegacy is seedctl's update before it followed the public code:
	// one trajectory return (success − nothing for invalid steps) copied
	// to every step, one optimizer step per iteration, no dual-clip, no
	// entropy bonus, rows without signal dropped. Kept to compare against.
	UpdateLegacy = "legacy"
)

// UseUpdate switches the stage-2 update to one of the named recipes.
func (c *Config) UseUpdate(name string) error {
	switch name {
	case UpdatePublic:
		d := Default()
		c.RL.Advantage, c.RL.RewardScale, c.RL.Outcome, c.Rollout.InvalidPenalty = d.RL.Advantage, d.RL.RewardScale, d.RL.Outcome, 0.1
		c.RL.MiniBatchRows, c.RL.MiniBatches, c.RL.ClipRatioC, c.RL.EntropyCoef, c.RL.DropFlat = d.RL.MiniBatchRows, d.RL.MiniBatches, d.RL.ClipRatioC, d.RL.EntropyCoef, d.RL.DropFlat
		c.RL.AdvNorm = AdvNormStd
		c.RL.dropDeviations()
	case UpdateLegacy:
		c.RL.Advantage, c.RL.RewardScale, c.RL.Outcome, c.Rollout.InvalidPenalty = AdvTrajectory, 1, OutcomeEnv, 0
		c.RL.MiniBatchRows, c.RL.MiniBatches, c.RL.ClipRatioC, c.RL.EntropyCoef, c.RL.DropFlat = 0, 1, 0, 0, DropNoSignal
		c.RL.AdvNorm = AdvNormStd
		c.RL.dropDeviations()
	default:
		return fmt.Errorf("update %q: want %q or %q", name, UpdatePublic, UpdateLegacy)
	}
	return nil
}

// dropDeviations resets where the embedded default's update departs from
// the public SEED code's (GiGPO's step-level advantage). Load and
// UseUpdate both call it, so a new departure is listed here once.
func (r *RLConfig) dropDeviations() {
	r.StepGroupWeight = 0
}

// Stage-1 targets (Stage1Config.Targets).
const (
	TargetsAll     = "all"
	TargetsEpisode = "episode"
)

// Critical-step selectors (Config.CriticalSteps).
const (
	// CriticalReturnVariance is docs/algorithm.md's: anchor states shared across
	// the group, ranked by how far a step's return falls below its
	// group's mean, candidates handed to the analyzer.
	CriticalReturnVariance = "return_variance"
	// CriticalLLM lets the analyzer choose the critical steps itself (the
	// public SEED scripts' LLM-chosen critical step).
	CriticalLLM = "llm"
)

// RLConfig is stage 2's loss and optimizer.
type RLConfig struct {
	// Lambda is λ, the weight of the gated distillation loss (paper: 0.01).
	Lambda float64 `json:"lambda"`
	// Beta is β of the gate σ(β·Δ) (paper: 5).
	Beta float64 `json:"beta"`
	// KLCoef weighs the k3 KL to the frozen reference (paper: 0.01).
	KLCoef float64 `json:"kl_coef"`
	// Agg is how loss terms are averaged: "verl" (each term's token mean
	// within a micro-batch of micro_batch_rows rows, divided by the
	// micro-batches and averaged over ranks: gradient accumulation and
	// FSDP as verl runs them) or "token_mean" ("" too: each term's token
	// mean over the whole mini-batch, every token weighed alike).
	Agg string `json:"agg,omitempty"`
	// MicroBatchRows is verl's ppo_micro_batch_size_per_gpu (agg "verl";
	// public: ALFWorld 32, WebShop 8).
	MicroBatchRows int `json:"micro_batch_rows,omitempty"`
	// KLClamp caps each token's k3 KL, zero gradient above it, as verl's
	// low_var_kl clamps to [−10, 10] (public: 10; 0: no cap).
	KLClamp float64 `json:"kl_clamp"`
	// ClipEps is PPO's ε (public code: 0.2).
	ClipEps float64 `json:"clip_eps"`
	// LR of stage 2's AdamW (paper: 1e-6 for 1.5B–7B models; the tiny
	// household model: 2e-4, measured against 3e-5, 1e-4 and 4e-4 on the
	// committed base, docs/experiments.md).
	LR float64 `json:"lr"`
	// WeightDecay of AdamW (decoupled).
	WeightDecay float64 `json:"weight_decay"`
	// ClipNorm clips the gradient's global norm (0: none).
	ClipNorm float64 `json:"clip_norm"`
	// LRSchedule is "constant" (the default) or "cosine": after the warm-up
	// the learning rate falls to MinLRFrac·LR along a half cosine over the
	// run's iterations (by the mini-batch's place in its iteration).
	LRSchedule string `json:"lr_schedule,omitempty"`
	// WarmupSteps ramps the learning rate linearly, LR·(s+1)/(WarmupSteps+1)
	// at mini-batch s of stage 2 (counted over the run, refused steps
	// included). A fresh AdamW's first steps are close to sign descent
	// (every parameter moves by about the full learning rate, whatever its
	// gradient's size), which a warm-up tempers.
	WarmupSteps int `json:"warmup_steps,omitempty"`
	// MinLRFrac is where the cosine schedule ends, as a share of LR.
	MinLRFrac float64 `json:"min_lr_frac,omitempty"`
	// MiniBatchRows is verl's ppo_mini_batch_size in rows: the iteration's
	// rows are cut, in order (Shuffle: seeded order), into mini-batches of
	// this many, one optimizer step each, one pass (ppo_epochs 1). From the
	// second mini-batch on the policy has moved away from ℓold, so the PPO
	// ratio and its clipping act. Reference: 256 on ALFWorld, 64 on
	// WebShop (public code). 0: MiniBatches instead.
	MiniBatchRows int `json:"mini_batch_rows"`
	// Shuffle orders the rows by a seeded permutation before they are cut
	// into mini-batches (verl's actor shuffle, off by default).
	Shuffle bool `json:"shuffle,omitempty"`
	// MiniBatches, used only when MiniBatchRows is 0, splits the rows into
	// this many mini-batches of a seeded shuffle, row i going to
	// mini-batch i mod MiniBatches (the update before the reference's
	// semantics were followed: 1 made one step per iteration).
	MiniBatches int `json:"mini_batches,omitempty"`
	// MicroBatchTokens bounds the padded tokens of one forward/backward;
	// gradients accumulate over a mini-batch's micro-batches.
	MicroBatchTokens int `json:"micro_batch_tokens"`
	// Recompute is activation recomputation in the trainer (per decoder
	// layer: only each layer's input is kept, the layer is recomputed in
	// the backward pass; the same gradients for about one more forward):
	// "" (auto: on for policies of trainer.RecomputeAutoParams parameters
	// or more, where activations, not compute, bound the micro-batch),
	// "on" or "off". Ours: verl and OpenRLHF turn it on for their GPU
	// recipes the same way.
	Recompute string `json:"recompute,omitempty"`
	// DType is the trainer's compute precision: "float32" ("" too; the
	// CPU default) or "bfloat16" (weights, activations and gradients in
	// bfloat16, log-softmax in float32, float32 master weights and Adam
	// moments in the optimizer; checkpoints are published in bfloat16, as
	// vLLM and SGLang load them). No loss scaling: bfloat16 has float32's
	// exponent range. The GPU presets use bfloat16, as verl does.
	DType string `json:"dtype,omitempty"`
	// MaxRefusals stops the run after this many non-finite steps in a row.
	MaxRefusals int `json:"max_refusals"`
	// Advantage is the granularity of GRPO's advantages: "step_rows" (every
	// step a row, statistics over all step rows of the group: the public
	// code's verl-agent GRPO) or "trajectory" (one return per trajectory,
	// copied to its steps: the paper's notation).
	Advantage string `json:"advantage"`
	// RewardScale is the reward of a full outcome (reference 10), against
	// which the invalid-action penalty (rollout.invalid_penalty, reference
	// 0.1) is weighed.
	RewardScale float64 `json:"reward_scale"`
	// Outcome is "success" (1 when the episode was won, else 0; the
	// reference, WebShop included: 10 only at score 1) or "env" (the
	// environment's own reward, WebShop's graded score).
	Outcome string `json:"outcome"`
	// AdvEps is ε in A = (r − mean)/(std + ε).
	AdvEps float64 `json:"adv_eps"`
	// RejectedCost is taken off the GRPO advantage of every step whose
	// action the environment rejected ("Nothing happens."), after the
	// group normalisation (ours; the public code has none). Unlike an
	// invalid-step penalty in the reward, which std normalisation turns
	// into a full-size advantage in groups where nobody won, it stays this
	// size: a small push away from rejected actions beside the outcome's.
	RejectedCost float64 `json:"rejected_cost,omitempty"`
	// StepGroupWeight > 0 adds GiGPO's step-level advantage (Feng et al.
	// 2025, verl-agent's gigpo; not SEED's public code), this many times,
	// to each step's: the steps of a task's group that act from the same
	// environment state (the same last observation; a rejected action
	// changes nothing) form a step group, and their discounted returns
	// (γ = gamma) are normalised within it as rl.adv_norm says. It credits
	// actions within an episode — which place to search first, taking the
	// object in view — where the episode's outcome credits all its steps
	// alike. GiGPO's reference weight is 1. 0: off.
	StepGroupWeight float64 `json:"step_group_weight,omitempty"`
	// StepGroupKey is what makes two steps' states the same for the
	// step-level advantage: "observation" (GiGPO's anchor states: the
	// observation text; the default) or "state" (the observation and the
	// environment's state line, where it reports one: the household's
	// says what the agent carries, which arriving somewhere does not).
	StepGroupKey string `json:"step_group_key,omitempty"`
	// StepRejectedCost is a step reward of −this on every action the
	// environment rejected ("Nothing happens."), in the step-level returns
	// only (with rl.step_group_weight > 0): there a rejected action is
	// compared with what else the group did from the same state, so the
	// charge says "not here" — unlike rl.rejected_cost, which pushes every
	// rejected action down wherever it was taken. 0: off.
	StepRejectedCost float64 `json:"step_rejected_cost,omitempty"`
	// AdvNorm is "std" (GRPO, the default) or "none" (mean only: verl's
	// norm_adv_by_std_in_grpo=False, the reference WebShop script).
	AdvNorm string `json:"adv_norm,omitempty"`
	// ClipRatioC is dual-clip's c (verl's clip_ratio_c; reference 3): for
	// A < 0 the clipped loss is capped at −c·A. 0 turns it off.
	ClipRatioC float64 `json:"clip_ratio_c"`
	// EntropyCoef weighs the entropy bonus (verl's entropy_coeff;
	// reference 0.001).
	EntropyCoef float64 `json:"entropy_coef"`
	// DropFlat leaves rows out of the update: "" (none; verl keeps every
	// row), "zero_advantage" (rows whose advantage is 0 at every token, for
	// every method alike, so GRPO's and SEED's loss normalisers stay the
	// same; SEED loses its distillation on them) or "no_signal" (rows with
	// advantage 0 and no distilled token: the update before the public
	// recipe was followed, which scales GRPO's gradient more than SEED's).
	DropFlat string `json:"drop_flat,omitempty"`
	// ServerOldLogP uses the server's sampling log-probs as ℓold instead of
	// recomputing them with the trainer (as verl does). Recomputing costs a
	// forward pass but makes the update independent of the server's batch
	// composition and precision; the gap is logged as old_logp_max_gap.
	ServerOldLogP bool `json:"server_old_logp,omitempty"`
	// DistillForm is the distillation term: "gated_nll" ("" too; the
	// paper's g·Δ, g = σ(β·Δ) held constant: its gradient raises every
	// distilled sampled token, more where the teacher agrees) or "signed"
	// (ours, off by default: the clipped shift Δ as a per-token reward,
	// raising what the teacher endorses and lowering what it rejects, as
	// on-policy distillation's reverse-KL gradient does).
	DistillForm string `json:"distill_form,omitempty"`
	// DeltaClip bounds |Δ| in the signed form (0: 5 nats).
	DeltaClip float64 `json:"delta_clip,omitempty"`
	// DistillForm "full" is on-policy distillation's exact per-token
	// reverse KL, Σ_v πθ(v)·(log πθ(v) − log πT(v)), over the teacher's
	// next-token distribution at every distilled token (Agarwal et al.;
	// TRL's GKDTrainer at beta 1): no sampling noise, and the gradient
	// moves every token's probability toward the teacher's, not only the
	// sampled one's. DistillTopK keeps the teacher's k most probable
	// tokens per position and the rest as one tail bucket (ms-swift's
	// gkd_logits_topk); 0 keeps the whole vocabulary (4 bytes per token
	// of vocabulary per distilled token in host memory).
	DistillTopK int `json:"distill_topk,omitempty"`
	// JSDBeta is the full form's divergence, TRL's GKDTrainer beta: 1
	// (the default) the reverse KL, 0 the forward KL, between them the
	// generalized Jensen–Shannon divergence β·KL(πT‖M) + (1−β)·KL(πθ‖M),
	// M = β·πT + (1−β)·πθ.
	JSDBeta float64 `json:"jsd_beta"`
	// PGCoef weighs the GRPO (policy-gradient) term (1, the paper's);
	// 0 trains on distillation (and KL/entropy) alone: the control that
	// shows whether the distillation path teaches by itself.
	PGCoef float64 `json:"pg_coef"`
	// TeacherModel is the distillation teacher's checkpoint (TRL's
	// teacher_model; same tokenizer as the policy), frozen for the run;
	// "" (the paper's): the current policy θ_k scores its own teacher
	// contexts.
	TeacherModel string `json:"teacher_model,omitempty"`
	// TeacherContext is what the teacher reads: "skill" ("" too; the
	// plain context with the trajectory's skill inserted, the paper's)
	// or "plain" (the plain context itself: standard on-policy
	// distillation from teacher_model, every trained token distilled,
	// no analysis).
	TeacherContext string `json:"teacher_context,omitempty"`
	// DistillBaseline is what the teacher's log-prob is compared with:
	// "" the policy's own (the paper's Δ = ℓᵀ − ℓθ) or "shuffled" (ours,
	// off by default: the contrastive gap Δ = ℓᵀ − ℓᴮ, ℓᴮ scored with a
	// skill written about another task of the same iteration put in the
	// same places, so what inserting any skill text does to the
	// log-probs cancels and what this skill says remains). One more
	// rescoring pass; a trajectory with no other task's skill to borrow
	// is not distilled (metric contrast_unpaired).
	DistillBaseline string `json:"distill_baseline,omitempty"`
	// TermGradsEvery > 0 splits the update's gradient by loss term on
	// every TermGradsEvery-th optimizer step (metrics grad_norm_grpo,
	// grad_norm_opd, grad_norm_kl, grad_norm_entropy, grad_share_*,
	// grad_cos_*): one extra backward pass per term on those steps, and 4
	// bytes per parameter per term in host memory, so a diagnostic for
	// small policies. The update is unchanged. 0: off.
	TermGradsEvery int `json:"term_grads_every,omitempty"`
}

// EvalConfig is the periodic evaluation (plain prompts). Reported numbers
// swing with the protocol (one public ALFWorld checkpoint: 37% or 95% on a
// history-template detail), so every eval table prints it (Protocol).
type EvalConfig struct {
	Every int `json:"every"` // iterations between evaluations (0: start and end only)
	// PlateauPatience stops training early when eval-seen success has not
	// beaten its best (the base evaluation's included) for this many
	// evaluations in a row (needs every > 0; 0: run every iteration): how
	// a run goes "until GRPO plateaus". The reason is printed and kept in
	// state.json (stopped).
	PlateauPatience int `json:"plateau_patience,omitempty"`
	Episodes        int `json:"episodes"` // tasks of each eval split: the split's first ones, always the same
	// Temperature samples eval actions (0: greedy). The public ALFWorld
	// protocol samples at 0.4.
	Temperature float64 `json:"temperature"`
	// MaxSteps per eval episode (0: env.max_steps); the public ALFWorld
	// protocol allows 50.
	MaxSteps int `json:"max_steps,omitempty"`
	// Window is the history window of eval prompts in window mode (0:
	// rollout.window); the public ALFWorld protocol shows 2 steps.
	Window int `json:"window,omitempty"`
	// Seed fixes eval sampling (0: the run's seed), so a sampled eval of
	// one checkpoint gives the same episodes in every run.
	Seed int64 `json:"seed,omitempty"`
	// SampledTemperature, when positive, plays eval_seen a second time
	// sampled at this temperature (one sample per task, the eval seed)
	// beside the main evaluation: how the policy that training samples
	// from does, as against its greedy decoding (EvalPoint.SeenSampled).
	SampledTemperature float64 `json:"sampled_temperature,omitempty"`
}

// Config is a whole run. Zero fields take Default()'s values when loaded
// from a file.
type Config struct {
	// Name is the run's folder under RunsDir.
	Name string `json:"name"`
	// RunsDir holds the run folders.
	RunsDir string `json:"runs_dir"`
	// Algo is seed, grpo, static-skill, random-skill, seed-no-sft,
	// privileged-skill or oracle-other-skill.
	Algo string `json:"algo"`
	// Seed of every random choice of the run (tasks, sampling, splits).
	Seed    int64         `json:"seed"`
	Model   string        `json:"model"` // Hugging Face checkpoint folder of the base policy
	Env     EnvConfig     `json:"env"`
	Backend BackendConfig `json:"backend"`
	Stage1  Stage1Config  `json:"stage1"`
	// Iterations of stage 2; TasksPerIteration is B, Rollout.GroupSize G.
	Iterations int `json:"iterations"`
	// TasksPerIteration is B (public code: 16).
	TasksPerIteration int     `json:"tasks_per_iteration"`
	DataShare         float64 `json:"data_share"` // share of the training set used (sample-efficiency tables)
	// TrainTasks is the training set: this many tasks of the seeded shuffle
	// of the train split (0: all of it). DataShare keeps a share of it, so
	// a run that consumes fewer tasks than the split holds still trains on
	// fewer distinct tasks at a smaller share (the benchmarks set it to
	// what a full-share run consumes).
	TrainTasks int `json:"train_tasks,omitempty"`
	Rollout    struct {
		// Mode is "window" (each step's prompt: the task and the last
		// Window steps, verl-agent's) or "chat" (one growing conversation).
		Mode string `json:"mode"`
		// Window is the history length in window mode (public ALFWorld: 2).
		Window int `json:"window"`
		// GroupSize is G, trajectories per task (paper: 8).
		GroupSize int `json:"group_size"`
		// MaxTokens bounds each reply.
		MaxTokens int `json:"max_tokens"`
		// Temperature of rollout sampling; the trainer scores tokens at it.
		Temperature float64 `json:"temperature"`
		// InvalidPenalty per invalid step, against rl.reward_scale for
		// success (public code: 0.1 against 10).
		InvalidPenalty float64 `json:"invalid_penalty"`
		// Invalid is what makes a step invalid: "format" (the public SEED
		// code's: the reply lacks its action tag, or <think>…</think> with
		// require_think, or holds CJK characters; an action the
		// environment rejects is valid) or "env" ("" too: also actions
		// the environment rejects, seedctl's earlier definition). Rejected
		// actions are their own metric (rejected_rate) either way.
		Invalid string `json:"invalid,omitempty"`
		// RequireThink: with invalid "format", a reply without
		// <think>…</think> is invalid (the public code's require_think).
		RequireThink bool `json:"require_think,omitempty"`
		// Prompt is the window-mode prompt: "verl-agent" (the public SEED
		// code's verl-agent prompts: task line, past observations and
		// actions, "Now it's your turn…", <think> then <action>) or
		// "seedctl" ("" too: the environment's own template).
		Prompt string `json:"prompt,omitempty"`
		// SkillFormat is how teacher contexts carry skills: "sections"
		// (the public code's "**Episode-Level Skill**" / "**Critical-Step
		// Skill**" sections, after its task lines or before "Now it's your
		// turn", else at the end) or "line" ("" too: seedctl's one line
		// after the task line, which the tiny bases were trained on).
		SkillFormat string `json:"skill_format,omitempty"`
		// MaxInFlight bounds generation requests at once.
		MaxInFlight int `json:"max_in_flight"`
		// PlacesLine is the household prompt's places-line style ("": the
		// template's, "next"; "few"; "all"): the one the base model was trained
		// with (its recipe's corpus.places_line; seedctl run reads it
		// from a bootstrapped model).
		PlacesLine string `json:"places_line,omitempty"`
		// PlacesOrder is the order the places line names the places not
		// searched yet in: "room" ("" too; one fixed order per room, as
		// the base model's demonstrations) or "episode" (each episode
		// draws its own, so a group's samples are pointed at different
		// first places: exploration through the prompt).
		PlacesOrder string `json:"places_order,omitempty"`
	} `json:"rollout"`
	// SkillMode selects the skills in teacher contexts: episode_only
	// (public code), step_only or episode_step (the paper's description).
	SkillMode string `json:"skill_mode"`
	// CriticalSteps selects where step skills go: "return_variance" or
	// "llm" (the analyzer chooses).
	CriticalSteps string `json:"critical_steps"`
	// MaxStepSkills is K, the most step skills per trajectory (paper: 5).
	MaxStepSkills int `json:"max_step_skills"`
	// Gamma discounts step returns for the return-variance critical-step
	// selector (paper: 0.95).
	Gamma float64 `json:"gamma"`
	// AnalysisTokens bounds each self-analysis answer.
	AnalysisTokens int `json:"analysis_max_tokens"`
	// AnalysisRepair sends a self-analysis answer that does not parse back
	// once with the error (docs/algorithm.md's repair prompt; the GPU configs have
	// it). Off in the embedded default: the tiny household model repaired
	// none of 583 such answers over the v11 bench's SEED runs, and the
	// round wrote more tokens than the analysis itself.
	AnalysisRepair bool `json:"analysis_repair"`
	// AnalysisMinWords: skill texts with fewer words count as no skill (0:
	// skills.MinSkillWords, 5, the public code's hosted-analyzer test and
	// the embedded default's; the GPU presets 1: the public launchers'
	// policy_vllm self-analysis keeps any non-empty skill).
	AnalysisMinWords int        `json:"analysis_min_skill_words,omitempty"`
	RL               RLConfig   `json:"rl"`
	Eval             EvalConfig `json:"eval"`
	// RescoreMaxTokens bounds the padded tokens of one rescoring forward.
	RescoreMaxTokens int `json:"rescore_max_tokens"`
	// RetryFor bounds retrying a failing server or environment call.
	RetryFor Duration `json:"retry_for"`
}

// Duration reads "30s"-style strings in JSON.
type Duration time.Duration

func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration: want a string like \"30s\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// Default is the embedded default's configuration (household, tiny model,
// embedded server, oracle stage-1 analyzer) with the reference loss
// weights; Model is filled in by the caller (the bootstrapped base model).
func Default() Config {
	var c Config
	c.Name = "default"
	c.RunsDir = "runs"
	c.Algo = AlgoSEED
	c.Seed = 1
	// The embedded default's testbed (docs/experiments.md, "Towards a
	// testbed where SEED can act"): objects are mostly where their type is
	// usually kept (placement_prior 0.8: what one task's hindsight learns
	// carries to others, as in ALFWorld), and each episode's places line
	// names the places in its own order (rollout.places_order "episode"),
	// so a group's samples open in different places. Measured on the
	// recipe-v12 base over 200 eval_seen tasks: greedy 21.0%, first-action
	// agreement 0.30 at T = 1 with 6 distinct first places per group of 8,
	// 40% of groups failing together, the oracle's same-task skill 68.0%.
	// Config files state their own env.options and places_order (Load).
	c.Env = EnvConfig{Name: "household", Kind: "builtin", Options: map[string]string{"placement_prior": "0.8"}}
	c.Backend = BackendConfig{Kind: "embedded"}
	// Sized for a 2-core CPU (measured: a SEED iteration of 8 tasks × 8
	// trajectories takes 1–1.5 minutes there, the whole run 14–17); GPU configs scale these up.
	// Stage 1 is gentle: on the tiny household model, 2 epochs at 1e-3
	// took rollout invalid actions from 43% to 62%; on the recipe-v11 base,
	// 1 epoch at 2e-4 still cost acting (first-iteration rollout success
	// 15.6% against 23.4% without stage 1, final eval 20.5% against 31.5%)
	// and 5e-5 did not (25.0%, final 31.5%), with as many usable
	// self-written skills (docs/experiments.md). Each 8,192-token step runs
	// as micro-batches of at most 2,048 padded tokens of similar length:
	// stage-1 rows range from ~100 acting tokens to ~1,000 of trajectory,
	// and one padded batch made a stage-1-only run take 174 s against 113
	// s (the same losses; README, "Training").
	c.Stage1 = Stage1Config{Episodes: 64, Analyzer: AnalyzerConfig{Kind: "oracle", MaxTokens: 512}, Epochs: 1, LR: 5e-5, BatchTokens: 8192, MicroBatchTokens: 2048, MaxLen: 4096, ActingReplay: 2,
		// All of the skill JSON (ours): the default's episode_step mode
		// needs a policy that writes step skills.
		Targets: TargetsAll}
	// 8 tasks: at the earlier tiny policies' ~5% rollout success, 4 tasks
	// × 8 trajectories held a win in about one iteration of three (the
	// recipe-v11 policy samples 10–25%).
	// Eight iterations: on the default base (recipe v12, 16.0% eval-seen)
	// four took SEED to 21.5% and 26.5% (seeds 1, 2) and GRPO to 24.0% and
	// 19.0%; eight took SEED to 26.5% and 28.0% in 14–17 minutes here and
	// GRPO to 27.0% and 26.0% (docs/experiments.md). The bench keeps four
	// (benchmarks.EmbeddedIterations).
	c.Iterations = 8
	c.TasksPerIteration = 8
	c.DataShare = 1
	c.Env.MaxSteps = 20
	c.Rollout.Mode = rollout.ModeWindow
	c.Rollout.Window = 3
	c.Rollout.GroupSize = 8
	c.Rollout.MaxTokens = 48
	c.Rollout.Temperature = 1
	// The public code's invalid step and penalty: a reply without its
	// <action>…</action> block (or with CJK characters) is invalid and
	// costs 0.1 against a success reward of 10; an action the environment
	// rejects ("Nothing happens.") is a valid step, counted as
	// rejected_rate. Under seedctl's earlier definition (rejected actions
	// invalid too) the same penalty took the policy from 24.5% to 0.0%
	// greedy eval-seen in eight iterations, SEED and GRPO alike: in groups
	// where every trajectory failed, std normalisation over step rows made
	// the penalty a full-size advantage and the policy stopped taking
	// things (docs/results.md). Under the public definition the tiny
	// policy's replies are malformed at 0.0–0.7% of steps and the penalty
	// changes little (docs/experiments.md, "The committed base").
	c.Rollout.Invalid = rollout.InvalidFormat
	c.Rollout.InvalidPenalty = 0.1
	c.Rollout.MaxInFlight = 64
	c.Rollout.PlacesOrder = rollout.PlacesOrderEpisode
	c.SkillMode = string(skills.EpisodeStep)
	c.CriticalSteps = CriticalReturnVariance
	c.MaxStepSkills = skills.DefaultMaxStepSkills
	c.Gamma = 0.95
	c.AnalysisTokens = 256
	// The reference loss weights. The learning rate is the tiny household
	// policy's, measured from the committed base (the reference 1e-6 is
	// for 1.5B–7B models): greedy eval_seen gained +5.3 points on average
	// over eight iterations at 2e-4 (seven seeds, 0 to +11.5) against +2.3
	// at 3e-5 (three seeds, each lower than at 2e-4); one run at 4e-4
	// broke the policy (docs/experiments.md, "A higher stage-2 learning
	// rate").
	//
	// The update follows the public SEED code (verl-agent's GRPO): step
	// rows, reward 10·success − 0.1 per invalid step, 256 rows per
	// mini-batch (its ALFWorld value; about 4 optimizer steps per
	// iteration here), dual-clip c=3, entropy bonus 0.001, every row kept.
	//
	// One deviation, labelled in the run's recipe: GiGPO's step-level
	// advantage at its reference weight 1 (rl.step_group_weight). The
	// episode's outcome credits every step of it alike; steps of a group
	// that act from the same state (93–97% of this policy's step rows
	// share one, 7–17 to a state) are credited by what followed them.
	// From the committed base, on `just run`'s seeds 1–3 it took the
	// greedy eval_seen gain from +3.0, +9.0, +8.0 to +5.5, +14.0, +15.5;
	// over eight seeds from +4.7 to +6.1 (paired +1.4, within noise;
	// docs/experiments.md, "GiGPO's step-level advantage").
	c.RL = RLConfig{Lambda: 0.01, Beta: 5, KLCoef: 0.01, KLClamp: 10, ClipEps: 0.2, LR: 2e-4, WeightDecay: 0, ClipNorm: 1,
		MiniBatchRows: 256, MicroBatchTokens: 8192, MaxRefusals: 3,
		Advantage: AdvStepRows, RewardScale: 10, Outcome: OutcomeSuccess, AdvEps: 1e-6, AdvNorm: AdvNormStd, ClipRatioC: 3, EntropyCoef: 0.001,
		StepGroupWeight: 1, PGCoef: 1, JSDBeta: 1}
	// 200 tasks per split for the base and the final eval: a 50-task eval's
	// success moves by ±6 points (one binomial std at 20%) between
	// equivalent checkpoints, 200 tasks' by ±3, and the run's headline is
	// the difference of two of them. Each 200-task eval takes about 80 s
	// here. The bench grid keeps 50 (benchmarks.EmbeddedEvalEpisodes).
	// Beside the greedy eval, eval_seen sampled at T = 1: the policy
	// training samples from (greedy decoding moved about twice as much as
	// sampling in the committed runs).
	c.Eval = EvalConfig{Every: 0, Episodes: 200, SampledTemperature: 1}
	c.RescoreMaxTokens = 16384
	c.RetryFor = Duration(2 * time.Minute)
	return c
}

// Load reads a JSON config over Default(); unknown fields are errors that
// name the field.
func Load(path string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("reading config: %w", err)
	}
	c := Default()
	// The embedded default's environment setting is not inherited: a
	// file (a GPU config, or a run's own config.json, where these are
	// written when set) says what its environment and prompts are, and an
	// older run's file without them means the environment's defaults.
	c.Env.Options, c.Rollout.PlacesOrder = nil, ""
	// Likewise the invalid-step definition and the sampled eval (both
	// written only when set): a file without them means seedctl's
	// earlier definition and no sampled eval, as when it was written.
	c.Rollout.Invalid, c.Eval.SampledTemperature = "", 0
	// And the embedded default's departures from the public update: a GPU
	// preset, or a run written without them, trains as the public code.
	c.RL.dropDeviations()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			line := bytes.Count(b[:se.Offset], []byte("\n")) + 1
			return Config{}, fmt.Errorf("config %s line %d: %w", path, line, err)
		}
		return Config{}, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// UsesSFT says whether the algorithm runs stage 1.
// Static skills come from the stage-1 analyzer itself, so that baseline
// needs no skill-writing policy.
func (c Config) UsesSFT() bool { return c.Algo == AlgoSEED || c.Algo == AlgoRandomSkill }

// UsesStage1Analyzer says whether the run calls the stage-1 analyzer: to
// label stage 1's SFT data, or as static-skill's frozen skill writer.
func (c Config) UsesStage1Analyzer() bool { return c.UsesSFT() || c.Algo == AlgoStaticSkill }

// UsesSelfAnalysis says whether the policy writes stage 2's skills.
func (c Config) UsesSelfAnalysis() bool {
	switch c.Algo {
	case AlgoSEED, AlgoSEEDNoSFT, AlgoRandomSkill:
		return true
	}
	return false
}

// analysisMinWords is the self-analysis' minimum skill length in words.
func (c Config) analysisMinWords() int {
	if c.AnalysisMinWords <= 0 {
		return skills.MinSkillWords
	}
	return c.AnalysisMinWords
}

// Distills says whether stage 2 has a distillation term.
func (c Config) Distills() bool { return c.Algo != AlgoGRPO }

// learnerSpec is what the learner loads: the policy and reference
// checkpoints, trained at the rollouts' sampling temperature.
func (c Config) learnerSpec(policy, reference string) LearnerSpec {
	return LearnerSpec{Policy: policy, Reference: reference, Teacher: c.RL.TeacherModel, RL: c.RL, Seed: uint64(c.Seed), Temperature: c.Rollout.Temperature}
}

// evalRolloutConfig is the rollout config of an evaluation: one sample
// per task at the eval temperature, the eval's step limit and window.
func (c Config) evalRolloutConfig() rollout.Config {
	seed := c.Eval.Seed
	if seed == 0 {
		seed = c.Seed
	}
	r := c.rolloutConfig(seed)
	r.GroupSize, r.Temperature = 1, c.Eval.Temperature
	if c.Eval.Window > 0 {
		r.Window = c.Eval.Window
	}
	if c.Eval.MaxSteps > 0 {
		r.EnvOptions = r.EnvOptions.With("max_steps", fmt.Sprint(c.Eval.MaxSteps))
		r.MaxSteps = c.Eval.MaxSteps
	}
	return r
}

// sampledEvalRolloutConfig is the second, sampled evaluation of eval_seen
// (Eval.SampledTemperature).
func (c Config) sampledEvalRolloutConfig() rollout.Config {
	r := c.evalRolloutConfig()
	r.Temperature = c.Eval.SampledTemperature
	return r
}

// EvalProtocol describes how the evaluation plays, for every table that
// reports its numbers.
func (c Config) EvalProtocol() string {
	r := c.evalRolloutConfig()
	how := "greedy"
	if r.Temperature > 0 {
		how = fmt.Sprintf("sampled at T=%g (seed %d)", r.Temperature, c.evalSeed())
	}
	if t := c.Eval.SampledTemperature; t > 0 {
		how += fmt.Sprintf("; eval_seen also sampled at T=%g (seed %d)", t, c.evalSeed())
	}
	steps := r.EnvOptions["max_steps"]
	if steps == "" {
		steps = "the env's"
	}
	prompt := "chat prompts (whole history)"
	if r.Mode == rollout.ModeWindow {
		prompt = fmt.Sprintf("window prompts (%d past steps)", r.Window)
	}
	where := ""
	if c.Env.Kind == "agentgym" {
		if splits, err := c.Env.RemoteSplits(); err == nil {
			where = " (server indices: " + describeSplits(splits) + ")"
		}
	}
	return fmt.Sprintf("eval protocol: %s, the first %d tasks of eval_seen and eval_unseen%s, %s, at most %s steps, %s, plain prompts (no skills)",
		c.Env.Name, c.Eval.Episodes, where, how, steps, prompt)
}

func (c Config) evalSeed() int64 {
	if c.Eval.Seed != 0 {
		return c.Eval.Seed
	}
	return c.Seed
}

// stage1RolloutConfig is stage 1's collection: the rollouts' config with
// stage1's temperature, window and step limit where set.
func (c Config) stage1RolloutConfig(seed int64) rollout.Config {
	r := c.rolloutConfig(seed)
	if c.Stage1.Temperature > 0 {
		r.Temperature = c.Stage1.Temperature
	}
	if c.Stage1.Window > 0 {
		r.Window = c.Stage1.Window
	}
	if c.Stage1.MaxSteps > 0 {
		r.EnvOptions = r.EnvOptions.With("max_steps", fmt.Sprint(c.Stage1.MaxSteps))
		r.MaxSteps = c.Stage1.MaxSteps
	}
	return r
}

// rolloutConfig is the rollout package's config for one iteration.
func (c Config) rolloutConfig(seed int64) rollout.Config {
	r := rollout.DefaultConfig()
	r.Mode, r.Window, r.GroupSize = c.Rollout.Mode, c.Rollout.Window, c.Rollout.GroupSize
	r.PlacesLine, r.PlacesOrder = c.Rollout.PlacesLine, c.Rollout.PlacesOrder
	r.MaxTokensPerTurn, r.Temperature, r.InvalidPenalty = c.Rollout.MaxTokens, c.Rollout.Temperature, c.Rollout.InvalidPenalty
	r.Invalid, r.RequireThink, r.SkillFormat, r.PromptStyle = c.Rollout.Invalid, c.Rollout.RequireThink, c.Rollout.SkillFormat, c.Rollout.Prompt
	if c.Rollout.MaxInFlight > 0 {
		r.MaxInFlight = c.Rollout.MaxInFlight
	}
	r.Seed = seed
	r.EnvOptions = envadapters.Options(c.Env.Options)
	if c.Env.MaxSteps > 0 {
		r.EnvOptions = r.EnvOptions.With("max_steps", fmt.Sprint(c.Env.MaxSteps))
		r.MaxSteps = c.Env.MaxSteps
	}
	return r
}

// Stage-2 learning-rate schedules (RLConfig.LRSchedule).
const (
	LRConstant = "constant"
	LRCosine   = "cosine"
)

// StepLR is the learning rate of stage 2's mini-batch b (0-based) of nb in
// iteration k (1-based), the run's s-th mini-batch (0-based, refused ones
// counted). It depends on the step's place in the run's plan, not on how
// many steps were taken, so a resumed run continues it exactly.
func (c Config) StepLR(k, b, nb, s int) float64 {
	rl := c.RL
	if s < rl.WarmupSteps {
		return rl.LR * float64(s+1) / float64(rl.WarmupSteps+1)
	}
	if rl.LRSchedule != LRCosine || c.Iterations < 1 {
		return rl.LR
	}
	p := min(1, (float64(k-1)+float64(b)/float64(max(1, nb)))/float64(c.Iterations))
	return rl.LR * (rl.MinLRFrac + (1-rl.MinLRFrac)*0.5*(1+math.Cos(math.Pi*p)))
}

// advantageParams are the run's GRPO advantage settings.
func (c Config) advantageParams() AdvantageParams {
	return AdvantageParams{Mode: c.RL.Advantage, Norm: c.RL.AdvNorm, Outcome: c.RL.Outcome, Scale: c.RL.RewardScale, Penalty: c.Rollout.InvalidPenalty, Eps: c.RL.AdvEps, RejectedCost: c.RL.RejectedCost,
		StepWeight: c.RL.StepGroupWeight, StepKey: c.RL.StepGroupKey, StepRejectedCost: c.RL.StepRejectedCost, Gamma: c.Gamma}
}

// referenceMiniBatchRows is the public SEED scripts' ppo_mini_batch_size
// for an environment: 256 on ALFWorld (and the household stand-in), 64 on
// WebShop; 0 where there is no public script.
func referenceMiniBatchRows(env string) int {
	switch env {
	case "alfworld", "household":
		return 256
	case "webshop":
		return 64
	}
	return 0
}

// Recipe lists the resolved training recipe, one setting per line, each
// marked with where its value comes from when it is a reference value
// ("public code": the SEED authors' verl-agent scripts; "paper": the SEED
// paper; "verl": verl's defaults) or "ours" otherwise.
func (c Config) Recipe() []string {
	src := func(ok bool, source string) string {
		if ok {
			return " (" + source + ")"
		}
		return " (ours)"
	}
	rl := c.RL
	var lines []string
	add := func(format string, a ...any) { lines = append(lines, fmt.Sprintf(format, a...)) }
	add("algo %s, %d iterations × %d tasks × %d trajectories", c.Algo, c.Iterations, c.TasksPerIteration, c.Rollout.GroupSize)
	if c.Algo == AlgoPrivilegedSkill {
		add("teacher: the oracle's advice about the scripted expert solving the same task, a privileged teacher (ours: the mechanism ladder's top rung)")
	}
	if c.Algo == AlgoTransferSkill {
		add("teacher: the oracle's advice about the scripted expert solving another training task of the same family and goal object (ours: transferable advice)")
	}
	if rl.TeacherModel != "" {
		add("teacher model: %s, frozen (ours; the paper's teacher is the current policy)", rl.TeacherModel)
	}
	if rl.TeacherContext == TeacherContextPlain {
		add("teacher context: the plain context, every trained token distilled (standard on-policy distillation; the paper's inserts the skill)")
	}
	if rl.PGCoef != 1 {
		add("policy-gradient (GRPO) term weighted %g (ours; 0: distillation alone)", rl.PGCoef)
	}
	if rl.DistillForm == DistillFull {
		k := "the whole vocabulary"
		if rl.DistillTopK > 0 {
			k = fmt.Sprintf("the teacher's top %d tokens and a tail bucket", rl.DistillTopK)
		}
		div := "the exact per-token reverse KL(πθ ‖ πT)"
		switch {
		case rl.JSDBeta == 0:
			div = "the exact per-token forward KL(πT ‖ πθ)"
		case rl.JSDBeta < 1:
			div = fmt.Sprintf("the per-token generalized JSD at β %g (TRL's GKD)", rl.JSDBeta)
		}
		add("distillation term: %s over %s (on-policy distillation; the paper's is the gated NLL σ(β·Δ)·Δ)", div, k)
	}
	if rl.DistillForm == "signed" {
		add("distillation term: the signed teacher shift −Δ̃·∇ℓθ, |Δ̃| ≤ %g (ours; the paper's is the gated NLL σ(β·Δ)·Δ)", map[bool]float64{true: 5, false: rl.DeltaClip}[rl.DeltaClip == 0])
	}
	if rl.DistillBaseline == DistillBaselineShuffled {
		add("teacher shift: the contrastive gap ℓᵀ − ℓᴮ against another task's skill in the same places (ours; the paper's is ℓᵀ − ℓθ)")
	}
	if rl.TermGradsEvery > 0 {
		add("gradient split by loss term every %d optimizer steps (diagnostics: one extra backward pass per term)", rl.TermGradsEvery)
	}
	add("advantage %s%s, normalisation %s%s, outcome %s%s", rl.Advantage, src(rl.Advantage == AdvStepRows, "public code"),
		rl.AdvNorm, src(rl.AdvNorm == AdvNormStd || c.Env.Name == "webshop", "public code"), rl.Outcome, src(rl.Outcome == OutcomeSuccess, "public code"))
	ref, hasRef := publicReference(c.Env.Name)
	if hasRef {
		add("reward %g·outcome − %g per invalid step%s", rl.RewardScale, c.Rollout.InvalidPenalty, src(rl.RewardScale == 10 && c.Rollout.InvalidPenalty == ref.invalidPenalty, ref.launcher))
		add("%d tasks per iteration%s, window %d%s, at most %d steps%s", c.TasksPerIteration, src(c.TasksPerIteration == ref.tasksPerIteration, ref.launcher),
			c.Rollout.Window, src(c.Rollout.Mode == rollout.ModeWindow && c.Rollout.Window == ref.window, ref.launcher), c.Env.MaxSteps, src(c.Env.MaxSteps == ref.maxSteps, ref.launcher))
	} else {
		add("reward %g·outcome − %g per invalid step%s", rl.RewardScale, c.Rollout.InvalidPenalty, src(rl.RewardScale == 10 && c.Rollout.InvalidPenalty == 0.1, "public code"))
	}
	if rl.RejectedCost != 0 {
		add("advantage − %g on every step the environment rejected, after the normalisation (ours)", rl.RejectedCost)
	}
	if rl.StepGroupWeight > 0 {
		same := "the same state"
		if rl.StepGroupKey == StepKeyState {
			same = "the same observation and environment state line"
		}
		add("+ %g × GiGPO's step-level advantage: discounted returns (γ %g) normalised over the steps of a group that act from %s (GiGPO; not the public SEED code)", rl.StepGroupWeight, c.Gamma, same)
		if rl.StepRejectedCost != 0 {
			add("step-level returns charge %g for each action the environment rejected (ours)", rl.StepRejectedCost)
		}
	}
	if c.Rollout.Invalid == rollout.InvalidFormat {
		think := ""
		if c.Rollout.RequireThink {
			think = ", <think>…</think>"
		}
		add("invalid step: the reply lacks its action tag%s or holds CJK characters (public code); actions the environment rejects are valid, counted as rejected_rate", think)
	} else {
		add("invalid step: no action read from the reply, or one the environment rejects (seedctl's; the public code counts only the reply's format)")
	}
	if rl.MiniBatchRows > 0 {
		most := c.TasksPerIteration * c.Rollout.GroupSize * max(1, c.Env.MaxSteps)
		order := "in order"
		if rl.Shuffle {
			order = "shuffled"
		}
		mbSrc := src(rl.MiniBatchRows == referenceMiniBatchRows(c.Env.Name), "public code")
		if hasRef {
			mbSrc = src(rl.MiniBatchRows == ref.miniBatchRows, ref.launcher)
		}
		add("%d rows per mini-batch%s, %s, one pass: up to %d updates per iteration (%d step rows at most)", rl.MiniBatchRows,
			mbSrc, order, (most+rl.MiniBatchRows-1)/rl.MiniBatchRows, most)
	} else {
		add("%d mini-batches per iteration (a seeded interleaved split; not the reference's semantics)", rl.MiniBatches)
	}
	if rl.Agg == "verl" {
		add("loss terms averaged as verl does: token mean per %d-row micro-batch, over micro-batches and ranks (public code)", rl.MicroBatchRows)
	} else {
		add("loss terms averaged over the whole mini-batch's tokens (ours; verl averages per micro-batch)")
	}
	entSrc, klSrc := src(rl.EntropyCoef == 0.001, "public code"), src(rl.KLCoef == 0.01, "paper")
	if hasRef {
		entSrc, klSrc = src(rl.EntropyCoef == ref.entropyCoef, ref.launcher), src(rl.KLCoef == ref.klCoef, ref.launcher)
	}
	add("PPO clip ε %g%s, dual-clip c %g%s, entropy bonus %g%s", rl.ClipEps, src(rl.ClipEps == 0.2, "public code"),
		rl.ClipRatioC, src(rl.ClipRatioC == 3, "public code"), rl.EntropyCoef, entSrc)
	if hasRef && rl.WarmupSteps == 0 {
		add("no learning-rate warm-up (ours: %s warms up over the first 10%% of its trainer steps, lr_warmup_steps_ratio 0.1; seedctl's rl.warmup_steps counts mini-batches)", ref.launcher)
	}
	add("λ %g%s, β %g%s, KL %g%s (k3, each token's capped at %g%s), lr %g%s, weight decay %g%s, rows with zero advantage %s%s", rl.Lambda, src(rl.Lambda == 0.01, "paper"), rl.Beta, src(rl.Beta == 5, "paper"),
		rl.KLCoef, klSrc, rl.KLClamp, src(rl.KLClamp == 10, "verl"), rl.LR, src(rl.LR == 1e-6, "paper"), rl.WeightDecay, src(rl.WeightDecay == 0.01, "public code"), map[string]string{"": "kept", DropZeroAdvantage: "dropped", DropNoSignal: "dropped unless distilled"}[rl.DropFlat], src(rl.DropFlat == "", "verl"))
	if c.Rollout.Prompt == rollout.PromptVerlAgent {
		add("prompts: verl-agent's (task line, last %d observations and actions, \"Now it's your turn\", <think> then <action>) (public code)", c.Rollout.Window)
	} else {
		add("prompts: seedctl's %s template (ours)", c.Rollout.Mode)
	}
	if c.Rollout.SkillFormat == rollout.SkillFormatSections {
		add("skills in teacher contexts: the public code's sections (Episode-Level / Critical-Step Skill) after its task lines or before \"Now it's your turn\", else at the end (public code)")
	} else {
		add("skills in teacher contexts: one line after the task line, step advice before the action request (ours: what the tiny bases read)")
	}
	if c.SkillMode == string(skills.EpisodeOnly) {
		add("skill mode %s (public code): the analysis asks for episode_summary and episode_skill alone, no critical steps", c.SkillMode)
	} else {
		add("skill mode %s, critical steps %s%s (K %d)", c.SkillMode, c.CriticalSteps, src(c.CriticalSteps == CriticalLLM, "public code"), c.MaxStepSkills)
	}
	if c.UsesSelfAnalysis() {
		repair := "no repair round (public launchers' policy_vllm)"
		if c.AnalysisRepair {
			repair = "one repair round for an answer without a usable skill (the public hosted-analyzer path's retry)"
		}
		length := fmt.Sprintf("skills of %d words or more (public hosted-analyzer path)", c.analysisMinWords())
		if c.analysisMinWords() <= 1 {
			length = "skills of any length (public launchers' policy_vllm)"
		}
		add("self-analysis: greedy, up to %d tokens%s, %s, %s; answers read as the public parser reads them (fences, trailing commas, Python-literal dicts) (public code)",
			c.AnalysisTokens, src(c.AnalysisTokens == 4096, "public launchers"), repair, length)
	}
	if c.UsesSFT() {
		add("stage 1: %d trajectories, targets %s%s, %g epochs, lr %g%s, examples up to %d tokens, acting replay %g per skill example%s, analyzer %s",
			c.Stage1.Episodes, c.Stage1.Targets, src(c.Stage1.Targets == TargetsEpisode, "public code"), c.Stage1.Epochs, c.Stage1.LR, src(c.Stage1.LR == 5e-6, "public SFT launcher"), c.Stage1.MaxLen,
			c.Stage1.ActingReplay, src(c.Stage1.ActingReplay == 0, "public code"), c.Stage1.Analyzer.Kind)
		if c.Stage1.Optimizer == Stage1OptimizerPublic {
			o := c.Stage1.sftOptions(0)
			add("stage 1 optimizer: AdamW β2 %g, %g%% warm-up, cosine to 0, %d sequences per step, the mean of their token means (public sft_trainer.yaml)", o.Beta2, 100*o.WarmupFrac, o.BatchSequences)
		} else {
			add("stage 1 optimizer: AdamW β2 0.999, 5%% warm-up, cosine to 0.1·lr, length-sorted batches of %d tokens, one token mean (ours; public sft_trainer.yaml: β2 0.95, 10%% warm-up, cosine to 0, 8 sequences per step, the mean of their token means: stage1.optimizer public)", c.Stage1.BatchTokens)
		}
		if c.Stage1.HeldOut > 0 {
			add("stage 1 held out: at least %d trajectories (whole groups), measured before and after the fine-tuning (ours)", c.Stage1.HeldOut)
		}
		s1 := c.stage1RolloutConfig(0)
		steps := "the env's"
		if s1.MaxSteps > 0 {
			steps = fmt.Sprint(s1.MaxSteps)
		}
		if sref, ok := publicSFTReference(c.Env.Name); ok {
			add("stage 1 collection: T=%g, window %d, at most %s steps%s; %d trajectories%s, %g epochs%s, examples up to %d tokens%s", s1.Temperature, s1.Window, steps,
				src(s1.Temperature == sref.stage1Temp && s1.Window == sref.stage1Window && s1.MaxSteps == sref.stage1MaxSteps, sref.sft),
				c.Stage1.Episodes, src(c.Stage1.Episodes == sref.stage1Eps, sref.sft), c.Stage1.Epochs, src(c.Stage1.Epochs == sref.stage1Epochs, sref.sft),
				c.Stage1.MaxLen, src(c.Stage1.MaxLen == sref.stage1MaxLen, sref.sft))
		} else {
			add("stage 1 collection: T=%g, window %d, at most %s steps%s", s1.Temperature, s1.Window, steps,
				src(s1.Temperature == 0.4 && s1.Window == 5 && s1.MaxSteps == 30, "public SFT launchers"))
		}
	} else {
		add("stage 1: none (algo %s)", c.Algo)
	}
	switch {
	case hasRef:
		add("%s%s", c.EvalProtocol(), src(c.Eval.Temperature == ref.evalTemp && c.Eval.Episodes == ref.evalEpisodes, ref.launcher+": T 0.4 sampled on its 512 validation questions"))
	case c.Env.Name == "alfworld":
		add("%s (ours; the public ALFWorld launcher evaluates every 5 iterations on 128 validation games sampled at T 0.4, _common/alfworld.sh)", c.EvalProtocol())
	case c.Env.Name == "household":
		add("%s (ours)", c.EvalProtocol())
	default:
		add("%s", c.EvalProtocol())
	}
	return lines
}
