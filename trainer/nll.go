package trainer

import (
	"fmt"
	"math"
	"runtime"
)

// NLLBackward computes the mean negative log-likelihood of the unmasked
// targets (ids >= 0) and accumulates its gradient into the parameters. It is
// the core of SFT; call ZeroGrad between optimizer steps. A non-finite
// log-prob is an error wrapping ErrNonFinite; the log-probs are read once,
// after the backward pass (headBackward's known derivatives), so the
// gradient has accumulated by then and the caller refuses the step and
// zeroes the gradients (TrainSFT does).
func (m *Model) NLLBackward(in Input, targets [][]int) (loss float64, err error) {
	return m.nllBackward(in, targets, nil, 0)
}

// nllBackward is NLLBackward with each target's log-prob scaled by its
// weight (nil: 1) and the sum divided by denom (0: the number of unmasked
// targets), for gradient accumulation across micro-batches.
func (m *Model) nllBackward(in Input, targets [][]int, weights [][]float32, denom float64) (loss float64, err error) {
	defer guard(&err, "NLL step")
	n := 0
	for _, row := range targets {
		for _, id := range row {
			if id >= 0 {
				n++
			}
		}
	}
	if n == 0 {
		return 0, fmt.Errorf("NLL step: no unmasked target tokens")
	}
	if denom == 0 {
		denom = float64(n)
	}
	_, width, err := in.shape()
	if err != nil {
		return 0, err
	}
	weight := func(b, k int) float64 {
		if weights == nil {
			return 1
		}
		return float64(weights[b][k])
	}
	// Each target's derivative, −weight/denom, is known before its
	// log-prob: the head runs without a read-back per chunk.
	known := make([]float32, len(targets)*width)
	for b, row := range targets {
		for k, id := range row {
			if id >= 0 {
				known[b*width+k] = float32(-weight(b, k) / denom)
			}
		}
	}
	sum := 0.0
	err = m.headBackward(in, targets, 1, entropyNone, known, func(j int, l, _ float64) (float64, float64, error) {
		b, k := j/width, j%width
		if targets[b][k] < 0 {
			return 0, 0, nil
		}
		if math.IsNaN(l) || math.IsInf(l, 0) {
			return 0, 0, fmt.Errorf("NLL step: log-prob %v at row %d position %d: %w", l, b, k, ErrNonFinite)
		}
		sum += weight(b, k) * l
		return float64(known[j]), 0, nil
	})
	if err != nil {
		return math.NaN(), err
	}
	return -sum / denom, nil
}

// ZeroGrad clears accumulated gradients. (gotch's Tensor.ZeroGrad lets its
// temporary grad handle be collected during the zeroing call.)
func (m *Model) ZeroGrad() {
	for _, p := range m.params {
		g, err := p.t.Grad(false)
		if err != nil {
			continue
		}
		if ok, _ := g.Defined(); ok {
			_ = g.Detach_()
			_ = g.Zero_()
		}
		runtime.KeepAlive(g)
		drop(g)
	}
}
