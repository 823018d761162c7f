package server

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestOfficialOpenAIClient drives the server with the official OpenAI
// client for Node.js (installed by ./setup.sh): chat with logprobs,
// streaming, completions with echo and logprobs, model listing, and a 404.
func TestOfficialOpenAIClient(t *testing.T) {
	mods, _ := filepath.Abs("../../.build/npm/node_modules")
	if _, err := os.Stat(filepath.Join(mods, "openai", "index.mjs")); err != nil {
		t.Fatalf("the npm package openai is missing (%v): run ./setup.sh", err)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node is missing: run ./setup.sh")
	}
	s := newTestServer(t, nil)
	cmd := exec.Command(node, "testdata/openai_client.mjs", mods, s.url+"/v1", "tiny")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("openai client: %v\n%s", err, stderr.String())
	}
	var got struct {
		ChatText, ChatFinish, StreamText, StreamFinish, EchoText, BadModelMessage string
		ChatLogprobs, ChatTop, GenTokens, BadModelStatus                          int
		EchoLogprobs                                                              []*float64
		Models                                                                    []string
		Usage                                                                     map[string]any
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("client output %q: %v", out, err)
	}
	t.Logf("openai client saw: %s", out)
	if got.ChatText == "" || got.ChatText != got.StreamText || got.ChatFinish == "" || got.StreamFinish != got.ChatFinish {
		t.Errorf("chat %q/%s vs stream %q/%s", got.ChatText, got.ChatFinish, got.StreamText, got.StreamFinish)
	}
	if got.ChatLogprobs == 0 || got.ChatTop != 2 || got.Usage["completion_tokens"] == nil {
		t.Errorf("chat logprobs %d top %d usage %v", got.ChatLogprobs, got.ChatTop, got.Usage)
	}
	if got.EchoText != "You arrive at cabinet 1." || len(got.EchoLogprobs) < 2 || got.EchoLogprobs[0] != nil || got.EchoLogprobs[1] == nil {
		t.Errorf("echo %q logprobs %v", got.EchoText, got.EchoLogprobs)
	}
	if got.GenTokens != 4 || len(got.Models) != 1 || got.Models[0] != "tiny" {
		t.Errorf("gen tokens %d models %v", got.GenTokens, got.Models)
	}
	if got.BadModelStatus != 404 {
		t.Errorf("unknown model: status %d (%s)", got.BadModelStatus, got.BadModelMessage)
	}
}
