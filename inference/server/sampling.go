package server

import (
	"math"
	"math/rand/v2"
	"sort"

	"github.com/seedctl/seedctl/trainer"
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

// maxLogit is the logits' maximum, NaN if any of them is NaN (as a chain
// of math.Max), by plain comparisons: math.Max's care for signed zeros
// and NaN made this pass cost as much as the exponentials.
func maxLogit(logits []float32) float64 {
	mx := float32(math.Inf(-1))
	nan := false
	for _, v := range logits {
		if v > mx {
			mx = v
		} else if v != v {
			nan = true
		}
	}
	if nan {
		return math.NaN()
	}
	return float64(mx)
}

// logSumExp is log Σ exp(logits), given their maximum.
func logSumExp(logits []float32, mx float64) float64 {
	sum := 0.0
	for _, v := range logits {
		sum += math.Exp(float64(v) - mx)
	}
	return mx + math.Log(sum)
}

// topK returns the k most likely ids by log-prob (logit − lse), ties by
// lower id, in one pass over the vocabulary (k is at most 20: an insertion
// into a short sorted list beats sorting 151k entries).
func topK(logits []float32, lse float64, k int) []tokenLogProb {
	if k <= 0 {
		return nil
	}
	k = min(k, len(logits))
	out := make([]tokenLogProb, 0, k+1)
	for i, l := range logits {
		v := float64(l) - lse
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

// errNonFiniteLogits: NaN among the logits, or no finite maximum (a
// diverged or broken checkpoint): there is no distribution to sample. The
// same error whether the host or libtorch draws.
var errNonFiniteLogits = trainer.ErrNonFiniteLogits

// sampler draws tokens with a scratch buffer of the vocabulary's size that
// it keeps between calls (a Qwen vocabulary's weights are 1.2 MB a token).
// One sampler serves one goroutine at a time.
type sampler struct {
	w []float64
}

// sample draws one token from logits and reports its log-probability under
// the raw distribution. Greedy is the first most likely token; otherwise
// softmax(logits/T), cut to top-k and top-p (sampleTempered). At T = 1, the
// default, the weights' exponentials give the log-sum-exp too: one pass of
// exp over the vocabulary instead of two. Same choices, log-probs and
// alternatives to the bit as computing every log-prob first, and one draw
// from rng per sampled token. Logits without a finite maximum (any NaN
// makes the maximum NaN) are errNonFiniteLogits, drawing nothing.
func (s *sampler) sample(logits []float32, p samplingParams, rng *rand.Rand) (tokenChoice, error) {
	mx := maxLogit(logits)
	if math.IsNaN(mx) || math.IsInf(mx, 0) {
		return tokenChoice{}, errNonFiniteLogits
	}
	var lse float64
	var id int
	if p.Temperature <= 0 {
		lse = logSumExp(logits, mx)
		best := math.Inf(-1)
		for i, v := range logits {
			if lp := float64(v) - lse; lp > best || i == 0 {
				id, best = i, lp
			}
		}
	} else {
		if cap(s.w) < len(logits) {
			s.w = make([]float64, len(logits))
		}
		w := s.w[:len(logits)]
		var total float64
		id, total = sampleWeights(w, logits, mx, p, rng)
		if p.Temperature == 1 {
			lse = mx + math.Log(total) // the weights are exp(l − max)
		} else {
			lse = logSumExp(logits, mx)
		}
	}
	return tokenChoice{ID: id, LogProb: float64(logits[id]) - lse, Top: topK(logits, lse, p.TopLogprobs)}, nil
}

// sampleWeights draws from softmax(logits/T), cut to the top-k and then
// the top-p nucleus (probabilities of the whole distribution, as before
// the cut), filling w with exp((l − max)/T) and returning the draw and the
// weights' sum. Without a cut it is one pass over the vocabulary; with one,
// only the tokens above a probability threshold are sorted, the threshold
// falling until they hold the cut (every token left out is less likely
// than every token kept, so the kept ones are the head of the full order).
func sampleWeights(w []float64, logits []float32, mx float64, p samplingParams, rng *rand.Rand) (int, float64) {
	t := p.Temperature
	total := 0.0 // the top token weighs 1
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
				return i, total
			}
		}
		return last, total
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
			return c, total
		}
	}
	return cands[len(cands)-1], total
}

// nucleus returns the ids sampling may pick under top-k and top-p, most
// likely first (ties: lower id), from weights w summing to total.
func nucleus(w []float64, total float64, p samplingParams) []int {
	topK := p.TopK > 0 && p.TopK < len(w)
	topP := p.TopP > 0 && p.TopP < 1
	var cands []int
	for thr := 1e-3; ; thr *= 1e-3 {
		if thr < 1e-15 {
			thr = 0
		}
		cands = cands[:0]
		mass := 0.0
		for i, x := range w {
			if x >= thr {
				cands = append(cands, i)
				mass += x
			}
		}
		if thr == 0 || (topK && len(cands) >= p.TopK) || (!topK && mass >= p.TopP*total) {
			break
		}
	}
	sort.Slice(cands, func(a, b int) bool {
		if w[cands[a]] != w[cands[b]] {
			return w[cands[a]] > w[cands[b]]
		}
		return cands[a] < cands[b]
	})
	if topK && len(cands) > p.TopK {
		cands = cands[:p.TopK]
	}
	if topP {
		cum := 0.0
		for i, c := range cands {
			cum += w[c] / total
			if cum >= p.TopP {
				cands = cands[:i+1]
				break
			}
		}
	}
	return cands
}
