package tokenizer

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

type chatCase struct {
	Template            string    `json:"template"`
	Conversation        string    `json:"conversation"`
	AddGenerationPrompt bool      `json:"add_generation_prompt"`
	EnableThinking      *bool     `json:"enable_thinking"`
	Messages            []Message `json:"messages"`
	Rendered            string    `json:"rendered"`
}

// TestChatTemplatesMatchGolden renders the Qwen2.5 and Qwen3 templates over
// the conversations in testdata/reference/chat_golden.json (rendered by
// Hugging Face's @huggingface/jinja; see gen.mjs) and compares byte for byte.
func TestChatTemplatesMatchGolden(t *testing.T) {
	_, qcfg := loadQwen3(t)
	q25, err := os.ReadFile("templates/qwen2.5.jinja")
	if err != nil {
		t.Fatal(err)
	}
	templates := map[string]*Config{
		"qwen3":   qcfg,
		"qwen2.5": {ChatTemplate: string(q25), EOSToken: "<|im_end|>"},
	}
	compiled := map[string]*ChatTemplate{}
	for name, cfg := range templates {
		ct, err := cfg.CompileChatTemplate()
		if err != nil {
			t.Fatalf("compiling %s template: %v", name, err)
		}
		compiled[name] = ct
	}
	b, err := os.ReadFile("testdata/reference/chat_golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var golden struct {
		Cases []chatCase `json:"cases"`
	}
	if err := json.Unmarshal(b, &golden); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, c := range golden.Cases {
		opt := ChatOptions{AddGenerationPrompt: c.AddGenerationPrompt}
		if c.EnableThinking != nil {
			opt.Extra = map[string]any{"enable_thinking": *c.EnableThinking}
		}
		got, err := compiled[c.Template].Render(c.Messages, opt)
		name := c.Template + "/" + c.Conversation
		if c.AddGenerationPrompt {
			name += "/gen"
		}
		if c.EnableThinking != nil {
			name += "/no-think"
		}
		seen[c.Template] = true
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if got != c.Rendered {
			t.Errorf("%s:\n got %q\nwant %q", name, got, c.Rendered)
		}
	}
	if !seen["qwen3"] || !seen["qwen2.5"] {
		t.Fatalf("golden file covers %v; want both qwen3 and qwen2.5", seen)
	}
}

func TestChatTemplateRendersThenEncodes(t *testing.T) {
	tok, cfg := loadQwen3(t)
	ct, err := cfg.CompileChatTemplate()
	if err != nil {
		t.Fatal(err)
	}
	text, err := ct.Render([]Message{{Role: "user", Content: "hi"}}, ChatOptions{AddGenerationPrompt: true, Extra: map[string]any{"enable_thinking": false}})
	if err != nil {
		t.Fatal(err)
	}
	ids, err := tok.Encode(text)
	if err != nil {
		t.Fatal(err)
	}
	back, _ := tok.Decode(ids, DecodeOptions{})
	if back != text || !strings.HasPrefix(text, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n") {
		t.Errorf("rendered %q, round trip %q", text, back)
	}
}

func TestParseConfig(t *testing.T) {
	c, err := ParseConfig([]byte(`{"bos_token": {"content": "<s>", "lstrip": false}, "eos_token": "</s>",
		"chat_template": [{"name": "default", "template": "{{ bos_token }}x"}, {"name": "tool_use", "template": "t"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.BOSToken != "<s>" || c.EOSToken != "</s>" || c.ChatTemplate != "{{ bos_token }}x" || c.NamedTemplates["tool_use"] != "t" {
		t.Fatalf("parsed %+v", c)
	}
	ct, err := c.CompileChatTemplate()
	if err != nil {
		t.Fatal(err)
	}
	if s, err := ct.Render(nil, ChatOptions{}); err != nil || s != "<s>x" {
		t.Errorf("Render = %q, %v", s, err)
	}
	if _, err := (&Config{}).CompileChatTemplate(); err != ErrNoChatTemplate {
		t.Errorf("no template: err = %v", err)
	}
	for _, bad := range []string{`{"eos_token": 5}`, `{"chat_template": 5}`, `not json`} {
		if _, err := ParseConfig([]byte(bad)); err == nil {
			t.Errorf("ParseConfig(%s) accepted", bad)
		}
	}
	broken := &Config{ChatTemplate: "{% for x in %}"}
	if _, err := broken.CompileChatTemplate(); err == nil {
		t.Error("a broken template compiled")
	}
}
