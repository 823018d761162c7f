package trainer

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"slices"
	"time"

	"github.com/sugarme/gotch/ts"
)

// StepBench is a timed training step: the NLL loss's forward and backward
// pass over random rows (the step BenchmarkTrainStep and the PyTorch eager
// peers time) and, with an optimizer, its AdamW update (gradients clipped
// to norm 1), on the model's device and in its precision.
type StepBench struct {
	Tokens, Row int
	// Seconds of each timed step (after one warm-up step), and of its
	// two phases: the loss's forward and backward pass, and the update
	// (gradient norm, clipping, AdamW). On CUDA the bench waits for the
	// device between the two, which real steps do not.
	Seconds, BackwardSeconds, UpdateSeconds []float64
	// AdamW is the update's kernel (Optimizer.Kernel), "" without one.
	AdamW string
	// TokensPerS is Tokens over the median step.
	TokensPerS float64
	// FLOPsPerToken is the model FLOPs of one token's forward and backward
	// pass (StepFLOPsPerToken; recomputation's extra forward not counted,
	// as MFU is usually reported).
	FLOPsPerToken float64
	Recompute     bool
	Update        bool
	Attention     string
	Plan          MemoryPlan
}

// StepFLOPsPerToken is the model FLOPs of one forward and backward token
// in rows of seq tokens: 6 per matmul parameter (embedding lookups
// excluded, the LM head included) plus the attention scores and values,
// 12·layers·seq·(heads·head_dim) (PaLM's accounting).
func StepFLOPsPerToken(c *ModelConfig, seq int) float64 {
	matmul := float64(c.ParamCount() - int64(c.VocabSize*c.HiddenSize)) // minus the embedding table
	matmul += float64(c.VocabSize * c.HiddenSize)                       // plus the head's matmul (tied or not)
	if !c.TieWordEmbeddings {
		matmul -= float64(c.VocabSize * c.HiddenSize) // ParamCount already has the separate head
	}
	attn := 12 * float64(c.NumHiddenLayers) * float64(seq) * float64(c.NumAttentionHeads*c.HeadDimension())
	return 6*matmul + attn
}

// BenchStep runs one warm-up step and steps timed steps of tokens random
// tokens in rows of row (one sequence per row, next-token targets); opt,
// when not nil, applies each step's update.
func (m *Model) BenchStep(opt *Optimizer, tokens, row, steps int, seed uint64) (StepBench, error) {
	return m.BenchStepProfiled(opt, tokens, row, steps, seed, "")
}

// BenchStepProfiled is BenchStep, then, when profile is not "", one more
// step under libtorch's profiler (Model.Profile), its Chrome trace written
// to profile. The timed steps run without the profiler.
func (m *Model) BenchStepProfiled(opt *Optimizer, tokens, row, steps int, seed uint64, profile string) (StepBench, error) {
	sb := StepBench{Tokens: tokens, Row: row, Recompute: m.recompute, Update: opt != nil, Attention: AttentionKernel()}
	if opt != nil {
		sb.AdamW = opt.Kernel()
	}
	if row < 2 || tokens < row || tokens%row != 0 || steps < 1 {
		return sb, fmt.Errorf("step bench: %d tokens in rows of %d, %d steps: want rows of at least 2 tokens that divide the tokens, and a step", tokens, row, steps)
	}
	var err error
	if sb.Plan, err = PlanMemory(MemoryInput{Model: m.cfg, DType: m.DType(), Tokens: tokens, RowTokens: row, Recompute: m.recompute, FusedAttention: sdpaAvailable(), CUDA: m.device.IsCuda()}); err != nil {
		return sb, err
	}
	sb.FLOPsPerToken = StepFLOPsPerToken(m.cfg, row)
	r := rand.New(rand.NewPCG(seed, 5))
	in := Input{IDs: make([][]int, tokens/row)}
	targets := make([][]int, len(in.IDs))
	for i := range in.IDs {
		ids := make([]int, row+1)
		for k := range ids {
			ids[k] = r.IntN(m.cfg.VocabSize)
		}
		in.IDs[i], targets[i] = ids[:row], ids[1:]
	}
	sync := func() error {
		if m.device.IsCuda() {
			if err := ts.CudaSynchronize(); err != nil {
				return fmt.Errorf("step bench: synchronising CUDA: %w", err)
			}
		}
		return nil
	}
	// As the training loops run their steps: on one OS thread (libtorch's
	// intra-op thread pool belongs to the calling thread; a step whose
	// calls wander between threads also wakes other threads' pools), with
	// the collector off and its finalizers run between steps.
	defer pinThread()()
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	step := func() (backward, update float64, err error) {
		quiesceGC()
		start := time.Now()
		if _, err := m.NLLBackward(in, targets); err != nil {
			return 0, 0, fmt.Errorf("step bench: %w", err)
		}
		if err := sync(); err != nil {
			return 0, 0, err
		}
		backward = time.Since(start).Seconds()
		if opt != nil {
			start = time.Now()
			if _, err := opt.Step(1); err != nil && !errors.Is(err, ErrNonFinite) {
				return 0, 0, fmt.Errorf("step bench: update: %w", err)
			}
			if err := sync(); err != nil {
				return 0, 0, err
			}
			update = time.Since(start).Seconds()
		}
		m.ZeroGrad()
		return backward, update, nil
	}
	if _, _, err := step(); err != nil { // warm-up: kernels chosen, caches filled
		return sb, err
	}
	for range steps {
		b, u, err := step()
		if err != nil {
			return sb, err
		}
		sb.Seconds = append(sb.Seconds, b+u)
		sb.BackwardSeconds = append(sb.BackwardSeconds, b)
		sb.UpdateSeconds = append(sb.UpdateSeconds, u)
	}
	sorted := slices.Sorted(slices.Values(sb.Seconds))
	sb.TokensPerS = float64(tokens) / sorted[len(sorted)/2]
	if profile != "" {
		if err := m.Profile(profile, func() error { _, _, err := step(); return err }); err != nil {
			return sb, fmt.Errorf("step bench: %w", err)
		}
	}
	return sb, nil
}
