package inference

import (
	"context"
	"fmt"
	"math"
	"strings"
)

// ProbeCheck is one preflight check of a running server.
type ProbeCheck struct {
	Name   string // health, generate, score, consistency, chat
	Detail string // what was seen
	Err    error  // nil when the check passed
	// Warn marks a failure that does not stop a run (Err is set).
	Warn bool
}

// ProbeTolerance is the largest gap between a sampled token's log-prob and
// its teacher-forced score that the consistency check accepts. Servers that
// compute both with the same kernels agree to ~1e-5 in fp32 and ~1e-2 in
// bf16; a larger gap usually means processed (temperature-scaled or
// penalised) sampling log-probs, which ℓold must not be.
const ProbeTolerance = 0.05

// Probe checks that a running server answers what a run needs before hours
// are spent on it: /health, generation that returns token ids with their
// log-probs, teacher-forced scoring of token ids (the rescoring pass), and
// that the two agree on the same tokens. prompt is any short sequence of
// valid token ids of the served model. Every check is run; the result holds
// one entry per check.
func Probe(ctx context.Context, b Backend, prompt []int) []ProbeCheck {
	var out []ProbeCheck
	add := func(name, detail string, err error, warn bool) {
		out = append(out, ProbeCheck{Name: name, Detail: detail, Err: err, Warn: warn && err != nil})
	}
	if err := b.Health(ctx); err != nil {
		add("health", "", fmt.Errorf("GET /health: %w", err), false)
		return out
	}
	add("health", "answers", nil, false)

	seed := int64(1)
	gen, err := b.Generate(ctx, []GenRequest{{Prompt: prompt, MaxTokens: 4, Temperature: 1, Seed: &seed}})
	var g GenResult
	switch {
	case err != nil:
		err = fmt.Errorf("generating 4 tokens from %d prompt ids: %w", len(prompt), err)
	case len(gen) != 1 || len(gen[0].IDs) == 0:
		err = fmt.Errorf("generating 4 tokens from %d prompt ids: no tokens came back", len(prompt))
	default:
		g = gen[0]
		err = checkLogProbs("sampled", g.LogProbs, len(g.IDs), 0)
	}
	if err != nil {
		add("generate", "", err, false)
	} else {
		add("generate", fmt.Sprintf("%d token ids with log-probs (%q, finish %s)", len(g.IDs), g.Text, g.FinishReason), nil, false)
	}

	seq := append(append([]int{}, prompt...), g.IDs...)
	sc, err := b.Score(ctx, [][]int{seq})
	switch {
	case err != nil:
		err = fmt.Errorf("scoring %d token ids: %w", len(seq), err)
	case len(sc) != 1:
		err = fmt.Errorf("scoring one sequence: %d came back", len(sc))
	default:
		err = checkLogProbs("teacher-forced", sc[0], len(seq), 1)
	}
	if err != nil {
		add("score", "", err, false)
		return out
	}
	add("score", fmt.Sprintf("%d teacher-forced log-probs", len(seq)-1), nil, false)
	if len(g.IDs) == 0 {
		return out
	}
	worst := 0.0
	for i, lp := range g.LogProbs {
		worst = math.Max(worst, math.Abs(lp-sc[0][len(prompt)+i]))
	}
	detail := fmt.Sprintf("sampled and scored log-probs of the same %d tokens differ by at most %.2g", len(g.IDs), worst)
	if worst > ProbeTolerance {
		add("consistency", detail, fmt.Errorf("%s (tolerance %.2g): the server's sampling log-probs are not the policy's raw log-probs "+
			"(vLLM: --logprobs-mode raw_logprobs); keep rl.server_old_logp off so the trainer recomputes ℓold", detail, ProbeTolerance), true)
	} else {
		add("consistency", detail, nil, false)
	}
	return out
}

// checkLogProbs wants n log-probs from index skip on, each finite and ≤ 0.
func checkLogProbs(what string, lps []float64, n, skip int) error {
	if len(lps) != n {
		return fmt.Errorf("%d %s log-probs for %d tokens", len(lps), what, n)
	}
	var bad []string
	for i := skip; i < n; i++ {
		if math.IsNaN(lps[i]) || math.IsInf(lps[i], 0) || lps[i] > 1e-6 {
			bad = append(bad, fmt.Sprintf("%d: %v", i, lps[i]))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("%s log-probs that are not finite and ≤ 0 (token %s)", what, strings.Join(bad, ", "))
	}
	return nil
}

// ProbeChat sends a one-line request to a chat endpoint (an external
// analyzer) and checks that an answer comes back.
func ProbeChat(ctx context.Context, c *ChatClient) ProbeCheck {
	ans, err := c.Complete(ctx, []ChatMessage{{Role: "user", Content: "Reply with the single word OK."}}, ChatOptions{MaxTokens: 16})
	switch {
	case err != nil:
		return ProbeCheck{Name: "chat", Err: fmt.Errorf("a one-line chat request: %w", err)}
	case strings.TrimSpace(ans) == "":
		// Reasoning models can spend 16 tokens before any content.
		return ProbeCheck{Name: "chat", Err: fmt.Errorf("a one-line chat request (16 tokens) came back without content"), Warn: true}
	}
	return ProbeCheck{Name: "chat", Detail: fmt.Sprintf("answers (%q)", strings.TrimSpace(ans))}
}
