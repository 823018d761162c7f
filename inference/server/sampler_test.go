package server

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
)

// The sampler computes one exponential per token at T = 1 and keeps its
// buffer; it must choose and report exactly what the sampler before it
// did (below, as it was: every log-prob first, then the draw), bit for
// bit, drawing as many numbers from the request's generator.
func TestSamplerMatchesTheOneBefore(t *testing.T) {
	params := []samplingParams{
		{Temperature: 0, TopP: 1},
		{Temperature: 0, TopP: 1, TopLogprobs: 5},
		{Temperature: 1, TopP: 1},
		{Temperature: 1, TopP: 1, TopLogprobs: 3},
		{Temperature: 0.7, TopP: 1, TopLogprobs: 2},
		{Temperature: 1, TopP: 0.9},
		{Temperature: 1.3, TopP: 0.95, TopK: 20},
		{Temperature: 1, TopP: 1, TopK: 1},
	}
	gen := rand.New(rand.NewPCG(7, 8))
	var s sampler // one sampler across calls, as the engine's workers keep them
	for trial := range 300 {
		n := []int{2, 7, 1295, 5000}[trial%4]
		logits := make([]float32, n)
		for i := range logits {
			logits[i] = float32(gen.NormFloat64() * 4)
			if trial%5 == 0 && i%3 == 0 {
				logits[i] = logits[0] // ties
			}
		}
		if trial%7 == 0 {
			logits[n-1] = float32(math.Inf(-1)) // a token the model rules out
		}
		for _, p := range params {
			seed := uint64(trial)
			a, b := rand.New(rand.NewPCG(seed, 1)), rand.New(rand.NewPCG(seed, 1))
			got, err := s.sample(logits, p, a)
			if err != nil {
				t.Fatalf("trial %d (%+v): %v", trial, p, err)
			}
			want := sampleBefore(logits, p, b)
			if fmt.Sprint(got) != fmt.Sprint(want) || math.Float64bits(got.LogProb) != math.Float64bits(want.LogProb) {
				t.Fatalf("trial %d (n %d, %+v): %+v, before %+v", trial, n, p, got, want)
			}
			if a.Uint64() != b.Uint64() {
				t.Fatalf("trial %d (%+v): the generators moved apart", trial, p)
			}
		}
	}
}

// sample draws one token with a fresh sampler.
func sample(logits []float32, p samplingParams, rng *rand.Rand) (tokenChoice, error) {
	var s sampler
	return s.sample(logits, p, rng)
}

// The sampler before this one, kept as the reference.
// logSoftmax returns log-probabilities of logits, in float64 (the
// sampler before computed them all; tests use it as the reference).
func logSoftmax(logits []float32) []float64 {
	mx := math.Inf(-1)
	for _, v := range logits {
		mx = math.Max(mx, float64(v))
	}
	sum := 0.0
	for _, v := range logits {
		sum += math.Exp(float64(v) - mx)
	}
	lse := mx + math.Log(sum)
	out := make([]float64, len(logits))
	for i, v := range logits {
		out[i] = float64(v) - lse
	}
	return out
}

// topKBefore returns the k most likely ids by log-prob, ties by lower id, in
// one pass over the vocabulary (k is at most 20: an insertion into a short
// sorted list beats sorting 151k entries).
func topKBefore(lp []float64, k int) []tokenLogProb {
	if k <= 0 {
		return nil
	}
	k = min(k, len(lp))
	out := make([]tokenLogProb, 0, k+1)
	for i, v := range lp {
		if len(out) == k && v <= out[k-1].LogProb {
			continue // ties keep the lower id, already in
		}
		at := len(out)
		for at > 0 && out[at-1].LogProb < v {
			at--
		}
		out = append(out, tokenLogProb{})
		copy(out[at+1:], out[at:])
		out[at] = tokenLogProb{ID: i, LogProb: v}
		if len(out) > k {
			out = out[:k]
		}
	}
	return out
}

// sampleBefore draws the next token. Temperature 0 is argmax (lowest id on ties),
// so it equals greedy decoding.
func sampleBefore(logits []float32, p samplingParams, rng *rand.Rand) tokenChoice {
	lp := logSoftmax(logits)
	var id int
	if p.Temperature <= 0 {
		for i := range lp {
			if lp[i] > lp[id] {
				id = i
			}
		}
	} else {
		id = sampleTemperedBefore(logits, p, rng)
	}
	return tokenChoice{ID: id, LogProb: lp[id], Top: topKBefore(lp, p.TopLogprobs)}
}

// sampleTemperedBefore draws from softmax(logits/T), cut to the top-k and then
// the top-p nucleus (probabilities of the whole distribution, as before
// the cut). Without a cut it is one pass over the vocabulary; with one,
// only the tokens above a probability threshold are sorted, the threshold
// falling until they hold the cut (every token left out is less likely
// than every token kept, so the kept ones are the head of the full order).
func sampleTemperedBefore(logits []float32, p samplingParams, rng *rand.Rand) int {
	t := p.Temperature
	mx := math.Inf(-1)
	for _, v := range logits {
		mx = math.Max(mx, float64(v))
	}
	w := make([]float64, len(logits)) // exp((l − max)/T): the top token weighs 1
	total := 0.0
	for i, v := range logits {
		w[i] = math.Exp((float64(v) - mx) / t)
		total += w[i]
	}
	if !(p.TopK > 0 && p.TopK < len(w)) && !(p.TopP > 0 && p.TopP < 1) {
		r := rng.Float64() * total
		last := 0
		for i, x := range w {
			if x > 0 {
				last = i
			}
			r -= x
			if r <= 0 && x > 0 {
				return i
			}
		}
		return last
	}
	cands := nucleus(w, total, p)
	kept := 0.0
	for _, c := range cands {
		kept += w[c]
	}
	r := rng.Float64() * kept
	for _, c := range cands {
		r -= w[c]
		if r <= 0 {
			return c
		}
	}
	return cands[len(cands)-1]
}

// A decode step's sampling is split among goroutines when it is large; the
// tokens must be those each sequence draws alone, from its own generator.
func TestSamplingSplitAmongGoroutinesChangesNothing(t *testing.T) {
	gen := rand.New(rand.NewPCG(3, 4))
	for _, c := range []struct{ rows, vocab int }{{1, 50}, {3, 50}, {64, 1295}, {17, 5000}} {
		logits := make([][]float32, c.rows)
		jobs := make([]*genJob, c.rows)
		want := make([]tokenChoice, c.rows)
		for i := range logits {
			logits[i] = make([]float32, c.vocab)
			for k := range logits[i] {
				logits[i][k] = float32(gen.NormFloat64() * 3)
			}
			p := samplingParams{Temperature: []float64{0, 1, 0.8}[i%3], TopP: []float64{1, 1, 0.9}[i%3], TopLogprobs: i % 4}
			jobs[i] = &genJob{params: p}
			want[i], _ = sample(logits[i], p, rand.New(rand.NewPCG(uint64(i), 9)))
		}
		var e Engine
		for range 2 { // the second step reuses the samplers' buffers
			for i, j := range jobs {
				j.rng = rand.New(rand.NewPCG(uint64(i), 9))
			}
			got := make([]tokenChoice, len(jobs))
			for i, r := range e.sampleAll(jobs, logits) {
				if r.err != nil {
					t.Fatal(r.err)
				}
				got[i] = r.c
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("%d rows × %d: split sampling %v, alone %v", c.rows, c.vocab, got, want)
			}
		}
		if split := c.rows*c.vocab >= parallelSampleLogits && c.rows > 1; split && len(e.samplers) < min(2, runtime.GOMAXPROCS(0)) {
			t.Errorf("%d rows × %d: %d samplers, want the step split", c.rows, c.vocab, len(e.samplers))
		}
	}
}

// Logits without a finite maximum (a diverged checkpoint) are an error
// naming the cause, for that sequence alone, and draw nothing; before,
// NaN logits sampled token 0 or, with top-p, indexed an empty list.
func TestNonFiniteLogitsAreAnError(t *testing.T) {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	for name, logits := range map[string][]float32{
		"a NaN":     {0.5, nan, 1},
		"+Inf":      {0.5, inf, 1},
		"all -Inf":  {-inf, -inf},
		"NaN first": {nan, 1, 2},
	} {
		for _, p := range []samplingParams{{Temperature: 0, TopP: 1}, {Temperature: 1, TopP: 1}, {Temperature: 1, TopP: 0.9}} {
			rng := rand.New(rand.NewPCG(1, 2))
			if _, err := sample(logits, p, rng); !errors.Is(err, errNonFiniteLogits) {
				t.Errorf("%s, %+v: error %v", name, p, err)
			}
			if rng.Uint64() != rand.New(rand.NewPCG(1, 2)).Uint64() {
				t.Errorf("%s, %+v: the generator moved", name, p)
			}
		}
	}
	// In a step, only the broken row fails.
	rows := make([][]float32, 8)
	jobs := make([]*genJob, 8)
	for i := range rows {
		rows[i] = make([]float32, 4096)
		jobs[i] = &genJob{params: samplingParams{Temperature: 1, TopP: 1}, rng: rand.New(rand.NewPCG(uint64(i), 1))}
	}
	rows[5][17] = nan
	var e Engine
	for i, r := range e.sampleAll(jobs, rows) {
		if (r.err != nil) != (i == 5) {
			t.Errorf("row %d: error %v", i, r.err)
		}
	}
}
