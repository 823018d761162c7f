package trainer

import (
	"fmt"
	"math"
	"runtime"
	"sort"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"
)

// TokenDist is a teacher's next-token distribution at one position, what
// the full-distribution distillation (DistillFull) reads.
type TokenDist struct {
	// IDs are the tokens LogP gives, the teacher's top k by probability;
	// the rest of the vocabulary holds the remaining mass 1 − Σ exp(LogP)
	// as one tail bucket. nil: LogP covers the whole vocabulary in id
	// order (no tail).
	IDs  []int32   `json:"ids,omitempty"`
	LogP []float32 `json:"logp"`
}

// tailFloor bounds the tail mass whose log is taken: a teacher whose top k
// hold all of its mass has log q_R = log 1e-12 there, not −∞.
const tailFloor = 1e-12

// tailLogP is log(1 − Σ exp(LogP)) over the top k, floored.
func (d *TokenDist) tailLogP() float64 {
	s := 0.0
	for _, l := range d.LogP {
		s += math.Exp(float64(l))
	}
	return math.Log(math.Max(1-s, tailFloor))
}

// check validates a distribution against the vocabulary size.
func (d *TokenDist) check(vocab int) error {
	if d.IDs == nil && len(d.LogP) != vocab {
		return fmt.Errorf("a whole-vocabulary teacher distribution has %d log-probs for a vocabulary of %d", len(d.LogP), vocab)
	}
	if d.IDs != nil {
		if len(d.IDs) != len(d.LogP) || len(d.IDs) == 0 || len(d.IDs) > vocab {
			return fmt.Errorf("a top-k teacher distribution has %d ids and %d log-probs (vocabulary %d)", len(d.IDs), len(d.LogP), vocab)
		}
		for _, id := range d.IDs {
			if id < 0 || int(id) >= vocab {
				return fmt.Errorf("teacher distribution id %d is outside the vocabulary (%d)", id, vocab)
			}
		}
	}
	s := 0.0
	for _, l := range d.LogP {
		if math.IsNaN(float64(l)) || l > 1e-4 {
			return fmt.Errorf("teacher log-prob %v: %w", l, ErrNonFinite)
		}
		s += math.Exp(float64(l))
	}
	if s > 1+1e-3 {
		return fmt.Errorf("teacher distribution sums to %.6f, above 1", s)
	}
	return nil
}

// distillKL is on-policy distillation's divergence of the policy's
// log-probs logp ([c, V], with a graph) from the teachers' distributions
// at local positions pos of the chunk: one value per position, with a
// graph. beta is TRL's generalized Jensen–Shannon coefficient: 1 the
// reverse KL Σ_v p(v)·(log p(v) − log q(v)), 0 the forward KL
// Σ_v q(v)·(log q(v) − log p(v)), between them β·KL(q‖m) + (1−β)·KL(p‖m)
// with m = β·q + (1−β)·p. Top-k distributions compare the k tokens one by
// one and the rest of the vocabulary as one bucket (p_R = 1 − Σ_k p, q_R
// likewise, both floored); every distribution of one call has the same
// shape.
func (m *Model) distillKL(logp *ts.Tensor, pos []int64, dists []*TokenDist, beta float64) *ts.Tensor {
	n := len(pos)
	k := len(dists[0].LogP)
	topk := dists[0].IDs != nil
	cols := k
	if topk {
		cols = k + 1 // the tail bucket
	}
	lq := make([]float32, 0, n*cols)
	var ids []int64
	for _, d := range dists {
		lq = append(lq, d.LogP...)
		if topk {
			for _, id := range d.IDs {
				ids = append(ids, int64(id))
			}
			lq = append(lq, float32(d.tailLogP()))
		}
	}
	sel := upload(pos, []int64{int64(n)}, m.device)
	lp := must(logp.IndexSelect(0, sel, false)) // [n, V]
	drop(sel)
	if topk {
		it := upload(ids, []int64{int64(n), int64(k)}, m.device)
		lpK := must(lp.Gather(1, it, false, true)) // [n, k]
		drop(it)
		// The tail: p_R = 1 − Σ_k p, floored like the teacher's.
		pK := must(lpK.Exp(false))
		pR := addScalar(mulScalar(must(pK.SumDimIntlist([]int64{-1}, true, gotch.Float, true)), -1, true), 1, true)
		fl := ts.FloatScalar(tailFloor)
		pR = must(pR.ClampMin(fl, true))
		runtime.KeepAlive(fl)
		lpR := must(pR.Log(true)) // [n, 1]
		lp = must(ts.Cat([]*ts.Tensor{lpK, lpR}, 1))
		drop(lpK, lpR)
	}
	defer drop(lp)
	lqT := upload(lq, []int64{int64(n), int64(cols)}, m.device)
	defer drop(lqT)
	// Σ exp(a)·(a − b) over the last dimension.
	kl := func(a, b *ts.Tensor) *ts.Tensor {
		ea := must(a.Exp(false))
		d := must(a.Sub(b, false))
		out := must(must(ea.Mul(d, true)).SumDimIntlist([]int64{-1}, false, gotch.Float, true))
		drop(d)
		return out
	}
	switch beta {
	case 1:
		return kl(lp, lqT)
	case 0:
		return kl(lqT, lp)
	}
	// log m = log(β·q + (1−β)·p), floored so 0·log 0 stays 0.
	qb := mulScalar(must(lqT.Exp(false)), beta, true)
	pb := mulScalar(must(lp.Exp(false)), 1-beta, true)
	mix := must(qb.Add(pb, true))
	drop(pb)
	fl := ts.FloatScalar(1e-30)
	mix = must(mix.ClampMin(fl, true))
	runtime.KeepAlive(fl)
	lm := must(mix.Log(true))
	defer drop(lm)
	a := mulScalar(kl(lqT, lm), beta, true)
	b := mulScalar(kl(lp, lm), 1-beta, true)
	out := must(a.Add(b, true))
	drop(b)
	return out
}

// RescoreDistAt is RescoreAt that also returns, where want[i][k] is set,
// the distribution of the token at position k of seqs[i] given the ones
// before it: its topK most probable tokens with their log-probs, or the
// whole vocabulary (IDs nil) when topK is 0 or not below the vocabulary.
// The head runs a chunk of positions at a time, so at most one chunk's
// [positions, vocabulary] log-probs exist at once.
func (m *Model) RescoreDistAt(seqs [][]int, want [][]bool, maxTokens int, temperature float64, topK int) (lps [][]float32, dists [][]*TokenDist, err error) {
	if len(want) != len(seqs) {
		return nil, nil, fmt.Errorf("rescore: %d sequences but %d position masks", len(seqs), len(want))
	}
	if maxTokens < 2 || temperature < 0 || math.IsNaN(temperature) || topK < 0 {
		return nil, nil, fmt.Errorf("rescore: max tokens %d (want ≥ 2), temperature %v (≥ 0), top k %d (≥ 0)", maxTokens, temperature, topK)
	}
	lens := make([]int, len(seqs))
	for i, s := range seqs {
		if len(s) < 2 || len(want[i]) != len(s) {
			return nil, nil, fmt.Errorf("rescore: sequence %d has %d ids and %d position marks, need at least 2 and one per id", i, len(s), len(want[i]))
		}
		for k, id := range s {
			if id < 0 || id >= m.cfg.VocabSize {
				return nil, nil, fmt.Errorf("rescore: id %d of sequence %d at %d is outside the vocabulary (%d)", id, i, k, m.cfg.VocabSize)
			}
		}
		if want[i][0] {
			return nil, nil, fmt.Errorf("rescore: sequence %d asks for position 0's distribution (nothing predicts it)", i)
		}
		lens[i] = len(s) - 1
	}
	if topK >= m.cfg.VocabSize {
		topK = 0
	}
	lps, dists = make([][]float32, len(seqs)), make([][]*TokenDist, len(seqs))
	defer guard(&err, "rescoring with distributions")
	for _, mb := range microBatches(lens, maxTokens) {
		in, targets, width := scoringBatch(seqs, lens, mb)
		var wantFlat []int // flat positions whose distribution is wanted
		for b, i := range mb {
			for k := 0; k < lens[i]; k++ {
				if want[i][k+1] {
					wantFlat = append(wantFlat, b*width+k)
				}
			}
		}
		rows, got, err := m.distLogProbs(in, targets, temperature, topK, wantFlat)
		if err != nil {
			return nil, nil, err
		}
		for b, i := range mb {
			o := make([]float32, lens[i]+1)
			copy(o[1:], rows[b][:lens[i]])
			lps[i] = o
			dists[i] = make([]*TokenDist, lens[i]+1)
		}
		for j, f := range wantFlat {
			b, k := f/width, f%width
			dists[mb[b]][k+1] = got[j]
		}
	}
	return lps, dists, nil
}

// distLogProbs scores targets (as tokenLogProbs) and returns the
// distributions at the flat positions wanted (sorted ascending).
func (m *Model) distLogProbs(in Input, targets [][]int, temperature float64, topK int, wanted []int) (out [][]float32, dists []*TokenDist, err error) {
	if !sort.IntsAreSorted(wanted) {
		return nil, nil, fmt.Errorf("distLogProbs: wanted positions must be sorted")
	}
	defer guard(&err, "scoring distributions")
	withoutGrad(func() {
		b, t, err := in.shape()
		if err != nil {
			panic(torchError{err})
		}
		flat, keep, err := m.targetIndex(targets, b, t)
		if err != nil {
			panic(torchError{err})
		}
		n := b * t
		hN := m.forwardHidden(in)
		flatH := must(hN.Reshape([]int64{int64(n), int64(m.cfg.HiddenSize)}, true))
		idx := upload(flat, []int64{int64(n), 1}, m.device)
		kt := upload(keep, []int64{int64(n)}, m.device)
		var parts []*ts.Tensor
		w := 0 // next wanted position
		V := m.cfg.VocabSize
		for lo := 0; lo < n; lo += headChunkTokens {
			c := min(headChunkTokens, n-lo)
			h := narrow(flatH, lo, c)
			logits := linear(h, m.lmHead, nil)
			drop(h)
			if temperature > 0 && temperature != 1 {
				logits = mulScalar(logits, 1/temperature, true)
			}
			logp := must(logits.LogSoftmax(-1, gotch.Float, true))
			ic, kc := narrow(idx, lo, c), narrow(kt, lo, c)
			g := must(must(logp.Gather(1, ic, false, false)).SqueezeDim(1, true))
			parts = append(parts, must(g.Mul(kc, true)))
			drop(ic, kc)
			var local []int64
			for ; w < len(wanted) && wanted[w] < lo+c; w++ {
				local = append(local, int64(wanted[w]-lo))
			}
			if len(local) > 0 {
				sel := upload(local, []int64{int64(len(local))}, m.device)
				rowsT := must(logp.IndexSelect(0, sel, false))
				drop(sel)
				if topK == 0 {
					v := toSlice[float32](rowsT)
					drop(rowsT)
					for r := range local {
						dists = append(dists, &TokenDist{LogP: v[r*V : (r+1)*V : (r+1)*V]})
					}
				} else {
					vals, ids := must2(rowsT.Topk(int64(topK), -1, true, true, true))
					v, iv := toSlice[float32](vals), toSlice[int64](ids)
					drop(vals, ids)
					for r := range local {
						d := &TokenDist{LogP: v[r*topK : (r+1)*topK : (r+1)*topK], IDs: make([]int32, topK)}
						for q := range d.IDs {
							d.IDs[q] = int32(iv[r*topK+q])
						}
						dists = append(dists, d)
					}
				}
			}
			drop(logp)
		}
		drop(flatH, idx, kt)
		all := must(ts.Cat(parts, 0))
		drop(parts...)
		masked := must(all.View([]int64{int64(b), int64(t)}, true))
		out = rows2D(masked)
		drop(masked)
	})
	return out, dists, nil
}

// must2 is must for a call that returns two tensors.
func must2(a, b *ts.Tensor, err error) (*ts.Tensor, *ts.Tensor) {
	if err != nil {
		panic(torchError{err})
	}
	return a, b
}
