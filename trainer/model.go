package trainer

import (
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"strings"
	"sync"
	"unsafe"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/libtch/seedops"
	"github.com/sugarme/gotch/nn"
	"github.com/sugarme/gotch/ts"
)

// ModelOptions choose where and in which precision the weights live.
type ModelOptions struct {
	// DType of the weights and activations: "float32" (default) or
	// "bfloat16". Log-probs are always computed in float32.
	DType string
	// Device: "cpu" (default) or "cuda" / "cuda:N" when libtorch has CUDA.
	Device string
}

// Validate names a bad option.
func (o ModelOptions) Validate() error {
	if _, err := o.dtype(); err != nil {
		return err
	}
	_, err := o.device()
	return err
}

func (o ModelOptions) dtype() (gotch.DType, error) {
	switch o.DType {
	case "", "float32", "fp32":
		return gotch.Float, nil
	case "bfloat16", "bf16":
		return gotch.BFloat16, nil
	default:
		return 0, fmt.Errorf("model dtype %q: want float32 or bfloat16", o.DType)
	}
}

// CheckDevice says whether a device name is one the trainer can use here
// ("cpu", or "cuda"/"cuda:N" when libtorch sees that GPU), so a command
// can refuse a wrong --device before it starts work.
func CheckDevice(name string) error {
	_, err := ModelOptions{Device: name}.device()
	return err
}

func (o ModelOptions) device() (gotch.Device, error) {
	switch o.Device {
	case "", "cpu":
		return gotch.CPU, nil
	case "cuda", "cuda:0":
		if !gotch.CUDA.IsAvailable() {
			return gotch.CPU, fmt.Errorf("model device %q: libtorch sees no CUDA device (see seedctl doctor)", o.Device)
		}
		return gotch.CudaBuilder(0), nil
	default:
		var n uint
		if _, err := fmt.Sscanf(o.Device, "cuda:%d", &n); err == nil {
			if !gotch.CUDA.IsAvailable() || int64(n) >= gotch.CUDA.DeviceCount() {
				return gotch.CPU, fmt.Errorf("model device %q: not available (see seedctl doctor)", o.Device)
			}
			return gotch.CudaBuilder(n), nil
		}
		return gotch.CPU, fmt.Errorf("model device %q: want cpu, cuda or cuda:N", o.Device)
	}
}

// Model is a decoder-only transformer (Qwen2/2.5, Qwen3, Llama 3) whose
// parameters carry Hugging Face names, so checkpoints map one to one.
type Model struct {
	cfg    *ModelConfig
	arch   Arch
	vs     *nn.VarStore
	device gotch.Device
	dtype  gotch.DType

	embed   *ts.Tensor
	layers  []block
	norm    *ts.Tensor
	lmHead  *ts.Tensor // the embedding itself when tied
	invFreq *ts.Tensor // float32 [head_dim/2]
	params  []param    // every stored tensor, in a fixed order

	// recompute: activation recomputation (SetRecompute); pending holds
	// the forward pass whose backward is still to run.
	recompute bool
	pending   *recomputed
}

type block struct {
	inNorm, postNorm             *ts.Tensor
	q, k, v, o                   *ts.Tensor
	qb, kb, vb, ob               *ts.Tensor
	qNorm, kNorm                 *ts.Tensor
	gate, up, down               *ts.Tensor
	nHeads, nKV, headDim, hidden int64
}

type param struct {
	name  string
	shape []int64
	t     *ts.Tensor
}

// Config is the model's config.json.
func (m *Model) Config() *ModelConfig { return m.cfg }

// Arch is the model's architecture.
func (m *Model) Arch() Arch { return m.arch }

// DType names the weight dtype ("float32" or "bfloat16").
func (m *Model) DType() string {
	if m.dtype == gotch.BFloat16 {
		return "bfloat16"
	}
	return "float32"
}

// NumParams counts stored parameters (a tied head counts once).
func (m *Model) NumParams() int64 {
	var n int64
	for _, p := range m.params {
		n += numel(p.shape)
	}
	return n
}

// paramSpecs lists every parameter of cfg with its Hugging Face name and
// shape, in the order checkpoints are written.
func paramSpecs(cfg *ModelConfig) []param {
	arch, _ := cfg.Arch()
	h, v, inter := int64(cfg.HiddenSize), int64(cfg.VocabSize), int64(cfg.IntermediateSize)
	hd := int64(cfg.HeadDimension())
	qd, kvd := int64(cfg.NumAttentionHeads)*hd, int64(cfg.NumKeyValueHeads)*hd
	ps := []param{{name: "model.embed_tokens.weight", shape: []int64{v, h}}}
	for i := 0; i < cfg.NumHiddenLayers; i++ {
		p := fmt.Sprintf("model.layers.%d.", i)
		ps = append(ps,
			param{name: p + "input_layernorm.weight", shape: []int64{h}},
			param{name: p + "self_attn.q_proj.weight", shape: []int64{qd, h}},
			param{name: p + "self_attn.k_proj.weight", shape: []int64{kvd, h}},
			param{name: p + "self_attn.v_proj.weight", shape: []int64{kvd, h}},
			param{name: p + "self_attn.o_proj.weight", shape: []int64{h, qd}},
		)
		if cfg.QKVBias() {
			ps = append(ps,
				param{name: p + "self_attn.q_proj.bias", shape: []int64{qd}},
				param{name: p + "self_attn.k_proj.bias", shape: []int64{kvd}},
				param{name: p + "self_attn.v_proj.bias", shape: []int64{kvd}},
			)
		}
		if cfg.OBias() {
			ps = append(ps, param{name: p + "self_attn.o_proj.bias", shape: []int64{h}})
		}
		if arch == ArchQwen3 {
			ps = append(ps,
				param{name: p + "self_attn.q_norm.weight", shape: []int64{hd}},
				param{name: p + "self_attn.k_norm.weight", shape: []int64{hd}},
			)
		}
		ps = append(ps,
			param{name: p + "post_attention_layernorm.weight", shape: []int64{h}},
			param{name: p + "mlp.gate_proj.weight", shape: []int64{inter, h}},
			param{name: p + "mlp.up_proj.weight", shape: []int64{inter, h}},
			param{name: p + "mlp.down_proj.weight", shape: []int64{h, inter}},
		)
	}
	ps = append(ps, param{name: "model.norm.weight", shape: []int64{h}})
	if !cfg.TieWordEmbeddings {
		ps = append(ps, param{name: "lm_head.weight", shape: []int64{v, h}})
	}
	return ps
}

// tensorSource yields the initial value of each parameter, already in the
// model's dtype and on its device.
type tensorSource func(name string, shape []int64) (*ts.Tensor, error)

// newModel builds a model whose parameters come from src.
func newModel(cfg *ModelConfig, opt ModelOptions, src tensorSource) (m *Model, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := opt.Validate(); err != nil {
		return nil, err
	}
	dt, _ := opt.dtype()
	dev, _ := opt.device()
	arch, _ := cfg.Arch()
	defer guard(&err, "building model")
	m = &Model{cfg: cfg, arch: arch, vs: nn.NewVarStore(dev), device: dev, dtype: dt}
	byName := map[string]*ts.Tensor{}
	root := m.vs.Root()
	for _, p := range paramSpecs(cfg) {
		t, err := src(p.name, p.shape)
		if err != nil {
			return nil, err
		}
		got := t.MustSize()
		if !equalShape(got, p.shape) {
			return nil, fmt.Errorf("tensor %s has shape %v, config.json implies %v", p.name, got, p.shape)
		}
		parts := strings.Split(p.name, ".")
		path := root
		for _, part := range parts[:len(parts)-1] {
			path = path.Sub(part)
		}
		added := must(path.Add(parts[len(parts)-1], t, true))
		runtime.KeepAlive(t) // gotch reads it in a C call after its last Go use
		byName[p.name] = added
		m.params = append(m.params, param{name: p.name, shape: p.shape, t: added})
	}
	m.embed = byName["model.embed_tokens.weight"]
	m.norm = byName["model.norm.weight"]
	m.lmHead = byName["lm_head.weight"]
	if cfg.TieWordEmbeddings {
		m.lmHead = m.embed
	}
	hd := int64(cfg.HeadDimension())
	for i := 0; i < cfg.NumHiddenLayers; i++ {
		p := fmt.Sprintf("model.layers.%d.", i)
		m.layers = append(m.layers, block{
			inNorm: byName[p+"input_layernorm.weight"], postNorm: byName[p+"post_attention_layernorm.weight"],
			q: byName[p+"self_attn.q_proj.weight"], k: byName[p+"self_attn.k_proj.weight"],
			v: byName[p+"self_attn.v_proj.weight"], o: byName[p+"self_attn.o_proj.weight"],
			qb: byName[p+"self_attn.q_proj.bias"], kb: byName[p+"self_attn.k_proj.bias"],
			vb: byName[p+"self_attn.v_proj.bias"], ob: byName[p+"self_attn.o_proj.bias"],
			qNorm: byName[p+"self_attn.q_norm.weight"], kNorm: byName[p+"self_attn.k_norm.weight"],
			gate: byName[p+"mlp.gate_proj.weight"], up: byName[p+"mlp.up_proj.weight"], down: byName[p+"mlp.down_proj.weight"],
			nHeads: int64(cfg.NumAttentionHeads), nKV: int64(cfg.NumKeyValueHeads), headDim: hd, hidden: int64(cfg.HiddenSize),
		})
	}
	inv := ropeInvFreq(cfg)
	m.invFreq = must(fromSlice(inv, []int64{int64(len(inv))}).To(dev, true))
	return m, nil
}

func equalShape(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// ropeInvFreq computes RoPE's inverse frequencies as transformers does,
// including Llama 3's frequency-dependent scaling.
func ropeInvFreq(cfg *ModelConfig) []float32 {
	hd := cfg.HeadDimension()
	inv := make([]float32, hd/2)
	for i := range inv {
		// transformers: 1 / base**(arange(0, dim, 2).float() / dim), in float32.
		exp := float32(2*i) / float32(hd)
		inv[i] = float32(1.0 / math.Pow(cfg.RopeTheta, float64(exp)))
	}
	r := cfg.RopeScaling
	switch r.Kind() {
	case "linear":
		for i := range inv {
			inv[i] /= float32(r.Factor)
		}
	case "llama3":
		old := float64(r.OriginalMaxPositionEmbeddings)
		lowWave, highWave := old/r.LowFreqFactor, old/r.HighFreqFactor
		for i, f := range inv {
			wave := 2 * math.Pi / float64(f)
			switch {
			case wave < highWave:
				// high frequency: unchanged
			case wave > lowWave:
				inv[i] = float32(float64(f) / r.Factor)
			default:
				smooth := (old/wave - r.LowFreqFactor) / (r.HighFreqFactor - r.LowFreqFactor)
				inv[i] = float32((1-smooth)*float64(f)/r.Factor + smooth*float64(f))
			}
		}
	}
	return inv
}

// Input is a batch of token rows of equal length T.
type Input struct {
	IDs [][]int
	// Positions are RoPE positions; nil means cache length + 0..T-1 for
	// every row. Packed rows restart positions at each segment.
	Positions [][]int
	// Segments label each token: a token attends (causally) only to earlier
	// tokens of its own segment. 0 marks padding. nil means one segment (1)
	// per row. What a padding position's output holds is unspecified (it
	// attends to itself alone, or, where every row is one segment then
	// padding and the fused kernel runs, causally to the row): nothing may
	// read it.
	Segments [][]int
}

func (in Input) shape() (b, t int, err error) {
	b = len(in.IDs)
	if b == 0 || len(in.IDs[0]) == 0 {
		return 0, 0, errors.New("input: empty batch")
	}
	t = len(in.IDs[0])
	for i, row := range in.IDs {
		if len(row) != t {
			return 0, 0, fmt.Errorf("input: row %d has %d tokens, row 0 has %d (pad rows to one length)", i, len(row), t)
		}
	}
	for name, rows := range map[string][][]int{"Positions": in.Positions, "Segments": in.Segments} {
		if rows == nil {
			continue
		}
		if len(rows) != b {
			return 0, 0, fmt.Errorf("input: %s has %d rows, IDs has %d", name, len(rows), b)
		}
		for i, row := range rows {
			if len(row) != t {
				return 0, 0, fmt.Errorf("input: %s row %d has %d entries, want %d", name, i, len(row), t)
			}
		}
	}
	return b, t, nil
}

// KVCache holds keys and values of earlier tokens for incremental decoding.
// One cache serves one batch whose rows advance together.
type KVCache struct {
	k, v []*ts.Tensor // per layer [B, nKV, S, headDim]
	segs [][]int      // [B][S]
	n    int          // S
}

// NewKVCache returns an empty cache for m.
func (m *Model) NewKVCache() *KVCache {
	return &KVCache{k: make([]*ts.Tensor, len(m.layers)), v: make([]*ts.Tensor, len(m.layers))}
}

// Len is the number of cached positions.
func (c *KVCache) Len() int { return c.n }

// Free releases the cached tensors.
func (c *KVCache) Free() {
	for i := range c.k {
		drop(c.k[i], c.v[i])
		c.k[i], c.v[i] = nil, nil
	}
	c.segs, c.n = nil, 0
}

// forward runs the decoder and returns logits [B, T, V] in the model dtype.
// It panics with torchError on libtorch failures; callers guard.
func (m *Model) forward(in Input, cache *KVCache) *ts.Tensor {
	return m.forwardTo(in, cache, true)
}

// forwardHidden is forward without the language-model head: the final
// norm's output [B, T, hidden], for a head applied in chunks.
func (m *Model) forwardHidden(in Input) *ts.Tensor {
	return m.forwardTo(in, nil, false)
}

func (m *Model) forwardTo(in Input, cache *KVCache, head bool) *ts.Tensor {
	b, t, err := in.shape()
	if err != nil {
		panic(torchError{err})
	}
	past := 0
	if cache != nil {
		past = cache.n
		if past > 0 && len(cache.segs) != b {
			panic(torchError{fmt.Errorf("input: batch of %d rows for a cache of %d rows", b, len(cache.segs))})
		}
	}
	vocab := m.cfg.VocabSize
	flat := make([]int64, 0, b*t)
	for i, row := range in.IDs {
		for j, id := range row {
			if id < 0 || id >= vocab {
				panic(torchError{fmt.Errorf("input: token id %d at row %d position %d is outside the vocabulary (%d)", id, i, j, vocab)})
			}
			flat = append(flat, int64(id))
		}
	}
	segs := in.Segments
	if segs == nil {
		segs = make([][]int, b)
		for i := range segs {
			segs[i] = make([]int, t)
			for j := range segs[i] {
				segs[i][j] = 1
			}
		}
	}
	pos := make([]float32, 0, b*t)
	for i := 0; i < b; i++ {
		for j := 0; j < t; j++ {
			if in.Positions != nil {
				pos = append(pos, float32(in.Positions[i][j]))
			} else {
				pos = append(pos, float32(past+j))
			}
		}
	}
	keySegs := segs
	if cache != nil && past > 0 {
		keySegs = make([][]int, b)
		for i := range keySegs {
			keySegs[i] = append(append([]int(nil), cache.segs[i]...), segs[i]...)
		}
	}
	mask := &attnMask{m: m, qSegs: segs, kSegs: keySegs, past: past, causal: past == 0 && causalAttention && sdpaAvailable() && causalRows(segs)}
	defer mask.free()

	var kv kvStore
	if cache != nil {
		kv = cache
	}
	logits := m.runTo(flat, pos, int64(b), int64(t), mask, kv, head)
	if cache != nil {
		if past == 0 {
			cache.segs = make([][]int, b)
		}
		for i := range segs {
			cache.segs[i] = append(cache.segs[i], segs[i]...)
		}
		cache.n += t
	}
	return logits
}

// run embeds ids [B·T], applies the layers with the given mask and kv
// store, and returns logits [B, T, V].
func (m *Model) run(flat []int64, pos []float32, b, t int64, mask *attnMask, kv kvStore) *ts.Tensor {
	return m.runTo(flat, pos, b, t, mask, kv, true)
}

// runTo is run; without head it returns the final norm's output instead
// of the logits.
func (m *Model) runTo(flat []int64, pos []float32, b, t int64, mask *attnMask, kv kvStore, head bool) *ts.Tensor {
	ids := upload(flat, []int64{b, t}, m.device)
	cos, sin := m.rope(pos, b, t)
	grad := gradEnabled()
	if m.recompute && kv == nil && grad {
		return m.runRecomputed(ids, cos, sin, mask, head)
	}
	defer drop(cos, sin)
	chunk := int64(0)
	if !grad {
		chunk = attentionChunk
	}

	grouped := groupedAttention(grad, t)
	x := must(ts.Embedding(m.embed, ids, -1, false, false))
	drop(ids)
	for li := range m.layers {
		x = m.layers[li].forward(x, cos, sin, mask, kv, li, m.cfg.RMSNormEps, chunk, grouped)
	}
	hN := rmsNorm(x, m.norm, m.cfg.RMSNormEps)
	drop(x)
	if !head {
		return hN
	}
	logits := m.headLogits(hN, grad)
	drop(hN)
	return logits
}

// oneRowMatVec routes headLogits' single float32 rows through a
// matrix-vector product (BenchmarkDecodeOneSequence turns it off to
// compare).
var oneRowMatVec = true

// headLogits applies the LM head to h [..., hidden]. One float32 row on
// the CPU without a graph (a single sequence's decode step) goes through
// a matrix-vector product: for that shape libtorch's linear reads the
// head's weights at about half the rate (BenchmarkDecodeOneSequence).
func (m *Model) headLogits(h *ts.Tensor, grad bool) *ts.Tensor {
	sz := h.MustSize()
	rows := int64(1)
	for _, d := range sz[:len(sz)-1] {
		rows *= d
	}
	if !oneRowMatVec || rows != 1 || grad || m.device.IsCuda() || h.DType() != gotch.Float || m.lmHead.DType() != gotch.Float {
		return linear(h, m.lmHead, nil)
	}
	vec := must(h.View([]int64{sz[len(sz)-1]}, false))
	out := must(m.lmHead.Mv(vec, false))
	drop(vec)
	shape := append(append([]int64(nil), sz[:len(sz)-1]...), int64(m.cfg.VocabSize))
	return must(out.View(shape, true))
}

// SetRecompute turns activation recomputation on or off. With it, a
// forward pass that builds a graph (training) keeps only each decoder
// layer's input, computed without a graph, plus the graph from the last
// layer's output to the logits; the backward pass (afterBackward, run by
// the training steps right after their loss's) recomputes one layer at a
// time from its saved input and back-propagates through it. Activation
// memory then holds one layer's graph instead of all of them, for the cost
// of a second forward pass through the layers. Gradients are the same.
func (m *Model) SetRecompute(on bool) { m.recompute = on }

// RecomputeAutoParams is the policy size from which activation
// recomputation is on when a config leaves it to the default: below it
// (the tiny CPU models) the extra forward costs time for memory nobody
// lacks.
const RecomputeAutoParams = 100_000_000

// RecomputeFor resolves a recomputation setting ("on", "off", or "" for
// RecomputeAutoParams) for this model.
func (m *Model) RecomputeFor(setting string) (bool, error) {
	switch setting {
	case "on":
		return true, nil
	case "off":
		return false, nil
	case "":
		return m.NumParams() >= RecomputeAutoParams, nil
	}
	return false, fmt.Errorf("recompute %q: want on, off or empty (auto)", setting)
}

// Recompute reports whether activation recomputation is on.
func (m *Model) Recompute() bool { return m.recompute }

// recomputed is a forward pass run for recomputation: the token ids,
// RoPE tables and mask, each layer's input, and the last layer's output as
// a leaf the head's graph starts from.
type recomputed struct {
	ids, cos, sin *ts.Tensor
	mask          *attnMask
	inputs        []*ts.Tensor
	last          *ts.Tensor
}

func (r *recomputed) free() {
	drop(r.ids, r.cos, r.sin, r.last)
	r.mask.free()
	drop(r.inputs...)
	r.inputs = nil
}

// gradEnabled reports libtorch's grad mode on this thread.
func gradEnabled() bool {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	prev, err := ts.GradSetEnabled(true)
	must0(err)
	_, err = ts.GradSetEnabled(prev)
	must0(err)
	return prev
}

// runRecomputed is run with activation recomputation; it takes ownership
// of ids, cos and sin.
func (m *Model) runRecomputed(ids, cos, sin *ts.Tensor, mask *attnMask, head bool) *ts.Tensor {
	if m.pending != nil { // a forward whose backward never ran (an error in between)
		m.pending.free()
		m.pending = nil
	}
	// A mask of its own, built again when the backward pass needs it.
	r := &recomputed{ids: ids, cos: cos, sin: sin, mask: &attnMask{m: m, qSegs: mask.qSegs, kSegs: mask.kSegs, past: mask.past}}
	withoutGrad(func() {
		grouped := groupedAttention(false, ids.MustSize()[1])
		x := must(ts.Embedding(m.embed, ids, -1, false, false))
		for li := range m.layers {
			r.inputs = append(r.inputs, must(x.ShallowClone()))
			x = m.layers[li].forward(x, cos, sin, r.mask, nil, li, m.cfg.RMSNormEps, attentionChunk, grouped)
		}
		r.last = x
	})
	hL := must(r.last.Detach(false))
	drop(r.last)
	hL = must(hL.SetRequiresGrad(true, true)) // (RequiresGrad_ would leak the old handle)
	r.last = hL
	m.pending = r
	hN := rmsNorm(hL, m.norm, m.cfg.RMSNormEps)
	if !head {
		return hN
	}
	logits := linear(hN, m.lmHead, nil)
	drop(hN)
	return logits
}

// afterBackward finishes a backward pass through a recomputed forward:
// from the gradient at the last layer's output, each layer is recomputed
// from its input (with a graph) and back-propagated, last to first, then
// the embedding. A no-op without a pending recomputed forward.
func (m *Model) afterBackward() {
	r := m.pending
	if r == nil {
		return
	}
	m.pending = nil
	defer r.free()
	g := must(r.last.Grad(false))
	if ok, _ := g.Defined(); !ok {
		drop(g)
		return // the loss did not reach the layers
	}
	for li := len(m.layers) - 1; li >= 0; li-- {
		x := must(r.inputs[li].Detach(false))
		x = must(x.SetRequiresGrad(true, true))
		// Fused attention keeps no score matrix: the layer is rebuilt
		// whole. Written out, its attention is rebuilt in blocks.
		if t := x.MustSize()[1]; attentionChunk > 0 && t > attentionChunk && !sdpaAvailable() {
			m.layers[li].recomputeBackward(x, g, r.cos, r.sin, r.mask, m.cfg.RMSNormEps, attentionChunk)
		} else {
			backwardAt(m.layers[li].forward(must(x.ShallowClone()), r.cos, r.sin, r.mask, nil, li, m.cfg.RMSNormEps, 0, groupedAttention(true, 0)), g)
		}
		drop(g)
		gx := must(x.Grad(false))
		g = must(gx.Detach(false))
		drop(gx, x)
	}
	e := must(ts.Embedding(m.embed, r.ids, -1, false, false))
	sur := must(must(e.Mul(g, true)).Sum(gotch.Float, true))
	must0(sur.Backward())
	drop(sur, g)
}

// kvStore supplies attention with the keys and values of earlier tokens.
// extend takes ownership of the new k, v [B, nKV, T, hd] and returns the
// full K, V for attention, which the caller drops after use.
type kvStore interface {
	extend(layer int, k, v *ts.Tensor) (K, V *ts.Tensor)
}

func (c *KVCache) extend(li int, k, v *ts.Tensor) (*ts.Tensor, *ts.Tensor) {
	return appendKV(&c.k[li], &c.v[li], k, v)
}

// appendKV appends new keys and values to a layer's cache slots along the
// sequence axis and returns the full K, V. The slots keep their own detached
// handles, so a cache never holds an autograd graph alive.
func appendKV(ks, vs **ts.Tensor, k, v *ts.Tensor) (*ts.Tensor, *ts.Tensor) {
	if *ks != nil {
		nk := must(ts.Cat([]*ts.Tensor{*ks, k}, 2))
		nv := must(ts.Cat([]*ts.Tensor{*vs, v}, 2))
		drop(*ks, *vs, k, v)
		k, v = nk, nv
	}
	*ks = must(k.Detach(false))
	*vs = must(v.Detach(false))
	return k, v
}

// attnMask is a forward pass's additive attention mask [B, 1, T, past+T]
// in float32 (in the model's dtype where the fused op takes it): 0 where
// query i may see key j (same non-zero segment, j not after i), the
// float32 minimum elsewhere. Every query may see itself, so
// padded rows stay finite. It is built whole on first use (all), or a
// block of query rows at a time (rows) without ever holding the whole
// T × (past+T) matrix, which chunked attention relies on.
type attnMask struct {
	m            *Model
	qSegs, kSegs [][]int
	past         int
	full         *ts.Tensor // built by all, or given (batched decode)
	scratch      []float32  // rows' host buffer, reused block after block
	// starts (a decode step on the CPU, DecodeBatchLogits): row b's first
	// key in the step's keys, the ones before it its left padding; no
	// mask tensor, attention is seedops.DecodeAttention.
	starts []int64
	// causal: every row is one segment from its first position, then
	// padding, with no cache (causalRows), and the fused attention runs:
	// all returns nil (attend then asks for is_causal and no mask: flash
	// attention on CUDA, which a mask rules out) and rows a [1, 1, n, S]
	// causal block. Outputs at padding positions differ from the masked
	// form's (they attend causally instead of to themselves); every
	// position before the padding is the same.
	causal bool
}

// causalAttention lets rows that are causal alone skip the mask (tests
// turn it off to compare; SEEDCTL_CAUSAL=0 does it for a whole process,
// for benchmarks side by side).
var causalAttention = os.Getenv("SEEDCTL_CAUSAL") != "0"

// causalRows says whether each row is one non-zero segment from its
// first position followed by padding (0) alone: the rows of an RL
// micro-batch, or of a batch without Segments.
func causalRows(segs [][]int) bool {
	for _, row := range segs {
		if len(row) == 0 || row[0] == 0 {
			return false
		}
		pad := false
		for _, sg := range row {
			switch {
			case sg == 0:
				pad = true
			case pad || sg != row[0]:
				return false
			}
		}
	}
	return true
}

// all returns the whole mask, owned by am, or nil where attention is
// causal alone (am.causal).
func (am *attnMask) all() *ts.Tensor {
	if am.causal {
		return nil
	}
	if am.full == nil {
		am.full = am.m.maskRows(am.qSegs, am.kSegs, am.past, 0, len(am.qSegs[0]), nil)
	}
	return am.full
}

// rows returns the mask of queries [s, s+n), which the caller drops.
func (am *attnMask) rows(s, n int64) *ts.Tensor {
	if am.full != nil {
		return must(am.full.Narrow(2, s, n, false))
	}
	if am.causal {
		return am.m.causalBlock(int(s), int(n), len(am.kSegs[0]))
	}
	need := len(am.qSegs) * int(n) * len(am.kSegs[0])
	if cap(am.scratch) < need {
		am.scratch = make([]float32, need)
	}
	return am.m.maskRows(am.qSegs, am.kSegs, am.past, int(s), int(n), am.scratch[:need])
}

func (am *attnMask) free() {
	if am != nil && am.full != nil {
		drop(am.full)
		am.full = nil
	}
}

// maskRows builds rows [lo, lo+n) of the mask [B, 1, n, S], in buf when
// given (B·n·S values; every one is written).
func (m *Model) maskRows(qSegs, kSegs [][]int, past, lo, n int, buf []float32) *ts.Tensor {
	b, s := len(qSegs), len(kSegs[0])
	vals := buf
	if vals == nil {
		vals = make([]float32, b*n*s)
	}
	neg := float32(-math.MaxFloat32)
	for bi := 0; bi < b; bi++ {
		for r := 0; r < n; r++ {
			i := lo + r
			qi := past + i
			row := vals[(bi*n+r)*s : (bi*n+r+1)*s]
			for j := 0; j < s; j++ {
				if j == qi || (j < qi && qSegs[bi][i] != 0 && kSegs[bi][j] == qSegs[bi][i]) {
					row[j] = 0
				} else {
					row[j] = neg
				}
			}
		}
	}
	mask := upload(vals, []int64{int64(b), 1, int64(n), int64(s)}, m.device)
	if m.dtype != gotch.Float && sdpaAvailable() {
		// The fused op takes the mask in the query's dtype: converted once
		// here, not in every layer (0 and float32's minimum stay 0 and a
		// finite minimum in bfloat16).
		mask = must(mask.Totype(m.dtype, true))
	}
	return mask
}

// causalBlock is the causal mask of queries [lo, lo+n) over s keys,
// [1, 1, n, s], in the dtype maskRows gives.
func (m *Model) causalBlock(lo, n, s int) *ts.Tensor {
	vals := make([]float32, n*s)
	neg := float32(-math.MaxFloat32)
	for r := 0; r < n; r++ {
		row := vals[r*s : (r+1)*s]
		for j := range row {
			if j > lo+r {
				row[j] = neg
			}
		}
	}
	mask := upload(vals, []int64{1, 1, int64(n), int64(s)}, m.device)
	if m.dtype != gotch.Float {
		mask = must(mask.Totype(m.dtype, true))
	}
	return mask
}

// rope returns cos and sin [B, 1, T, headDim] in the model dtype.
func (m *Model) rope(pos []float32, b, t int64) (cos, sin *ts.Tensor) {
	p := upload(pos, []int64{b, t, 1}, m.device)
	half := m.invFreq.MustSize()[0]
	inv := must(m.invFreq.View([]int64{1, 1, half}, false))
	freqs := must(p.Mul(inv, true))
	drop(inv)
	emb := must(ts.Cat([]*ts.Tensor{freqs, freqs}, -1))
	drop(freqs)
	emb = must(emb.Unsqueeze(1, true))
	cos = must(must(emb.Cos(false)).Totype(m.dtype, true))
	sin = must(must(emb.Sin(false)).Totype(m.dtype, true))
	drop(emb)
	return cos, sin
}

// rmsNorm follows transformers: normalise in float32, cast back, scale.
func rmsNorm(x, w *ts.Tensor, eps float64) *ts.Tensor {
	dt := x.DType()
	xf := must(x.Totype(gotch.Float, false))
	v := must(must(xf.Square(false)).MeanDim([]int64{-1}, true, gotch.Float, true))
	r := must(addScalar(v, eps, true).Rsqrt(true))
	n := must(must(xf.Mul(r, true)).Totype(dt, true))
	drop(r)
	return must(n.Mul(w, true))
}

func rotateHalf(x *ts.Tensor, hd int64) *ts.Tensor {
	x1 := must(x.Narrow(-1, 0, hd/2, false))
	x2 := must(x.Narrow(-1, hd/2, hd/2, false))
	nx2 := must(x2.Neg(true))
	out := must(ts.Cat([]*ts.Tensor{nx2, x1}, -1))
	drop(x1, nx2)
	return out
}

func applyRope(x, cos, sin *ts.Tensor, hd int64) *ts.Tensor {
	rh := rotateHalf(x, hd)
	a := must(x.Mul(cos, false))
	bb := must(rh.Mul(sin, true))
	out := must(a.Add(bb, true))
	drop(bb)
	return out
}

// repeatKV expands [B, nKV, S, hd] to [B, nKV*rep, S, hd]: head h uses kv
// head h / rep, as transformers' repeat_kv.
func repeatKV(x *ts.Tensor, rep int64) *ts.Tensor {
	if rep == 1 {
		return x
	}
	s := x.MustSize()
	e := must(x.Unsqueeze(2, false))
	e = must(e.Expand([]int64{s[0], s[1], rep, s[2], s[3]}, false, true))
	return must(e.Reshape([]int64{s[0], s[1] * rep, s[2], s[3]}, true))
}

// attentionChunk is how many queries one attention matmul takes in
// forward passes without a graph (scoring, prefill, recomputation's first
// pass) and in the backward pass of a recomputed layer: the score matrix
// of a block is chunk × keys instead of queries × keys, so its memory
// grows linearly with the sequence. Without recomputation the whole matrix
// is computed at once in training (autograd would keep every block's
// scores for the backward pass anyway).
var attentionChunk int64 = 512

// forward runs one decoder layer; x is consumed. chunk > 0 computes
// attention in blocks of that many queries; grouped (groupedAttention)
// attends with the keys and values as cached instead of repeated per
// query head.
func (l *block) forward(x, cos, sin *ts.Tensor, mask *attnMask, kv kvStore, li int, eps float64, chunk int64, grouped bool) *ts.Tensor {
	q, k, v := l.qkv(x, cos, sin, eps)
	if kv != nil {
		k, v = kv.extend(li, k, v)
	}
	var attn *ts.Tensor
	if grouped {
		attn = attention(q, k, v, mask, l.headDim, x.DType(), chunk, true)
	} else {
		kr, vr := l.repeat(k, v)
		attn = attention(q, kr, vr, mask, l.headDim, x.DType(), chunk, false)
		if kr != k {
			drop(kr, vr)
		}
	}
	drop(q, k, v)
	return l.finish(x, attn, eps)
}

// qkv is the layer's attention input: q [B, H, T, hd], k and v
// [B, nKV, T, hd], normalised (Qwen3) and rotated; x is kept.
func (l *block) qkv(x, cos, sin *ts.Tensor, eps float64) (q, k, v *ts.Tensor) {
	sz := x.MustSize()
	b, t := sz[0], sz[1]
	h := rmsNorm(x, l.inNorm, eps)
	q = must(linear(h, l.q, l.qb).View([]int64{b, t, l.nHeads, l.headDim}, true))
	k = must(linear(h, l.k, l.kb).View([]int64{b, t, l.nKV, l.headDim}, true))
	v = must(linear(h, l.v, l.vb).View([]int64{b, t, l.nKV, l.headDim}, true))
	drop(h)
	if l.qNorm != nil { // Qwen3 normalises each head before RoPE
		q = swapDrop(q, rmsNorm(q, l.qNorm, eps))
		k = swapDrop(k, rmsNorm(k, l.kNorm, eps))
	}
	q = must(q.Transpose(1, 2, true))
	k = must(k.Transpose(1, 2, true))
	v = must(v.Transpose(1, 2, true))
	q = swapDrop(q, applyRope(q, cos, sin, l.headDim))
	k = swapDrop(k, applyRope(k, cos, sin, l.headDim))
	return q, k, v
}

// repeat expands k and v to every query head (themselves when there is
// one query head per key/value head).
func (l *block) repeat(k, v *ts.Tensor) (kr, vr *ts.Tensor) {
	rep := l.nHeads / l.nKV
	return repeatKV(k, rep), repeatKV(v, rep)
}

// finish applies o_proj and the MLP to the attention output attn
// [B, H, T, hd], with the residual stream x; both are consumed.
func (l *block) finish(x, attn *ts.Tensor, eps float64) *ts.Tensor {
	sz := x.MustSize()
	b, t := sz[0], sz[1]
	attn = must(must(attn.Transpose(1, 2, true)).Reshape([]int64{b, t, l.nHeads * l.headDim}, true))
	o := linear(attn, l.o, l.ob)
	drop(attn)
	x = must(x.Add(o, true))
	drop(o)

	h2 := rmsNorm(x, l.postNorm, eps)
	g := must(linear(h2, l.gate, nil).Silu(true))
	u := linear(h2, l.up, nil)
	drop(h2)
	gu := must(g.Mul(u, true))
	drop(u)
	d := linear(gu, l.down, nil)
	drop(gu)
	out := must(x.Add(d, true))
	drop(d)
	return out
}

// attention is softmax(q·kᵀ/√d + mask)·v for q [B, H, T, hd] and k, v
// [B, H, S, hd] (attend), or, grouped, k, v [B, H/rep, S, hd] with query
// head h reading key/value head h/rep (attendGrouped, only where
// groupedAttention says so), in blocks of chunk queries when chunk > 0
// (the mask's rows built a block at a time); it drops nothing it was
// given.
func attention(q, k, v *ts.Tensor, mask *attnMask, headDim int64, dt gotch.DType, chunk int64, grouped bool) *ts.Tensor {
	if mask != nil && mask.starts != nil {
		return decodeAttention(q, k, v, mask.starts, headDim)
	}
	att := func(q, k, v, m *ts.Tensor) *ts.Tensor {
		if grouped {
			return attendGrouped(q, k, v, m, headDim, dt, q.MustSize()[1]/k.MustSize()[1])
		}
		return attend(q, k, v, m, headDim, dt)
	}
	t := q.MustSize()[2]
	if chunk <= 0 || t <= chunk {
		return att(q, k, v, mask.all())
	}
	var parts []*ts.Tensor
	for s := int64(0); s < t; s += chunk {
		n := min(chunk, t-s)
		qb := must(q.Narrow(2, s, n, false))
		mb := mask.rows(s, n)
		parts = append(parts, att(qb, k, v, mb))
		drop(qb, mb)
	}
	out := must(ts.Cat(parts, 2))
	drop(parts...)
	return out
}

// recomputeBackward rebuilds the layer from its input x (a leaf that
// requires grad; x itself is kept) and back-propagates g, the gradient at
// the layer's output, into the layer's parameters and x's gradient, with
// attention's scores never whole: the attention output is computed in
// blocks of chunk queries without a graph and enters the rest of the
// layer as a leaf; the backward pass through o_proj and the MLP gives its
// gradient, and then each block of queries is recomputed with a graph and
// back-propagated on its own (the keys' and values' gradients summing
// over blocks), as flash attention's backward does; last, the gradients
// at q, k and v flow back through the projections to x. Peak memory is
// one block's scores, linear in the sequence, for a second forward pass
// through attention.
func (l *block) recomputeBackward(x, g, cos, sin *ts.Tensor, mask *attnMask, eps float64, chunk int64) {
	dt := x.DType()
	q, k, v := l.qkv(x, cos, sin, eps)
	kr, vr := l.repeat(k, v)
	leaf := func(t *ts.Tensor) *ts.Tensor {
		return must(must(t.Detach(false)).SetRequiresGrad(true, true))
	}
	qL, kL, vL := leaf(q), leaf(kr), leaf(vr)
	var attn *ts.Tensor
	withoutGrad(func() { attn = attention(qL, kL, vL, mask, l.headDim, dt, chunk, false) })
	aL := leaf(attn)
	drop(attn)
	backwardAt(l.finish(must(x.ShallowClone()), must(aL.ShallowClone()), eps), g)
	dO := must(aL.Grad(false))
	drop(aL)

	t := q.MustSize()[2]
	for s := int64(0); s < t; s += chunk {
		n := min(chunk, t-s)
		qb := must(qL.Narrow(2, s, n, false))
		mb := mask.rows(s, n)
		ab := attend(qb, kL, vL, mb, l.headDim, dt)
		drop(qb, mb)
		gb := must(dO.Narrow(2, s, n, false))
		backwardAt(ab, gb)
		drop(gb)
	}
	drop(dO)

	dq, dk, dv := must(qL.Grad(false)), must(kL.Grad(false)), must(vL.Grad(false))
	drop(qL, kL, vL)
	sq := must(must(q.Mul(dq, false)).Sum(gotch.Float, true))
	sk := must(must(kr.Mul(dk, false)).Sum(gotch.Float, true))
	sv := must(must(vr.Mul(dv, false)).Sum(gotch.Float, true))
	sur := must(must(sq.Add(sk, false)).Add(sv, true))
	must0(sur.Backward())
	drop(sur, sq, sk, sv, dq, dk, dv, q)
	if kr != k {
		drop(kr, vr)
	}
	drop(k, v)
}

// backwardAt back-propagates the gradient g at out (consumed) through
// out's graph: the backward pass of sum(out ⊙ g).
func backwardAt(out, g *ts.Tensor) {
	sur := must(must(out.Mul(g, true)).Sum(gotch.Float, true))
	must0(sur.Backward())
	drop(sur)
}

// useDecodeKernel routes batched decode steps on the CPU through
// decodeAttention (tests and benchmarks turn it off to compare;
// SEEDCTL_DECODE_ATTENTION=0 does it for a whole process).
var useDecodeKernel = os.Getenv("SEEDCTL_DECODE_ATTENTION") != "0"

// decodeAttention is one decode step's attention on the CPU for q
// [B, H, 1, d] and k, v [B, H/rep, S, d], row b attending to its keys from
// starts[b] on (seedops.DecodeAttention: one pass over each row's
// unpadded keys and values shared by its query heads, no mask). It drops
// nothing it was given.
//
// It replaced the fused op with a mask (libtorch 2.x; 1.13: products and
// sums over the padded cache), whose CPU kernel multiplies each (row,
// head)'s block of query heads against its keys as small matrix products
// and reads the padding too: at 64 sequences on the committed base that
// was about half of the embedded server's decode step (Go's profile of
// the server; docs/benchmarks.md, "A decode attention of our own").
func decodeAttention(q, k, v *ts.Tensor, starts []int64, headDim int64) *ts.Tensor {
	out, err := seedops.DecodeAttention(q.Ctensor(), k.Ctensor(), v.Ctensor(), starts, 1/math.Sqrt(float64(headDim)))
	return seedopsResult(out, err, q, k, v)
}

// seedopsResult is the tensor a seedops call returned (panicking with its
// error as the other libtorch calls do), keeping its operands alive until
// the call has returned.
func seedopsResult(out unsafe.Pointer, err error, operands ...*ts.Tensor) *ts.Tensor {
	runtime.KeepAlive(operands)
	if err != nil {
		panic(torchError{fmt.Errorf("%w: %w", ErrTorch, err)})
	}
	return ts.FromCtensor(out)
}

// attend is softmax(q·kᵀ/√d + mask)·v for q [B, H, T, d], k and v
// [B, H, S, d] and mask [B, 1, T, S] (nil: causal, T = S); it drops
// nothing it was given. Where
// libtorch has scaled_dot_product_attention (2.x) it is that fused op
// (flash attention's CPU kernel, the flash or memory-efficient kernels on
// CUDA: no score matrix is kept for the backward pass); otherwise
// (libtorch 1.13) matmul, softmax in float32, matmul.
func attend(q, k, v, mask *ts.Tensor, headDim int64, dt gotch.DType) *ts.Tensor {
	if mask == nil { // causal alone (attnMask.causal; only where the fused op exists)
		out, err := seedops.CausalAttention(q.Ctensor(), k.Ctensor(), v.Ctensor())
		return seedopsResult(out, err, q, k, v)
	}
	if sdpaAvailable() {
		m := mask
		if mask.DType() != dt { // a mask built for another dtype (maskRows converts)
			m = must(mask.Totype(dt, false))
			defer drop(m)
		}
		return must(ts.ScaledDotProductAttention(q, k, v, m, 0, false, nil))
	}
	return attendMatmul(q, k, v, mask, headDim, dt)
}

// attendMatmul is attend written out, the softmax in float32. Each step
// frees its input as it makes its output, so at most two score-sized
// tensors exist at once. (Not gotch's in-place ops: they replace the
// tensor's handle without freeing the old one, which keeps the storage
// alive — a leak on temporaries.)
func attendMatmul(q, k, v, mask *ts.Tensor, headDim int64, dt gotch.DType) *ts.Tensor {
	kt := must(k.Transpose(2, 3, false))
	scores := mulScalar(must(q.Matmul(kt, false)), 1/math.Sqrt(float64(headDim)), true)
	drop(kt)
	scoresF := must(must(scores.Totype(gotch.Float, true)).Add(mask, true))
	probs := must(must(scoresF.Softmax(-1, gotch.Float, true)).Totype(dt, true))
	return must(probs.Matmul(v, true))
}

// attendGrouped is attendMatmul for grouped-query attention without
// repeating the keys and values: q [B, H, T, d] is viewed as [B, H/rep,
// rep·T, d] (query head h = kv·rep + r reads key/value head kv, as
// repeatKV's order), so each key/value head meets its rep query heads in
// one matmul against k and v [B, H/rep, S, d] as they are; the mask
// [B|1, 1, T, S] broadcasts over the rep query heads. repeatKV copied the
// whole cache (both halves, every layer) at each decode step; here only q
// is reshaped. Same values as attendMatmul on repeated k and v.
//
// One query per row (a decode step) is products and sums instead: as
// matmuls, the B·H/rep products of [rep, d]·[d, S] were that many tiny
// GEMM calls (libtorch 1.13's CPU bmm calls BLAS once per matrix), which
// cost more than their arithmetic; as elementwise products summed over d
// (then over S) each is one vectorised kernel over the whole batch.
func attendGrouped(q, k, v, mask *ts.Tensor, headDim int64, dt gotch.DType, rep int64) *ts.Tensor {
	qs := q.MustSize()
	b, h, t, d := qs[0], qs[1], qs[2], qs[3]
	kvh, s := h/rep, k.MustSize()[2]
	if t == 1 {
		return attendOneQuery(q, k, v, mask, headDim, dt, b, kvh, rep, d)
	}
	qg := must(q.Reshape([]int64{b, kvh, rep * t, d}, false))
	kt := must(k.Transpose(2, 3, false))
	scores := mulScalar(must(qg.Matmul(kt, false)), 1/math.Sqrt(float64(headDim)), true)
	drop(qg, kt)
	scoresF := must(must(scores.Totype(gotch.Float, true)).View([]int64{b, kvh, rep, t, s}, true))
	m5 := must(mask.Unsqueeze(2, false))
	scoresF = must(scoresF.Add(m5, true))
	drop(m5)
	probs := must(must(scoresF.Softmax(-1, gotch.Float, true)).Totype(dt, true))
	probs = must(probs.View([]int64{b, kvh, rep * t, s}, true))
	out := must(probs.Matmul(v, true))
	return must(out.View([]int64{b, h, t, d}, true))
}

// attendOneQuery is attendGrouped for one query per row: q [B, H, 1, d],
// k and v [B, H/rep, S, d], mask [B|1, 1, 1, S].
//
// Where libtorch has the fused op, it is that op on q viewed as [B, H/rep,
// rep, d]: the rep query heads of a key/value head are its rep "query
// positions", which the mask's one row reaches by broadcasting. Neither
// the repeated keys and values (a copy of the whole cache per layer and
// step, most of a decode step's time at long contexts) nor the products
// are materialised.
func attendOneQuery(q, k, v, mask *ts.Tensor, headDim int64, dt gotch.DType, b, kvh, rep, d int64) *ts.Tensor {
	if sdpaAvailable() {
		qg := must(q.View([]int64{b, kvh, rep, d}, false))
		out := attend(qg, k, v, mask, headDim, dt)
		drop(qg)
		return must(out.View([]int64{b, kvh * rep, 1, d}, true))
	}
	qg := must(q.View([]int64{b, kvh, rep, 1, d}, false))
	k5 := must(k.Unsqueeze(2, false)) // [B, H/rep, 1, S, d]
	prod := must(qg.Mul(k5, false))
	drop(qg, k5)
	scores := mulScalar(must(prod.SumDimIntlist([]int64{-1}, false, dt, true)), 1/math.Sqrt(float64(headDim)), true) // [B, H/rep, rep, S]
	scoresF := must(must(scores.Totype(gotch.Float, true)).Add(mask, true))
	probs := must(must(scoresF.Softmax(-1, gotch.Float, true)).Totype(dt, true))
	p5 := must(probs.Unsqueeze(-1, true)) // [B, H/rep, rep, S, 1]
	v5 := must(v.Unsqueeze(2, false))     // [B, H/rep, 1, S, d]
	out := must(p5.Mul(v5, true))
	drop(v5)
	out = must(out.SumDimIntlist([]int64{-2}, false, dt, true)) // [B, H/rep, rep, d]
	return must(out.View([]int64{b, kvh * rep, 1, d}, true))
}

// groupedAttention says whether the layers of a forward pass attend with
// attendGrouped (keys and values as cached, not repeated per query head),
// given whether the pass builds a graph (grad, read once per pass) and
// its queries per row (t): in passes without one (decoding, prefill,
// scoring) where attention is matmul and softmax (libtorch 1.13, or the
// fused op turned off), and in decode steps (t = 1) where it is the fused
// op. gotch's wrapper of the fused op has no enable_gqa; with one query
// per row, a key/value head's query heads stand in for query positions
// (attendOneQuery) and the mask's one row broadcasts over them. With many
// queries that would need the mask repeated per query head, larger than
// the keys and values it saves repeating, and the causal form has no mask
// to broadcast, so those passes keep repeated keys. Training keeps the repeated
// form: it gained nothing measurable from the grouped one (0.97–1.04× in
// BenchmarkGroupedAttention), and both base-model builds made with it
// came out far worse (oracle-hinted success 14.5% and 24.0% against
// 55.5–67.5% without it; suggestive, not proof: p ≈ 0.05–0.17 were
// builds exchangeable, docs/experiments.md) although the two forms'
// logits and gradients agree to 1e-5 in every test; no cause is found, so
// it stays out of training. useGrouped turns it off (tests
// compare both; SEEDCTL_GQA=0 for a whole process).
func groupedAttention(grad bool, t int64) bool {
	return useGrouped && !grad && (!sdpaAvailable() || t == 1)
}

var useGrouped = os.Getenv("SEEDCTL_GQA") != "0"

// useSDPA turns the fused attention off where libtorch has it (tests
// compare both; SEEDCTL_SDPA=0 does it for a whole process).
var useSDPA = os.Getenv("SEEDCTL_SDPA") != "0"

var sdpa struct {
	once sync.Once
	ok   bool
}

// sdpaAvailable reports whether attend uses scaled_dot_product_attention:
// useSDPA, and libtorch has the op (probed once: on libtorch 1.13 gotch's
// wrapper is a stub that returns an error).
func sdpaAvailable() bool {
	if !useSDPA {
		return false
	}
	sdpa.once.Do(func() {
		x := ts.MustOnes([]int64{1, 1, 2, 4}, gotch.Float, gotch.CPU)
		m := ts.MustZeros([]int64{1, 1, 2, 2}, gotch.Float, gotch.CPU)
		out, err := ts.ScaledDotProductAttention(x, x, x, m, 0, false, nil)
		sdpa.ok = err == nil
		drop(x, m)
		if err == nil {
			drop(out)
		}
	})
	return sdpa.ok
}

// AttentionKernel names how attention is computed in this build:
// "scaled_dot_product_attention" (libtorch 2.x) or "matmul+softmax"
// (libtorch 1.13), for doctor and benchmark reports.
func AttentionKernel() string {
	if sdpaAvailable() {
		return "scaled_dot_product_attention"
	}
	return "matmul+softmax"
}

// swapDrop frees old and returns updated.
func swapDrop(old, updated *ts.Tensor) *ts.Tensor {
	drop(old)
	return updated
}

// Close frees the model's tensors now rather than at garbage collection.
// The model must not be used afterwards.
func (m *Model) Close() {
	if m.vs == nil {
		return
	}
	if m.pending != nil {
		m.pending.free()
		m.pending = nil
	}
	m.vs.Destroy()
	drop(m.invFreq)
	m.vs, m.invFreq, m.params, m.layers = nil, nil, nil, nil
	m.embed, m.norm, m.lmHead = nil, nil, nil
}
