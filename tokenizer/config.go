package tokenizer

import (
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/ardanlabs/jinja"
)

// Config is what seedctl uses from tokenizer_config.json.
type Config struct {
	BOSToken     string
	EOSToken     string
	PadToken     string
	ChatTemplate string // the default template; "" when the file has none
	// ChatTemplateFile names where ChatTemplate came from:
	// "chat_template.jinja", "chat_template.json" or
	// "tokenizer_config.json" ("" when there is none).
	ChatTemplateFile string
	// NamedTemplates holds the other templates of a list-form chat_template
	// (e.g. "tool_use").
	NamedTemplates map[string]string
	Raw            map[string]json.RawMessage
}

// ErrNoChatTemplate means tokenizer_config.json carries no chat template.
var ErrNoChatTemplate = errors.New("no chat template (chat_template.jinja, chat_template.json or tokenizer_config.json's chat_template)")

// LoadConfig reads a tokenizer_config.json.
func LoadConfig(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("loading tokenizer config: %w", err)
	}
	c, err := ParseConfig(b)
	if err != nil {
		return nil, fmt.Errorf("loading tokenizer config %s: %w", path, err)
	}
	return c, nil
}

// ParseConfig parses the bytes of a tokenizer_config.json.
func ParseConfig(b []byte) (*Config, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("parsing tokenizer_config.json: %w", err)
	}
	c := &Config{Raw: raw, NamedTemplates: map[string]string{}}
	for key, dst := range map[string]*string{"bos_token": &c.BOSToken, "eos_token": &c.EOSToken, "pad_token": &c.PadToken} {
		v, err := tokenName(raw[key])
		if err != nil {
			return nil, fmt.Errorf("tokenizer_config.json field %s: %w", key, err)
		}
		*dst = v
	}
	if ct, ok := raw["chat_template"]; ok && string(ct) != "null" {
		var s string
		if err := json.Unmarshal(ct, &s); err == nil {
			c.ChatTemplate = s
		} else {
			var list []struct {
				Name     string `json:"name"`
				Template string `json:"template"`
			}
			if err := json.Unmarshal(ct, &list); err != nil {
				return nil, fmt.Errorf("tokenizer_config.json field chat_template: want a string or a list of {name, template}: %w", err)
			}
			for _, t := range list {
				if t.Name == "default" {
					c.ChatTemplate = t.Template
				} else {
					c.NamedTemplates[t.Name] = t.Template
				}
			}
		}
	}
	return c, nil
}

// tokenName accepts a token given as a string or as {"content": ...}.
func tokenName(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var obj struct {
		Content string `json:"content"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil {
		return "", fmt.Errorf("want a string or {\"content\": ...}: %w", err)
	}
	return obj.Content, nil
}

// Message is one chat turn.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
	// ReasoningContent is Qwen3's separate thinking text, when given.
	ReasoningContent string `json:"reasoning_content,omitempty"`
}

// ChatOptions are the variables a chat template reads besides the messages.
type ChatOptions struct {
	AddGenerationPrompt bool
	// Extra variables, e.g. {"enable_thinking": false} for Qwen3.
	Extra map[string]any
}

// ChatTemplate is a compiled chat template, safe for concurrent use.
type ChatTemplate struct {
	tmpl   *jinja.Template
	source string
	cfg    *Config
}

// CompileChatTemplate compiles the config's default chat template.
func (c *Config) CompileChatTemplate() (*ChatTemplate, error) {
	if c.ChatTemplate == "" {
		return nil, ErrNoChatTemplate
	}
	t, err := jinja.Compile(c.ChatTemplate)
	if err != nil {
		return nil, fmt.Errorf("compiling chat_template: %w", err)
	}
	return &ChatTemplate{tmpl: t, source: c.ChatTemplate, cfg: c}, nil
}

// Source is the template text.
func (ct *ChatTemplate) Source() string { return ct.source }

// Render formats messages the way Hugging Face's apply_chat_template(...,
// tokenize=False) does.
func (ct *ChatTemplate) Render(msgs []Message, opt ChatOptions) (string, error) {
	ms := make([]any, len(msgs))
	for i, m := range msgs {
		mm := map[string]any{"role": m.Role, "content": m.Content}
		if m.ReasoningContent != "" {
			mm["reasoning_content"] = m.ReasoningContent
		}
		ms[i] = mm
	}
	data := map[string]any{
		"messages":              ms,
		"add_generation_prompt": opt.AddGenerationPrompt,
		"bos_token":             ct.cfg.BOSToken,
		"eos_token":             ct.cfg.EOSToken,
		"pad_token":             ct.cfg.PadToken,
	}
	for k, v := range opt.Extra {
		data[k] = v
	}
	out, err := ct.tmpl.Render(data)
	if err != nil {
		roles := make([]string, len(msgs))
		for i, m := range msgs {
			roles[i] = m.Role
		}
		return "", fmt.Errorf("rendering chat template for roles [%s]: %w", strings.Join(roles, " "), err)
	}
	return out, nil
}

// Qwen25ChatTemplate is the chat template Qwen2.5 models ship (with its
// default system prompt); tiny models use it so prompts look like Qwen's.
//
//go:embed templates/qwen2.5.jinja
var Qwen25ChatTemplate string

// WriteConfigFile writes a tokenizer_config.json for t, in the layout
// transformers writes for Qwen2 tokenizers, so vLLM and transformers load
// the folder unchanged. It is written atomically.
func WriteConfigFile(path string, t *Tokenizer, c *Config) error {
	added := map[string]any{}
	for _, a := range t.added {
		added[strconv.Itoa(a.ID)] = map[string]any{
			"content": a.Content, "lstrip": a.LStrip, "normalized": a.Normalized,
			"rstrip": a.RStrip, "single_word": a.SingleWord, "special": a.Special,
		}
	}
	nullable := func(s string) any {
		if s == "" {
			return nil
		}
		return s
	}
	out := map[string]any{
		"add_bos_token":                false,
		"add_prefix_space":             false,
		"added_tokens_decoder":         added,
		"bos_token":                    nullable(c.BOSToken),
		"eos_token":                    nullable(c.EOSToken),
		"pad_token":                    nullable(c.PadToken),
		"unk_token":                    nil,
		"clean_up_tokenization_spaces": false,
		"errors":                       "replace",
		"model_max_length":             32768,
		"split_special_tokens":         false,
		"tokenizer_class":              "Qwen2Tokenizer",
	}
	if c.ChatTemplate != "" {
		out["chat_template"] = c.ChatTemplate
	}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return writeFileAtomic(path, append(b, '\n'))
}

// Save writes tokenizer.json and tokenizer_config.json into dir.
func Save(dir string, t *Tokenizer, c *Config) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("saving tokenizer: %w", err)
	}
	if err := t.WriteFile(filepath.Join(dir, "tokenizer.json")); err != nil {
		return fmt.Errorf("saving tokenizer: %w", err)
	}
	if err := WriteConfigFile(filepath.Join(dir, "tokenizer_config.json"), t, c); err != nil {
		return fmt.Errorf("saving tokenizer: %w", err)
	}
	return nil
}
