package server

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/seedctl/seedctl/inference/server/servertest"
	"github.com/seedctl/seedctl/tokenizer"
)

// FuzzCompletionRequest: any body is either refused with a 4xx naming the
// problem or accepted with prompts and limits the engine can serve (every
// prompt non-empty and inside the vocabulary, prompt + max_tokens within
// the context, prompts × n within the per-request bound). Never a panic.
// The seed corpus runs with every `go test`; `just fuzz` runs it longer.
func FuzzCompletionRequest(f *testing.F) {
	tok, err := tokenizer.TrainBPE(servertest.Corpus(), func() tokenizer.TrainConfig {
		c := tokenizer.DefaultTrainConfig()
		c.VocabSize = 300
		return c
	}())
	if err != nil {
		f.Fatal(err)
	}
	lim := completionLimits{tok: tok, vocab: tok.VocabSize(), maxLen: 512, sequences: 64}
	for _, tt := range hostileRequests() {
		if s, ok := tt.body.(string); ok {
			f.Add([]byte(s))
		} else if b, err := json.Marshal(tt.body); err == nil && len(b) < 4096 {
			f.Add(b)
		}
	}
	for _, s := range []string{
		`{"prompt": "hi", "max_tokens": 3}`, `{"prompt": [[1,2],[3]], "n": 2, "echo": true, "logprobs": 0, "max_tokens": 0}`,
		`{"prompt": ["a", "b"], "stop": ["x"], "stop_token_ids": [4]}`, `{"prompt": [1, 2, 3], "max_tokens": 9223372036854775807}`,
		`{"prompt": "", "n": 64}`, `{"prompt": [[]]}`, `{"prompt": [-1]}`, `{"prompt": "x", "temperature": 1e309}`,
		`{"prompt": "x", "top_k": -5, "top_p": 2}`, `{"prompt": "x", "stream": true, "echo": true}`, `{"prompt": "x", "best_of": 1, "suffix": ""}`,
		"{\"prompt\": \"\xff\"}", `[1,2,3]`, `null`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var req completionRequest
		if err := unmarshalBody(body, &req); err != nil {
			var br *badRequest
			if !errors.As(err, &br) || br.status/100 != 4 {
				t.Fatalf("decode error %v is not a 4xx", err)
			}
			return
		}
		prompts, p, err := validateCompletion(&req, lim)
		if err != nil {
			var br *badRequest
			if !errors.As(err, &br) || br.status/100 != 4 {
				t.Fatalf("validation error %v is not a 4xx", err)
			}
			return
		}
		if len(prompts) == 0 || len(prompts)*p.n > lim.sequences || p.n < 1 || p.maxTokens < 0 {
			t.Fatalf("accepted %d prompts × n=%d, max_tokens %d", len(prompts), p.n, p.maxTokens)
		}
		for i, pr := range prompts {
			if len(pr) == 0 || len(pr)+p.maxTokens > lim.maxLen {
				t.Fatalf("accepted prompt %d of %d tokens with max_tokens %d (context %d)", i, len(pr), p.maxTokens, lim.maxLen)
			}
			for _, id := range pr {
				if id < 0 || id >= lim.vocab {
					t.Fatalf("accepted token id %d", id)
				}
			}
		}
	})
}
