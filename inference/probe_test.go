package inference

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seedctl/seedctl/inference/server"
	"github.com/seedctl/seedctl/inference/server/servertest"
)

func probeSummary(checks []ProbeCheck) string {
	var b strings.Builder
	for _, c := range checks {
		state := "ok"
		switch {
		case c.Err != nil && c.Warn:
			state = "warn"
		case c.Err != nil:
			state = "fail"
		}
		fmt.Fprintf(&b, "%s=%s ", c.Name, state)
	}
	return strings.TrimSpace(b.String())
}

func TestProbe(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "m")
	if err := servertest.WriteTinyCheckpoint(dir, 1); err != nil {
		t.Fatal(err)
	}
	emb, err := newEmbedded(t, ctx, server.DefaultConfig(dir), DefaultConfig("embedded"), testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	defer emb.Close()

	remote := func(url string) Backend {
		c := DefaultConfig("vllm")
		c.BaseURL, c.Model, c.RetryFor = url, "m", 50*time.Millisecond
		b, err := NewRemote(c, testLog(t))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	fake := newFake(t) // samples at -0.5, scores every token at -1
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	positive := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A server whose "log-probs" are something else (logits, say).
		if r.URL.Path != "/v1/completions" {
			return
		}
		var body struct {
			Prompt []int `json:"prompt"`
			Echo   bool  `json:"echo"`
		}
		json.NewDecoder(r.Body).Decode(&body)
		toks, lps := []string{"token_id:3"}, []any{0.7}
		if body.Echo {
			toks, lps = nil, nil
			for i, id := range append(body.Prompt, 3) {
				toks = append(toks, fmt.Sprintf("token_id:%d", id))
				lps = append(lps, map[bool]any{true: nil, false: 0.7}[i == 0])
			}
		}
		json.NewEncoder(w).Encode(map[string]any{"choices": []any{map[string]any{"index": 0, "text": "x", "finish_reason": "length",
			"logprobs": map[string]any{"tokens": toks, "token_logprobs": lps}}}})
	}))
	defer positive.Close()

	for _, tc := range []struct {
		name string
		b    Backend
		want string
		err  string // in the failing check's error
	}{
		{"embedded server", emb, "health=ok generate=ok score=ok consistency=ok", ""},
		{"processed sampling log-probs", remote(fake.srv.URL), "health=ok generate=ok score=ok consistency=warn", "--logprobs-mode"},
		{"no server", remote(dead.URL), "health=fail", "/health"},
		{"positive log-probs", remote(positive.URL), "health=ok generate=fail score=fail", "not finite and ≤ 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checks := Probe(ctx, tc.b, []int{5, 6, 7})
			if got := probeSummary(checks); got != tc.want {
				t.Fatalf("checks %s, want %s (%+v)", got, tc.want, checks)
			}
			if tc.err == "" {
				return
			}
			for _, c := range checks {
				if c.Err != nil && strings.Contains(c.Err.Error(), tc.err) {
					return
				}
			}
			t.Errorf("no check's error mentions %q: %+v", tc.err, checks)
		})
	}
}

func TestProbeChat(t *testing.T) {
	reply := "OK"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"id":"1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":%q},"finish_reason":"stop"}]}`, reply)
	}))
	defer srv.Close()
	c, err := NewChatClient(DefaultChatConfig(srv.URL+"/v1", "analyzer"), testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	if got := ProbeChat(context.Background(), c); got.Err != nil || !strings.Contains(got.Detail, "OK") {
		t.Errorf("answering endpoint: %+v", got)
	}
	reply = ""
	if got := ProbeChat(context.Background(), c); got.Err == nil || !got.Warn {
		t.Errorf("empty answer: %+v, want a warning", got)
	}
}
