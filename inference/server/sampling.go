package server

import (
	"math"
	"math/rand/v2"
	"sort"
)

// samplingParams are one request's decoding settings.
type samplingParams struct {
	Temperature float64 // 0: greedy
	TopP        float64 // (0, 1]
	TopK        int     // 0: off
	TopLogprobs int     // alternatives to report per token
}

// tokenChoice is one sampled token with its log-probability under the raw
// (untempered) distribution, as vLLM reports by default, and alternatives.
type tokenChoice struct {
	ID      int
	LogProb float64
	Top     []tokenLogProb
}

type tokenLogProb struct {
	ID      int
	LogProb float64
}

// logSoftmax returns log-probabilities of logits, in float64.
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

// topK returns the k most likely ids by log-prob, ties by lower id.
func topK(lp []float64, k int) []tokenLogProb {
	if k <= 0 {
		return nil
	}
	k = min(k, len(lp))
	idx := make([]int, len(lp))
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool {
		if lp[idx[a]] != lp[idx[b]] {
			return lp[idx[a]] > lp[idx[b]]
		}
		return idx[a] < idx[b]
	})
	out := make([]tokenLogProb, k)
	for i := 0; i < k; i++ {
		out[i] = tokenLogProb{ID: idx[i], LogProb: lp[idx[i]]}
	}
	return out
}

// sample draws the next token. Temperature 0 is argmax (lowest id on ties),
// so it equals greedy decoding.
func sample(logits []float32, p samplingParams, rng *rand.Rand) tokenChoice {
	lp := logSoftmax(logits)
	var id int
	if p.Temperature <= 0 {
		for i := range lp {
			if lp[i] > lp[id] {
				id = i
			}
		}
	} else {
		id = sampleTempered(logits, p, rng)
	}
	return tokenChoice{ID: id, LogProb: lp[id], Top: topK(lp, p.TopLogprobs)}
}

func sampleTempered(logits []float32, p samplingParams, rng *rand.Rand) int {
	t := p.Temperature
	scaled := make([]float32, len(logits))
	for i, v := range logits {
		scaled[i] = float32(float64(v) / t)
	}
	lp := logSoftmax(scaled)
	type cand struct {
		id int
		p  float64
	}
	cands := make([]cand, len(lp))
	for i, l := range lp {
		cands[i] = cand{i, math.Exp(l)}
	}
	sort.Slice(cands, func(a, b int) bool {
		if cands[a].p != cands[b].p {
			return cands[a].p > cands[b].p
		}
		return cands[a].id < cands[b].id
	})
	if p.TopK > 0 && p.TopK < len(cands) {
		cands = cands[:p.TopK]
	}
	if p.TopP > 0 && p.TopP < 1 {
		cum := 0.0
		for i, c := range cands {
			cum += c.p
			if cum >= p.TopP {
				cands = cands[:i+1]
				break
			}
		}
	}
	total := 0.0
	for _, c := range cands {
		total += c.p
	}
	r := rng.Float64() * total
	for _, c := range cands {
		r -= c.p
		if r <= 0 {
			return c.id
		}
	}
	return cands[len(cands)-1].id
}
