package trainer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"runtime/debug"
	"slices"
	"sort"
	"time"
	"unsafe"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/libtch/seedops"
)

// ErrNonFinite means a loss or gradient was NaN or Inf; the step was refused.
var ErrNonFinite = errors.New("non-finite loss or gradient")

// GradNorm is the global L2 norm of the accumulated gradients.
func (o *Optimizer) GradNorm() (norm float64, err error) {
	defer guard(&err, "gradient norm")
	if o.kernel != AdamWGo {
		params := make([]unsafe.Pointer, len(o.m.params))
		for i, p := range o.m.params {
			params[i] = p.t.Ctensor()
		}
		norm, err = seedops.GradNorm(params)
		runtime.KeepAlive(o.m.params)
		if err != nil {
			return 0, fmt.Errorf("%w: %w", ErrTorch, err)
		}
		return norm, nil
	}
	withoutGrad(func() {
		sum := 0.0
		for _, p := range o.m.params {
			g := must(p.t.Grad(false))
			if !g.MustDefined() {
				drop(g)
				continue
			}
			if g.DType() != gotch.Float { // bfloat16 gradients: square in float32
				gf := must(g.Totype(gotch.Float, false))
				drop(g)
				g = gf
			}
			sq := must(must(g.Square(false)).Sum(gotch.Double, true))
			sum += scalarFloat(sq)
			drop(sq, g)
		}
		norm = math.Sqrt(sum)
	})
	return norm, nil
}

// Step clips gradients to maxNorm (0: no clipping), applies AdamW and clears
// the gradients. A non-finite gradient norm refuses the step: gradients are
// cleared, the weights are untouched and ErrNonFinite is returned.
func (o *Optimizer) Step(maxNorm float64) (norm float64, err error) {
	norm, err = o.GradNorm()
	if err != nil {
		return 0, err
	}
	defer guard(&err, "optimizer step")
	if math.IsNaN(norm) || math.IsInf(norm, 0) {
		o.m.ZeroGrad()
		return norm, fmt.Errorf("gradient norm %v: %w", norm, ErrNonFinite)
	}
	scale := 1.0
	if maxNorm > 0 && norm > maxNorm {
		scale = maxNorm / (norm + 1e-6)
	}
	o.adamStep(scale)
	o.m.ZeroGrad()
	if o.owner != nil {
		if err := o.gatherWeights(); err != nil {
			return norm, err
		}
	}
	return norm, nil
}

// SFTExample is one training sequence; Loss[i] marks positions whose token
// is trained on (predicted from the tokens before it).
type SFTExample struct {
	IDs  []int
	Loss []bool
	// Weight scales the example's loss (0: 1). Weight k trains like k
	// copies of the example in the epoch, for the compute of one.
	Weight float64 `json:",omitempty"`
}

// weight is the example's loss weight.
func (e SFTExample) weight() float64 {
	if e.Weight == 0 {
		return 1
	}
	return e.Weight
}

// SFTConfig configures supervised fine-tuning.
type SFTConfig struct {
	Epochs      float64 // may be fractional
	BatchTokens int     // padded tokens per optimizer step
	MaxLen      int     // longer examples are rejected
	LR          float64
	MinLRFrac   float64 // cosine decays to LR·MinLRFrac
	WarmupFrac  float64 // share of steps with linear warm-up
	WeightDecay float64
	ClipNorm    float64
	Seed        uint64
	// MaxRefusals stops training after this many non-finite steps in a row.
	MaxRefusals int
	// MicroBatchTokens bounds the padded tokens of one forward/backward
	// (a longer row is a micro-batch of its own); a step's gradients
	// accumulate over its micro-batches. Below BatchTokens they are formed
	// from rows of similar length; 0 or at least BatchTokens keeps the
	// step's rows in batch order (one micro-batch per step).
	MicroBatchTokens int `json:",omitempty"`
	// Pack puts several short examples into one row (each attends only to
	// itself, positions restart), so little compute goes to padding.
	Pack bool `json:",omitempty"`
	// Beta2 is AdamW's second-moment decay (0: 0.999).
	Beta2 float64 `json:",omitempty"`
	// BatchSequences, when positive, makes each optimizer step this many
	// examples drawn in shuffled order (examples of every length mixed, as
	// verl's SFT trainer batches) instead of length-sorted batches of
	// BatchTokens padded tokens; BatchTokens then bounds one forward.
	BatchSequences int `json:",omitempty"`
	// SequenceMean makes a step's loss the (weighted) mean over its
	// examples of each example's mean NLL per trained token (verl's SFT
	// loss), instead of the mean over all the step's trained tokens.
	SequenceMean bool `json:",omitempty"`
}

// DefaultSFTConfig suits tiny models on CPU.
func DefaultSFTConfig() SFTConfig {
	return SFTConfig{Epochs: 1, BatchTokens: 4096, MaxLen: 2048, LR: 3e-3, MinLRFrac: 0.1, WarmupFrac: 0.05, WeightDecay: 0.01, ClipNorm: 1, Seed: 1, MaxRefusals: 5}
}

// Validate names the first bad field.
func (c SFTConfig) Validate() error {
	switch {
	case c.Epochs <= 0:
		return fmt.Errorf("sft config: epochs %v must be positive", c.Epochs)
	case c.BatchTokens < 1 || c.MaxLen < 2 || c.MaxLen > c.BatchTokens:
		return fmt.Errorf("sft config: need 2 <= max_len (%d) <= batch_tokens (%d)", c.MaxLen, c.BatchTokens)
	case c.LR <= 0 || c.MinLRFrac < 0 || c.MinLRFrac > 1 || c.WarmupFrac < 0 || c.WarmupFrac >= 1:
		return fmt.Errorf("sft config: lr %v must be positive, min_lr_frac and warmup_frac in [0, 1)", c.LR)
	case c.MaxRefusals < 1:
		return fmt.Errorf("sft config: max_refusals %d must be at least 1", c.MaxRefusals)
	case c.MicroBatchTokens < 0:
		return fmt.Errorf("sft config: micro_batch_tokens %d must not be negative", c.MicroBatchTokens)
	case c.Beta2 < 0 || c.Beta2 >= 1:
		return fmt.Errorf("sft config: beta2 %v must be in [0, 1) (0: 0.999)", c.Beta2)
	case c.BatchSequences < 0:
		return fmt.Errorf("sft config: batch_sequences %d must not be negative", c.BatchSequences)
	}
	return nil
}

// SFTProgress is reported after every optimizer step.
type SFTProgress struct {
	Step, Steps int
	Loss        float64 // mean over the step's trained tokens
	GradNorm    float64
	LR          float64
	Tokens      int // trained tokens so far
	Elapsed     time.Duration
}

// lrAt is linear warm-up then cosine decay.
func (c SFTConfig) lrAt(step, steps int) float64 {
	warm := int(c.WarmupFrac * float64(steps))
	if step < warm {
		return c.LR * float64(step+1) / float64(warm+1)
	}
	p := float64(step-warm) / math.Max(1, float64(steps-warm))
	return c.LR * (c.MinLRFrac + (1-c.MinLRFrac)*0.5*(1+math.Cos(math.Pi*p)))
}

// bucketSize is how many shuffled examples are grouped by length class
// together before batching; lengthClass is the width of a class in tokens.
const (
	bucketSize  = 512
	lengthClass = 256
)

// batches groups shuffled examples so each batch's padded size stays within
// BatchTokens. Within buckets of bucketSize shuffled examples, examples are
// ordered by length class (lengthClass tokens wide; random order inside a
// class) and the batches shuffled again: a few long examples (skill-writing
// prompts) mixed into batches of short ones (acting turns) padded a third of
// every step. Classes are coarse on purpose: batches sorted by exact length
// learned a copy task half as well (each batch then teaches one length).
func (c SFTConfig) batches(data []SFTExample, r *rand.Rand) [][]int {
	order := r.Perm(len(data))
	if c.BatchSequences > 0 {
		var out [][]int
		for lo := 0; lo < len(order); lo += c.BatchSequences {
			out = append(out, order[lo:min(lo+c.BatchSequences, len(order))])
		}
		return out
	}
	length := func(i int) int { return len(data[i].IDs) }
	for lo := 0; lo < len(order); lo += bucketSize {
		b := order[lo:min(lo+bucketSize, len(order))]
		sort.SliceStable(b, func(x, y int) bool { return length(b[x])/lengthClass < length(b[y])/lengthClass })
	}
	out := groupPadded(order, length, c.BatchTokens)
	r.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// TrainSFT fine-tunes m on data: next-token NLL on the marked tokens, AdamW,
// clipping, warm-up and cosine decay. Deterministic for a seed.
func TrainSFT(ctx context.Context, m *Model, data []SFTExample, cfg SFTConfig, progress func(SFTProgress)) error {
	return trainSFT(ctx, m, data, cfg, nil, progress)
}

// TrainSFTDist is TrainSFT as one rank of a data-parallel group: every
// rank holds the same data and seed, so all plan the same steps; each
// computes the gradients of its share of each step's rows (row i goes to
// rank i mod World), scaled by the whole step's token count, the
// gradients are summed across the group and every rank takes the same
// step. The weights start as rank 0's. The result equals TrainSFT's to
// float rounding. A nil group is TrainSFT.
func TrainSFTDist(ctx context.Context, m *Model, data []SFTExample, cfg SFTConfig, g *ProcessGroup, progress func(SFTProgress)) error {
	return trainSFT(ctx, m, data, cfg, g, progress)
}

func trainSFT(ctx context.Context, m *Model, data []SFTExample, cfg SFTConfig, g *ProcessGroup, progress func(SFTProgress)) error {
	defer pinThread()()
	if err := cfg.Validate(); err != nil {
		return err
	}
	if len(data) == 0 {
		return errors.New("sft: no examples")
	}
	for i, ex := range data {
		if len(ex.IDs) != len(ex.Loss) || len(ex.IDs) < 2 || len(ex.IDs) > cfg.MaxLen {
			return fmt.Errorf("sft: example %d has %d ids, %d loss marks (want equal, 2..%d)", i, len(ex.IDs), len(ex.Loss), cfg.MaxLen)
		}
		if !(ex.Weight >= 0) || math.IsInf(ex.Weight, 0) {
			return fmt.Errorf("sft: example %d has weight %v (want a finite weight >= 0; 0 means 1)", i, ex.Weight)
		}
	}
	opt, err := m.NewAdamW(cfg.LR, cfg.WeightDecay)
	if err != nil {
		return err
	}
	if cfg.Beta2 > 0 {
		opt.beta2 = cfg.Beta2
	}
	if cfg.SequenceMean {
		// Weight w/n for an example of n trained tokens: the step's
		// weighted token mean becomes the mean of the examples' means.
		data = slices.Clone(data)
		for i := range data {
			if n := data[i].trained(); n > 0 {
				data[i].Weight = data[i].weight() / float64(n)
			}
		}
	}
	if g != nil {
		if err := m.BroadcastParams(g, 0); err != nil {
			return fmt.Errorf("sft: %w", err)
		}
	}
	r := rand.New(rand.NewPCG(cfg.Seed, 17))
	var plan [][]int
	for e := 0; float64(e) < cfg.Epochs; e++ {
		bs := cfg.batches(data, r)
		if frac := cfg.Epochs - float64(e); frac < 1 {
			bs = bs[:max(1, int(frac*float64(len(bs))))]
		}
		plan = append(plan, bs...)
	}
	// Automatic GC is off while training; it runs between steps instead
	// (see quiesceGC). Each step frees its tensors explicitly, so memory
	// stays bounded.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	start := time.Now()
	tokens, refusals := 0, 0
	for step, batch := range plan {
		if err := ctx.Err(); err != nil {
			return err
		}
		quiesceGC()
		lr := cfg.lrAt(step, len(plan))
		opt.SetLR(lr)
		loss, err := cfg.accumulate(m, data, batch, g)
		if g != nil {
			loss, err = reduceSFTStep(m, g, loss, err)
		}
		var norm float64
		if err == nil {
			norm, err = opt.Step(cfg.ClipNorm)
		} else {
			m.ZeroGrad()
		}
		if err != nil {
			if !errors.Is(err, ErrNonFinite) && !math.IsNaN(loss) && !math.IsInf(loss, 0) {
				return fmt.Errorf("sft step %d: %w", step, err)
			}
			refusals++
			if refusals >= cfg.MaxRefusals {
				return fmt.Errorf("sft: %d non-finite steps in a row (last at step %d): %w", refusals, step, ErrNonFinite)
			}
			continue
		}
		refusals = 0
		tokens += countTrained(data, batch)
		if progress != nil {
			progress(SFTProgress{Step: step + 1, Steps: len(plan), Loss: loss, GradNorm: norm, LR: lr, Tokens: tokens, Elapsed: time.Since(start)})
		}
	}
	return nil
}

func countTrained(data []SFTExample, batch []int) int {
	n := 0
	for _, i := range batch {
		n += data[i].trained()
	}
	return n
}

// trained is the number of the example's tokens trained on.
func (e SFTExample) trained() int {
	n := 0
	for _, l := range e.Loss[1:] {
		if l {
			n++
		}
	}
	return n
}

// weightedTrained is countTrained with each token counted at its
// example's weight: the denominator of the step's weighted mean NLL.
func weightedTrained(data []SFTExample, batch []int) float64 {
	n := 0.0
	for _, i := range batch {
		n += data[i].weight() * float64(data[i].trained())
	}
	return n
}

// accumulate runs one step's forward/backward passes: the batch's examples
// split into micro-batches (packed into rows when Pack), each gradient
// scaled by the whole step's (weighted) trained-token count, so the
// accumulated gradient is that of the step's weighted mean NLL. It returns
// that mean.
// With a group, only this rank's share of the rows (row i to rank i mod
// World) is computed; the scale is still the whole step's count.
func (c SFTConfig) accumulate(m *Model, data []SFTExample, batch []int, g *ProcessGroup) (float64, error) {
	total := weightedTrained(data, batch)
	if total == 0 {
		return 0, fmt.Errorf("sft: a batch of %d examples has no trained tokens", len(batch))
	}
	var rows [][]int // example indices per row
	if c.Pack {
		rows = packRows(data, batch, c.MaxLen)
	} else {
		for _, i := range batch {
			rows = append(rows, []int{i})
		}
	}
	if g != nil {
		rows = RankShare(rows, g.Rank(), g.World())
	}
	// Micro-batches of rows of similar length (microBatches), each padded
	// only to its own longest row; the step's gradient is the same sum.
	// Without a limit below the step's size the rows stay in batch order
	// (one padded batch unless packed rows overflow it), as SFT ran before
	// micro-batches were sorted: the same weights as then.
	lens := make([]int, len(rows))
	order := make([]int, len(rows))
	for i, r := range rows {
		lens[i], order[i] = rowLen(data, r), i
	}
	var groups [][]int
	if c.MicroBatchTokens > 0 && c.MicroBatchTokens < c.BatchTokens {
		groups = microBatches(lens, c.MicroBatchTokens)
	} else {
		groups = groupPadded(order, func(i int) int { return lens[i] }, cmp.Or(c.MicroBatchTokens, c.BatchTokens))
	}
	loss := 0.0
	for _, mb := range groups {
		group := make([][]int, len(mb))
		for k, i := range mb {
			group[k] = rows[i]
		}
		in, targets, weights, n := sftRows(data, group)
		if n == 0 {
			continue
		}
		l, err := m.nllBackward(in, targets, weights, total)
		if err != nil {
			return loss, err
		}
		loss += l
	}
	return loss, nil
}

// reduceSFTStep joins one rank's part of an SFT step to the group's: the
// losses are summed and a failure on any rank (a non-finite loss) fails
// the step on every rank, so no rank waits in a collective the others
// skipped; otherwise the gradients are summed.
func reduceSFTStep(m *Model, g *ProcessGroup, loss float64, stepErr error) (float64, error) {
	failed := 0.0
	if stepErr != nil {
		failed = 1
	}
	v, err := g.SumFloats([]float64{loss, failed})
	if err != nil {
		return loss, fmt.Errorf("sft: %w", err)
	}
	switch {
	case stepErr != nil:
		return loss, stepErr
	case v[1] > 0:
		return v[0], fmt.Errorf("sft: another rank's part of the step failed: %w", ErrNonFinite)
	}
	if err := m.allReduceGrads(g); err != nil {
		return v[0], fmt.Errorf("sft: %w", err)
	}
	return v[0], nil
}

// rowLen is the input length of a row holding the given examples.
func rowLen(data []SFTExample, row []int) int {
	n := 0
	for _, i := range row {
		n += len(data[i].IDs) - 1
	}
	return n
}

// packRows fills rows of at most maxLen input tokens first-fit, longest
// examples first.
func packRows(data []SFTExample, batch []int, maxLen int) [][]int {
	order := append([]int(nil), batch...)
	sort.SliceStable(order, func(a, b int) bool { return len(data[order[a]].IDs) > len(data[order[b]].IDs) })
	var rows [][]int
	var used []int
	for _, i := range order {
		l := len(data[i].IDs) - 1
		placed := false
		for r := range rows {
			if used[r]+l <= maxLen {
				rows[r] = append(rows[r], i)
				used[r] += l
				placed = true
				break
			}
		}
		if !placed {
			rows = append(rows, []int{i})
			used = append(used, l)
		}
	}
	return rows
}

// sftRows builds the model input for rows of (packed) examples: each
// example is its own segment with positions from 0. weights is nil when
// every example weighs 1, else each target's example weight.
func sftRows(data []SFTExample, rows [][]int) (in Input, targets [][]int, weights [][]float32, n int) {
	weighted := false
	for _, r := range rows {
		for _, i := range r {
			weighted = weighted || data[i].weight() != 1
		}
	}
	width := 0
	for _, r := range rows {
		width = max(width, rowLen(data, r))
	}
	in = Input{IDs: make([][]int, len(rows)), Segments: make([][]int, len(rows)), Positions: make([][]int, len(rows))}
	targets = make([][]int, len(rows))
	if weighted {
		weights = make([][]float32, len(rows))
	}
	for b, r := range rows {
		in.IDs[b], in.Segments[b], in.Positions[b], targets[b] = make([]int, width), make([]int, width), make([]int, width), make([]int, width)
		for k := range targets[b] {
			targets[b][k] = -1
		}
		if weighted {
			weights[b] = make([]float32, width)
		}
		at := 0
		for seg, i := range r {
			ex := data[i]
			for k := 0; k < len(ex.IDs)-1; k++ {
				in.IDs[b][at] = ex.IDs[k]
				in.Segments[b][at] = seg + 1
				in.Positions[b][at] = k
				if ex.Loss[k+1] {
					targets[b][at] = ex.IDs[k+1]
					n++
					if weighted {
						weights[b][at] = float32(ex.weight())
					}
				}
				at++
			}
		}
	}
	return in, targets, weights, n
}
