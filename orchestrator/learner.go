package orchestrator

import (
	"context"
	"errors"
)

// Row is one RL training sequence (see trainer.RLSequence, which the
// wiring converts it to). Position k of the per-position slices refers to
// IDs[k] predicted from IDs[:k].
type Row struct {
	ID        string
	IDs       []int
	Train     []bool
	Advantage float64
	// Advantages, when set, holds one advantage per position (a chat-mode
	// row spans many steps); Advantage is then unused.
	Advantages  []float32
	OldLogP     []float32
	RefLogP     []float32
	TeacherLogP []float32
	Distill     []bool
	// BaselineLogP: the log-probs with another task's skill in the same
	// places (rl.distill_baseline "shuffled"); nil otherwise.
	BaselineLogP []float32
	// TeacherDist: the teacher's next-token distribution at each distilled
	// position (rl.distill_form "full"); nil otherwise.
	TeacherDist []*TokenDist `json:",omitempty"`
}

// TokenDist is a next-token distribution at one position: the top k
// tokens' log-probs (IDs set; the rest of the vocabulary is one tail
// bucket) or the whole vocabulary's in id order (IDs nil).
type TokenDist struct {
	IDs  []int32   `json:"ids,omitempty"`
	LogP []float32 `json:"logp"`
}

// SFTExample is one stage-1 sequence; Loss marks trained positions.
type SFTExample struct {
	IDs  []int
	Loss []bool
}

// SFTOptions configure stage-1 fine-tuning.
type SFTOptions struct {
	Epochs           float64
	LR               float64
	BatchTokens      int
	MicroBatchTokens int
	MaxLen           int
	Seed             uint64
	// The schedule and optimizer (stage1.optimizer): AdamW's β2, the
	// share of warm-up steps, the cosine's floor as a share of LR; with
	// BatchSequences > 0, steps of that many examples in shuffled order,
	// and SequenceMean averages the examples' mean NLLs.
	Beta2          float64 `json:",omitempty"`
	WarmupFrac     float64 `json:",omitempty"`
	MinLRFrac      float64 `json:",omitempty"`
	BatchSequences int     `json:",omitempty"`
	SequenceMean   bool    `json:",omitempty"`
}

// StepStats are one optimizer step's metrics, by name (loss, grpo_loss,
// opd_loss, kl, gate_mean, positive_shift, clip_frac, grad_norm, entropy,
// tokens_per_s, …).
type StepStats map[string]float64

// Learner is the trainer as the orchestrator uses it. Implementations hold
// the policy being trained, its optimizer and the frozen reference policy.
type Learner interface {
	// Rescore returns log p(ids[k] | ids[:k]) under the current weights
	// (entry 0 is 0), without gradients.
	Rescore(ctx context.Context, seqs [][]int) ([][]float32, error)
	// RescoreRef is Rescore under the frozen reference policy.
	RescoreRef(ctx context.Context, seqs [][]int) ([][]float32, error)
	// RescoreTeacher is Rescore under the distillation teacher (the
	// spec's Teacher checkpoint, or the current weights without one) and,
	// where want marks a position (want may be nil), the teacher's
	// distribution there: its topK most probable tokens, or the whole
	// vocabulary with topK 0.
	RescoreTeacher(ctx context.Context, seqs [][]int, want [][]bool, topK int) ([][]float32, [][]*TokenDist, error)
	// Step is one RL optimizer step at learning rate lr; a non-finite step
	// returns an error for which IsRefusal is true and leaves the weights
	// unchanged.
	Step(ctx context.Context, rows []Row, lr float64) (StepStats, error)
	// SFT fine-tunes on examples (stage 1).
	SFT(ctx context.Context, data []SFTExample, opt SFTOptions, progress func(step, steps int, loss float64)) error
	// Save writes a Hugging Face checkpoint plus optimizer state into dir
	// (atomically).
	Save(ctx context.Context, dir string) error
	Close()
}

// LearnerSpec says what to load.
type LearnerSpec struct {
	// Policy is the checkpoint to train from (with optimizer state when a
	// resumed run saved one); Reference is the frozen KL reference.
	Policy, Reference string
	// Teacher is the distillation teacher's checkpoint (rl.teacher_model;
	// "": the policy being trained scores its own teacher contexts).
	Teacher string
	RL      RLConfig
	Seed    uint64
	// Temperature is the rollouts' sampling temperature: the learner's
	// log-probs (ℓθ, recomputed ℓold, the teacher's and the reference's)
	// are of softmax(logits/Temperature), the distribution the tokens were
	// drawn from.
	Temperature float64
}

// LearnerFactory builds a Learner (cmd/seedctl wires the trainer's).
type LearnerFactory func(spec LearnerSpec) (Learner, error)

// IsRefusal reports whether err is a refused (non-finite) step.
func IsRefusal(err error) bool {
	var r *RefusedError
	return errors.As(err, &r)
}

// RefusedError marks a refused step; learners wrap their cause in it.
type RefusedError struct{ Err error }

func (e *RefusedError) Error() string { return "step refused: " + e.Err.Error() }
func (e *RefusedError) Unwrap() error { return e.Err }
