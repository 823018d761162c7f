package tokenizer

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The chat template files transformers writes beside tokenizer_config.json
// win over its chat_template, as in transformers: chat_template.jinja
// (transformers ≥ 4.47 and 5), else chat_template.json; named templates
// come from additional_chat_templates/.
func TestChatTemplateFiles(t *testing.T) {
	tj, err := os.ReadFile("../basemodel/committed/household-tiny/tokenizer.json")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name, body string) {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("tokenizer.json", string(tj))
	render := func() (string, string) {
		t.Helper()
		_, cfg, err := Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		ct, err := cfg.CompileChatTemplate()
		if err != nil {
			return "", cfg.ChatTemplateFile
		}
		s, err := ct.Render([]Message{{Role: "user", Content: "hi"}}, ChatOptions{AddGenerationPrompt: true})
		if err != nil {
			t.Fatal(err)
		}
		return s, cfg.ChatTemplateFile
	}
	if s, f := render(); s != "" || f != "" {
		t.Fatalf("no template anywhere: rendered %q from %q", s, f)
	}
	write("tokenizer_config.json", `{"eos_token": "<|im_end|>", "chat_template": "CONFIG {{ messages[0].content }}"}`)
	if s, f := render(); s != "CONFIG hi" || f != "tokenizer_config.json" {
		t.Errorf("tokenizer_config.json's template: %q from %q", s, f)
	}
	write("chat_template.json", `{"chat_template": "JSON {{ messages[0].content }}"}`)
	if s, f := render(); s != "JSON hi" || f != "chat_template.json" {
		t.Errorf("chat_template.json over the config's: %q from %q", s, f)
	}
	write("chat_template.jinja", "JINJA {{ messages[0].content }}{% if add_generation_prompt %}!{% endif %}")
	if s, f := render(); s != "JINJA hi!" || f != "chat_template.jinja" {
		t.Errorf("chat_template.jinja over both: %q from %q", s, f)
	}
	write("additional_chat_templates/tool_use.jinja", "TOOLS")
	_, cfg, err := Load(dir)
	if err != nil || cfg.NamedTemplates["tool_use"] != "TOOLS" {
		t.Errorf("named template: %v, %v", cfg.NamedTemplates, err)
	}
	// Without tokenizer_config.json (transformers 5 may write the template
	// alone) the jinja file still counts.
	os.Remove(filepath.Join(dir, "tokenizer_config.json"))
	if s, f := render(); s != "JINJA hi!" || f != "chat_template.jinja" {
		t.Errorf("jinja without tokenizer_config.json: %q from %q", s, f)
	}
	os.Remove(filepath.Join(dir, "chat_template.jinja"))
	write("chat_template.json", `{"template": "x"}`)
	if _, _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "chat_template.json") {
		t.Errorf("a chat_template.json without chat_template: %v", err)
	}
}
