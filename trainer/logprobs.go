package trainer

import (
	"fmt"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"
)

// TokenLogProbs scores targets[b][t] at each position of in without
// gradients, in float32. For next-token scoring pass targets = ids shifted
// left by one (the last position gets -1).
func (m *Model) TokenLogProbs(in Input, targets [][]int) (out [][]float32, err error) {
	return m.tokenLogProbs(in, targets, 1)
}

// tokenLogProbs is TokenLogProbs at a sampling temperature. Without a
// gradient only the targets' log-probs are needed: logit − logsumexp, so
// no second [B, T, vocabulary] tensor (the log-softmax) is made.
func (m *Model) tokenLogProbs(in Input, targets [][]int, temperature float64) (out [][]float32, err error) {
	defer guard(&err, "scoring tokens")
	withoutGrad(func() {
		b, t, err := in.shape()
		if err != nil {
			panic(torchError{err})
		}
		flat, keep, err := m.targetIndex(targets, b, t)
		if err != nil {
			panic(torchError{err})
		}
		// The head runs headChunkTokens positions at a time, as in
		// training (headBackward): at most one chunk's [positions,
		// vocabulary] logits exist at once, whatever the batch's B×T.
		n := b * t
		hN := m.forwardHidden(in)
		flatH := must(hN.Reshape([]int64{int64(n), int64(m.cfg.HiddenSize)}, true))
		idx := upload(flat, []int64{int64(n), 1}, m.device)
		k := upload(keep, []int64{int64(n)}, m.device)
		var parts []*ts.Tensor
		for lo := 0; lo < n; lo += headChunkTokens {
			c := min(headChunkTokens, n-lo)
			h := narrow(flatH, lo, c)
			logits := linear(h, m.lmHead, nil)
			drop(h)
			if temperature > 0 && temperature != 1 {
				logits = mulScalar(logits, 1/temperature, true)
			}
			lse := must(logits.Logsumexp([]int64{-1}, false, false))
			ic, kc := narrow(idx, lo, c), narrow(k, lo, c)
			g := must(must(logits.Gather(1, ic, false, true)).SqueezeDim(1, true))
			lp := must(g.Sub(lse, true))
			parts = append(parts, must(lp.Mul(kc, true)))
			drop(lse, ic, kc)
		}
		drop(flatH, idx, k)
		all := must(ts.Cat(parts, 0))
		drop(parts...)
		masked := must(all.View([]int64{int64(b), int64(t)}, true))
		out = rows2D(masked)
		drop(masked)
	})
	return out, nil
}

// targetIndex flattens targets [b][t] (−1: none) into gather indexes and
// a 0/1 mask.
func (m *Model) targetIndex(targets [][]int, b, t int) (flat []int64, keep []float32, err error) {
	if len(targets) != b {
		return nil, nil, fmt.Errorf("targets: %d rows for %d input rows", len(targets), b)
	}
	flat, keep = make([]int64, 0, b*t), make([]float32, 0, b*t)
	for i, row := range targets {
		if len(row) != t {
			return nil, nil, fmt.Errorf("targets: row %d has %d entries, want %d", i, len(row), t)
		}
		for j, id := range row {
			if id >= m.cfg.VocabSize {
				return nil, nil, fmt.Errorf("targets: id %d at row %d position %d is outside the vocabulary (%d)", id, i, j, m.cfg.VocabSize)
			}
			if id < 0 {
				flat, keep = append(flat, 0), append(keep, 0)
			} else {
				flat, keep = append(flat, int64(id)), append(keep, 1)
			}
		}
	}
	return flat, keep, nil
}

// Logits returns float32 logits [B][T][V] without gradients (small models:
// tests and inspection).
func (m *Model) Logits(in Input) (out [][][]float32, err error) {
	defer guard(&err, "computing logits")
	withoutGrad(func() {
		l := m.forward(in, nil)
		f := must(l.Totype(gotch.Float, true))
		sz := f.MustSize()
		vals := toSlice[float32](f)
		drop(f)
		b, t, v := int(sz[0]), int(sz[1]), int(sz[2])
		out = make([][][]float32, b)
		for i := range out {
			out[i] = make([][]float32, t)
			for j := range out[i] {
				out[i][j] = vals[(i*t+j)*v : (i*t+j+1)*v]
			}
		}
	})
	return out, nil
}

func rows2D(x *ts.Tensor) [][]float32 {
	f := must(x.Totype(gotch.Float, false))
	defer drop(f)
	sz := f.MustSize()
	vals := toSlice[float32](f)
	b, t := int(sz[0]), int(sz[1])
	out := make([][]float32, b)
	for i := range out {
		out[i] = vals[i*t : (i+1)*t]
	}
	return out
}

// Greedy extends prompt by up to maxNew argmax tokens, stopping after any
// id in stop. With useCache it decodes incrementally through a KV cache;
// without, it recomputes the whole prefix each step (the reference the cache
// is tested against).
func (m *Model) Greedy(prompt []int, maxNew int, stop []int, useCache bool) (out []int, err error) {
	if len(prompt) == 0 {
		return nil, fmt.Errorf("greedy decoding: empty prompt")
	}
	defer guard(&err, "greedy decoding")
	isStop := map[int]bool{}
	for _, s := range stop {
		isStop[s] = true
	}
	withoutGrad(func() {
		var cache *KVCache
		if useCache {
			cache = m.NewKVCache()
			defer cache.Free()
		}
		seq := append([]int(nil), prompt...)
		next := prompt
		for step := 0; step < maxNew; step++ {
			in := Input{IDs: [][]int{seq}}
			if useCache {
				in = Input{IDs: [][]int{next}}
			}
			logits := m.forward(in, cache)
			t := logits.MustSize()[1]
			last := must(logits.Narrow(1, t-1, 1, true))
			am := must(last.Argmax([]int64{-1}, false, true))
			id := int(scalarInt(am))
			drop(am)
			out = append(out, id)
			seq = append(seq, id)
			next = []int{id}
			if isStop[id] {
				break
			}
		}
	})
	return out, nil
}
