package server

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/seedctl/seedctl/tokenizer"
	"github.com/seedctl/seedctl/trainer"
)

// benchServer serves a small Qwen2 (4 layers, hidden 128, a 1,024-token
// BPE vocabulary); vocab > 0 widens its vocabulary (embeddings and LM
// head) past the tokenizer's, as Qwen's 151,936 rows exceed its
// tokenizer's 151,665.
func benchServer(b *testing.B, vocab int) *Server {
	return benchServerAt(b, benchModel(b, vocab), nil)
}

// benchModel writes benchServer's checkpoint and returns its folder.
func benchModel(b *testing.B, vocab int) string {
	dir := filepath.Join(b.TempDir(), "bench")
	tc := tokenizer.DefaultTrainConfig()
	tc.VocabSize = 1024
	var corpus []string
	for i := 0; i < 400; i++ {
		corpus = append(corpus, fmt.Sprintf("You arrive at cabinet %d. On the cabinet %d, you see a mug %d and a %s.", i%13, i%13, i%7, []string{"spoon", "plate", "apple", "egg", "book"}[i%5]))
	}
	tok, err := tokenizer.TrainBPE(corpus, tc)
	if err != nil {
		b.Fatal(err)
	}
	cfg := &trainer.ModelConfig{
		Architectures: []string{"Qwen2ForCausalLM"}, ModelType: "qwen2", VocabSize: tok.VocabSize(),
		HiddenSize: 128, IntermediateSize: 352, NumHiddenLayers: 4, NumAttentionHeads: 4, NumKeyValueHeads: 2,
		MaxPositionEmbeddings: 2048, RMSNormEps: 1e-6, RopeTheta: 1e6, HiddenAct: "silu", InitializerRange: 0.02, TieWordEmbeddings: true,
	}
	if vocab > 0 {
		cfg.VocabSize = vocab
	}
	m, err := trainer.InitRandom(cfg, trainer.ModelOptions{}, 1)
	if err != nil {
		b.Fatal(err)
	}
	tcfg := &tokenizer.Config{EOSToken: "<|im_end|>", PadToken: "<|endoftext|>", ChatTemplate: tokenizer.Qwen25ChatTemplate}
	if err := m.Save(dir, trainer.SaveOptions{WriteExtra: func(tmp string) error { return tokenizer.Save(tmp, tok, tcfg) }}); err != nil {
		b.Fatal(err)
	}
	m.Close()
	return dir
}

// benchServerAt serves dir without prefix reuse, mutate changing the rest.
func benchServerAt(b *testing.B, dir string, mutate func(*Config)) *Server {
	c := DefaultConfig(dir)
	c.PrefixCacheEntries = 0
	if mutate != nil {
		mutate(&c)
	}
	s, err := New(c, zerolog.Nop())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Shutdown(context.Background()) })
	return s
}

// BenchmarkServe measures generated tokens/s with 1, 4, 16 and 64
// concurrent requests (64 new tokens each after a 48-token prompt), the
// batched/single throughput ratio, the per-token latency each request
// sees at 64 against 1 (its time from first to last token over its tokens),
// prefill tokens/s with 1 and 16 prompts admitted together (max_tokens 1:
// the prompt's forward and one sampled token), and teacher-forced scoring
// tokens/s, all in one run.
//
//	go test ./inference/server -run '^$' -bench Serve -benchtime 1x
func BenchmarkServe(b *testing.B) {
	s := benchServer(b, 0)
	const newTokens, promptLen = 64, 48
	vocab := s.eng.snap().model.Config().VocabSize
	prompt := make([]int, promptLen)
	for i := range prompt {
		prompt[i] = (i*37 + 11) % vocab
	}
	p := parsedGen{maxTokens: newTokens, n: 1, ignoreEOS: true, params: samplingParams{Temperature: 1, TopP: 1}}
	run := func(conc int, p parsedGen, promptOf func(c int) []int) (rate, perToken float64) {
		return serveConcurrent(b, s, conc, p, promptOf)
	}
	same := func(int) []int { return prompt }
	rate, lat := map[int]float64{}, map[int]float64{}
	for i := 0; i < b.N; i++ {
		for _, conc := range []int{1, 4, 16, 64} {
			rate[conc], lat[conc] = run(conc, p, same)
		}
	}
	for _, conc := range []int{1, 4, 16, 64} {
		b.ReportMetric(rate[conc], fmt.Sprintf("tok/s@%d", conc))
	}
	b.ReportMetric(rate[64]/rate[1], "batched64/single")
	b.ReportMetric(1000*lat[1], "ms/token@1")
	b.ReportMetric(1000*lat[64], "ms/token@64")
	b.ReportMetric(lat[64]/lat[1], "latency64/single")

	// Prefill: distinct prompts (no prefix to reuse), one new token each.
	one := parsedGen{maxTokens: 1, n: 1, ignoreEOS: true, params: samplingParams{Temperature: 1, TopP: 1}}
	distinct := func(c int) []int {
		q := append([]int(nil), prompt...)
		q[0] = (q[0] + 1 + c) % vocab
		return q
	}
	for _, conc := range []int{1, 16} {
		// 16 rounds of conc prompts (a single short prefill is too quick to time alone).
		start := time.Now()
		for round := range 16 {
			run(conc, one, func(c int) []int { return distinct(round*conc + c) })
		}
		b.ReportMetric(float64(16*conc*promptLen)/time.Since(start).Seconds(), fmt.Sprintf("prefill-tok/s@%d", conc))
	}

	seqs := make([][]int, 32)
	for i := range seqs {
		seqs[i] = append(append([]int(nil), prompt...), prompt...)
	}
	start := time.Now()
	if _, _, err := s.eng.score(context.Background(), seqs); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(32*2*promptLen)/time.Since(start).Seconds(), "score-tok/s")
}

// serveConcurrent sends conc requests at once and returns the tokens/s of
// the whole and the mean per-token latency a request saw after its first
// token.
func serveConcurrent(b *testing.B, s *Server, conc int, p parsedGen, promptOf func(c int) []int) (rate, perToken float64) {
	start := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	errs := make(chan error, conc)
	lat := 0.0
	for c := 0; c < conc; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			pp := p
			seed := int64(c)
			pp.seed = &seed
			var first, last time.Time
			n := 0
			_, err := s.generate(context.Background(), [][]int{promptOf(c)}, pp, 0, func(int, genEvent, *choiceResult) error {
				now := time.Now()
				if n == 0 {
					first = now
				}
				last, n = now, n+1
				return nil
			})
			if err != nil {
				errs <- err
				return
			}
			if n > 1 {
				mu.Lock()
				lat += last.Sub(first).Seconds() / float64(n-1)
				mu.Unlock()
			}
		}(c)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	return float64(conc*p.maxTokens) / time.Since(start).Seconds(), lat / float64(conc)
}

// BenchmarkServeQwenVocab is BenchmarkServe's decode at 1 and 64
// concurrent requests with a Qwen-sized vocabulary (151,936 logits per
// sequence and step: the LM head, reading the logits back and sampling
// them in Go grow with it), 16 new tokens each.
//
//	go test ./inference/server -run '^$' -bench ServeQwenVocab -benchtime 1x
func BenchmarkServeQwenVocab(b *testing.B) {
	s := benchServer(b, 151936)
	prompt := make([]int, 48)
	for i := range prompt {
		prompt[i] = (i*37 + 11) % 1000
	}
	p := parsedGen{maxTokens: 16, n: 1, ignoreEOS: true, params: samplingParams{Temperature: 1, TopP: 1}}
	same := func(int) []int { return prompt }
	rate, lat := map[int]float64{}, map[int]float64{}
	for range b.N {
		for _, conc := range []int{1, 64} {
			rate[conc], lat[conc] = serveConcurrent(b, s, conc, p, same)
		}
	}
	b.ReportMetric(rate[1], "tok/s@1")
	b.ReportMetric(rate[64], "tok/s@64")
	b.ReportMetric(rate[64]/rate[1], "batched64/single")
	b.ReportMetric(1000*lat[1], "ms/token@1")
	b.ReportMetric(1000*lat[64], "ms/token@64")
}

// BenchmarkSamplingInLibtorch: BenchmarkServe's decode, at its
// tokenizer's own vocabulary (a few hundred ids) and widened to Qwen's, with the tokens drawn
// inside libtorch (the default) and on the host from every logit read
// back (HostSampling), two servers on the same checkpoint in alternating
// rounds, at 1 and 64 concurrent requests (T = 1, 32 new tokens); medians
// of the rounds and their ratio.
//
//	go test ./inference/server -run '^$' -bench SamplingInLibtorch -benchtime 3x
func BenchmarkSamplingInLibtorch(b *testing.B) {
	for _, vocab := range []int{151936, 0} {
		name := "vocab=151936"
		if vocab == 0 {
			name = "vocab=tokenizer" // the BPE's own few hundred ids
		}
		b.Run(name, func(b *testing.B) { benchSamplingInLibtorch(b, vocab) })
	}
}

func benchSamplingInLibtorch(b *testing.B, vocab int) {
	dir := benchModel(b, vocab)
	dev := benchServerAt(b, dir, nil)
	host := benchServerAt(b, dir, func(c *Config) { c.HostSampling = true })
	prompt := make([]int, 48)
	for i := range prompt {
		prompt[i] = (i*37 + 11) % min(1000, dev.eng.snap().model.Config().VocabSize)
	}
	p := parsedGen{maxTokens: 32, n: 1, ignoreEOS: true, params: samplingParams{Temperature: 1, TopP: 1}}
	same := func(int) []int { return prompt }
	serveConcurrent(b, dev, 4, p, same) // warm both
	serveConcurrent(b, host, 4, p, same)
	type key struct {
		host bool
		conc int
	}
	rates := map[key][]float64{}
	for range b.N {
		for _, conc := range []int{1, 64} {
			for _, h := range []bool{false, true} {
				s := dev
				if h {
					s = host
				}
				r, _ := serveConcurrent(b, s, conc, p, same)
				rates[key{h, conc}] = append(rates[key{h, conc}], r)
			}
		}
	}
	for _, conc := range []int{1, 64} {
		d, h := median(rates[key{false, conc}]), median(rates[key{true, conc}])
		b.ReportMetric(d, fmt.Sprintf("libtorch-tok/s@%d", conc))
		b.ReportMetric(h, fmt.Sprintf("host-tok/s@%d", conc))
		b.ReportMetric(d/h, fmt.Sprintf("libtorch/host@%d", conc))
	}
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)/2]
}

// BenchmarkServeCommittedBase: the embedded default's committed base
// served at 1 and 64 concurrent requests of 256 prompt and 128 new tokens
// (EOS ignored, T = 1), as BenchmarkVLLMDecode serves it beside vLLM but
// without vLLM, for profiling the server (-cpuprofile; with
// SEEDCTL_DECODE_ATTENTION=0 the decode steps attend as before the CPU
// kernel).
//
//	go test ./inference/server -run '^$' -bench ServeCommittedBase -benchtime 1x -cpuprofile cpu.out
func BenchmarkServeCommittedBase(b *testing.B) {
	s := benchServerAt(b, "../../basemodel/committed/household-tiny", nil)
	vocab := s.eng.snap().model.Config().VocabSize
	p := parsedGen{maxTokens: 128, n: 1, ignoreEOS: true, params: samplingParams{Temperature: 1, TopP: 1}}
	prompt := func(c int) []int {
		q := make([]int, 256)
		for i := range q {
			q[i] = (i*37 + 11 + c*7) % (vocab - 10)
		}
		return q
	}
	for _, conc := range []int{1, 64} {
		var rate, lat float64
		for range b.N {
			rate, lat = serveConcurrent(b, s, conc, p, prompt)
		}
		b.ReportMetric(rate, fmt.Sprintf("tok/s@%d", conc))
		b.ReportMetric(1000*lat, fmt.Sprintf("ms/token@%d", conc))
	}
}
