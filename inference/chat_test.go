package inference

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestChatClient(t *testing.T) {
	var calls atomic.Int32
	var failFirst atomic.Int32
	failFirst.Store(2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if r.URL.Path != "/v1/chat/completions" {
			http.NotFound(w, r)
			return
		}
		if r.Header.Get("Authorization") != "Bearer k-123" {
			w.WriteHeader(401)
			w.Write([]byte(`{"error": {"message": "bad key", "type": "auth"}}`))
			return
		}
		if failFirst.Add(-1) >= 0 {
			w.WriteHeader(502)
			w.Write([]byte(`{"error": {"message": "upstream down"}}`))
			return
		}
		var req map[string]any
		json.NewDecoder(r.Body).Decode(&req)
		msgs := req["messages"].([]any)
		last := msgs[len(msgs)-1].(map[string]any)["content"].(string)
		json.NewEncoder(w).Encode(map[string]any{
			"id": "x", "object": "chat.completion", "model": req["model"],
			"choices": []any{map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": "echo: " + last}, "finish_reason": "stop"}},
		})
	}))
	defer srv.Close()
	t.Setenv("SEEDCTL_TEST_ANALYZER_KEY", "k-123")
	cfg := DefaultChatConfig(srv.URL+"/v1", "analyzer")
	cfg.APIKeyEnv, cfg.RetryFor = "SEEDCTL_TEST_ANALYZER_KEY", 10*time.Second
	c, err := NewChatClient(cfg, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	out, err := c.Complete(context.Background(), []ChatMessage{{Role: "system", Content: "s"}, {Role: "user", Content: "hi"}}, ChatOptions{})
	if err != nil || out != "echo: hi" {
		t.Fatalf("Complete = %q, %v", out, err)
	}
	if calls.Load() != 3 {
		t.Errorf("%d calls; want 2 failures then a success", calls.Load())
	}

	t.Setenv("SEEDCTL_TEST_ANALYZER_KEY", "wrong")
	c2, _ := NewChatClient(cfg, testLog(t))
	before := calls.Load()
	_, err = c2.Complete(context.Background(), []ChatMessage{{Role: "user", Content: "hi"}}, ChatOptions{})
	if err == nil || !strings.Contains(err.Error(), "bad key") || calls.Load() != before+1 {
		t.Errorf("401: %v after %d calls", err, calls.Load()-before)
	}
	if strings.Contains(err.Error(), "wrong") {
		t.Errorf("the API key leaked into the error: %v", err)
	}
	if _, err := NewChatClient(ChatConfig{BaseURL: srv.URL, Model: "m", MaxInFlight: 1, APIKeyEnv: "SEEDCTL_TEST_UNSET_VAR"}, testLog(t)); err == nil {
		t.Error("unset api_key_env accepted")
	}
}

// A temperature of 0 reaches the server as a (tiny) temperature: left out,
// as go-openai leaves out zeros, the server would sample at its default.
func TestChatClientSendsGreedyTemperature(t *testing.T) {
	var got []any
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req map[string]any
		json.NewDecoder(r.Body).Decode(&req)
		got = append(got, req["temperature"])
		json.NewEncoder(w).Encode(map[string]any{"id": "x", "object": "chat.completion", "model": req["model"],
			"choices": []any{map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": "ok"}, "finish_reason": "stop"}}})
	}))
	defer srv.Close()
	c, err := NewChatClient(DefaultChatConfig(srv.URL+"/v1", "analyzer"), testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, temp := range []float32{0, 0.7} {
		if _, err := c.Complete(context.Background(), []ChatMessage{{Role: "user", Content: "hi"}}, ChatOptions{Temperature: temp}); err != nil {
			t.Fatal(err)
		}
	}
	if len(got) != 2 || got[0] == nil || got[0].(float64) <= 0 || got[0].(float64) > 1e-30 || got[1].(float64) < 0.69 || got[1].(float64) > 0.71 {
		t.Errorf("temperatures sent: %v, want a tiny positive one for 0 and 0.7", got)
	}
}
