package trainer

import (
	"fmt"
	"math"
	"runtime"

	"github.com/sugarme/gotch"
)

// NLLBackward computes the mean negative log-likelihood of the unmasked
// targets (ids >= 0) and accumulates its gradient into the parameters. It is
// the core of SFT; call ZeroGrad between optimizer steps. A non-finite loss
// is returned as an error before any gradient is accumulated.
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
	lp := m.tokenLogProbsT(in, targets)
	if weights != nil {
		flat := make([]float32, 0, len(weights)*len(weights[0]))
		for _, row := range weights {
			flat = append(flat, row...)
		}
		w := must(fromSlice(flat, []int64{int64(len(weights)), int64(len(weights[0]))}).To(m.device, true))
		lp = must(lp.Mul(w, true))
		drop(w)
	}
	sum := must(lp.Sum(gotch.Float, true))
	l := mulScalar(sum, -1/denom, true)
	defer drop(l)
	loss = scalarFloat(l)
	if math.IsNaN(loss) || math.IsInf(loss, 0) {
		return loss, fmt.Errorf("NLL step: loss is %v", loss)
	}
	must0(l.Backward())
	m.afterBackward()
	return loss, nil
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
