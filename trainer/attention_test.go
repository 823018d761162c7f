package trainer

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/libtch/seedops"
	"github.com/sugarme/gotch/ts"
)

// TestChunkedAttentionMatches: attention in query blocks (forward passes
// without a graph) gives the logits of attention in one piece, for packed
// rows with several segments and padding, each architecture, block sizes
// that do and do not divide the length.
func TestChunkedAttentionMatches(t *testing.T) {
	saved := attentionChunk
	defer func() { attentionChunk = saved }()
	in := packedInput()
	for _, arch := range []Arch{ArchQwen2, ArchQwen3, ArchLlama} {
		m, _ := newTiny(t, arch, 41)
		attentionChunk = 0
		whole, err := m.Logits(in)
		if err != nil {
			t.Fatal(err)
		}
		for _, chunk := range []int64{16, 37, 150} {
			attentionChunk = chunk
			got, err := m.Logits(in)
			if err != nil {
				t.Fatal(err)
			}
			if d := maxAbsDiff(whole, got); d > 1e-5 {
				t.Errorf("%s, blocks of %d queries: logits differ by %g", arch, chunk, d)
			}
		}
		m.Close()
	}
}

// packedInput is two 150-token rows: one sequence, and three packed
// segments followed by padding.
func packedInput() Input {
	r := rand.New(rand.NewPCG(3, 4))
	const width = 150
	in := Input{IDs: make([][]int, 2), Positions: make([][]int, 2), Segments: make([][]int, 2)}
	for b := range 2 {
		for j := range width {
			in.IDs[b] = append(in.IDs[b], 3+r.IntN(90))
			seg, pos := 1, j
			if b == 1 { // three packed segments, then padding
				seg, pos = 1+j/60, j%60
				if j >= 140 {
					seg, pos = 0, 0
				}
			}
			in.Segments[b] = append(in.Segments[b], seg)
			in.Positions[b] = append(in.Positions[b], pos)
		}
	}
	return in
}

// nextTokenTargets is each position's next token within its segment, -1
// at a segment's end and on padding.
func nextTokenTargets(in Input) [][]int {
	targets := make([][]int, len(in.IDs))
	for b, row := range in.IDs {
		for j := range row {
			tg := -1
			if j+1 < len(row) && in.Segments[b][j] != 0 && in.Segments[b][j+1] == in.Segments[b][j] {
				tg = row[j+1]
			}
			targets[b] = append(targets[b], tg)
		}
	}
	return targets
}

// TestChunkedAttentionBackward: with recomputation, the backward pass that
// rebuilds attention a block of queries at a time gives the gradients of
// the whole-matrix step without recomputation (every parameter, each
// architecture, packed rows with padding, block sizes that do and do not
// divide the length).
func TestChunkedAttentionBackward(t *testing.T) {
	saved, fused := attentionChunk, useSDPA
	defer func() { attentionChunk, useSDPA = saved, fused }()
	useSDPA = false // the blocks are the path without the fused op
	in := packedInput()
	checkAttentionPath(t, "fused attention", []Arch{ArchQwen2, ArchQwen3, ArchLlama}, 47, in, nextTokenTargets(in),
		func(on bool) { useSDPA = on }, nil)
}

// TestChunkedAttentionMemory: the peak memory of a forward pass without a
// graph over one 4,096-token row stays within 2× of the estimate that is
// linear in the length (the weights, activations and one block's scores),
// where attention in one piece needs 4,096² scores per head (measured in a
// child process, whose peak RSS is its own).
func TestChunkedAttentionMemory(t *testing.T) {
	if os.Getenv("SEEDCTL_ATTN_CHILD") != "" {
		return
	}
	peak := func(chunk int64) float64 { return childPeak(t, chunk, false, false) }
	const T, heads, hidden, inter = 4096, 4, 32, 48
	chunked, whole := peak(512), peak(0)
	// Linear estimate: per token, the float32 activations of one layer
	// (hidden, q/k/v, MLP, logits of the 97-token vocabulary, a few copies
	// each), plus one block's scores and probabilities and its mask (on the
	// host and as a tensor).
	linear := float64(T)*4*(8*hidden+4*inter+4*97) + 2*512*T*heads*4 + 2*512*T*4
	quadratic := 2.0 * T * T * heads * 4
	checkAttentionMemory(t, "forward", false, chunked, whole, linear, quadratic)
}

// checkAttentionMemory asserts a memory test's measurements: the blocks
// within 2× of the linear estimate, the whole matrices seen by the
// measurement, and where libtorch has the fused op, it within 2× too.
func checkAttentionMemory(t *testing.T, what string, train bool, chunked, whole, linear, quadratic float64) {
	t.Helper()
	t.Logf("peak RSS growth of a 4,096-token %s: %.1f MB in blocks of 512 queries, %.1f MB in one piece; linear estimate %.1f MB, the full score matrices %.1f MB",
		what, chunked/1e6, whole/1e6, linear/1e6, quadratic/1e6)
	if chunked > 2*linear {
		t.Errorf("chunked attention grew RSS by %.1f MB, more than twice the linear estimate %.1f MB", chunked/1e6, linear/1e6)
	}
	if whole < quadratic/2 {
		t.Errorf("attention in one piece grew RSS by only %.1f MB: the measurement does not see the score matrices (%.1f MB)", whole/1e6, quadratic/1e6)
	}
	if sdpaAvailable() {
		fused := childPeak(t, 0, train, true)
		t.Logf("with %s in one piece: %.1f MB", AttentionKernel(), fused/1e6)
		if fused > 2*linear {
			t.Errorf("fused attention grew RSS by %.1f MB, more than twice the linear estimate %.1f MB", fused/1e6, linear/1e6)
		}
	}
}

// TestChunkedAttentionTrainMemory: the same for a training step (forward
// and backward of the NLL loss with recomputation) over one 4,096-token
// row: in blocks of 512 queries its peak stays within 2× of the linear
// estimate, where the whole matrices need 4,096² scores per head and their
// gradients.
func TestChunkedAttentionTrainMemory(t *testing.T) {
	if os.Getenv("SEEDCTL_ATTN_CHILD") != "" {
		return
	}
	const T, heads, hidden, inter, layers, vocab = 4096, 4, 32, 48, 2, 97
	chunked, whole := childPeak(t, 512, true, false), childPeak(t, 0, true, false)
	// Linear estimate, per token in float32: each layer's saved input; the
	// rebuilt layer's graph (norms, q/k/v, MLP) with the leaves of q, k, v
	// and the attention output and their gradients; the head's logits, its
	// log-softmax and their gradients; then one block's probabilities, their
	// gradient and the scores' gradient (3 per head), and the block's mask
	// on the host and as a tensor.
	linear := float64(T)*4*(layers*hidden+16*hidden+8*inter+6*vocab) + 3*512*T*heads*4 + 2*512*T*4
	quadratic := 2.0 * T * T * heads * 4
	checkAttentionMemory(t, "training step", true, chunked, whole, linear, quadratic)
}

// childPeak runs TestAttentionMemoryChild with blocks of chunk queries
// (0: whole), a forward pass or (train) a training step, attention written
// out or (fused) libtorch's scaled_dot_product_attention, and returns the
// growth of its peak RSS over the warm-up.
func childPeak(t *testing.T, chunk int64, train, fused bool) float64 {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run", "^TestAttentionMemoryChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), "SEEDCTL_ATTN_CHILD="+strconv.FormatInt(chunk, 10), "SEEDCTL_SDPA=0")
	if fused {
		cmd.Env[len(cmd.Env)-1] = "SEEDCTL_SDPA=1"
	}
	if train {
		cmd.Env = append(cmd.Env, "SEEDCTL_ATTN_TRAIN=1")
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	var before, after float64
	for _, l := range strings.Split(string(out), "\n") {
		if _, err := fmt.Sscanf(strings.TrimSpace(l), "rss %g %g", &before, &after); err == nil {
			return after - before
		}
	}
	t.Fatalf("child printed no rss line:\n%s", out)
	return 0
}

// TestAttentionMemoryChild is TestChunkedAttentionMemory's child
// (SEEDCTL_ATTN_T sets another length, to see how the growth scales).
func TestAttentionMemoryChild(t *testing.T) {
	c := os.Getenv("SEEDCTL_ATTN_CHILD")
	if c == "" {
		t.Skip("run by TestChunkedAttentionMemory")
	}
	chunk, _ := strconv.ParseInt(c, 10, 64)
	attentionChunk = chunk
	mapLargeBuffers() // the resident set is then what is live, not what the heap kept
	cfg := tinyConfig(ArchQwen2)
	cfg.MaxPositionEmbeddings = 8192
	m, err := InitRandom(cfg, ModelOptions{}, 5)
	if err != nil {
		t.Fatal(err)
	}
	n := 4096
	if v, err := strconv.Atoi(os.Getenv("SEEDCTL_ATTN_T")); err == nil {
		n = v
	}
	ids := make([]int, n)
	for i := range ids {
		ids[i] = 3 + i%90
	}
	small := []int{5, 6, 7}
	if os.Getenv("SEEDCTL_ATTN_TRAIN") != "" {
		// One NLL step with recomputation: a training forward and backward.
		m.SetRecompute(true)
		step := func(ids []int) {
			in := Input{IDs: [][]int{ids}}
			targets := [][]int{append(append([]int(nil), ids[1:]...), -1)}
			if _, err := m.NLLBackward(in, targets); err != nil {
				t.Fatal(err)
			}
			m.ZeroGrad()
		}
		step(small)
		before := maxRSS()
		step(ids)
		fmt.Printf("rss %g %g\n", before, maxRSS())
		return
	}
	if _, err := m.Rescore([][]int{small}, 1<<20); err != nil { // warm-up: libtorch's own buffers
		t.Fatal(err)
	}
	before := maxRSS()
	if _, err := m.Rescore([][]int{ids}, 1<<20); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("rss %g %g\n", before, maxRSS())
}

// maxRSS is the process's peak resident set in bytes.
func maxRSS() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Maxrss) * 1024
}

// TestFusedAttentionMatches: where libtorch has scaled_dot_product_attention
// (2.x builds), the logits and the gradients of an NLL step through it
// equal those of attention written out (matmul, float32 softmax, matmul),
// for packed rows with padding, each architecture, with and without
// recomputation. On libtorch 1.13 the op is absent and the test says so.
func TestFusedAttentionMatches(t *testing.T) {
	if !sdpaAvailable() {
		t.Skipf("this libtorch has no scaled_dot_product_attention (attention kernel: %s)", AttentionKernel())
	}
	defer func(on bool) { useSDPA = on }(useSDPA)
	in := packedInput()
	targets := nextTokenTargets(in)
	for _, arch := range []Arch{ArchQwen2, ArchQwen3, ArchLlama} {
		m, _ := newTiny(t, arch, 47)
		run := func(fused, recompute bool) ([][][]float32, map[string][]float64, float64) {
			useSDPA = fused
			m.SetRecompute(recompute)
			logits, err := m.Logits(in)
			if err != nil {
				t.Fatal(err)
			}
			loss, err := m.NLLBackward(in, targets)
			if err != nil {
				t.Fatal(err)
			}
			g := gradValues(m)
			m.ZeroGrad()
			return logits, g, loss
		}
		wantLogits, wantGrads, wantLoss := run(false, false)
		for _, rec := range []bool{false, true} {
			logits, grads, loss := run(true, rec)
			if d := maxAbsDiff(wantLogits, logits); d > 1e-5 {
				t.Errorf("%s (recompute %v): fused attention's logits differ by %g", arch, rec, d)
			}
			if rel, ok := compareGrads(wantGrads, grads); !ok || rel > 1e-5 || math.Abs(loss-wantLoss) > 1e-5 {
				t.Errorf("%s (recompute %v): fused attention's gradients differ by %.3g of the largest (same parameters: %v), loss %v vs %v", arch, rec, rel, ok, loss, wantLoss)
			}
		}
		m.Close()
	}
}

func TestCausalRows(t *testing.T) {
	for _, c := range []struct {
		segs [][]int
		want bool
	}{
		{[][]int{{1, 1, 1}, {1, 1, 1}}, true},
		{[][]int{{1, 1, 0, 0}, {2, 2, 2, 2}}, true}, // one segment then padding
		{[][]int{{1, 2, 2}}, false},                 // packed
		{[][]int{{1, 0, 1}}, false},                 // a token after padding
		{[][]int{{0, 1, 1}}, false},                 // left padding
		{[][]int{{}}, false},
	} {
		if got := causalRows(c.segs); got != c.want {
			t.Errorf("causalRows(%v) = %v, want %v", c.segs, got, c.want)
		}
	}
}

// TestCausalAttentionMatchesMasked: rows that are one sequence each, right
// padded (an RL micro-batch), run scaled_dot_product_attention with
// is_causal and no mask; the logits before the padding and an NLL step's
// loss and gradients equal the masked form's, with and without
// recomputation (which builds causal blocks of three queries).
func TestCausalAttentionMatchesMasked(t *testing.T) {
	if !sdpaAvailable() {
		t.Skipf("this libtorch has no scaled_dot_product_attention (attention kernel: %s): rows always take the mask", AttentionKernel())
	}
	defer func(on bool, chunk int64) { causalAttention, attentionChunk = on, chunk }(causalAttention, attentionChunk)
	attentionChunk = 3 // recomputation's blocks of queries: 0-2, 3-5, 6
	in := Input{
		IDs:      [][]int{{5, 17, 3, 88, 41, 9, 60}, {7, 7, 12, 30, 0, 0, 0}},
		Segments: [][]int{{1, 1, 1, 1, 1, 1, 1}, {1, 1, 1, 1, 0, 0, 0}},
	}
	targets := [][]int{{17, 3, 88, 41, 9, 60, -1}, {7, 12, 30, -1, -1, -1, -1}}
	checkAttentionPath(t, "causal attention", []Arch{ArchQwen2, ArchLlama}, 48, in, targets,
		func(on bool) { causalAttention = on },
		func(logits [][][]float32) { logits[1] = logits[1][:4] }) // the padding's outputs are unspecified
}

// checkAttentionPath compares an attention path that set(true) turns on
// against set(false), for each architecture (a tiny model from seed): the
// logits (trimmed by trim, when given) and an NLL step's loss and
// gradients agree, with and without recomputation.
func checkAttentionPath(t *testing.T, what string, archs []Arch, seed uint64, in Input, targets [][]int, set func(on bool), trim func([][][]float32)) {
	t.Helper()
	for _, arch := range archs {
		m, _ := newTiny(t, arch, seed)
		run := func(on, recompute bool) ([][][]float32, map[string][]float64, float64) {
			set(on)
			m.SetRecompute(recompute)
			logits, err := m.Logits(in)
			if err != nil {
				t.Fatal(err)
			}
			loss, err := m.NLLBackward(in, targets)
			if err != nil {
				t.Fatal(err)
			}
			g := gradValues(m)
			m.ZeroGrad()
			if trim != nil {
				trim(logits)
			}
			return logits, g, loss
		}
		wantLogits, wantGrads, wantLoss := run(false, false)
		for _, rec := range []bool{false, true} {
			logits, grads, loss := run(true, rec)
			if d := maxAbsDiff(wantLogits, logits); d > 1e-5 {
				t.Errorf("%s (recompute %v): %s's logits differ by %g", arch, rec, what, d)
			}
			if rel, ok := compareGrads(wantGrads, grads); !ok || rel > 1e-5 || math.Abs(loss-wantLoss) > 1e-5 {
				t.Errorf("%s (recompute %v): %s's gradients differ by %.3g of the largest (same parameters: %v), loss %v vs %v", arch, rec, what, rel, ok, loss, wantLoss)
			}
		}
		m.Close()
	}
}

// TestGroupedAttentionMatchesRepeated: grouped-query attention without
// repeating the keys and values (attendGrouped, forward passes without a
// graph) gives the logits of attention on repeated ones — packed rows with
// padding, whole and in blocks of three queries — and the same logits when
// decoding from a cache (one query against the cached keys, sequences of
// different lengths batched), with the matmul path and, where libtorch
// has it, the fused op. (Its gradients matched too to 1e-5 while
// training used it; see groupedAttention for why it no longer does.)
func TestGroupedAttentionMatchesRepeated(t *testing.T) {
	defer func(grouped, fused bool, chunk int64) { useGrouped, useSDPA, attentionChunk = grouped, fused, chunk }(useGrouped, useSDPA, attentionChunk)
	useSDPA = false // the grouped form is the matmul path's
	in := packedInput()
	for _, chunk := range []int64{512, 3} {
		attentionChunk = chunk
		checkAttentionPath(t, fmt.Sprintf("grouped attention (blocks of %d)", chunk), []Arch{ArchQwen2, ArchQwen3, ArchLlama}, 49, in, nextTokenTargets(in),
			func(on bool) { useGrouped = on }, nil)
	}
	m, _ := newTiny(t, ArchQwen2, 50)
	defer m.Close()
	if m.cfg.NumAttentionHeads == m.cfg.NumKeyValueHeads {
		t.Fatal("the tiny model has as many key/value heads as query heads: nothing is grouped")
	}
	decode := func(on bool) [][]float32 {
		useGrouped = on
		prompts := [][]int{{5, 9, 2}, {1, 2, 3, 4, 5, 6, 7}}
		caches := make([]*SeqCache, len(prompts))
		for i, p := range prompts {
			caches[i] = m.NewSeqCache()
			if _, err := m.Extend(caches[i], p); err != nil {
				t.Fatal(err)
			}
		}
		var out [][]float32
		next := []int{11, 12}
		for range 3 {
			logits, err := m.DecodeBatch(caches, next)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, logits...)
			next = []int{argmax(logits[0]), argmax(logits[1])}
		}
		for _, c := range caches {
			c.Free()
		}
		return out
	}
	fusedToo := []bool{false}
	useSDPA = true
	if sdpaAvailable() { // the fused op's decode step attends grouped too (attendOneQuery)
		fusedToo = append(fusedToo, true)
	}
	for _, fused := range fusedToo {
		useSDPA = fused
		want, got := decode(false), decode(true)
		if d := maxAbsDiff([][][]float32{want}, [][][]float32{got}); d > 1e-5 {
			t.Errorf("decoding (fused op %v): grouped attention's logits differ from repeated keys' by %g", fused, d)
		}
	}
}

// TestDecodeAttentionMatchesMasked: the CPU decode kernel
// (decodeAttention) against attendMatmul with the additive mask it
// replaces, on keys and values that are windows of larger buffers (as a
// decode group's are), rows with left padding, 1 to 4 query heads per
// key/value head, head sizes with and without a tail past multiples of 8,
// in float32 and bfloat16, through the AVX2 path and the portable loops.
// Rows whose padding holds huge values would poison a masked sum that
// read them; the kernel must not read them at all.
func TestDecodeAttentionMatchesMasked(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	cases := []struct {
		b, kvh, rep, s, d int
		starts            []int64
	}{
		{1, 1, 1, 1, 8, []int64{0}},
		{2, 2, 2, 9, 32, []int64{0, 5}},
		{3, 1, 4, 17, 12, []int64{16, 3, 0}},
		{4, 2, 1, 40, 64, []int64{1, 39, 20, 0}},
		{2, 3, 2, 5, 7, []int64{4, 2}},
	}
	for _, portable := range []bool{false, true} {
		prev := seedops.DecodeAttentionPortable(portable)
		for _, dt := range []gotch.DType{gotch.Float, gotch.BFloat16} {
			for ci, c := range cases {
				name := fmt.Sprintf("portable=%v %v case %d", portable, dt, ci)
				h := c.kvh * c.rep
				qv := make([]float32, c.b*h*c.d)
				for i := range qv {
					qv[i] = float32(rng.NormFloat64())
				}
				// Buffers 3 columns wider than the window, which starts at column 2.
				const off, extra = 2, 3
				w := c.s + extra
				kv, vv := make([]float32, c.b*c.kvh*w*c.d), make([]float32, c.b*c.kvh*w*c.d)
				for i := range kv {
					kv[i], vv[i] = float32(2*rng.NormFloat64()), float32(rng.NormFloat64())
				}
				for bi, st := range c.starts { // padding: values a masked product would still multiply
					for g := 0; g < c.kvh; g++ {
						for j := 0; j < int(st); j++ {
							for e := 0; e < c.d; e++ {
								i := ((bi*c.kvh+g)*w+off+j)*c.d + e
								kv[i], vv[i] = 1e30, float32(math.NaN())
							}
						}
					}
				}
				withoutGrad(func() {
					q := must(upload(qv, []int64{int64(c.b), int64(h), 1, int64(c.d)}, gotch.CPU).Totype(dt, true))
					kb := must(upload(kv, []int64{int64(c.b), int64(c.kvh), int64(w), int64(c.d)}, gotch.CPU).Totype(dt, true))
					vb := must(upload(vv, []int64{int64(c.b), int64(c.kvh), int64(w), int64(c.d)}, gotch.CPU).Totype(dt, true))
					k := must(kb.Narrow(2, off, int64(c.s), false))
					v := must(vb.Narrow(2, off, int64(c.s), false))
					got := rows2D(must(must(decodeAttention(q, k, v, c.starts, int64(c.d)).Totype(gotch.Float, true)).View([]int64{int64(c.b * h), int64(c.d)}, true)))

					// The reference: float32 copies with the padding zeroed, repeated per query head, masked.
					kf := must(must(k.Totype(gotch.Float, false)).Contiguous(true))
					vf := must(must(v.Totype(gotch.Float, false)).Contiguous(true))
					mv := make([]float32, c.b*c.s)
					for bi, st := range c.starts {
						for j := 0; j < int(st); j++ {
							mv[bi*c.s+j] = float32(-math.MaxFloat32)
						}
					}
					keep := make([]float32, c.b*c.s)
					for i, x := range mv {
						if x == 0 {
							keep[i] = 1
						}
					}
					km := upload(keep, []int64{int64(c.b), 1, int64(c.s), 1}, gotch.CPU)
					kf = must(kf.Mul(km, true))
					vf = must(must(vf.NanToNum([]float64{0}, nil, nil, true)).Mul(km, true))
					mask := upload(mv, []int64{int64(c.b), 1, 1, int64(c.s)}, gotch.CPU)
					qf := must(q.Totype(gotch.Float, false))
					kr, vr := repeatKV(kf, int64(c.rep)), repeatKV(vf, int64(c.rep))
					want := rows2D(must(attendMatmul(qf, kr, vr, mask, int64(c.d), gotch.Float).View([]int64{int64(c.b * h), int64(c.d)}, true)))
					tol := 2e-5
					if dt == gotch.BFloat16 {
						tol = 2e-2 // the output rounded to bfloat16
					}
					for r := range want {
						for e := range want[r] {
							if d := math.Abs(float64(got[r][e] - want[r][e])); !(d <= tol*math.Max(1, math.Abs(float64(want[r][e])))) {
								t.Fatalf("%s: out[%d][%d] = %v, masked attention %v", name, r, e, got[r][e], want[r][e])
							}
						}
					}
					drop(q, kb, vb, k, v, kf, vf, km, mask, qf, kr, vr)
				})
			}
		}
		seedops.DecodeAttentionPortable(prev)
	}
}

// TestDecodeAttentionRefusesBadShapes: the kernel's checks name what was
// wrong instead of reading out of bounds.
func TestDecodeAttentionRefusesBadShapes(t *testing.T) {
	withoutGrad(func() {
		q := must(ts.Zeros([]int64{2, 4, 1, 8}, gotch.Float, gotch.CPU))
		k := must(ts.Zeros([]int64{2, 2, 5, 8}, gotch.Float, gotch.CPU))
		defer drop(q, k)
		for _, c := range []struct {
			starts []int64
			want   string
		}{
			{[]int64{0}, "one first key per row"},
			{[]int64{0, 5}, "outside its keys"},
			{[]int64{-1, 0}, "outside its keys"},
		} {
			_, err := seedops.DecodeAttention(q.Ctensor(), k.Ctensor(), k.Ctensor(), c.starts, 1)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("starts %v: %v, want an error saying %q", c.starts, err, c.want)
			}
		}
		q3 := must(ts.Zeros([]int64{2, 3, 1, 8}, gotch.Float, gotch.CPU))
		defer drop(q3)
		if _, err := seedops.DecodeAttention(q3.Ctensor(), k.Ctensor(), k.Ctensor(), []int64{0, 0}, 1); err == nil || !strings.Contains(err.Error(), "multiple") {
			t.Errorf("3 query heads over 2 key/value heads: %v", err)
		}
	})
}
