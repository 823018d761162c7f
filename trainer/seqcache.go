package trainer

import (
	"errors"
	"fmt"
	"math"

	"github.com/sugarme/gotch/ts"
)

// SeqCache is the KV cache of one sequence. Servers keep one per request and
// advance many together with DecodeBatch (continuous batching); a finished
// sequence's cache can seed a later request that extends it (prefix reuse).
// A SeqCache is not safe for concurrent use.
type SeqCache struct {
	model  *Model
	k, v   []*ts.Tensor // per layer [1, nKV, S, headDim]
	tokens []int
}

// ErrCacheModel means a cache was used with a model other than its own.
var ErrCacheModel = errors.New("sequence cache belongs to another model")

// NewSeqCache returns an empty cache for one sequence.
func (m *Model) NewSeqCache() *SeqCache {
	return &SeqCache{model: m, k: make([]*ts.Tensor, len(m.layers)), v: make([]*ts.Tensor, len(m.layers))}
}

// Len is the number of cached positions.
func (c *SeqCache) Len() int { return len(c.tokens) }

// Tokens are the ids whose keys and values are cached.
func (c *SeqCache) Tokens() []int { return append([]int(nil), c.tokens...) }

// Model is the model the cache belongs to.
func (c *SeqCache) Model() *Model { return c.model }

// Free releases the cached tensors.
func (c *SeqCache) Free() {
	for i := range c.k {
		drop(c.k[i], c.v[i])
		c.k[i], c.v[i] = nil, nil
	}
	c.tokens = nil
}

// Fork returns a new cache holding the first n positions of c.
func (c *SeqCache) Fork(n int) (out *SeqCache, err error) {
	if n < 0 || n > c.Len() {
		return nil, fmt.Errorf("forking a %d-token cache at %d", c.Len(), n)
	}
	defer guard(&err, "forking a sequence cache")
	out = c.model.NewSeqCache()
	out.tokens = append([]int(nil), c.tokens[:n]...)
	if n == 0 {
		return out, nil
	}
	for i := range c.k {
		out.k[i] = must(c.k[i].Narrow(2, 0, int64(n), false))
		out.v[i] = must(c.v[i].Narrow(2, 0, int64(n), false))
	}
	return out, nil
}

func (c *SeqCache) extend(li int, k, v *ts.Tensor) (*ts.Tensor, *ts.Tensor) {
	return appendKV(&c.k[li], &c.v[li], k, v)
}

// Extend feeds ids to one sequence, appending them to its cache, and returns
// the float32 logits after the last of them (the next-token distribution).
func (m *Model) Extend(c *SeqCache, ids []int) (last []float32, err error) {
	if c.model != m {
		return nil, ErrCacheModel
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("extending a sequence: no tokens")
	}
	defer guard(&err, "extending a sequence")
	past := c.Len()
	flat := make([]int64, len(ids))
	pos := make([]float32, len(ids))
	segs := make([]int, len(ids))
	for i, id := range ids {
		if id < 0 || id >= m.cfg.VocabSize {
			return nil, fmt.Errorf("extending a sequence: token id %d is outside the vocabulary (%d)", id, m.cfg.VocabSize)
		}
		flat[i], pos[i], segs[i] = int64(id), float32(past+i), 1
	}
	keySegs := make([]int, past+len(ids))
	for i := range keySegs {
		keySegs[i] = 1
	}
	withoutGrad(func() {
		mask := &attnMask{m: m, qSegs: [][]int{segs}, kSegs: [][]int{keySegs}, past: past}
		logits := m.run(flat, pos, 1, int64(len(ids)), mask, c)
		mask.free()
		lastT := must(must(logits.Narrow(1, int64(len(ids)-1), 1, true)).View([]int64{1, -1}, true))
		last = rows2D(lastT)[0]
		drop(lastT)
	})
	c.tokens = append(c.tokens, ids...)
	return last, nil
}

// batchStore lets sequences of different lengths attend in one batch: each
// row's past keys are left-padded to the longest, and the padding is masked.
type batchStore struct {
	seqs []*SeqCache
	smax int
}

func (s *batchStore) extend(li int, k, v *ts.Tensor) (*ts.Tensor, *ts.Tensor) {
	sz := k.MustSize() // [B, nKV, 1, hd]
	var kp, vp []*ts.Tensor
	var owned []*ts.Tensor
	for _, c := range s.seqs {
		n := c.Len()
		kb, vb := c.k[li], c.v[li]
		if pad := s.smax - n; pad > 0 {
			z := must(ts.Zeros([]int64{1, sz[1], int64(pad), sz[3]}, k.DType(), k.MustDevice()))
			owned = append(owned, z)
			if n > 0 {
				kb = must(ts.Cat([]*ts.Tensor{z, kb}, 2))
				vb = must(ts.Cat([]*ts.Tensor{z, vb}, 2))
				owned = append(owned, kb, vb)
			} else {
				kb, vb = z, z
			}
		}
		kp, vp = append(kp, kb), append(vp, vb)
	}
	var K, V *ts.Tensor
	if s.smax > 0 {
		kPast := must(ts.Cat(kp, 0))
		vPast := must(ts.Cat(vp, 0))
		K = must(ts.Cat([]*ts.Tensor{kPast, k}, 2))
		V = must(ts.Cat([]*ts.Tensor{vPast, v}, 2))
		drop(kPast, vPast)
	} else {
		K, V = must(k.ShallowClone()), must(v.ShallowClone())
	}
	drop(owned...)
	for b, c := range s.seqs {
		kb := must(k.Narrow(0, int64(b), 1, false))
		vb := must(v.Narrow(0, int64(b), 1, false))
		c.extend(li, kb, vb)
	}
	drop(k, v)
	return K, V
}

// DecodeBatch feeds one token to each sequence in a single batched forward
// and returns each sequence's next-token logits (float32). Sequences may
// have different lengths; all must belong to m.
func (m *Model) DecodeBatch(cs []*SeqCache, ids []int) (out [][]float32, err error) {
	if len(cs) == 0 || len(cs) != len(ids) {
		return nil, fmt.Errorf("batched decode: %d sequences, %d tokens", len(cs), len(ids))
	}
	smax := 0
	flat := make([]int64, len(ids))
	pos := make([]float32, len(ids))
	for i, c := range cs {
		if c.model != m {
			return nil, ErrCacheModel
		}
		if ids[i] < 0 || ids[i] >= m.cfg.VocabSize {
			return nil, fmt.Errorf("batched decode: token id %d is outside the vocabulary (%d)", ids[i], m.cfg.VocabSize)
		}
		smax = max(smax, c.Len())
		flat[i], pos[i] = int64(ids[i]), float32(c.Len())
	}
	defer guard(&err, "batched decode")
	b := len(cs)
	// Row b sees its own past (the last Len(b) of smax slots) and itself.
	vals := make([]float32, b*(smax+1))
	neg := float32(-math.MaxFloat32)
	for i, c := range cs {
		for j := 0; j < smax-c.Len(); j++ {
			vals[i*(smax+1)+j] = neg
		}
	}
	withoutGrad(func() {
		full := fromSlice(vals, []int64{int64(b), 1, 1, int64(smax + 1)})
		mask := &attnMask{full: must(full.To(m.device, true))}
		logits := m.run(flat, pos, int64(b), 1, mask, &batchStore{seqs: cs, smax: smax})
		mask.free()
		flatLogits := must(logits.View([]int64{int64(b), -1}, true))
		out = rows2D(flatLogits)
		drop(flatLogits)
	})
	for i, c := range cs {
		c.tokens = append(c.tokens, ids[i])
	}
	return out, nil
}
