package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/seedctl/seedctl/inference/server"
	"github.com/seedctl/seedctl/inference/server/servertest"
	"github.com/seedctl/seedctl/orchestrator"
)

// config check --probe contacts what a config names: a running server
// (here the embedded server standing in for SGLang), an external analyzer
// and a retriever, and fails on a server that does not answer.
func TestConfigCheckProbe(t *testing.T) {
	model := filepath.Join(t.TempDir(), "m")
	if err := servertest.WriteTinyCheckpoint(model, 1); err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.DefaultConfig(model), zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	policy := httptest.NewServer(srv.Handler())
	defer policy.Close()
	analyzer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"id":"1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"OK"},"finish_reason":"stop"}]}`)
	}))
	defer analyzer.Close()
	retriever := httptest.NewServer(http.NotFoundHandler()) // answers, with a 404 on GET /
	defer retriever.Close()
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()

	write := func(name, backendURL string) string {
		cfg := orchestrator.Default()
		cfg.Model, cfg.Env.Name = model, "searchqa"
		cfg.Env.Options = map[string]string{"retriever_url": retriever.URL}
		cfg.Backend = orchestrator.BackendConfig{Kind: "sglang", BaseURL: backendURL, Model: srv.ModelName()}
		cfg.Stage1.Analyzer = orchestrator.AnalyzerConfig{Kind: "external", BaseURL: analyzer.URL + "/v1", Model: "hosted"}
		b, _ := json.Marshal(cfg)
		f := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(f, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return f
	}
	out, err := runApp(t, "config", "check", "--probe", write("good.json", policy.URL))
	if err != nil {
		t.Fatalf("probing live servers: %v\n%s", err, out)
	}
	for _, want := range []string{"probe backend health: ok", "probe backend generate: ok", "probe backend score: ok",
		"probe backend consistency: ok", "probe analyzer chat: ok", "probe retriever reachable: ok"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	out, err = runApp(t, "config", "check", "--probe", write("dead.json", dead.URL))
	if err == nil || !strings.Contains(out, "probe backend health: FAIL") {
		t.Errorf("a dead backend passed the probe (%v):\n%s", err, out)
	}
}
