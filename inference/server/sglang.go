package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/http"

	"github.com/seedctl/seedctl/tokenizer"
)

// POST /generate: the subset of SGLang's native generation API that token
// ids in / token ids out needs (its GenerateReqInput and SamplingParams
// fields below), so the SGLang backend can be tested end to end against a
// real model here. Unknown fields are refused, as SGLang's dataclasses
// refuse them.
type sglangRequest struct {
	InputIDs       json.RawMessage `json:"input_ids"`
	SamplingParams struct {
		MaxNewTokens  *int            `json:"max_new_tokens"`
		Temperature   *float64        `json:"temperature"`
		TopP          *float64        `json:"top_p"`
		TopK          *int            `json:"top_k"`
		Stop          json.RawMessage `json:"stop"`
		StopTokenIDs  []int           `json:"stop_token_ids"`
		IgnoreEOS     bool            `json:"ignore_eos"`
		SkipSpecial   *bool           `json:"skip_special_tokens"`
		MinNewTokens  *int            `json:"min_new_tokens"`
		NoStopTrim    bool            `json:"no_stop_trim"`
		N             *int            `json:"n"`
		FrequencyPen  *float64        `json:"frequency_penalty"`
		PresencePen   *float64        `json:"presence_penalty"`
		RepetitionPen *float64        `json:"repetition_penalty"`
	} `json:"sampling_params"`
	ReturnLogprob   bool   `json:"return_logprob"`
	LogprobStartLen *int   `json:"logprob_start_len"`
	TopLogprobsNum  int    `json:"top_logprobs_num"`
	RID             any    `json:"rid"`
	Stream          bool   `json:"stream"`
	ReturnText      bool   `json:"return_text_in_logprobs"`
	LoraPath        string `json:"lora_path"`
}

func (s *Server) sglangGenerate(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(r)
	if err != nil {
		s.fail(w, err)
		return
	}
	if err := loneSurrogate(body); err != nil {
		s.fail(w, err)
		return
	}
	if err := checkFieldLimits(body); err != nil {
		s.fail(w, err)
		return
	}
	var req sglangRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		s.fail(w, bad("", "malformed /generate request: %v", err))
		return
	}
	if req.Stream || req.LoraPath != "" || req.SamplingParams.N != nil && *req.SamplingParams.N != 1 {
		s.fail(w, bad("", "stream, lora_path and n are not supported by this server's /generate"))
		return
	}
	snap := s.eng.snap()
	vocab := snap.model.Config().VocabSize
	// Counted before anything is decoded, as /v1/completions counts: a
	// body of many prompts is refused without building them.
	if n := countPrompts(req.InputIDs, s.eng.maxSequences()+1); n > s.eng.maxSequences() {
		s.fail(w, bad("input_ids", "more than %d prompts in one request", s.eng.maxSequences()))
		return
	}
	var prompts [][]int
	var one []int
	batch := false
	if json.Unmarshal(req.InputIDs, &one) == nil && len(one) > 0 {
		prompts = [][]int{one}
	} else if err := json.Unmarshal(req.InputIDs, &prompts); err == nil {
		batch = true
	} else {
		s.fail(w, bad("input_ids", "input_ids must be a list of token ids or a list of such lists"))
		return
	}
	if len(prompts) == 0 || len(prompts) > s.eng.maxSequences() {
		s.fail(w, bad("input_ids", "%d prompts: want 1 to %d", len(prompts), s.eng.maxSequences()))
		return
	}
	for i, p := range prompts {
		if len(p) == 0 {
			s.fail(w, bad("input_ids", "prompt %d is empty", i))
			return
		}
		for _, id := range p {
			if id < 0 || id >= vocab {
				s.fail(w, bad("input_ids", "token id %d in prompt %d is outside the vocabulary (%d)", id, i, vocab))
				return
			}
		}
	}
	sp := req.SamplingParams
	if sp.FrequencyPen != nil && *sp.FrequencyPen != 0 || sp.PresencePen != nil && *sp.PresencePen != 0 || sp.RepetitionPen != nil && *sp.RepetitionPen != 1 || sp.MinNewTokens != nil && *sp.MinNewTokens > 0 {
		s.fail(w, bad("sampling_params", "penalties and min_new_tokens are not supported by this server"))
		return
	}
	g := genParams{MaxTokens: sp.MaxNewTokens, Temperature: sp.Temperature, TopP: sp.TopP, TopK: sp.TopK, Stop: sp.Stop, StopTokenIDs: sp.StopTokenIDs, IgnoreEOS: sp.IgnoreEOS, SkipSpecial: sp.SkipSpecial}
	p, err := g.parse(128, vocab) // SGLang's default max_new_tokens is 128
	if err != nil {
		s.fail(w, err)
		return
	}
	if err := checkLength(prompts, p.maxTokens, snap.maxLen); err != nil {
		s.fail(w, err)
		return
	}
	if req.TopLogprobsNum < 0 || req.TopLogprobsNum > 20 {
		s.fail(w, bad("top_logprobs_num", "top_logprobs_num must be in [0, 20]"))
		return
	}
	start := -1
	if req.LogprobStartLen != nil {
		start = *req.LogprobStartLen
	}
	var promptLP [][]float64
	if req.ReturnLogprob && start >= 0 {
		if promptLP, snap, err = s.eng.score(r.Context(), prompts); err != nil {
			s.fail(w, err)
			return
		}
	}
	results := make([]choiceResult, len(prompts))
	for i, pr := range prompts {
		results[i] = choiceResult{index: i, prompt: pr, finish: "length", snap: snap}
	}
	if p.maxTokens > 0 {
		if results, err = s.generate(r.Context(), prompts, p, req.TopLogprobsNum, nil); err != nil {
			s.fail(w, err)
			return
		}
	}
	entry := func(lp float64, id int, tok *tokenizer.Tokenizer) []any {
		var text any
		if req.ReturnText {
			text = tokenText(tok, id, false)
		}
		if math.IsNaN(lp) {
			return []any{nil, id, text}
		}
		return []any{lp, id, text}
	}
	out := make([]map[string]any, len(results))
	for i, res := range results {
		rs := res.snap
		if rs == nil {
			rs = snap
		}
		meta := map[string]any{"id": fmt.Sprintf("gen-%d-%d", s.seq.Add(1), i), "finish_reason": map[string]any{"type": res.finish},
			"prompt_tokens": len(res.prompt), "completion_tokens": len(res.gen), "cached_tokens": res.cached, "weight_version": rs.version}
		if req.ReturnLogprob {
			outLP := make([][]any, len(res.gen))
			for k, gt := range res.gen {
				outLP[k] = entry(gt.LogProb, gt.ID, rs.tok)
			}
			meta["output_token_logprobs"] = outLP
			if promptLP != nil {
				var in [][]any
				for k := min(start, len(res.prompt)); k < len(res.prompt); k++ {
					lp := promptLP[i][k]
					if k == 0 {
						lp = math.NaN()
					}
					in = append(in, entry(lp, res.prompt[k], rs.tok))
				}
				meta["input_token_logprobs"] = in
			}
		}
		text := truncateAtStop(decodeText(rs.tok, genIDs(res.gen), p.skipSpecial, true), p.stops)
		out[i] = map[string]any{"text": text, "output_ids": genIDs(res.gen), "meta_info": meta}
	}
	if batch {
		writeJSON(w, out)
		return
	}
	writeJSON(w, out[0])
}
