package trainer

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"
)

// benchConfig is a small Qwen2 model (≈3.7M parameters) that fits the CPU.
func benchConfig() *ModelConfig {
	c := tinyConfig(ArchQwen2)
	c.VocabSize, c.HiddenSize, c.IntermediateSize, c.NumHiddenLayers = 2048, 256, 704, 4
	c.NumAttentionHeads, c.NumKeyValueHeads, c.InitializerRange = 8, 2, 0.02
	return c
}

// BenchmarkTrainStep measures forward+backward tokens/s of the trainer, its
// model-FLOPs utilisation against this machine's measured fp32 matmul peak,
// and the same step in PyTorch eager (Debian's python3-torch on the same
// libtorch) side by side.
//
//	go test ./trainer -run '^$' -bench TrainStep -benchtime 20x
//
// randomLMBatch is batch rows of seq random tokens with next-token
// targets (the last row's target wraps to its first token), the same every
// call.
func randomLMBatch(vocab, batch, seq int) (Input, [][]int) {
	r := rand.New(rand.NewPCG(0, 0))
	in := Input{IDs: make([][]int, batch)}
	targets := make([][]int, batch)
	for i := range in.IDs {
		in.IDs[i] = make([]int, seq)
		for j := range in.IDs[i] {
			in.IDs[i][j] = r.IntN(vocab)
		}
		targets[i] = append(append([]int(nil), in.IDs[i][1:]...), in.IDs[i][0])
	}
	return in, targets
}

// sideBySide times variants of one piece of work in one run: each once as
// a warm-up, then b.N rounds of each in turn, so the machine's drift falls
// on all alike; it returns each variant's total time over the rounds.
func sideBySide(b *testing.B, variants ...func() time.Duration) []time.Duration {
	b.Helper()
	for _, v := range variants {
		v()
	}
	took := make([]time.Duration, len(variants))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for k, v := range variants {
			took[k] += v()
		}
	}
	b.StopTimer()
	return took
}

func BenchmarkTrainStep(b *testing.B) {
	const batch, seq = 8, 128
	cfg := benchConfig()
	m, err := InitRandom(cfg, ModelOptions{}, 1)
	if err != nil {
		b.Fatal(err)
	}
	dir := filepath.Join(b.TempDir(), "bench")
	if err := m.Save(dir, SaveOptions{}); err != nil {
		b.Fatal(err)
	}
	in, targets := randomLMBatch(cfg.VocabSize, batch, seq)
	// As TrainSFT runs its steps: on one OS thread, collector off.
	defer pinThread()()
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	step := func() {
		if _, err := m.NLLBackward(in, targets); err != nil {
			b.Fatal(err)
		}
		m.ZeroGrad()
	}
	step() // warm-up
	peak, err := MeasureMatmul(context.Background(), 1024, time.Second, false)
	if err != nil {
		b.Fatal(err)
	}

	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		step()
	}
	el := time.Since(start)
	b.StopTimer()
	tokS := float64(b.N*batch*seq) / el.Seconds()
	gflops := tokS * StepFLOPsPerToken(cfg, seq) / 1e9
	b.ReportMetric(tokS, "tokens/s")
	b.ReportMetric(gflops, "model-GFLOP/s")
	b.ReportMetric(100*gflops/peak.GFLOPS, "MFU%")
	b.ReportMetric(peak.GFLOPS, "peak-GFLOP/s")

	out, err := exec.Command("/usr/bin/python3", "testdata/torch_bench.py", dir,
		strconv.Itoa(batch), strconv.Itoa(seq), strconv.FormatFloat(max(el.Seconds(), 2), 'f', 2, 64)).Output()
	if err != nil {
		b.Logf("PyTorch peer unavailable (install python3-torch via ./setup.sh): %v", err)
		return
	}
	var peer struct {
		TokensPerS float64 `json:"tokens_per_s"`
		Threads    int     `json:"threads"`
	}
	if err := json.Unmarshal(out, &peer); err != nil {
		b.Fatalf("torch_bench.py output %q: %v", out, err)
	}
	b.ReportMetric(peer.TokensPerS, "torch-tokens/s")
	b.ReportMetric(tokS/peer.TokensPerS, "go/torch")
}

// BenchmarkBackwardRepeatability measures how often libtorch's CPU backward
// gives a different gradient for the same weights and batch: it repeats one
// forward+backward 20 times (GC off) and reports the number of distinct
// gradient norms (1 would be bit-exact) and whether the loss ever differed,
// with the goroutine free to move between OS threads mid-step ("free") and
// pinned to one thread per repeat as TrainSFT and RLStep run ("pinned").
func BenchmarkBackwardRepeatability(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	var data []SFTExample
	for i := 0; i < 8; i++ {
		s := make([]int, 200+r.IntN(200))
		l := make([]bool, len(s))
		for k := range s {
			s[k] = r.IntN(97)
			l[k] = k > len(s)/2
		}
		data = append(data, SFTExample{IDs: s, Loss: l})
	}
	c := tinyConfig(ArchQwen2)
	c.HiddenSize, c.IntermediateSize, c.NumHiddenLayers = 128, 384, 4
	m, _ := InitRandom(c, ModelOptions{}, 1)
	opt, _ := m.NewAdamW(1e-3, 0)
	cfg := DefaultSFTConfig()
	cfg.BatchTokens, cfg.MaxLen = 4096, 1024
	batch := []int{0, 1, 2, 3, 4, 5, 6, 7}
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	for _, pinned := range []bool{false, true} {
		name := map[bool]string{false: "free", true: "pinned"}[pinned]
		b.Run(name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				norms, losses := map[float64]bool{}, map[float64]bool{}
				for rep := 0; rep < 20; rep++ {
					quiesceGC()
					done := make(chan struct{})
					go func() {
						defer close(done)
						if pinned {
							defer pinThread()()
						}
						loss, err := cfg.accumulate(m, data, batch, nil)
						if err != nil {
							b.Error(err)
							return
						}
						n, _ := opt.GradNorm()
						m.ZeroGrad()
						norms[n], losses[loss] = true, true
					}()
					<-done
				}
				b.ReportMetric(float64(len(norms)), "distinct-grad-norms/20")
				b.ReportMetric(float64(len(losses)), "distinct-losses/20")
			}
		})
	}
}

// BenchmarkMicroBatch measures SFT forward+backward tokens/s of the
// household base model's shape (hidden 128, 4 layers, vocabulary 2048) on
// 240 examples as long as the bootstrap corpus's (100–200 tokens, one in
// thirty 400–1,100: the skill-writing examples), in 4,096-token steps
// grouped as TrainSFT groups them, each step split into micro-batches of
// similar length of 512 to 4,096 padded tokens, side by side in one run,
// and each size's speed relative to 4,096 (every step one padded batch, as
// recipe v11 pre-trained).
//
//	go test ./trainer -run '^$' -bench MicroBatch -benchtime 3x
func BenchmarkMicroBatch(b *testing.B) {
	const stepTokens, maxLen = 4096, 1100
	c := tinyConfig(ArchQwen2)
	c.VocabSize, c.HiddenSize, c.IntermediateSize, c.NumHiddenLayers = 2048, 128, 384, 4
	c.NumAttentionHeads, c.NumKeyValueHeads, c.InitializerRange = 4, 2, 0.02
	m, err := InitRandom(c, ModelOptions{}, 1)
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	r := rand.New(rand.NewPCG(3, 4))
	data := make([]SFTExample, 240)
	for i := range data {
		n := 100 + r.IntN(100)
		if r.IntN(30) == 0 {
			n = 400 + r.IntN(700)
		}
		data[i] = SFTExample{IDs: make([]int, n), Loss: make([]bool, n)}
		for k := range n {
			data[i].IDs[k], data[i].Loss[k] = r.IntN(c.VocabSize), k > 0
		}
	}
	cfg := DefaultSFTConfig()
	cfg.BatchTokens, cfg.MaxLen = stepTokens, maxLen
	steps := cfg.batches(data, r)
	trained := 0
	for _, st := range steps {
		trained += countTrained(data, st)
	}
	epoch := func(mb int) time.Duration {
		cfg.MicroBatchTokens = mb
		quiesceGC()
		start := time.Now()
		for _, st := range steps {
			if _, err := cfg.accumulate(m, data, st, nil); err != nil {
				b.Fatal(err)
			}
			m.ZeroGrad()
		}
		return time.Since(start)
	}
	sizes := []int{512, 1024, 2048, 4096}
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	defer pinThread()()
	epoch(2048) // warm-up
	b.ResetTimer()
	took := map[int]time.Duration{}
	for i := 0; i < b.N; i++ {
		for _, mb := range sizes {
			took[mb] += epoch(mb)
		}
	}
	for _, mb := range sizes {
		b.ReportMetric(float64(trained*b.N)/took[mb].Seconds(), "tok/s-mb"+strconv.Itoa(mb))
		b.ReportMetric(took[4096].Seconds()/took[mb].Seconds(), "x4096-mb"+strconv.Itoa(mb))
	}
}

// BenchmarkRecompute is the TrainStep step (NLL forward and backward, the
// benchmark's shape) with and without activation recomputation,
// alternating in one run: recompute-ratio is the step time with it over
// without (the cost of the second forward through the layers).
func BenchmarkRecompute(b *testing.B) {
	const batch, seq = 8, 256
	cfg := benchConfig()
	m, err := InitRandom(cfg, ModelOptions{}, 1)
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	in, targets := randomLMBatch(cfg.VocabSize, batch, seq)
	step := func(on bool) time.Duration {
		m.SetRecompute(on)
		start := time.Now()
		if _, err := m.NLLBackward(in, targets); err != nil {
			b.Fatal(err)
		}
		m.ZeroGrad()
		return time.Since(start)
	}
	took := sideBySide(b, func() time.Duration { return step(false) }, func() time.Duration { return step(true) })
	plain, rec := took[0], took[1]
	b.ReportMetric(float64(b.N*batch*seq)/plain.Seconds(), "tokens/s")
	b.ReportMetric(float64(b.N*batch*seq)/rec.Seconds(), "recompute-tokens/s")
	b.ReportMetric(rec.Seconds()/plain.Seconds(), "recompute-ratio")
}

// BenchmarkChunkedAttention: a recomputed NLL step of the bench model over
// 2,048-token rows with the rebuilt layer's attention in blocks of 512
// queries (linear memory: block.recomputeBackward) against the whole score
// matrix, side by side: chunked-ratio is the step time in blocks over
// whole (the cost of attention's second forward pass in the backward).
func BenchmarkChunkedAttention(b *testing.B) {
	defer func(n int64) { attentionChunk = n }(attentionChunk)
	const batch, seq = 2, 2048
	cfg := benchConfig()
	cfg.MaxPositionEmbeddings = seq
	m, err := InitRandom(cfg, ModelOptions{}, 1)
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	m.SetRecompute(true)
	in, targets := randomLMBatch(cfg.VocabSize, batch, seq)
	step := func(chunk int64) time.Duration {
		attentionChunk = chunk
		start := time.Now()
		if _, err := m.NLLBackward(in, targets); err != nil {
			b.Fatal(err)
		}
		m.ZeroGrad()
		return time.Since(start)
	}
	took := sideBySide(b, func() time.Duration { return step(0) }, func() time.Duration { return step(512) })
	whole, chunked := took[0], took[1]
	b.ReportMetric(float64(b.N*batch*seq)/whole.Seconds(), "whole-tokens/s")
	b.ReportMetric(float64(b.N*batch*seq)/chunked.Seconds(), "chunked-tokens/s")
	b.ReportMetric(chunked.Seconds()/whole.Seconds(), "chunked-ratio")
}

// BenchmarkBF16Step: one forward+backward and optimizer step of the bench
// model in float32 and in bfloat16 (float32 master weights), side by side.
// On a GPU bfloat16 is the fast path; on a CPU without native bfloat16
// matmuls it is the slow one — the ratio says which this machine is.
func BenchmarkBF16Step(b *testing.B) {
	const batch, seq = 4, 256
	cfg := benchConfig()
	in, targets := randomLMBatch(cfg.VocabSize, batch, seq)
	var models [2]*Model
	var opts [2]*Optimizer
	for i, dt := range []string{"float32", "bfloat16"} {
		m, err := InitRandom(cfg, ModelOptions{DType: dt}, 1)
		if err != nil {
			b.Fatal(err)
		}
		defer m.Close()
		o, err := m.NewAdamW(1e-5, 0)
		if err != nil {
			b.Fatal(err)
		}
		models[i], opts[i] = m, o
	}
	step := func(i int) time.Duration {
		start := time.Now()
		if _, err := models[i].NLLBackward(in, targets); err != nil {
			b.Fatal(err)
		}
		if _, err := opts[i].Step(1); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	took := sideBySide(b, func() time.Duration { return step(0) }, func() time.Duration { return step(1) })
	f32, bf16 := took[0], took[1]
	b.ReportMetric(float64(b.N*batch*seq)/f32.Seconds(), "fp32-tokens/s")
	b.ReportMetric(float64(b.N*batch*seq)/bf16.Seconds(), "bf16-tokens/s")
	b.ReportMetric(bf16.Seconds()/f32.Seconds(), "bf16-time-ratio")
}

// BenchmarkHeadChunks: an NLL forward+backward of the bench model (the
// embedded default's shape) with the LM head in chunks of headChunkTokens
// positions against one chunk over the whole micro-batch, side by side:
// what chunking costs where the vocabulary is small.
func BenchmarkHeadChunks(b *testing.B) {
	defer func(n int) { headChunkTokens = n }(headChunkTokens)
	const batch, seq = 8, 256
	cfg := benchConfig()
	m, err := InitRandom(cfg, ModelOptions{}, 1)
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	in, targets := randomLMBatch(cfg.VocabSize, batch, seq)
	chunk := headChunkTokens
	step := func(n int) time.Duration {
		headChunkTokens = n
		start := time.Now()
		if _, err := m.NLLBackward(in, targets); err != nil {
			b.Fatal(err)
		}
		m.ZeroGrad()
		return time.Since(start)
	}
	took := sideBySide(b, func() time.Duration { return step(chunk) }, func() time.Duration { return step(1 << 30) })
	chunked, whole := took[0], took[1]
	b.ReportMetric(chunked.Seconds()/whole.Seconds(), "chunked-time-ratio")
}

// BenchmarkGroupedAttention: grouped-query attention without repeating
// the keys and values (attendGrouped) against repeating them, side by
// side in each iteration, at the embedded default's model shape (4 query
// heads on 2 key/value heads): a batched decode (64 sequences, 48-, 256-
// and 768-token prompts, 32 steps from fresh caches, as the embedded
// server runs them) and a forward pass without a graph (12 rows of 160
// tokens: scoring). Training keeps the repeated form (groupedAttention).
// Where libtorch has the fused op, the grouped decode is that op on
// grouped queries (attendOneQuery) and scoring takes the same path both
// ways (its score-speedup is then ~1 by construction).
//
//	go test ./trainer -run '^$' -bench GroupedAttention -benchtime 5x
func BenchmarkGroupedAttention(b *testing.B) {
	defer func(on bool) { useGrouped = on }(useGrouped)
	cfg := tinyConfig(ArchQwen2)
	cfg.VocabSize, cfg.HiddenSize, cfg.IntermediateSize, cfg.NumHiddenLayers = 1295, 128, 384, 4
	cfg.NumAttentionHeads, cfg.NumKeyValueHeads, cfg.InitializerRange, cfg.MaxPositionEmbeddings = 4, 2, 0.02, 1024
	m, err := InitRandom(cfg, ModelOptions{}, 1)
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	// 768: about a self-analysis prompt of the embedded default (46,000
	// prompt tokens for 64 trajectories).
	for _, promptLen := range []int{48, 256, 768} {
		b.Run(fmt.Sprintf("prompt=%d", promptLen), func(b *testing.B) { benchGrouped(b, m, cfg, promptLen) })
	}
}

func benchGrouped(b *testing.B, m *Model, cfg *ModelConfig, promptLen int) {
	const seqs, steps = 64, 32
	decode := func(grouped bool) time.Duration {
		useGrouped = grouped
		caches := make([]*SeqCache, seqs)
		news := make([][]int, seqs)
		for i := range caches {
			caches[i] = m.NewSeqCache()
			news[i] = make([]int, promptLen)
			for k := range news[i] {
				news[i][k] = (i*31 + k*7) % cfg.VocabSize
			}
		}
		if _, err := m.ExtendBatch(caches, news); err != nil {
			b.Fatal(err)
		}
		ids := make([]int, seqs)
		start := time.Now()
		for s := range steps {
			for i := range ids {
				ids[i] = (i + s*13) % cfg.VocabSize
			}
			if _, err := m.DecodeBatch(caches, ids); err != nil {
				b.Fatal(err)
			}
		}
		d := time.Since(start)
		for _, c := range caches {
			c.Free()
		}
		return d
	}
	in, _ := randomLMBatch(cfg.VocabSize, 12, 160)
	score := func(grouped bool) time.Duration {
		useGrouped = grouped
		start := time.Now()
		if _, err := m.Logits(in); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	took := sideBySide(b,
		func() time.Duration { return decode(false) }, func() time.Duration { return decode(true) },
		func() time.Duration { return score(false) }, func() time.Duration { return score(true) })
	dOff, dOn, tOff, tOn := took[0], took[1], took[2], took[3]
	n := float64(b.N)
	b.ReportMetric(dOff.Seconds()*1000/(n*steps), "decode-ms/step-repeated")
	b.ReportMetric(dOn.Seconds()*1000/(n*steps), "decode-ms/step-grouped")
	b.ReportMetric(dOff.Seconds()/dOn.Seconds(), "decode-speedup")
	b.ReportMetric(n*12*160/tOff.Seconds(), "score-tok/s-repeated")
	b.ReportMetric(n*12*160/tOn.Seconds(), "score-tok/s-grouped")
	b.ReportMetric(tOff.Seconds()/tOn.Seconds(), "score-speedup")
}

// BenchmarkDecodeOneSequence: one sequence's decode step (DecodeBatchLogits
// and Draw at T = 1) on the shape of the vLLM comparison — Qwen2, hidden
// 128, 2 layers, head_dim 64, untied, Qwen3's 151,669-token vocabulary,
// after a 256-token prompt — with the LM head as a matrix-vector product
// (the default for one float32 row) and as libtorch's linear, alternating
// in rounds of 10 steps; medians of the rounds.
//
//	go test ./trainer -run '^$' -bench DecodeOneSequence -benchtime 1x
func BenchmarkDecodeOneSequence(b *testing.B) {
	cfg := vllmCompareConfig()
	m, err := InitRandom(cfg, ModelOptions{}, 1)
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	rng := rand.New(rand.NewPCG(1, 1))
	prompt := randomPrompt(rng, 256)
	c := m.NewSeqCache()
	defer c.Free()
	last, err := m.Extend(c, prompt)
	if err != nil {
		b.Fatal(err)
	}
	next := []int{argmax(last)}
	step := func() {
		sl, err := m.DecodeBatchLogits([]*SeqCache{c}, next)
		if err != nil {
			b.Fatal(err)
		}
		d, err := sl.Draw([]DrawSpec{{Temperature: 1}}, func(int) float64 { return rng.Float64() })
		sl.Free()
		if err != nil {
			b.Fatal(err)
		}
		next[0] = d[0].ID
	}
	defer func() { oneRowMatVec = true }()
	per := map[bool][]float64{}
	for range b.N {
		for round := 0; round < 6; round++ {
			for _, mv := range []bool{true, false} {
				oneRowMatVec = mv
				step() // warm
				start := time.Now()
				for range 10 {
					step()
				}
				per[mv] = append(per[mv], float64(time.Since(start).Microseconds())/10/1000)
			}
		}
	}
	mv, lin := medianOf(per[true]), medianOf(per[false])
	b.ReportMetric(mv, "ms/step-matvec")
	b.ReportMetric(lin, "ms/step-linear")
	b.ReportMetric(lin/mv, "linear/matvec")
}

// BenchmarkDecodeStepParts: where a decode step's time goes on the vLLM
// comparison's shape (BenchmarkDecodeOneSequence's model, 256-token
// prompts) at 1 and 64 sequences, in float32 and bfloat16: the forward
// (DecodeBatchLogits), drawing the tokens inside libtorch (Draw, T = 1),
// and, for comparison, reading every logit back to the host as the host
// sampler needs; means over 10 steps.
//
//	go test ./trainer -run '^$' -bench DecodeStepParts -benchtime 1x
func BenchmarkDecodeStepParts(b *testing.B) {
	cfg := vllmCompareConfig()
	for _, dt := range []string{"float32", "bfloat16"} {
		m, err := InitRandom(cfg, ModelOptions{DType: dt}, 1)
		if err != nil {
			b.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(1, 1))
		for _, rows := range []int{1, 64} {
			caches, next := benchCaches(b, m, rows, func() []int { return randomPrompt(rng, 256) })
			specs := make([]DrawSpec, rows)
			for i := range specs {
				specs[i] = DrawSpec{Temperature: 1}
			}
			var fwd, draw, back time.Duration
			const steps = 10
			for s := -2; s < steps*b.N; s++ { // two warm-up steps
				t0 := time.Now()
				sl, err := m.DecodeBatchLogits(caches, next)
				if err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				d, err := sl.Draw(specs, func(int) float64 { return rng.Float64() })
				if err != nil {
					b.Fatal(err)
				}
				t2 := time.Now()
				withoutGrad(func() { _ = rows2D(sl.t) })
				t3 := time.Now()
				sl.Free()
				for i := range next {
					next[i] = d[i].ID
				}
				if s >= 0 {
					fwd, draw, back = fwd+t1.Sub(t0), draw+t2.Sub(t1), back+t3.Sub(t2)
				}
			}
			n := float64(steps * b.N)
			b.ReportMetric(float64(fwd.Microseconds())/n/1000, fmt.Sprintf("ms-forward@%d-%s", rows, dt))
			b.ReportMetric(float64(draw.Microseconds())/n/1000, fmt.Sprintf("ms-draw@%d-%s", rows, dt))
			b.ReportMetric(float64(back.Microseconds())/n/1000, fmt.Sprintf("ms-readback@%d-%s", rows, dt))
			for _, c := range caches {
				c.Free()
			}
		}
		m.Close()
	}
}

// benchCaches prefills rows caches, one prompt each, and returns them
// with each one's greedy next token.
func benchCaches(b *testing.B, m *Model, rows int, prompt func() []int) ([]*SeqCache, []int) {
	caches, next := make([]*SeqCache, rows), make([]int, rows)
	for i := range caches {
		caches[i] = m.NewSeqCache()
		last, err := m.Extend(caches[i], prompt())
		if err != nil {
			b.Fatal(err)
		}
		next[i] = argmax(last)
	}
	return caches, next
}

// randomIDs is n ids drawn uniformly from a vocabulary of vocab.
func randomIDs(rng *rand.Rand, vocab, n int) []int {
	p := make([]int, n)
	for k := range p {
		p[k] = rng.IntN(vocab)
	}
	return p
}

// vllmCompareConfig is the vLLM comparison's checkpoint shape
// (BenchmarkVLLMDecode): Qwen2, hidden 128, 2 layers, head_dim 64, untied,
// Qwen3's 151,669-token vocabulary.
func vllmCompareConfig() *ModelConfig {
	return &ModelConfig{Architectures: []string{"Qwen2ForCausalLM"}, ModelType: "qwen2", VocabSize: 151669,
		HiddenSize: 128, IntermediateSize: 256, NumHiddenLayers: 2, NumAttentionHeads: 2, NumKeyValueHeads: 2,
		MaxPositionEmbeddings: 2048, RMSNormEps: 1e-6, RopeTheta: 1e6, HiddenAct: "silu", InitializerRange: 0.02}
}

// randomPrompt is n ids drawn from the Qwen-sized vocabulary's middle.
func randomPrompt(rng *rand.Rand, n int) []int {
	p := make([]int, n)
	for k := range p {
		p[k] = 1000 + rng.IntN(100000)
	}
	return p
}

func medianOf(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)/2]
}

// BenchmarkDecodeAttention: a decode step (DecodeBatchLogits, the logits
// read back) at 1 and 64 sequences after 256-token prompts, with the CPU
// decode kernel (decodeAttention) and with the fused op and a mask it
// replaced, alternating rounds of 10 steps on the same caches; medians and
// their ratio, on the embedded default's committed base shape and on the
// vLLM comparison's.
//
//	go test ./trainer -run '^$' -bench DecodeAttention -benchtime 1x
func BenchmarkDecodeAttention(b *testing.B) {
	committed, err := LoadModelConfig("../basemodel/committed/household-tiny/config.json")
	if err != nil {
		b.Fatal(err)
	}
	prev := useDecodeKernel
	defer func() { useDecodeKernel = prev }()
	for _, shape := range []struct {
		name string
		cfg  *ModelConfig
	}{{"committed-base", committed}, {"qwen-vocab", vllmCompareConfig()}} {
		m, err := InitRandom(shape.cfg, ModelOptions{}, 1)
		if err != nil {
			b.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(1, 1))
		for _, rows := range []int{1, 64} {
			caches, next := benchCaches(b, m, rows, func() []int { return randomIDs(rng, shape.cfg.VocabSize, 256) })
			step := func() {
				logits, err := m.DecodeBatch(caches, next)
				if err != nil {
					b.Fatal(err)
				}
				for i := range next {
					next[i] = argmax(logits[i])
				}
			}
			step()
			var kernel, masked []float64
			for range 3 * b.N {
				for _, on := range []bool{true, false} {
					useDecodeKernel = on
					t0 := time.Now()
					for range 10 {
						step()
					}
					ms := float64(time.Since(t0).Microseconds()) / 10 / 1000
					if on {
						kernel = append(kernel, ms)
					} else {
						masked = append(masked, ms)
					}
				}
			}
			b.ReportMetric(medianOf(kernel), fmt.Sprintf("ms-step-kernel@%d-%s", rows, shape.name))
			b.ReportMetric(medianOf(masked), fmt.Sprintf("ms-step-masked@%d-%s", rows, shape.name))
			b.ReportMetric(medianOf(masked)/medianOf(kernel), fmt.Sprintf("speedup@%d-%s", rows, shape.name))
			for _, c := range caches {
				c.Free()
			}
		}
		m.Close()
	}
}

// BenchmarkDecodeAttentionOp: one layer's decode attention alone at 64
// rows of the committed base's shape (4 query heads over 2 key/value
// heads, head_dim 32, 320 cached keys, each row's first 10% padding), the
// kernel (decodeAttention) against the masked form it replaced
// (attendOneQuery with the additive mask), alternating rounds of 200
// calls; µs per call, medians, and their ratio.
//
//	go test ./trainer -run '^$' -bench DecodeAttentionOp -benchtime 1x
func BenchmarkDecodeAttentionOp(b *testing.B) {
	const rows, kvh, rep, s, d = 64, 2, 2, 320, 32
	withoutGrad(func() {
		q := must(ts.Randn([]int64{rows, kvh * rep, 1, d}, gotch.Float, gotch.CPU))
		k := must(ts.Randn([]int64{rows, kvh, s, d}, gotch.Float, gotch.CPU))
		v := must(ts.Randn([]int64{rows, kvh, s, d}, gotch.Float, gotch.CPU))
		starts := make([]int64, rows)
		mv := make([]float32, rows*s)
		for r := range starts {
			starts[r] = int64(r % (s / 10))
			for j := 0; j < int(starts[r]); j++ {
				mv[r*s+j] = float32(-math.MaxFloat32)
			}
		}
		mask := upload(mv, []int64{rows, 1, 1, s}, gotch.CPU)
		defer drop(q, k, v, mask)
		var kernel, masked []float64
		for range 5 * b.N {
			for _, on := range []bool{true, false} {
				t0 := time.Now()
				for range 200 {
					var out *ts.Tensor
					if on {
						out = decodeAttention(q, k, v, starts, d)
					} else {
						out = attendOneQuery(q, k, v, mask, d, gotch.Float, rows, kvh, rep, d)
					}
					drop(out)
				}
				us := float64(time.Since(t0).Microseconds()) / 200
				if on {
					kernel = append(kernel, us)
				} else {
					masked = append(masked, us)
				}
			}
		}
		b.ReportMetric(medianOf(kernel), "us-kernel")
		b.ReportMetric(medianOf(masked), "us-masked")
		b.ReportMetric(medianOf(masked)/medianOf(kernel), "speedup")
	})
}

// BenchmarkDecodeTrace: libtorch's own trace (Model.Profile, Kineto:
// libtorch 2.x) of two decode steps of the committed base's shape at 1
// and 64 sequences after 256-token prompts, in float32 and bfloat16,
// written to $SEEDCTL_TRACE_DIR/decode-DTYPE-ROWS.json, with each
// configuration's mean step over 20 untraced steps; compare two traces
// with scripts/gpu/trace_summary.py A.json B.json.
//
//	SEEDCTL_TRACE_DIR=DIR ./scripts/test-torch2.sh ./trainer -run '^$' -bench DecodeTrace -benchtime 1x
func BenchmarkDecodeTrace(b *testing.B) {
	dir := os.Getenv("SEEDCTL_TRACE_DIR")
	if dir == "" {
		b.Skip("SEEDCTL_TRACE_DIR is not set")
	}
	cfg, err := LoadModelConfig("../basemodel/committed/household-tiny/config.json")
	if err != nil {
		b.Fatal(err)
	}
	for _, dt := range []string{"float32", "bfloat16"} {
		m, err := InitRandom(cfg, ModelOptions{DType: dt}, 1)
		if err != nil {
			b.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(1, 1))
		for _, rows := range []int{1, 64} {
			caches, next := benchCaches(b, m, rows, func() []int { return randomIDs(rng, cfg.VocabSize, 256) })
			step := func() error {
				logits, err := m.DecodeBatch(caches, next)
				for i := range logits {
					next[i] = argmax(logits[i])
				}
				return err
			}
			for range 3 {
				if err := step(); err != nil {
					b.Fatal(err)
				}
			}
			t0 := time.Now()
			for range 20 * b.N {
				if err := step(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(time.Since(t0).Microseconds())/float64(20*b.N)/1000, fmt.Sprintf("ms-step@%d-%s", rows, dt))
			path := filepath.Join(dir, fmt.Sprintf("decode-%s-%d.json", dt, rows))
			if err := m.Profile(path, func() error {
				if err := step(); err != nil {
					return err
				}
				return step()
			}); err != nil {
				b.Fatal(err)
			}
			for _, c := range caches {
				c.Free()
			}
		}
		m.Close()
	}
}
