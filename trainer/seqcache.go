package trainer

import (
	"errors"
	"fmt"
	"math"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"
)

// SeqCache is the KV cache of one sequence. Servers keep one per request and
// advance many together with DecodeBatch (continuous batching); a finished
// sequence's cache can seed a later request that extends it (prefix reuse).
// A SeqCache is not safe for concurrent use.
type SeqCache struct {
	model  *Model
	k, v   []*ts.Tensor // per layer [1, nKV, S, headDim]; nil while in a decode group
	tokens []int
	// grp is the decode group holding this sequence's keys and values
	// (row row of its batched tensors) since the last DecodeBatch; nil
	// when the cache holds them itself.
	grp *decodeGroup
	row int
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
	if c.grp != nil {
		c.grp.drop(c) // no copy of a row about to be freed
	}
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
	c.leaveGroup()
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

// Own makes the cache hold its own keys and values (a copy of its row of
// a decode group), so that a cache kept for later (a prefix cache) keeps
// no other sequence's memory alive.
func (c *SeqCache) Own() { c.leaveGroup() }

// leaveGroup takes the sequence's keys and values back from its decode
// group (a copy of its row), before anything but DecodeBatch uses them.
func (c *SeqCache) leaveGroup() {
	if c.grp != nil {
		c.grp.detach(c)
	}
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
	c.leaveGroup()
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
		hN := m.runTo(flat, pos, 1, int64(len(ids)), mask, c, false)
		mask.free()
		last = m.lastLogits(hN)[0]
	})
	c.tokens = append(c.tokens, ids...)
	return last, nil
}

// lastLogits applies the LM head to the last position of each row of hN
// [B, T, hidden] (consumed) and returns the rows' float32 logits: the head
// never runs over the whole prompt.
func (m *Model) lastLogits(hN *ts.Tensor) [][]float32 {
	sz := hN.MustSize()
	lastH := must(hN.Narrow(1, sz[1]-1, 1, true))
	logits := m.headLogits(lastH, false)
	drop(lastH)
	flat := must(logits.View([]int64{sz[0], -1}, true))
	out := rows2D(flat)
	drop(flat)
	return out
}

// ExtendBatch feeds each sequence its new tokens in one forward pass and
// returns each one's next-token logits: Extend for many sequences at once
// (a turn's prompts, each continuing a cached prefix of its own length).
// Row i holds its cached past right-aligned in the longest past's width,
// then its new tokens right-aligned in the longest's; the mask keeps every
// query to its own past and new tokens. Afterwards each cache holds its
// own keys and values again (the padding cut out). All empty: PrefillBatch.
func (m *Model) ExtendBatch(cs []*SeqCache, news [][]int) (out [][]float32, err error) {
	t, pmax, err := m.checkBatch("batched extend", cs, news)
	if err != nil {
		return nil, err
	}
	if pmax == 0 {
		return m.prefillBatch(cs, news, t)
	}
	defer guard(&err, "batched extend")
	for _, c := range cs {
		c.leaveGroup()
	}
	b := len(cs)
	flat := make([]int64, b*t)
	pos := make([]float32, b*t)
	qSegs, kSegs := make([][]int, b), make([][]int, b)
	st := &raggedStore{cs: cs, pmax: pmax, offs: make([]int, b)}
	for i, c := range cs {
		p, n := c.Len(), len(news[i])
		off := t - n
		st.offs[i] = off
		qSegs[i] = make([]int, t)
		kSegs[i] = make([]int, pmax+t)
		for j := pmax - p; j < pmax; j++ {
			kSegs[i][j] = 1
		}
		for j, id := range news[i] {
			flat[i*t+off+j], pos[i*t+off+j], qSegs[i][off+j], kSegs[i][pmax+off+j] = int64(id), float32(p+j), 1, 1
		}
	}
	withoutGrad(func() {
		mask := &attnMask{m: m, qSegs: qSegs, kSegs: kSegs, past: pmax}
		hN := m.runTo(flat, pos, int64(b), int64(t), mask, st, false)
		mask.free()
		out = m.lastLogits(hN)
	})
	for i, c := range cs {
		c.tokens = append(c.tokens, news[i]...)
	}
	return out, nil
}

// raggedStore is ExtendBatch's kvStore: per layer, the pasts left-padded
// to pmax, then the new keys; afterwards each sequence keeps its past and
// its new tokens' keys, without the padding between them.
type raggedStore struct {
	cs   []*SeqCache
	pmax int
	offs []int // each row's padding before its new tokens
}

func (s *raggedStore) extend(li int, k, v *ts.Tensor) (*ts.Tensor, *ts.Tensor) {
	sz := k.MustSize() // [B, nKV, T, hd]
	lens := make([]int, len(s.cs))
	ks, vs := make([]*ts.Tensor, len(s.cs)), make([]*ts.Tensor, len(s.cs))
	for i, c := range s.cs {
		lens[i], ks[i], vs[i] = c.Len(), c.k[li], c.v[li]
	}
	// The pasts padded to pmax and, in the room after them, the new keys:
	// one buffer, one copy of each.
	t := sz[2]
	K, V := leftPadded(ks, lens, s.pmax, int(t), k), leftPadded(vs, lens, s.pmax, int(t), v)
	for _, kv := range [][2]*ts.Tensor{{K, k}, {V, v}} {
		dst := must(kv[0].Narrow(2, int64(s.pmax), t, false))
		dst.Copy_(kv[1])
		drop(dst, kv[1])
	}
	for i, c := range s.cs {
		n, off := int64(c.Len()), int64(s.offs[i])
		keep := func(x *ts.Tensor) *ts.Tensor {
			row := must(x.Narrow(0, int64(i), 1, false))
			newPart := must(row.Narrow(2, int64(s.pmax)+off, t-off, false))
			var y *ts.Tensor
			if n == 0 {
				y = must(newPart.Contiguous(false))
			} else {
				pastPart := must(row.Narrow(2, int64(s.pmax)-n, n, false))
				y = must(ts.Cat([]*ts.Tensor{pastPart, newPart}, 2))
				drop(pastPart)
			}
			drop(row, newPart)
			return y
		}
		nk, nv := keep(K), keep(V)
		drop(c.k[li], c.v[li])
		c.k[li], c.v[li] = nk, nv
	}
	return K, V
}

// PrefillBatch runs the prompts of empty caches in one forward pass, each
// right-aligned in a batch as long as the longest (the left padding is
// masked), and returns each one's next-token logits. The caches leave it
// as one decode group, so the first DecodeBatch over the same sequences
// appends a column instead of gathering them.
func (m *Model) PrefillBatch(cs []*SeqCache, prompts [][]int) (out [][]float32, err error) {
	t, pmax, err := m.checkBatch("batched prefill", cs, prompts)
	if err != nil {
		return nil, err
	}
	if pmax > 0 {
		return nil, fmt.Errorf("batched prefill: a sequence has %d cached tokens (ExtendBatch continues sequences)", pmax)
	}
	return m.prefillBatch(cs, prompts, t)
}

// checkBatch checks a batched forward's sequences and their new tokens and
// returns the longest new part and the longest cached past.
func (m *Model) checkBatch(what string, cs []*SeqCache, news [][]int) (t, pmax int, err error) {
	if len(cs) == 0 || len(cs) != len(news) {
		return 0, 0, fmt.Errorf("%s: %d sequences, %d token lists", what, len(cs), len(news))
	}
	seen := make(map[*SeqCache]bool, len(cs))
	for i, c := range cs {
		switch {
		case c.model != m:
			return 0, 0, ErrCacheModel
		case len(news[i]) == 0:
			return 0, 0, fmt.Errorf("%s: sequence %d has no new tokens", what, i)
		case seen[c]:
			return 0, 0, fmt.Errorf("%s: sequence %d is listed twice", what, i)
		}
		seen[c] = true
		for _, id := range news[i] {
			if id < 0 || id >= m.cfg.VocabSize {
				return 0, 0, fmt.Errorf("%s: token id %d is outside the vocabulary (%d)", what, id, m.cfg.VocabSize)
			}
		}
		t, pmax = max(t, len(news[i])), max(pmax, c.Len())
	}
	return t, pmax, nil
}

// prefillBatch is PrefillBatch after checkBatch; t is the longest prompt.
func (m *Model) prefillBatch(cs []*SeqCache, prompts [][]int, t int) (out [][]float32, err error) {
	b := len(cs)
	flat := make([]int64, b*t)
	pos := make([]float32, b*t)
	segs := make([][]int, b)
	for i, p := range prompts {
		segs[i] = make([]int, t)
		off := t - len(p)
		for j, id := range p {
			flat[i*t+off+j], pos[i*t+off+j], segs[i][off+j] = int64(id), float32(j), 1
		}
	}
	var g *decodeGroup
	defer func() { // runs after guard turned a panic into err
		if err != nil && g != nil {
			g.free()
			for _, c := range cs {
				c.grp = nil
			}
		}
	}()
	defer guard(&err, "batched prefill")
	for _, c := range cs {
		c.leaveGroup()
	}
	g = &decodeGroup{seqs: append([]*SeqCache(nil), cs...), k: make([]*ts.Tensor, len(m.layers)), v: make([]*ts.Tensor, len(m.layers)), lens: make([]int, b)}
	withoutGrad(func() {
		mask := &attnMask{m: m, qSegs: segs, kSegs: segs}
		hN := m.runTo(flat, pos, int64(b), int64(t), mask, g, false)
		mask.free()
		out = m.lastLogits(hN)
	})
	g.smax = t
	for i, c := range cs {
		g.lens[i] = len(prompts[i])
		c.grp, c.row = g, i
		c.tokens = append([]int(nil), prompts[i]...)
	}
	return out, nil
}

// decodeGroup is the keys and values of the sequences one DecodeBatch
// advanced, kept batched per layer as [B, nKV, smax, hd] (each row's past
// right-aligned, zeros to its left), so that the next step over the same
// sequences appends one column per layer instead of padding and
// concatenating every sequence's cache again (about eight ops per
// sequence and layer, the batched decode's main cost at 64 sequences).
// The columns live in a buffer with room after them (columns off …
// off+smax of k[li], v[li]): a step writes its column in place, where a
// concatenation copied the whole cache at every layer and step (the cost
// that grows with the context: 64 self-analysis prompts of ~750 tokens).
// Members' own caches are empty meanwhile; a sequence used any other way
// (Extend, Fork, Free, another batch) takes its row back first (detach).
// When some members stop (finished requests), the rows of the rest are
// selected in one op per layer.
type decodeGroup struct {
	seqs []*SeqCache // by row; nil where a member left
	k, v []*ts.Tensor
	off  int // the first column of the window in k[li], v[li]
	smax int
	lens []int // each row's cached positions
	// fresh: the tensors are built in this step's forward from the
	// members' own caches (a new group).
	fresh bool
}

// decodeRoom is the columns a decode group's buffers hold beyond what
// its sequences use when they are (re)allocated: one reallocation and
// copy per that many steps.
const decodeRoom = 64

// window is layer li's keys and values as the sequences have them: views
// [B, nKV, smax+extra, hd] of the buffers (extra: columns just written).
func (g *decodeGroup) window(li, extra int) (*ts.Tensor, *ts.Tensor) {
	n := int64(g.smax + extra)
	return must(g.k[li].Narrow(2, int64(g.off), n, false)), must(g.v[li].Narrow(2, int64(g.off), n, false))
}

// reserve makes room for t more columns in every layer's buffers (moving
// the window to the start when it has to reallocate). It runs before a
// step's forward, so all layers share one off.
func (g *decodeGroup) reserve(t int) {
	if g.fresh || g.k[0] == nil || g.off+g.smax+t <= int(g.k[0].MustSize()[2]) {
		return // a fresh group's buffers are built with room (extend)
	}
	withoutGrad(func() {
		for li := range g.k {
			for _, b := range []**ts.Tensor{&g.k[li], &g.v[li]} {
				*b = withRoom(*b, g.off, g.smax, g.smax+t+decodeRoom)
			}
		}
	})
	g.off = 0
}

// withRoom copies columns off … off+n of buf ([B, nKV, S, hd], freed)
// into the first n columns of a new [B, nKV, width, hd] tensor.
func withRoom(buf *ts.Tensor, off, n, width int) *ts.Tensor {
	sz := buf.MustSize()
	out := must(ts.Empty([]int64{sz[0], sz[1], int64(width), sz[3]}, buf.DType(), buf.MustDevice()))
	if n > 0 {
		dst := must(out.Narrow(2, 0, int64(n), false))
		src := must(buf.Narrow(2, int64(off), int64(n), false))
		dst.Copy_(src)
		drop(dst, src)
	}
	drop(buf)
	return out
}

// rowOf is row b's n positions (of smax, right-aligned) as its own tensor.
func rowOf(t *ts.Tensor, b, pad, n int64) *ts.Tensor {
	r := must(t.Narrow(0, b, 1, false))
	x := must(r.Narrow(2, pad, n, false))
	y := must(x.Contiguous(false))
	drop(r, x)
	return y
}

// drop takes c out of the group without giving it its row.
func (g *decodeGroup) drop(c *SeqCache) {
	g.seqs[c.row], c.grp = nil, nil
	g.freeIfEmpty()
}

func (g *decodeGroup) freeIfEmpty() {
	for _, m := range g.seqs {
		if m != nil {
			return
		}
	}
	g.free()
}

// detach gives c its row back and takes it out of the group.
func (g *decodeGroup) detach(c *SeqCache) {
	b := c.row
	if n := g.lens[b]; n > 0 {
		// After a failed step the new column may be in some layers: the
		// row is the n positions after the padding either way.
		pad := int64(g.off + g.smax - n)
		withoutGrad(func() {
			for li := range g.k {
				if g.k[li] == nil {
					continue // a fresh group that failed before this layer: c keeps its own
				}
				drop(c.k[li], c.v[li])
				c.k[li] = rowOf(g.k[li], int64(b), pad, int64(n))
				c.v[li] = rowOf(g.v[li], int64(b), pad, int64(n))
			}
		})
	}
	g.seqs[b], c.grp = nil, nil
	g.freeIfEmpty() // the last member left
}

func (g *decodeGroup) free() {
	for li := range g.k {
		drop(g.k[li], g.v[li])
		g.k[li], g.v[li] = nil, nil
	}
}

// keep narrows the group to the given rows (increasing), dropping the
// left padding no remaining row needs.
func (g *decodeGroup) keep(rows []int) {
	smax := 0
	for _, r := range rows {
		smax = max(smax, g.lens[r])
	}
	idx := make([]int64, len(rows))
	for i, r := range rows {
		idx[i] = int64(r)
	}
	withoutGrad(func() {
		at := must(must(ts.OfSlice(idx)).To(g.k[0].MustDevice(), true))
		for li := range g.k {
			for _, t := range []**ts.Tensor{&g.k[li], &g.v[li]} {
				sel := must((*t).IndexSelect(0, at, false))
				drop(*t)
				*t = sel
			}
		}
		drop(at)
	})
	seqs, lens := make([]*SeqCache, len(rows)), make([]int, len(rows))
	for i, r := range rows {
		seqs[i], lens[i] = g.seqs[r], g.lens[r]
		seqs[i].row = i
	}
	// The left padding no remaining row needs is skipped, not cut.
	g.seqs, g.lens, g.off, g.smax = seqs, lens, g.off+g.smax-smax, smax
}

// extend appends this step's keys and values (one column per row) and
// returns the batch's K, V. A fresh group first gathers the members' own
// caches, left-padded to the longest, and frees them. The group's first
// keys (a batched prefill's, or empty members') become its buffers as
// they are; the next step's reserve gives them room.
func (g *decodeGroup) extend(li int, k, v *ts.Tensor) (*ts.Tensor, *ts.Tensor) {
	if g.fresh && g.smax > 0 {
		ks, vs := make([]*ts.Tensor, len(g.seqs)), make([]*ts.Tensor, len(g.seqs))
		for b, c := range g.seqs {
			ks[b], vs[b] = c.k[li], c.v[li]
		}
		g.k[li], g.v[li] = leftPadded(ks, g.lens, g.smax, decodeRoom, k), leftPadded(vs, g.lens, g.smax, decodeRoom, v)
		g.off = 0
		for _, c := range g.seqs {
			drop(c.k[li], c.v[li])
			c.k[li], c.v[li] = nil, nil
		}
	}
	if g.k[li] == nil {
		return appendKV(&g.k[li], &g.v[li], k, v)
	}
	t := int(k.MustSize()[2])
	for _, p := range [][2]*ts.Tensor{{g.k[li], k}, {g.v[li], v}} {
		col := must(p[0].Narrow(2, int64(g.off+g.smax), int64(t), false))
		col.Copy_(p[1])
		drop(col)
	}
	drop(k, v)
	return g.window(li, t)
}

// leftPadded stacks one layer's rows [1, nKV, lens[i], hd] (nil where
// lens[i] is 0) into a zeroed [B, nKV, width+room, hd] in like's dtype and
// device, each right-aligned to end at column width; the room columns
// after it are for the steps to come (a decode group's buffers).
func leftPadded(rows []*ts.Tensor, lens []int, width, room int, like *ts.Tensor) *ts.Tensor {
	sz := like.MustSize() // [B, nKV, T, hd]
	out := must(ts.Zeros([]int64{int64(len(rows)), sz[1], int64(width + room), sz[3]}, like.DType(), like.MustDevice()))
	for i, r := range rows {
		if lens[i] == 0 {
			continue
		}
		row := must(out.Narrow(0, int64(i), 1, false))
		dst := must(row.Narrow(2, int64(width-lens[i]), int64(lens[i]), false))
		dst.Copy_(r)
		drop(dst, row)
	}
	return out
}

// decodeGroupFor returns the group DecodeBatch advances cs in: their
// current one when cs are its members in row order (the rows of members
// that left are dropped), else a fresh one (members of other groups take
// their rows back first).
func decodeGroupFor(cs []*SeqCache, layers int) *decodeGroup {
	if g := cs[0].grp; g != nil {
		prev, ok := -1, true
		for _, c := range cs {
			if c.grp != g || c.row <= prev || g.lens[c.row] != c.Len() {
				ok = false
				break
			}
			prev = c.row
		}
		if ok {
			if len(cs) < len(g.seqs) {
				in := make([]bool, len(g.seqs))
				rows := make([]int, len(cs))
				for i, c := range cs {
					in[c.row], rows[i] = true, c.row
				}
				for r, c := range g.seqs {
					if c != nil && !in[r] {
						g.detach(c)
					}
				}
				g.keep(rows)
			}
			g.fresh = false
			return g
		}
	}
	for _, c := range cs {
		c.leaveGroup()
	}
	g := &decodeGroup{seqs: append([]*SeqCache(nil), cs...), k: make([]*ts.Tensor, layers), v: make([]*ts.Tensor, layers), lens: make([]int, len(cs)), fresh: true}
	for i, c := range cs {
		g.lens[i], g.smax = c.Len(), max(g.smax, c.Len())
		c.grp, c.row = g, i
	}
	return g
}

// decodeMask is a decode step's attention mask: row b sees its own past
// (the last Len(b) of smax slots) and itself. On the CPU it is each row's
// first key (decodeAttention); elsewhere an additive mask [B, 1, 1, smax+1].
func (m *Model) decodeMask(cs []*SeqCache, smax int) *attnMask {
	if useDecodeKernel && !m.device.IsCuda() {
		starts := make([]int64, len(cs))
		for i, c := range cs {
			starts[i] = int64(smax - c.Len())
		}
		return &attnMask{starts: starts}
	}
	vals := make([]float32, len(cs)*(smax+1))
	neg := float32(-math.MaxFloat32)
	for i, c := range cs {
		for j := 0; j < smax-c.Len(); j++ {
			vals[i*(smax+1)+j] = neg
		}
	}
	return &attnMask{full: upload(vals, []int64{int64(len(cs)), 1, 1, int64(smax + 1)}, m.device)}
}

// DecodeBatch feeds one token to each sequence in a single batched forward
// and returns each sequence's next-token logits (float32). Sequences may
// have different lengths; all must belong to m.
func (m *Model) DecodeBatch(cs []*SeqCache, ids []int) (out [][]float32, err error) {
	sl, err := m.DecodeBatchLogits(cs, ids)
	if err != nil {
		return nil, err
	}
	defer sl.Free()
	return sl.All()
}

// DecodeBatchLogits is DecodeBatch keeping the logits in libtorch, for
// StepLogits.Draw; the caller frees them.
func (m *Model) DecodeBatchLogits(cs []*SeqCache, ids []int) (out *StepLogits, err error) {
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
	var g *decodeGroup
	defer func() { // runs after guard turned a panic into err
		if err != nil && g != nil { // the members take back what they had before the step
			for _, c := range g.seqs {
				if c != nil {
					g.detach(c)
				}
			}
		}
	}()
	defer guard(&err, "batched decode")
	b := len(cs)
	withoutGrad(func() {
		mask := m.decodeMask(cs, smax)
		g = decodeGroupFor(cs, len(m.layers))
		g.reserve(1)
		logits := m.run(flat, pos, int64(b), 1, mask, g)
		g.smax++
		for i := range g.lens {
			g.lens[i]++
		}
		mask.free()
		flatLogits := must(logits.View([]int64{int64(b), -1}, true))
		if flatLogits.DType() != gotch.Float {
			flatLogits = must(flatLogits.Totype(gotch.Float, true))
		}
		out = &StepLogits{t: flatLogits, dev: m.device, rows: b, vocab: m.cfg.VocabSize}
	})
	for i, c := range cs {
		c.tokens = append(c.tokens, ids[i])
	}
	return out, nil
}
