package trainer

import (
	"errors"
	"fmt"
	"math"
	"runtime/debug"
	"sort"
	"time"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"
)

// RLSequence is one training row of the RL step. Position k of every
// per-position slice refers to IDs[k], scored given IDs[:k]; position 0 is
// never trained.
type RLSequence struct {
	// ID names the row in logs (trajectory and step).
	ID  string
	IDs []int
	// Train marks the sampled response tokens: the policy-gradient tokens.
	Train []bool
	// Advantage is the GRPO advantage of the row, broadcast to every
	// trained token, unless Advantages is set.
	Advantage float64
	// Advantages, when set, gives each trained position its own advantage
	// (a chat-mode sequence holds many steps, each a GRPO row of its own).
	Advantages []float32
	// OldLogP is ℓold, the log-prob the tokens were sampled with.
	OldLogP []float32
	// RefLogP is the frozen reference policy's log-prob (for the k3 KL);
	// nil leaves the row out of the KL term.
	RefLogP []float32
	// TeacherLogP is ℓᵀ, the log-prob with the hindsight skill in context;
	// Distill marks the tokens distilled (a subset of Train). Both nil: no
	// distillation for this row.
	TeacherLogP []float32
	Distill     []bool
	// BaselineLogP, when set, is the log-prob with another task's skill
	// in context (the contrastive gap, ours): the teacher's shift is then
	// Δ = ℓᵀ − ℓᴮ rather than ℓᵀ − ℓθ, which cancels what inserting any
	// skill text does to the log-probs and keeps what this skill says.
	// Read only at distilled positions.
	BaselineLogP []float32
	// TeacherDist, read by the full-distribution form (DistillFull),
	// holds the teacher's next-token distribution at every distilled
	// position (nil elsewhere); TeacherLogP still gives the sampled
	// token's log-prob for the shift statistics.
	TeacherDist []*TokenDist
}

// RLConfig weighs the loss L = L_GRPO + λ·L_OPD + c_KL·KL (docs/algorithm.md).
type RLConfig struct {
	ClipEps float64 // ε_c of the clipped ratio (0.2)
	Lambda  float64 // λ, weight of the gated distillation loss (0.01)
	Beta    float64 // β of the gate σ(β·Δ) (5)
	KLCoef  float64 // c_KL (0.01)
	// MicroBatchTokens bounds the padded tokens of one forward/backward;
	// gradients accumulate across micro-batches into one optimizer step.
	MicroBatchTokens int
	ClipNorm         float64 // gradient-norm clipping (0: none)
	// Temperature is the rollouts' sampling temperature: ℓθ (and the
	// entropy) are log-probs of softmax(logits/Temperature), the
	// distribution the tokens were drawn from, as ℓold, ℓᵀ and the
	// reference's must be (Model.RescoreAt). 0 and 1: the logits as they are.
	Temperature float64
	// ClipRatioC is dual-clip's c (verl's clip_ratio_c, reference 3): for
	// A < 0 the clipped loss is capped at −c·A, so a token whose ratio has
	// run far above 1 (r > c) stops pushing the update. 0: no dual clip.
	ClipRatioC float64
	// EntropyCoef weighs an entropy bonus: the loss gains −coef·H̄, H̄ the
	// token-mean entropy of the policy over trained tokens (verl's
	// entropy_coeff, reference 0.001). 0: none (and no gradient through H).
	EntropyCoef float64
	// Agg is how the loss terms are averaged: AggTokenMean ("" too: each
	// term's token mean over the whole mini-batch, every rank's tokens
	// counted) or AggVerl (verl's: each term's token mean within a
	// micro-batch of MicroBatchRows rows, divided by the micro-batches,
	// then averaged over ranks, as gradient accumulation and FSDP do).
	Agg string
	// MicroBatchRows is verl's ppo_micro_batch_size_per_gpu, the rows of
	// one AggVerl micro-batch (in order); each is still run in pieces of
	// at most MicroBatchTokens for memory, which leaves its means alone.
	MicroBatchRows int
	// KLClamp caps each token's k3 KL: above it the term counts as KLClamp
	// with zero gradient, as verl's kl_penalty("low_var_kl") clamps to
	// [−10, 10] (reference 10; k3 is never negative). 0: no cap.
	KLClamp float64
	// DecisionProb: distilled tokens the policy gives less probability
	// than this count as decisions in RLStats' Decision* figures
	// (0: DefaultDecisionProb). Diagnostics only; the loss ignores it.
	DecisionProb float64
	// DistillForm is the distillation term's form: DistillGatedNLL (""
	// too: the paper's g·Δ with g = σ(β·Δ) held constant, whose gradient
	// −g·∇ℓθ raises every distilled sampled token, more where the teacher
	// agrees), DistillSigned (ours, off by default: −Δ̃·∇ℓθ, raising the
	// tokens the teacher endorses and lowering those it rejects) or
	// DistillFull (on-policy distillation's exact per-token reverse KL
	// Σ_v πθ(v)·(log πθ(v) − log πT(v)) over the teacher's distribution,
	// RLSequence.TeacherDist: no sampling noise in the signal).
	DistillForm string
	// DeltaClip bounds |Δ| in the signed form (0: DefaultDeltaClip).
	DeltaClip float64
	// JSDBeta is the full form's divergence, TRL's GKDTrainer beta: 1
	// the reverse KL (on-policy distillation's; 0 is read as 1, the
	// default), between 0 and 1 the generalized Jensen–Shannon
	// divergence, and JSDForward (any negative value) the forward KL.
	JSDBeta float64
	// PGCoef weighs the clipped policy-gradient (GRPO) term: 1 in
	// DefaultRLConfig; 0 trains on the other terms alone (distillation
	// without outcome reward: the on-policy distillation control).
	PGCoef float64
	// TermGradsEvery > 0 splits the gradient by loss term (RLStats'
	// TermGrads) on every TermGradsEvery-th optimizer step: one extra
	// backward pass per active term over the mini-batch, and 4 bytes per
	// parameter per term on the host. Diagnostics; the update is the same.
	TermGradsEvery int
}

// Loss aggregations (RLConfig.Agg).
const (
	AggTokenMean = "token_mean"
	AggVerl      = "verl"
)

// Distillation forms (RLConfig.DistillForm).
const (
	DistillGatedNLL = "gated_nll"
	DistillSigned   = "signed"
	DistillFull     = "full"
)

// JSDForward is RLConfig.JSDBeta's forward KL (TRL's beta 0: a zero
// JSDBeta is the reverse KL, the default).
const JSDForward = -1

// jsdBeta is the β distillKL takes: 1 (reverse KL) for 0, 0 (forward
// KL) for JSDForward.
func (c RLConfig) jsdBeta() float64 {
	switch {
	case c.JSDBeta == 0:
		return 1
	case c.JSDBeta < 0:
		return 0
	}
	return c.JSDBeta
}

// DefaultDeltaClip is RLConfig.DeltaClip's default: a teacher shift
// beyond 5 nats weighs as 5.
const DefaultDeltaClip = 5.0

// DefaultDecisionProb is RLConfig.DecisionProb's default.
const DefaultDecisionProb = 0.9

// DefaultRLConfig is the SEED reference setting.
func DefaultRLConfig() RLConfig {
	return RLConfig{ClipEps: 0.2, Lambda: 0.01, Beta: 5, KLCoef: 0.01, KLClamp: 10, MicroBatchTokens: 8192, ClipNorm: 1, ClipRatioC: 3, EntropyCoef: 0.001, PGCoef: 1}
}

// Validate names the first bad field.
func (c RLConfig) Validate() error {
	switch {
	case c.ClipEps <= 0 || c.ClipEps >= 1:
		return fmt.Errorf("rl config: clip_eps %v must be in (0, 1)", c.ClipEps)
	case c.Lambda < 0 || math.IsNaN(c.Lambda):
		return fmt.Errorf("rl config: lambda %v must be >= 0", c.Lambda)
	case c.Beta <= 0:
		return fmt.Errorf("rl config: beta %v must be positive", c.Beta)
	case c.KLCoef < 0:
		return fmt.Errorf("rl config: kl_coef %v must be >= 0", c.KLCoef)
	case c.Agg != "" && c.Agg != AggTokenMean && c.Agg != AggVerl:
		return fmt.Errorf("rl config: agg %q: want %q or %q", c.Agg, AggTokenMean, AggVerl)
	case c.Agg == AggVerl && c.MicroBatchRows < 1:
		return fmt.Errorf("rl config: agg %q needs micro_batch_rows >= 1 (verl's ppo_micro_batch_size_per_gpu)", AggVerl)
	case c.KLClamp < 0 || math.IsNaN(c.KLClamp):
		return fmt.Errorf("rl config: kl_clamp %v must be >= 0 (0: no cap)", c.KLClamp)
	case c.MicroBatchTokens < 2:
		return fmt.Errorf("rl config: micro_batch_tokens %d must be at least 2", c.MicroBatchTokens)
	case c.ClipNorm < 0:
		return fmt.Errorf("rl config: clip_norm %v must be >= 0", c.ClipNorm)
	case c.Temperature < 0 || math.IsNaN(c.Temperature):
		return fmt.Errorf("rl config: temperature %v must be >= 0", c.Temperature)
	case c.ClipRatioC != 0 && !(c.ClipRatioC > 1):
		return fmt.Errorf("rl config: clip_ratio_c %v must be 0 (off) or above 1", c.ClipRatioC)
	case c.EntropyCoef < 0 || math.IsNaN(c.EntropyCoef):
		return fmt.Errorf("rl config: entropy_coef %v must be >= 0", c.EntropyCoef)
	case c.DecisionProb < 0 || c.DecisionProb > 1:
		return fmt.Errorf("rl config: decision_prob %v must be in [0, 1]", c.DecisionProb)
	case c.DistillForm != "" && c.DistillForm != DistillGatedNLL && c.DistillForm != DistillSigned && c.DistillForm != DistillFull:
		return fmt.Errorf("rl config: distill_form %q: want %q, %q or %q", c.DistillForm, DistillGatedNLL, DistillSigned, DistillFull)
	case c.JSDBeta != JSDForward && (c.JSDBeta < 0 || c.JSDBeta > 1 || math.IsNaN(c.JSDBeta)):
		return fmt.Errorf("rl config: jsd_beta %v must be in (0, 1] or JSDForward", c.JSDBeta)
	case c.PGCoef < 0 || math.IsNaN(c.PGCoef) || math.IsInf(c.PGCoef, 0):
		return fmt.Errorf("rl config: pg_coef %v must be a number >= 0", c.PGCoef)
	case c.DeltaClip < 0 || math.IsNaN(c.DeltaClip):
		return fmt.Errorf("rl config: delta_clip %v must be >= 0 (0: %v)", c.DeltaClip, DefaultDeltaClip)
	case c.TermGradsEvery < 0:
		return fmt.Errorf("rl config: term_grads_every %d must be >= 0 (0: off)", c.TermGradsEvery)
	}
	return nil
}

// RLStats are the step's metrics. Loss terms are the values of the
// weighted sum's parts before weighting.
type RLStats struct {
	Loss     float64 `json:"loss"`
	GRPOLoss float64 `json:"grpo_loss"`
	OPDLoss  float64 `json:"opd_loss"`
	KL       float64 `json:"kl"`
	// GateMean is the mean of σ(β·Δ) over distilled tokens; PositiveShift
	// the share of them with Δ > 0; MeanShift the mean Δ.
	GateMean float64 `json:"gate_mean"`
	// GateBins is the share of distilled tokens with the gate below 0.1,
	// in [0.1, 0.4), [0.4, 0.6), [0.6, 0.9) and from 0.9 on (nil without
	// distilled tokens).
	GateBins      []float64 `json:"-"`
	PositiveShift float64   `json:"positive_shift"`
	MeanShift     float64   `json:"mean_shift"`
	// The same on the distilled tokens the policy was unsure of (its
	// probability below RLConfig.DecisionProb): a near-deterministic policy's
	// sampled tokens have ℓ ≈ 0, where Δ cannot be positive and the gate
	// sits at 0.5 whatever the skill says, so the whole-batch figures are
	// dominated by tokens the teacher cannot move. DecisionShare is those
	// tokens' share of the distilled ones.
	DecisionShare    float64 `json:"decision_share"`
	DecisionGate     float64 `json:"decision_gate_mean"`
	DecisionPositive float64 `json:"decision_positive_shift"`
	DecisionShift    float64 `json:"decision_mean_shift"`
	// DecisionShiftPosAdv and DecisionShiftNegAdv split DecisionShift by
	// the row's advantage sign (absent when no decision token had one): a
	// teacher that knows what went right and wrong raises the decisions
	// of trajectories that beat their group and lowers the others', so
	// the first exceeds the second; a context that moves every decision
	// alike (a skill of another episode does that too) shows no gap.
	DecisionShiftPosAdv *float64 `json:"decision_mean_shift_pos_adv,omitempty"`
	DecisionShiftNegAdv *float64 `json:"decision_mean_shift_neg_adv,omitempty"`
	// With a contrastive baseline (RLSequence.BaselineLogP) Δ = ℓᵀ − ℓᴮ;
	// these are the two shifts it is the difference of, on the decision
	// tokens: this skill's, ℓᵀ − ℓθ, and another task's skill's in the
	// same places, ℓᴮ − ℓθ (what inserting any skill text does). Absent
	// without a baseline.
	DecisionTeacherShift  *float64 `json:"decision_teacher_shift,omitempty"`
	DecisionBaselineShift *float64 `json:"decision_baseline_shift,omitempty"`
	// ClipFrac is the share of trained tokens whose clipped term is active;
	// DualClipFrac the share capped by dual-clip (A < 0, r > c).
	ClipFrac     float64 `json:"clip_frac"`
	DualClipFrac float64 `json:"dual_clip_frac"`
	// RatioMaxDev is max |r−1| over trained tokens (1e-6-ish when ℓold was
	// computed by this model, larger when it came from the server).
	RatioMaxDev   float64       `json:"ratio_max_dev"`
	GradNorm      float64       `json:"grad_norm"`
	Entropy       float64       `json:"entropy"`
	Tokens        int           `json:"tokens"`
	DistillTokens int           `json:"distill_tokens"`
	Sequences     int           `json:"sequences"`
	MicroBatches  int           `json:"micro_batches"`
	TokensPerSec  float64       `json:"tokens_per_s"`
	Elapsed       time.Duration `json:"elapsed_ns"`
	// Comm is this rank's time and bytes in the step's collectives (data
	// parallelism only: the counts' and statistics' reductions, the
	// gradients' buckets, a sharded optimizer's weight broadcasts).
	*CommStats `json:",omitempty"`
	// TermGrads splits the gradient by loss term (RLConfig.TermGradsEvery;
	// nil on other steps).
	*TermGrads `json:",omitempty"`
}

// tokenTerms are one token's contributions to the loss and the derivative
// of the whole (normalised, weighted) loss with respect to its ℓθ.
type tokenTerms struct {
	grpo, opd, kl   float64 // unnormalised per-token values
	gate, delta     float64
	clipped, hasKL  bool
	dualClipped     bool
	dGRPO, dOPD, dK float64 // ∂(term)/∂ℓθ, unnormalised
}

// advantage is the advantage of position k.
func (s *RLSequence) advantage(k int) float64 {
	if s.Advantages != nil {
		return float64(s.Advantages[k])
	}
	return s.Advantage
}

// termsAt computes the per-token SEED loss pieces for log-prob lp (ℓθ).
// GRPO: −min(r·A, clip(r)·A) with r = exp(ℓθ−ℓold); its derivative is
// −r·A when the unclipped term is the active one, else 0. With dual-clip
// (c = ClipRatioC) and A < 0 the term is min(that, −c·A), as verl's
// compute_policy_loss: past the cap it is constant, derivative 0. OPD:
// g·(ℓᵀ−ℓθ) with g = σ(β·(ℓᵀ−ℓθ)) held constant, derivative −g (with a
// baseline, Δ = ℓᵀ−ℓᴮ and the term g·(Δ − (ℓθ−ℓold)), same derivative;
// signed: −Δ̃·(ℓθ−ℓold), derivative −Δ̃). KL (k3):
// e^ρ−ρ−1 with ρ = ℓref−ℓθ, derivative 1−e^ρ; above KLClamp it is
// KLClamp, derivative 0 (verl's clamp).
func termsAt(lp float64, s *RLSequence, k int, cfg RLConfig) tokenTerms {
	var t tokenTerms
	r := math.Exp(lp - float64(s.OldLogP[k]))
	a := s.advantage(k)
	unclipped := r * a
	cr := math.Min(math.Max(r, 1-cfg.ClipEps), 1+cfg.ClipEps)
	clippedV := cr * a
	if clippedV < unclipped {
		t.grpo = -clippedV
		t.clipped = true
	} else {
		t.grpo = -unclipped
		t.dGRPO = -unclipped
	}
	if c := cfg.ClipRatioC; c > 0 && a < 0 && -c*a < t.grpo {
		t.grpo, t.dGRPO, t.clipped, t.dualClipped = -c*a, 0, false, true
	}
	if s.Distill != nil && s.Distill[k] {
		t.delta = float64(s.TeacherLogP[k]) - lp
		if s.BaselineLogP != nil {
			t.delta = float64(s.TeacherLogP[k] - s.BaselineLogP[k])
		}
		t.gate = 1 / (1 + math.Exp(-cfg.Beta*t.delta))
		if cfg.DistillForm == DistillFull {
			// The reverse KL over the vocabulary is computed on the
			// chunk's log-softmax (distillKL); the sampled token's
			// shift stays a statistic.
		} else if cfg.DistillForm == DistillSigned {
			// The teacher's shift as a per-token reward: −Δ̃·(ℓθ − ℓold)
			// has the gradient −Δ̃·∇ℓθ, raising what the teacher
			// endorses and lowering what it rejects (on-policy
			// distillation's reverse-KL gradient; Δ̃ = Δ clipped).
			c := cfg.DeltaClip
			if c <= 0 {
				c = DefaultDeltaClip
			}
			dc := math.Max(-c, math.Min(c, t.delta))
			t.opd = -dc * (lp - float64(s.OldLogP[k]))
			t.dOPD = -dc
		} else {
			t.opd = t.gate * t.delta
			if s.BaselineLogP != nil {
				// Δ no longer holds ℓθ: −g·(ℓθ − ℓold) keeps the
				// derivative −g, and the value is g·Δ on-policy.
				t.opd -= t.gate * (lp - float64(s.OldLogP[k]))
			}
			t.dOPD = -t.gate
		}
	}
	if s.RefLogP != nil {
		rho := float64(s.RefLogP[k]) - lp
		t.kl = math.Exp(rho) - rho - 1
		t.dK = 1 - math.Exp(rho)
		if cfg.KLClamp > 0 && t.kl > cfg.KLClamp {
			t.kl, t.dK = cfg.KLClamp, 0
		}
		t.hasKL = true
	}
	return t
}

// check validates a sequence's shape.
func (s *RLSequence) check(vocab int) error {
	n := len(s.IDs)
	if n < 2 {
		return fmt.Errorf("rl sequence %q: %d ids, need at least 2", s.ID, n)
	}
	if len(s.Train) != n || len(s.OldLogP) != n {
		return fmt.Errorf("rl sequence %q: %d ids but %d train marks and %d old log-probs", s.ID, n, len(s.Train), len(s.OldLogP))
	}
	if s.RefLogP != nil && len(s.RefLogP) != n {
		return fmt.Errorf("rl sequence %q: %d ids but %d reference log-probs", s.ID, n, len(s.RefLogP))
	}
	if (s.Distill == nil) != (s.TeacherLogP == nil) || (s.Distill != nil && (len(s.Distill) != n || len(s.TeacherLogP) != n)) {
		return fmt.Errorf("rl sequence %q: distill marks and teacher log-probs must both be absent or both have %d entries", s.ID, n)
	}
	if s.BaselineLogP != nil && (s.Distill == nil || len(s.BaselineLogP) != n) {
		return fmt.Errorf("rl sequence %q: %d baseline log-probs need distill marks and %d entries", s.ID, len(s.BaselineLogP), n)
	}
	if s.TeacherDist != nil && (s.Distill == nil || len(s.TeacherDist) != n) {
		return fmt.Errorf("rl sequence %q: %d teacher distributions need distill marks and %d entries", s.ID, len(s.TeacherDist), n)
	}
	if math.IsNaN(s.Advantage) || math.IsInf(s.Advantage, 0) {
		return fmt.Errorf("rl sequence %q: advantage %v: %w", s.ID, s.Advantage, ErrNonFinite)
	}
	if s.Advantages != nil {
		if len(s.Advantages) != n {
			return fmt.Errorf("rl sequence %q: %d ids but %d per-position advantages", s.ID, n, len(s.Advantages))
		}
		for k, a := range s.Advantages {
			if math.IsNaN(float64(a)) || math.IsInf(float64(a), 0) {
				return fmt.Errorf("rl sequence %q: advantage %v at %d: %w", s.ID, a, k, ErrNonFinite)
			}
		}
	}
	if s.Train[0] {
		return fmt.Errorf("rl sequence %q: position 0 cannot be trained (nothing predicts it)", s.ID)
	}
	for k, id := range s.IDs {
		if id < 0 || id >= vocab {
			return fmt.Errorf("rl sequence %q: id %d at %d is outside the vocabulary (%d)", s.ID, id, k, vocab)
		}
		if s.Distill != nil && s.Distill[k] && !s.Train[k] {
			return fmt.Errorf("rl sequence %q: position %d is distilled but not a trained token", s.ID, k)
		}
	}
	return nil
}

// microBatches groups row indices (longest first) so each group's padded
// size stays within maxTokens; a single longer row forms its own group.
func microBatches(lens []int, maxTokens int) [][]int {
	order := make([]int, len(lens))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return lens[order[a]] > lens[order[b]] })
	return groupPadded(order, func(i int) int { return lens[i] }, maxTokens)
}

// groupPadded splits items, in the given order, into consecutive groups
// whose padded size (members × longest member) stays within limit; an item
// longer than limit forms its own group.
func groupPadded(order []int, length func(int) int, limit int) [][]int {
	var out [][]int
	var cur []int
	width := 0
	for _, i := range order {
		l := length(i)
		if len(cur) > 0 && (len(cur)+1)*max(width, l) > limit {
			out = append(out, cur)
			cur, width = nil, 0
		}
		cur = append(cur, i)
		width = max(width, l)
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// RLStep runs one optimizer step of L = L_GRPO + λ·L_OPD + c_KL·KL on batch:
// ℓθ with gradients in micro-batches (gradients accumulate), each term's
// token-mean over the whole batch (OPD over distilled tokens), clipping,
// AdamW. Non-finite log-probs, losses or gradients refuse the step: the
// weights are untouched, gradients are cleared, and the error wraps
// ErrNonFinite.
func (m *Model) RLStep(opt *Optimizer, batch []RLSequence, cfg RLConfig) (st RLStats, err error) {
	if opt == nil {
		return st, errors.New("rl step: no optimizer")
	}
	if opt.Sharded() {
		return st, errors.New("rl step: a sharded optimizer steps with RLStepDist")
	}
	return m.rlStep(opt, nil, batch, cfg)
}

// RLStepDist is RLStep as one rank of a data-parallel group: shard is
// this rank's share of the batch (possibly none of it), the token means
// divide by the whole batch's counts, gradients are summed across the
// group before clipping, and every rank takes the same step. The stats
// are the whole batch's. A nil group is RLStep.
func (m *Model) RLStepDist(opt *Optimizer, g *ProcessGroup, shard []RLSequence, cfg RLConfig) (st RLStats, err error) {
	if opt == nil {
		return st, errors.New("rl step: no optimizer")
	}
	return m.rlStep(opt, g, shard, cfg)
}

// rlBackward accumulates the RL loss's gradients of batch without an
// optimizer step (tests compare them).
func (m *Model) rlBackward(batch []RLSequence, cfg RLConfig) (RLStats, error) {
	return m.rlStep(nil, nil, batch, cfg)
}

// rlStep is RLStep; with a nil optimizer it stops after the backward pass.
func (m *Model) rlStep(opt *Optimizer, g *ProcessGroup, batch []RLSequence, cfg RLConfig) (st RLStats, err error) {
	defer pinThread()()
	start := time.Now()
	if err := cfg.Validate(); err != nil {
		return st, err
	}
	if len(batch) == 0 && g == nil {
		return st, errors.New("rl step: empty batch")
	}
	lens := make([]int, len(batch))
	for i := range batch {
		s := &batch[i]
		if err := s.check(m.cfg.VocabSize); err != nil {
			return st, fmt.Errorf("rl step: %w", err)
		}
		lens[i] = len(s.IDs) - 1
	}
	if cfg.DistillForm == DistillFull {
		if err := checkDists(batch, m.cfg.VocabSize); err != nil {
			return st, fmt.Errorf("rl step: %w", err)
		}
	}
	nTrain, nDistill, nKL := countTokens(batch)
	nSeq := len(batch)
	if g != nil {
		c0 := g.Comm()
		defer func() {
			c := g.Comm().Sub(c0)
			st.CommStats = &c
		}()
		// The whole batch's counts: every rank's token means divide by
		// them, so the gradients summed across ranks are the
		// single-process step's.
		c, err := g.SumFloats([]float64{float64(nTrain), float64(nDistill), float64(nKL), float64(nSeq)})
		if err != nil {
			return st, fmt.Errorf("rl step: %w", err)
		}
		nTrain, nDistill, nKL, nSeq = int(c[0]), int(c[1]), int(c[2]), int(c[3])
	}
	if nTrain == 0 {
		return st, errors.New("rl step: no trained tokens in the batch")
	}
	defer func() {
		if err != nil {
			m.ZeroGrad()
		}
	}()
	defer guard(&err, "rl step")
	// As in TrainSFT: no finalizer may run while libtorch computes.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	quiesceGC()
	if opt != nil && cfg.TermGradsEvery > 0 && opt.Steps()%int64(cfg.TermGradsEvery) == 0 {
		if st.TermGrads, err = m.termGradients(batch, lens, g, cfg, nTrain, nDistill, nKL); err != nil {
			return st, fmt.Errorf("per-term gradients: %w", err)
		}
	}
	acc := rlSums{decisionLogP: cfg.decisionLogP()}
	if err := m.rlPasses(batch, lens, g, cfg, nTrain, nDistill, nKL, &st, &acc); err != nil {
		return st, err
	}
	verlLoss := acc.verlLoss
	if g != nil {
		if err := st.reduce(g, &acc); err != nil {
			return st, fmt.Errorf("rl step: %w", err)
		}
		if cfg.Agg == AggVerl {
			v, err := g.SumFloats([]float64{verlLoss})
			if err != nil {
				return st, fmt.Errorf("rl step: %w", err)
			}
			verlLoss = v[0]
		}
		if err := m.allReduceGrads(g); err != nil {
			return st, fmt.Errorf("rl step: %w", err)
		}
	}
	st.GRPOLoss /= float64(nTrain)
	if nDistill > 0 {
		st.OPDLoss /= float64(nDistill)
		st.DecisionShare = float64(acc.decision.n) / float64(nDistill)
	}
	st.GateMean, st.MeanShift, st.PositiveShift = acc.distilled.means()
	if n := acc.distilled.n; n > 0 {
		st.GateBins = make([]float64, len(acc.gateBins))
		for i, c := range acc.gateBins {
			st.GateBins[i] = c / float64(n)
		}
	}
	st.DecisionGate, st.DecisionShift, st.DecisionPositive = acc.decision.means()
	st.DecisionShiftPosAdv, st.DecisionShiftNegAdv = acc.posAdv.meanShift(), acc.negAdv.meanShift()
	st.DecisionTeacherShift, st.DecisionBaselineShift = acc.decTeacher.meanShift(), acc.decBaseline.meanShift()
	if nKL > 0 {
		st.KL /= float64(nKL)
	}
	st.Entropy = acc.ent / float64(nTrain)
	st.Loss = cfg.PGCoef*st.GRPOLoss + cfg.Lambda*st.OPDLoss + cfg.KLCoef*st.KL - cfg.EntropyCoef*st.Entropy
	if cfg.Agg == AggVerl {
		st.Loss = verlLoss // the loss the gradient is of; the terms above stay whole-batch means
	}
	st.ClipFrac = float64(acc.clip) / float64(nTrain)
	st.DualClipFrac = float64(acc.dualClip) / float64(nTrain)
	st.Tokens, st.DistillTokens, st.Sequences = nTrain, nDistill, nSeq
	if opt == nil { // rlBackward: the gradients are the result
		return st, nil
	}
	st.GradNorm, err = opt.Step(cfg.ClipNorm)
	if err != nil {
		return st, err
	}
	st.Elapsed = time.Since(start)
	st.TokensPerSec = float64(nTrain) / st.Elapsed.Seconds()
	return st, nil
}

// rlPasses runs the forward and backward passes of every micro-batch,
// accumulating the gradient of the loss (or of the term acc.only) and the
// statistics; with AggVerl, acc.verlLoss is the loss the gradient is of.
func (m *Model) rlPasses(batch []RLSequence, lens []int, g *ProcessGroup, cfg RLConfig, nTrain, nDistill, nKL int, st *RLStats, acc *rlSums) error {
	if cfg.Agg == AggVerl {
		l, err := m.rlVerlMicroBatches(batch, lens, g, cfg, st, acc)
		acc.verlLoss = l
		return err
	}
	for _, mb := range microBatches(lens, cfg.MicroBatchTokens) {
		st.MicroBatches++
		if err := m.rlMicroBatch(batch, mb, cfg, nTrain, nDistill, nKL, st, acc); err != nil {
			return err
		}
	}
	return nil
}

// countTokens counts rows' trained tokens, distilled tokens and trained
// tokens with a reference log-prob (the KL's): each loss term's token-mean
// denominator.
func countTokens(rows []RLSequence) (train, distill, kl int) {
	for i := range rows {
		s := &rows[i]
		for k := range s.IDs {
			if s.Train[k] {
				train++
				if s.RefLogP != nil {
					kl++
				}
			}
			if s.Distill != nil && s.Distill[k] {
				distill++
			}
		}
	}
	return train, distill, kl
}

// rlVerlMicroBatches runs this rank's rows as verl does: micro-batches of
// cfg.MicroBatchRows rows in order, each term's token mean within the
// micro-batch, divided by the rank's micro-batch count and by the world
// size (FSDP averages the ranks' gradients, which the group then sums).
// It returns this rank's share of that loss.
func (m *Model) rlVerlMicroBatches(batch []RLSequence, lens []int, g *ProcessGroup, cfg RLConfig, st *RLStats, acc *rlSums) (float64, error) {
	world := 1
	if g != nil {
		world = g.World()
	}
	nMB := (len(batch) + cfg.MicroBatchRows - 1) / cfg.MicroBatchRows
	loss := 0.0
	for lo := 0; lo < len(batch); lo += cfg.MicroBatchRows {
		hi := min(lo+cfg.MicroBatchRows, len(batch))
		nT, nD, nK := countTokens(batch[lo:hi])
		if nT == 0 {
			continue // its token means are 0 (verl's masked mean of nothing)
		}
		// Denominators that make each token's weight 1/(n_mb·M·W).
		scale := nMB * world
		dT, dD, dK := nT*scale, max(nD, 1)*scale, max(nK, 1)*scale
		before := [4]float64{st.GRPOLoss, st.OPDLoss, st.KL, acc.ent}
		sub := lens[lo:hi]
		for _, piece := range microBatches(sub, cfg.MicroBatchTokens) {
			idx := make([]int, len(piece))
			for j, p := range piece {
				idx[j] = lo + p
			}
			st.MicroBatches++
			if err := m.rlMicroBatch(batch, idx, cfg, dT, dD, dK, st, acc); err != nil {
				return 0, err
			}
		}
		l := cfg.PGCoef * (st.GRPOLoss - before[0]) / float64(nT)
		if nD > 0 {
			l += cfg.Lambda * (st.OPDLoss - before[1]) / float64(nD)
		}
		if nK > 0 {
			l += cfg.KLCoef * (st.KL - before[2]) / float64(nK)
		}
		l -= cfg.EntropyCoef * (acc.ent - before[3]) / float64(nT)
		loss += l / float64(scale)
	}
	return loss, nil
}

// decisionLogP is the log-probability below which a distilled token
// counts as a decision.
func (c RLConfig) decisionLogP() float64 {
	if c.DecisionProb > 0 {
		return math.Log(c.DecisionProb)
	}
	return math.Log(DefaultDecisionProb)
}

// shiftSums accumulates the teacher's shift over a set of distilled tokens.
type shiftSums struct {
	n, pos      int
	gate, delta float64
}

func (s *shiftSums) add(gate, delta float64) {
	s.n++
	s.gate += gate
	s.delta += delta
	if delta > 0 {
		s.pos++
	}
}

// means are the gate mean, the mean Δ and the share with Δ > 0 (zeros
// for an empty set).
func (s shiftSums) means() (gate, delta, positive float64) {
	if s.n == 0 {
		return 0, 0, 0
	}
	n := float64(s.n)
	return s.gate / n, s.delta / n, float64(s.pos) / n
}

// gateBinEdges split the gate σ(β·Δ) into bins: a teacher that says
// something puts tokens in the outer bins; one that barely moves the
// policy leaves them around 0.5.
var gateBinEdges = [...]float64{0.1, 0.4, 0.6, 0.9}

// GateBinNames are RLStats.GateBins' metric names.
var GateBinNames = [len(gateBinEdges) + 1]string{"gate_share_below_0.1", "gate_share_0.1_0.4", "gate_share_0.4_0.6", "gate_share_0.6_0.9", "gate_share_above_0.9"}

func gateBin(g float64) int {
	for i, e := range gateBinEdges {
		if g < e {
			return i
		}
	}
	return len(gateBinEdges)
}

// meanShift is the mean Δ, nil for an empty set.
func (s shiftSums) meanShift() *float64 {
	if s.n == 0 {
		return nil
	}
	v := s.delta / float64(s.n)
	return &v
}

// reduce sums the step's per-token statistics over the group (the ratio
// deviation takes the maximum), before they are turned into means.
func (st *RLStats) reduce(g *ProcessGroup, acc *rlSums) error {
	shifts := []*shiftSums{&acc.distilled, &acc.decision, &acc.posAdv, &acc.negAdv, &acc.decTeacher, &acc.decBaseline}
	v := []float64{st.GRPOLoss, st.OPDLoss, st.KL, acc.ent, float64(acc.clip), float64(acc.dualClip), float64(st.MicroBatches)}
	for _, s := range shifts {
		v = append(v, float64(s.n), float64(s.pos), s.gate, s.delta)
	}
	v = append(v, acc.gateBins[:]...)
	sum, err := g.SumFloats(v)
	if err != nil {
		return err
	}
	copy(acc.gateBins[:], sum[len(sum)-len(acc.gateBins):])
	st.GRPOLoss, st.OPDLoss, st.KL, acc.ent = sum[0], sum[1], sum[2], sum[3]
	acc.clip, acc.dualClip, st.MicroBatches = int(sum[4]), int(sum[5]), int(sum[6])
	for i, s := range shifts {
		o := 7 + 4*i
		s.n, s.pos, s.gate, s.delta = int(sum[o]), int(sum[o+1]), sum[o+2], sum[o+3]
	}
	mx, err := g.maxFloats([]float64{st.RatioMaxDev})
	if err != nil {
		return err
	}
	st.RatioMaxDev = mx[0]
	return nil
}

// rlSums accumulates a step's per-token statistics across micro-batches.
type rlSums struct {
	ent            float64
	clip, dualClip int
	decisionLogP   float64
	// gateBins counts distilled tokens by gate (gateBinEdges).
	gateBins [len(gateBinEdges) + 1]float64
	// only is the loss term whose derivative the passes carry (termAll
	// in a training step).
	only     lossTerm
	verlLoss float64
	// The teacher's shift on every distilled token, on the decision
	// tokens, and on the decision tokens of rows with A > 0 and A < 0.
	distilled, decision, posAdv, negAdv shiftSums
	// ℓᵀ − ℓθ and ℓᴮ − ℓθ on the decision tokens of rows with a baseline.
	decTeacher, decBaseline shiftSums
}

func (m *Model) rlMicroBatch(batch []RLSequence, mb []int, cfg RLConfig, nTrain, nDistill, nKL int, st *RLStats, acc *rlSums) error {
	width := 0
	for _, i := range mb {
		width = max(width, len(batch[i].IDs)-1)
	}
	in := Input{IDs: make([][]int, len(mb)), Segments: make([][]int, len(mb))}
	targets := make([][]int, len(mb))
	for b, i := range mb {
		s := &batch[i]
		in.IDs[b], in.Segments[b], targets[b] = make([]int, width), make([]int, width), make([]int, width)
		for k := 0; k < width; k++ {
			targets[b][k] = -1
			if k < len(s.IDs)-1 {
				in.IDs[b][k] = s.IDs[k]
				in.Segments[b][k] = 1
				if s.Train[k+1] {
					targets[b][k] = s.IDs[k+1]
				}
			}
		}
	}
	// The loss's derivative per token, from the detached log-prob l and
	// entropy e of flat position j (row j/width, position j%width): d for
	// ℓθ, de for the entropy (with an entropy bonus).
	derivs := func(j int, l, e float64) (d, de float64, err error) {
		b, k := j/width, j%width
		if targets[b][k] < 0 {
			return 0, 0, nil
		}
		s := &batch[mb[b]]
		pos := k + 1
		if math.IsNaN(l) || math.IsInf(l, 0) {
			return 0, 0, fmt.Errorf("rl step: log-prob %v of %q at %d: %w", l, s.ID, pos, ErrNonFinite)
		}
		// A sampled token had probability > 0: a non-finite ℓold is bad
		// input (dual-clip would otherwise cap an infinite ratio quietly).
		if o := float64(s.OldLogP[pos]); math.IsNaN(o) || math.IsInf(o, 0) {
			return 0, 0, fmt.Errorf("rl step: old log-prob %v of %q at %d: %w", o, s.ID, pos, ErrNonFinite)
		}
		t := termsAt(l, s, pos, cfg)
		st.GRPOLoss += t.grpo
		dG, dO, dK := cfg.PGCoef*t.dGRPO/float64(nTrain), 0.0, 0.0
		if t.clipped {
			acc.clip++
		}
		if t.dualClipped {
			acc.dualClip++
		}
		if cfg.EntropyCoef > 0 {
			de = -cfg.EntropyCoef / float64(nTrain)
		}
		st.RatioMaxDev = math.Max(st.RatioMaxDev, math.Abs(math.Exp(l-float64(s.OldLogP[pos]))-1))
		if s.Distill != nil && s.Distill[pos] {
			st.OPDLoss += t.opd
			acc.distilled.add(t.gate, t.delta)
			acc.gateBins[gateBin(t.gate)]++
			if l < acc.decisionLogP {
				acc.decision.add(t.gate, t.delta)
				if s.BaselineLogP != nil {
					acc.decTeacher.add(0, float64(s.TeacherLogP[pos])-l)
					acc.decBaseline.add(0, float64(s.BaselineLogP[pos])-l)
				}
				switch a := s.advantage(pos); {
				case a > 0:
					acc.posAdv.add(t.gate, t.delta)
				case a < 0:
					acc.negAdv.add(t.gate, t.delta)
				}
			}
			dO = cfg.Lambda * t.dOPD / float64(nDistill)
		}
		if t.hasKL {
			st.KL += t.kl
			dK = cfg.KLCoef * t.dK / float64(nKL)
		}
		switch acc.only {
		case termAll:
			d = dG + dO + dK
		case termGRPO:
			d, de = dG, 0
		case termOPD:
			d, de = dO, 0
		case termKL:
			d, de = dK, 0
		case termEntropy:
			d = 0
		}
		acc.ent += e
		if math.IsNaN(d) || math.IsInf(d, 0) || math.IsNaN(t.grpo+t.opd+t.kl) || math.IsInf(t.grpo+t.opd+t.kl, 0) {
			return 0, 0, fmt.Errorf("rl step: loss of %q at %d is not finite (log-prob %v): %w", s.ID, pos, l, ErrNonFinite)
		}
		return d, de, nil
	}
	entropy := entropyRead
	if cfg.EntropyCoef > 0 && (acc.only == termAll || acc.only == termEntropy) {
		entropy = entropyGrad
	}
	var extra headExtra
	if cfg.DistillForm == DistillFull && nDistill > 0 {
		w := 0.0 // the reverse KL's weight in the loss being differentiated
		if acc.only == termAll || acc.only == termOPD {
			w = cfg.Lambda / float64(nDistill)
		}
		extra = func(lo, c int, logp *ts.Tensor) (*ts.Tensor, error) {
			var pos []int64
			var dists []*TokenDist
			var ids []string
			for j := lo; j < lo+c; j++ {
				b, k := j/width, j%width
				s := &batch[mb[b]]
				if targets[b][k] < 0 || s.Distill == nil || !s.Distill[k+1] {
					continue
				}
				pos, dists = append(pos, int64(j-lo)), append(dists, s.TeacherDist[k+1])
				ids = append(ids, s.ID)
			}
			if len(pos) == 0 {
				return nil, nil
			}
			kl := m.distillKL(logp, pos, dists, cfg.jsdBeta())
			for i, v := range values1D(kl) {
				if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
					drop(kl)
					return nil, fmt.Errorf("rl step: reverse KL %v of %q at %d: %w", v, ids[i], lo+int(pos[i]), ErrNonFinite)
				}
				st.OPDLoss += float64(v)
			}
			if w == 0 {
				drop(kl)
				return nil, nil
			}
			return mulScalar(must(kl.Sum(gotch.Float, true)), w, true), nil
		}
	}
	return m.headBackwardWith(in, targets, cfg.Temperature, entropy, nil, derivs, extra)
}

// checkDists checks that every distilled token of batch has a teacher
// distribution, all of one shape (the whole vocabulary, or k tokens).
func checkDists(batch []RLSequence, vocab int) error {
	shape, topk, seen := 0, false, false
	for i := range batch {
		s := &batch[i]
		for k, d := range s.Distill {
			if !d {
				continue
			}
			if s.TeacherDist == nil || s.TeacherDist[k] == nil {
				return fmt.Errorf("rl sequence %q: distilled position %d has no teacher distribution (distill_form %q needs one)", s.ID, k, DistillFull)
			}
			td := s.TeacherDist[k]
			if err := td.check(vocab); err != nil {
				return fmt.Errorf("rl sequence %q position %d: %w", s.ID, k, err)
			}
			if !seen {
				shape, topk, seen = len(td.LogP), td.IDs != nil, true
			} else if len(td.LogP) != shape || (td.IDs != nil) != topk {
				return fmt.Errorf("rl sequence %q position %d: a teacher distribution of %d entries (top-k %v) among ones of %d (top-k %v)", s.ID, k, len(td.LogP), td.IDs != nil, shape, topk)
			}
		}
	}
	return nil
}

// headExtra adds a term computed on a chunk's whole log-softmax to the
// chunk's surrogate: given the chunk's first flat position, its size and
// its log-probs [c, V] (with a graph), it returns a scalar with a graph
// (nil: nothing to add).
type headExtra func(lo, c int, logp *ts.Tensor) (*ts.Tensor, error)

// headChunkTokens bounds the positions whose [positions, vocabulary]
// log-softmax exists at once in a training step: the head is applied to
// the final hidden states a chunk at a time, each chunk's part of the loss
// back-propagated to the hidden states before the next is computed, and
// the decoder's backward pass runs once from their summed gradient. With a
// 152k vocabulary a 16k-token micro-batch would otherwise hold ~46 GiB of
// log-probabilities (docs/gpu.md, memory plan); chunked, ~3 GiB at any
// size. The gradient is the same.
var headChunkTokens = 1024

// headBackward runs in through the decoder with a graph, then the head in
// chunks of headChunkTokens positions: for each chunk, the log-probs of
// targets (flat position j = row·T + column; targets < 0 score 0 and get
// no gradient) and the policy's entropy are read (the entropy keeps a
// graph only with entropyGrad), derivs
// gives the loss's derivative with respect to each (computed from the
// detached values), and the chunk's surrogate Σ d·ℓ + de·H is
// back-propagated at once. The hidden states' gradient then flows through
// the decoder (and, with recomputation, afterBackward's layer-by-layer
// pass).
//
// known, when not nil, is every position's derivative d, known before the
// log-probs are (the NLL's −weight/denominator): the chunks then run back
// to back without reading anything back, the decoder's backward pass
// follows, and only then are the log-probs read, once, and derivs called
// at every position for its sums and checks (its d is ignored; entropy
// must be entropyNone). On a GPU every read-back, and every copy of host
// memory to the device, waits for the device's queue to drain (a copy from
// pageable memory synchronises the stream). The targets go to the device
// once, before the forward pass; after it, an NLL step reads back once
// however many chunks it has, where the per-chunk form reads back once and
// uploads once per chunk. The gradient is the same to the bit
// (TestNLLHeadWithoutReadBacks).
func (m *Model) headBackward(in Input, targets [][]int, temperature float64, entropy headEntropy, known []float32, derivs func(j int, l, e float64) (d, de float64, err error)) error {
	return m.headBackwardWith(in, targets, temperature, entropy, known, derivs, nil)
}

// headBackwardWith is headBackward with a term on each chunk's whole
// log-softmax (extra; nil: none, and it needs known to be nil).
func (m *Model) headBackwardWith(in Input, targets [][]int, temperature float64, entropy headEntropy, known []float32, derivs func(j int, l, e float64) (d, de float64, err error), extra headExtra) error {
	if extra != nil && known != nil {
		return fmt.Errorf("head: a whole-distribution term needs the per-chunk path (no known derivatives)")
	}
	b, t, err := in.shape()
	if err != nil {
		return err
	}
	n := b * t
	if known != nil && (len(known) != n || entropy != entropyNone) {
		return fmt.Errorf("head: %d known derivatives for %d positions with entropy mode %d: want one per position and no entropy", len(known), n, entropy)
	}
	flat := make([]int64, n)
	keep := make([]float32, n)
	for i, row := range targets {
		for k, id := range row {
			if id >= 0 {
				flat[i*t+k], keep[i*t+k] = int64(id), 1
			}
		}
	}
	// The targets (and known derivatives) go to the device once, before
	// the forward pass, while its queue is empty.
	idx := upload(flat, []int64{int64(n), 1}, m.device)
	kt := upload(keep, []int64{int64(n)}, m.device)
	defer drop(idx, kt)
	var wt *ts.Tensor
	if known != nil {
		wt = upload(known, []int64{int64(n)}, m.device)
		defer drop(wt)
	}
	hN := m.forwardHidden(in)
	hDim := int64(m.cfg.HiddenSize)
	flatH := must(hN.Reshape([]int64{int64(n), hDim}, false))
	leaf := must(must(flatH.Detach(true)).SetRequiresGrad(true, true))
	defer drop(leaf)
	var lps []*ts.Tensor // known: each chunk's log-probs, detached
	defer func() { drop(lps...) }()
	for lo := 0; lo < n; lo += headChunkTokens {
		c := min(headChunkTokens, n-lo)
		ch := headChunkInput{lo: lo, c: c, idx: narrow(idx, lo, c), keep: narrow(kt, lo, c)}
		if wt != nil {
			ch.w = narrow(wt, lo, c)
		}
		lp, err := m.headChunk(leaf, ch, temperature, entropy, derivs, extra)
		drop(ch.idx, ch.keep)
		if ch.w != nil {
			drop(ch.w)
		}
		if err != nil {
			drop(hN)
			return err
		}
		if lp != nil {
			lps = append(lps, lp)
		}
	}
	g := must(leaf.Grad(false))
	gv := must(must(g.Detach(false)).View([]int64{int64(b), int64(t), hDim}, true))
	drop(g)
	sur := must(must(hN.Mul(gv, true)).Sum(gotch.Float, true))
	drop(gv)
	must0(sur.Backward())
	drop(sur)
	m.afterBackward()
	if known == nil {
		return nil
	}
	all := must(ts.Cat(lps, 0))
	lv := values1D(all)
	drop(all)
	for j, l := range lv {
		if _, _, err := derivs(j, float64(l), 0); err != nil {
			return err
		}
	}
	return nil
}

// narrow is x's positions [lo, lo+c) along its first dimension, a view.
func narrow(x *ts.Tensor, lo, c int) *ts.Tensor {
	return must(x.Narrow(0, int64(lo), int64(c), false))
}

// headEntropy says what headBackward does with the policy's entropy.
type headEntropy int

const (
	entropyNone headEntropy = iota // not computed (derivs sees 0): SFT's NLL
	entropyRead                    // computed without a graph: a logged figure
	entropyGrad                    // computed with a graph: the entropy bonus
)

// headChunkInput is one chunk of headBackward: positions [lo, lo+c), their
// targets (idx, [c, 1]), whether each is scored (keep, 1 or 0) and, when
// known ahead, the loss's derivative at each (w; nil: derivs gives it).
type headChunkInput struct {
	lo, c        int
	idx, keep, w *ts.Tensor
}

// headChunk is one chunk of headBackward. With ch.w it back-propagates
// Σ w·ℓ and returns the chunk's log-probs, detached, for the caller to
// read; without, it reads them, asks derivs, and returns nil.
func (m *Model) headChunk(leaf *ts.Tensor, ch headChunkInput, temperature float64, entropy headEntropy, derivs func(j int, l, e float64) (d, de float64, err error), extra headExtra) (*ts.Tensor, error) {
	withGrad := entropy == entropyGrad
	h := narrow(leaf, ch.lo, ch.c)
	logits := linear(h, m.lmHead, nil)
	drop(h)
	if temperature > 0 && temperature != 1 {
		logits = mulScalar(logits, 1/temperature, true)
	}
	logp := must(logits.LogSoftmax(-1, gotch.Float, true))
	g := must(must(logp.Gather(1, ch.idx, false, false)).SqueezeDim(1, true))
	lp := must(g.Mul(ch.keep, true))
	if ch.w != nil {
		drop(logp)
		sur := must(must(lp.Mul(ch.w, false)).Sum(gotch.Float, true))
		must0(sur.Backward())
		drop(sur)
		out := must(lp.Detach(false))
		drop(lp)
		return out, nil
	}
	var xs *ts.Tensor // the extra term's scalar, with a graph
	if extra != nil {
		var err error
		if xs, err = extra(ch.lo, ch.c, logp); err != nil {
			drop(logp, lp)
			return nil, err
		}
		if xs != nil {
			defer drop(xs)
		}
	}
	// The entropy is read for the RL step's metrics; it keeps a graph only
	// with the bonus. The NLL of SFT has no use for it.
	var ent *ts.Tensor
	var ev []float32
	if entropy == entropyNone {
		ev = make([]float32, ch.c) // derivs sees 0
	} else {
		d := logp
		if !withGrad {
			d = must(logp.Detach(false))
		}
		p := must(d.Exp(false))
		pl := must(p.Mul(d, true))
		ent = mulScalar(must(pl.SumDimIntlist([]int64{-1}, false, gotch.Float, true)), -1, true)
		if !withGrad {
			drop(d)
		}
		defer drop(ent)
	}
	drop(logp)
	defer drop(lp)
	var lv []float32
	if ent == nil {
		lv = values1D(lp)
	} else { // one read-back for both
		dl, de := must(lp.Detach(false)), must(ent.Detach(false))
		both := must(ts.Cat([]*ts.Tensor{dl, de}, 0))
		drop(dl, de)
		v := values1D(both)
		drop(both)
		lv, ev = v[:ch.c], v[ch.c:]
	}
	w := make([]float32, ch.c, 2*ch.c)
	we := make([]float32, ch.c)
	for i := range w {
		d, de, err := derivs(ch.lo+i, float64(lv[i]), float64(ev[i]))
		if err != nil {
			return nil, err
		}
		w[i], we[i] = float32(d), float32(de)
	}
	// The surrogate Σ w·ℓθ (+ Σ we·H) has exactly the loss's gradient (w
	// is the loss's derivative per token, computed with gates detached).
	// With the entropy's graph both go to the device in one copy.
	var up, wt, wet *ts.Tensor
	if withGrad {
		up = upload(append(w, we...), []int64{int64(2 * ch.c)}, m.device)
		wt, wet = narrow(up, 0, ch.c), narrow(up, ch.c, ch.c)
	} else {
		wt = upload(w, []int64{int64(ch.c)}, m.device)
	}
	prod := must(lp.Mul(wt, false))
	if withGrad {
		em := must(ent.Mul(wet, false))
		prod = must(prod.Add(em, true))
		drop(em, wet, up)
	}
	sur := must(prod.Sum(gotch.Float, true))
	if xs != nil {
		sur = must(sur.Add(xs, true))
	}
	must0(sur.Backward())
	drop(sur, wt)
	return nil, nil
}

// values1D reads a 1-D tensor's values as float32 (detached).
func values1D(x *ts.Tensor) []float32 {
	d := must(x.Detach(false))
	f := must(d.Totype(gotch.Float, true))
	defer drop(f)
	return toSlice[float32](f)
}

// scoringBatch pads the sequences mb of seqs (lens: each one's scored
// positions, len − 1) into one input whose row b predicts targets[b][k] =
// seqs[mb[b]][k+1] from the ids before it (−1 in the padding); width is
// the padded length.
func scoringBatch(seqs [][]int, lens []int, mb []int) (in Input, targets [][]int, width int) {
	for _, i := range mb {
		width = max(width, lens[i])
	}
	in = Input{IDs: make([][]int, len(mb)), Segments: make([][]int, len(mb))}
	targets = make([][]int, len(mb))
	for b, i := range mb {
		in.IDs[b], in.Segments[b], targets[b] = make([]int, width), make([]int, width), make([]int, width)
		for k := 0; k < width; k++ {
			targets[b][k] = -1
			if k < lens[i] {
				in.IDs[b][k] = seqs[i][k]
				in.Segments[b][k] = 1
				targets[b][k] = seqs[i][k+1]
			}
		}
	}
	return in, targets, width
}

// Rescore returns, for each sequence, log p(ids[k] | ids[:k]) at every
// position k ≥ 1 (entry 0 is 0), without gradients: teacher log-probs with
// skills in context, the reference policy's log-probs, or ℓold recomputed
// by the trainer. Sequences are batched (longest first) within maxTokens
// padded tokens per forward.
func (m *Model) Rescore(seqs [][]int, maxTokens int) (out [][]float32, err error) {
	return m.RescoreAt(seqs, maxTokens, 1)
}

// RescoreAt is Rescore of the distribution at a sampling temperature
// (softmax of logits/temperature; 0 and 1: the logits as they are).
func (m *Model) RescoreAt(seqs [][]int, maxTokens int, temperature float64) (out [][]float32, err error) {
	if maxTokens < 2 {
		return nil, fmt.Errorf("rescore: max tokens %d must be at least 2", maxTokens)
	}
	if temperature < 0 || math.IsNaN(temperature) {
		return nil, fmt.Errorf("rescore: temperature %v must be >= 0", temperature)
	}
	lens := make([]int, len(seqs))
	for i, s := range seqs {
		if len(s) < 2 {
			return nil, fmt.Errorf("rescore: sequence %d has %d ids, need at least 2", i, len(s))
		}
		lens[i] = len(s) - 1
	}
	out = make([][]float32, len(seqs))
	for _, mb := range microBatches(lens, maxTokens) {
		in, targets, _ := scoringBatch(seqs, lens, mb)
		rows, err := m.tokenLogProbs(in, targets, temperature)
		if err != nil {
			return nil, fmt.Errorf("rescore: %w", err)
		}
		for b, i := range mb {
			o := make([]float32, lens[i]+1)
			copy(o[1:], rows[b][:lens[i]])
			out[i] = o
		}
	}
	return out, nil
}
