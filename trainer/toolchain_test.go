package trainer

import (
	"math"
	"testing"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/nn"
	"github.com/sugarme/gotch/ts"
)

// TestToolchainTrainsTinyModel proves gotch and libtorch work end to end on
// this machine: forward, log-softmax/gather (the per-token log-prob primitive
// the trainer is built on), backward and AdamW must take a tiny next-token
// model from its random-init loss (at least chance, ln 11 ≈ 2.40 nats) to
// near-zero loss on modular addition.
func TestToolchainTrainsTinyModel(t *testing.T) {
	const (
		vocab     = 11
		dim       = 16
		hidden    = 64
		steps     = 400
		threshold = 0.05 // nats per token
	)
	var ctxIDs, targets []int64
	for a := int64(0); a < vocab; a++ {
		for b := int64(0); b < vocab; b++ {
			ctxIDs = append(ctxIDs, a, b)
			targets = append(targets, (a+b)%vocab)
		}
	}
	n := int64(len(targets))
	x := ts.MustOfSlice(ctxIDs).MustView([]int64{n, 2}, true)
	y := ts.MustOfSlice(targets).MustView([]int64{n, 1}, true)

	vs := nn.NewVarStore(gotch.CPU)
	root := vs.Root()
	emb := nn.NewEmbedding(root.Sub("embed"), vocab, dim, nn.DefaultEmbeddingConfig())
	l1 := nn.NewLinear(root.Sub("l1"), 2*dim, hidden, nn.DefaultLinearConfig())
	l2 := nn.NewLinear(root.Sub("l2"), hidden, vocab, nn.DefaultLinearConfig())
	opt, err := nn.DefaultAdamWConfig().Build(vs, 1e-2)
	if err != nil {
		t.Fatalf("building AdamW: %v", err)
	}

	// The forward keeps every tensor it passes to libtorch referenced until
	// the call returns, rather than using gotch's nn layers' Forward, whose
	// temporaries can be freed by their finalizers mid-call (seen as a
	// SIGSEGV in CI).
	lossAt := func() *ts.Tensor {
		e := must(ts.Embedding(emb.Ws, x, -1, false, false))
		h := must(e.View([]int64{n, 2 * dim}, true))
		// gotch's Linear keeps its weight as [in, out].
		h1 := must(must(h.Matmul(l1.Ws, false)).Add(l1.Bs, true))
		drop(h)
		a := must(h1.Tanh(true))
		logits := must(must(a.Matmul(l2.Ws, false)).Add(l2.Bs, true))
		drop(a)
		logp := must(logits.LogSoftmax(-1, gotch.Float, true))
		tok := must(logp.Gather(1, y, false, true))
		return must(must(tok.Mean(gotch.Float, true)).Neg(true))
	}

	first := math.NaN()
	var last float64
	for step := 0; step < steps; step++ {
		loss := lossAt()
		last = scalarFloat(loss)
		if step == 0 {
			first = last
			if first < 1 {
				t.Fatalf("untrained loss %.3f is already low: the task proves nothing", first)
			}
		}
		if math.IsNaN(last) || math.IsInf(last, 0) {
			t.Fatalf("step %d: loss is %v", step, last)
		}
		if err := opt.BackwardStep(loss); err != nil {
			t.Fatalf("step %d: backward/step: %v", step, err)
		}
		loss.MustDrop()
		if last < threshold {
			t.Logf("loss %.3f → %.4f after %d steps", first, last, step+1)
			return
		}
	}
	t.Fatalf("loss %.3f → %.4f after %d steps; want below %.2f", first, last, steps, threshold)
}
