// Package rollouttest writes a checkpoint folder a rollout can be served
// from (a byte-level BPE tokenizer with the Qwen2.5 chat template, no
// weights) and reads text in and out of its token ids: for tests of the
// loop above the rollout that fake the learner and the inference server,
// without importing the tokenizer themselves.
package rollouttest

import (
	"fmt"

	"github.com/seedctl/seedctl/tokenizer"
)

// WriteModel writes the tokenizer files of a tiny policy into dir: a
// 400-token BPE trained on household-like text, <|im_end|> its EOS.
func WriteModel(dir string) error {
	tc := tokenizer.DefaultTrainConfig()
	tc.VocabSize = 400
	corpus := []string{"Your task is to: put a clean mug in cabinet.", "go to cabinet 1", "take mug 1 from countertop 2",
		"Places not searched yet: drawer 1, shelf 2.", "Admissible actions: look; inventory", `{"episode_summary": "x", "episode_skill": "y"}`}
	tok, err := tokenizer.TrainBPE(corpus, tc)
	if err != nil {
		return fmt.Errorf("rollouttest: training the tokenizer: %w", err)
	}
	cfg := &tokenizer.Config{EOSToken: "<|im_end|>", PadToken: "<|endoftext|>", ChatTemplate: tokenizer.Qwen25ChatTemplate}
	return tokenizer.Save(dir, tok, cfg)
}

// Codec turns a checkpoint folder's token ids into text and back.
type Codec struct {
	tok *tokenizer.Tokenizer
	// EOS is the end-of-turn token's id.
	EOS int
}

// LoadCodec reads the tokenizer of the checkpoint folder dir.
func LoadCodec(dir string) (*Codec, error) {
	tok, cfg, err := tokenizer.Load(dir)
	if err != nil {
		return nil, err
	}
	eos, ok := tok.TokenID(cfg.EOSToken)
	if !ok {
		return nil, fmt.Errorf("rollouttest: %s: eos %q is not in the vocabulary", dir, cfg.EOSToken)
	}
	return &Codec{tok: tok, EOS: eos}, nil
}

// Encode is text's ids.
func (c *Codec) Encode(text string) ([]int, error) { return c.tok.Encode(text) }

// Decode is ids' text, special tokens included.
func (c *Codec) Decode(ids []int) (string, error) {
	return c.tok.Decode(ids, tokenizer.DecodeOptions{})
}
