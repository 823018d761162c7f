package inference

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
)

// SGLang's native /generate (its GenerateReqInput): token ids in, and the
// sampled ids with their log-probs out in meta_info. Its OpenAI-compatible
// /v1/completions has no return_tokens_as_token_ids, and answers
// "logprobs": 0 with echo without prompt log-probs (0 is falsy there), so
// token-in/token-out and teacher-forced scoring go through /generate.

type sglangGenerateReq struct {
	InputIDs        any            `json:"input_ids"` // []int, or [][]int for a batch
	SamplingParams  map[string]any `json:"sampling_params"`
	ReturnLogprob   bool           `json:"return_logprob"`
	LogprobStartLen int            `json:"logprob_start_len"`
}

type sglangGenerateReply struct {
	Text      string `json:"text"`
	OutputIDs []int  `json:"output_ids"`
	MetaInfo  struct {
		FinishReason *struct {
			Type string `json:"type"`
		} `json:"finish_reason"`
		CachedTokens        int                 `json:"cached_tokens"`
		InputTokenLogprobs  [][]json.RawMessage `json:"input_token_logprobs"`
		OutputTokenLogprobs [][]json.RawMessage `json:"output_token_logprobs"`
	} `json:"meta_info"`
}

// sglangLogprobs reads [[logprob, token_id, text], …]; a null log-prob
// (the first prompt token's) is NaN.
func sglangLogprobs(rows [][]json.RawMessage) (lps []float64, ids []int, err error) {
	for i, r := range rows {
		if len(r) < 2 {
			return nil, nil, fmt.Errorf("log-prob entry %d has %d fields, want [logprob, token_id, …]: %w", i, len(r), ErrServer)
		}
		lp := math.NaN()
		if string(r[0]) != "null" {
			if err := json.Unmarshal(r[0], &lp); err != nil {
				return nil, nil, fmt.Errorf("log-prob entry %d: %s is not a number: %w", i, r[0], ErrServer)
			}
		}
		var id int
		if err := json.Unmarshal(r[1], &id); err != nil {
			return nil, nil, fmt.Errorf("log-prob entry %d: token id %s: %w", i, r[1], ErrServer)
		}
		lps, ids = append(lps, lp), append(ids, id)
	}
	return lps, ids, nil
}

func (b *sglangBackend) generateOneNative(ctx context.Context, r GenRequest) (GenResult, error) {
	sp := map[string]any{"max_new_tokens": r.MaxTokens, "temperature": r.Temperature}
	if r.TopP > 0 {
		sp["top_p"] = r.TopP
	}
	if len(r.Stop) > 0 {
		sp["stop"] = r.Stop
	}
	if len(r.StopTokenIDs) > 0 {
		sp["stop_token_ids"] = r.StopTokenIDs
	}
	if r.IgnoreEOS {
		sp["ignore_eos"] = true
	}
	// r.Seed is not sent: SGLang's sampling parameters have no per-request
	// seed in the releases this was written against.
	var rep sglangGenerateReply
	req := sglangGenerateReq{InputIDs: r.Prompt, SamplingParams: sp, ReturnLogprob: true, LogprobStartLen: -1}
	if err := b.http.do(ctx, "POST", "/generate", req, &rep); err != nil {
		return GenResult{}, err
	}
	lps, ids, err := sglangLogprobs(rep.MetaInfo.OutputTokenLogprobs)
	if err != nil {
		return GenResult{}, fmt.Errorf("%s/generate: %w", b.cfg.BaseURL, err)
	}
	if rep.OutputIDs != nil && fmt.Sprint(rep.OutputIDs) != fmt.Sprint(ids) {
		return GenResult{}, fmt.Errorf("%s/generate: output_ids %v differ from the log-probs' ids %v: %w", b.cfg.BaseURL, rep.OutputIDs, ids, ErrServer)
	}
	for i, lp := range lps {
		if math.IsNaN(lp) {
			return GenResult{}, fmt.Errorf("%s/generate: no log-prob for generated token %d: %w", b.cfg.BaseURL, i, ErrServer)
		}
	}
	finish := "stop"
	if fr := rep.MetaInfo.FinishReason; fr != nil && fr.Type == "length" {
		finish = "length"
	}
	return GenResult{IDs: ids, LogProbs: lps, Text: rep.Text, FinishReason: finish, CachedTokens: rep.MetaInfo.CachedTokens}, nil
}

// Generate sends each request to SGLang's /generate (the embedded server,
// which shares this backend's publish calls, speaks /v1/completions).
func (b *sglangBackend) Generate(ctx context.Context, reqs []GenRequest) ([]GenResult, error) {
	if !b.native {
		return b.openAICompat.Generate(ctx, reqs)
	}
	return generateEach(ctx, reqs, b.cfg.MaxInFlight, b.generateOneNative)
}

// Score teacher-forces sequences through /generate with
// logprob_start_len 0: meta_info.input_token_logprobs holds every prompt
// token's log-prob (null for the first).
func (b *sglangBackend) Score(ctx context.Context, seqs [][]int) ([][]float64, error) {
	if !b.native {
		return b.openAICompat.Score(ctx, seqs)
	}
	out := make([][]float64, len(seqs))
	err := scoreBatches(ctx, seqs, b.cfg.ScoreBatch, b.cfg.MaxInFlight, func(ctx context.Context, lo, hi int) error {
		req := sglangGenerateReq{InputIDs: seqs[lo:hi], SamplingParams: map[string]any{"max_new_tokens": 1, "temperature": 0}, ReturnLogprob: true, LogprobStartLen: 0}
		var reps []sglangGenerateReply
		if err := b.http.do(ctx, "POST", "/generate", req, &reps); err != nil {
			return fmt.Errorf("scoring sequences %d-%d: %w", lo, hi-1, err)
		}
		if len(reps) != hi-lo {
			return fmt.Errorf("scoring sequences %d-%d: %d answers for %d prompts: %w", lo, hi-1, len(reps), hi-lo, ErrServer)
		}
		for j, rep := range reps {
			i := lo + j
			lps, ids, err := sglangLogprobs(rep.MetaInfo.InputTokenLogprobs)
			if err != nil {
				return fmt.Errorf("scoring sequence %d: %w", i, err)
			}
			if len(ids) != len(seqs[i]) {
				return fmt.Errorf("scoring sequence %d: %d prompt log-probs for %d tokens (logprob_start_len ignored?): %w", i, len(ids), len(seqs[i]), ErrServer)
			}
			for t := range ids {
				if ids[t] != seqs[i][t] {
					return fmt.Errorf("scoring sequence %d: the server scored token %d as %d, sent %d: %w", i, t, ids[t], seqs[i][t], ErrServer)
				}
				if t > 0 && math.IsNaN(lps[t]) {
					return fmt.Errorf("scoring sequence %d: no log-prob for token %d: %w", i, t, ErrServer)
				}
			}
			lps[0] = math.NaN()
			out[i] = lps
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
