package rollout

import (
	"errors"
	"fmt"
	"strings"

	"github.com/seedctl/seedctl/inference"
	"github.com/seedctl/seedctl/tokenizer"
)

// Policy is the served model as rollouts see it: the backend that samples,
// and the checkpoint's tokenizer and chat template that turn turns into the
// exact token ids the backend receives.
type Policy struct {
	Backend inference.Backend
	Tok     *tokenizer.Tokenizer
	Chat    *tokenizer.ChatTemplate
	// EOS closes assistant turns (<|im_end|> for Qwen).
	EOS     int
	EOSText string
	// ChatExtra goes to the template, e.g. {"enable_thinking": false}.
	ChatExtra map[string]any
}

// LoadPolicy reads the tokenizer and chat template of checkpoint dir.
func LoadPolicy(dir string, b inference.Backend) (*Policy, error) {
	tok, cfg, err := tokenizer.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("loading the policy's tokenizer: %w", err)
	}
	return NewPolicy(b, tok, cfg)
}

// NewPolicy builds a Policy from a loaded tokenizer and config.
func NewPolicy(b inference.Backend, tok *tokenizer.Tokenizer, cfg *tokenizer.Config) (*Policy, error) {
	ct, err := cfg.CompileChatTemplate()
	if err != nil {
		return nil, fmt.Errorf("the policy needs a chat template: %w", err)
	}
	if cfg.EOSToken == "" {
		return nil, errors.New("the policy's tokenizer_config.json names no eos_token")
	}
	eos, ok := tok.TokenID(cfg.EOSToken)
	if !ok {
		return nil, fmt.Errorf("eos_token %q is not in the vocabulary", cfg.EOSToken)
	}
	return &Policy{Backend: b, Tok: tok, Chat: ct, EOS: eos, EOSText: cfg.EOSToken, ChatExtra: map[string]any{"enable_thinking": false}}, nil
}

func (p *Policy) render(msgs []tokenizer.Message, agp bool) (string, error) {
	return p.Chat.Render(msgs, tokenizer.ChatOptions{AddGenerationPrompt: agp, Extra: p.ChatExtra})
}

func messages(system string, users ...string) []tokenizer.Message {
	var out []tokenizer.Message
	if system != "" {
		out = append(out, tokenizer.Message{Role: "system", Content: system})
	}
	for _, u := range users {
		out = append(out, tokenizer.Message{Role: "user", Content: u})
	}
	return out
}

// StartIDs renders a conversation's first prompt (system, user, then the
// assistant header) and encodes it.
func (p *Policy) StartIDs(system, user string) ([]int, error) {
	text, err := p.render(messages(system, user), true)
	if err != nil {
		return nil, fmt.Errorf("rendering the first prompt: %w", err)
	}
	return p.Tok.Encode(text)
}

// marker stands in for an assistant reply when measuring what the template
// adds after it; it cannot occur in real text.
const marker = "\x00seedctl-reply\x00"

// NextIDs returns the tokens the chat template adds after an assistant turn
// (closed by EOS) to open the next user turn and the next assistant header.
// Appending these to the ids so far gives exactly the ids of the rendered
// longer conversation, without re-tokenizing the sampled reply.
func (p *Policy) NextIDs(system, user string) ([]int, error) {
	msgs := append(messages(system, "x"), tokenizer.Message{Role: "assistant", Content: marker}, tokenizer.Message{Role: "user", Content: user})
	text, err := p.render(msgs, true)
	if err != nil {
		return nil, fmt.Errorf("rendering the next turn: %w", err)
	}
	i := strings.Index(text, marker+p.EOSText)
	if i < 0 {
		return nil, fmt.Errorf("the chat template does not close assistant turns with %s; chat mode needs one that does (use window mode)", p.EOSText)
	}
	return p.Tok.Encode(text[i+len(marker)+len(p.EOSText):])
}
