package server

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Every list, map and string of a request has a limit, checked before any
// decoding or work: each field of the [hardening-2] battery, sent past its
// limit, is refused at once with 413 naming it, allocating little; the
// weight-update reply can no longer echo an unbounded path.
func TestEveryFieldHasALimit(t *testing.T) {
	ts := newTestServer(t, func(c *Config) { c.MaxModelLen = 1024 })
	h := ts.Handler()
	js := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	many := func(n int, v any) []any {
		out := make([]any, n)
		for i := range out {
			out[i] = v
		}
		return out
	}
	kwargs := map[string]any{}
	for i := range 100 {
		kwargs[strings.Repeat("k", 3)+string(rune('a'+i%26))+strings.Repeat("x", i)] = 1
	}
	bigKwarg := map[string]any{"enable_thinking": strings.Repeat("y", 100<<10)}
	chat := func(extra map[string]any) string {
		m := map[string]any{"max_tokens": 1, "messages": []map[string]string{{"role": "user", "content": "hi"}}}
		for k, v := range extra {
			m[k] = v
		}
		return js(m)
	}
	comp := func(extra map[string]any) string {
		m := map[string]any{"max_tokens": 1, "prompt": "hi"}
		for k, v := range extra {
			m[k] = v
		}
		return js(m)
	}
	gen := func(sp map[string]any, extra map[string]any) string {
		sp["max_new_tokens"] = 1
		m := map[string]any{"input_ids": []int{1, 2}, "sampling_params": sp}
		for k, v := range extra {
			m[k] = v
		}
		return js(m)
	}
	for _, tc := range []struct {
		name, path, body, field string
	}{
		{"chat_template_kwargs keys", "/v1/chat/completions", chat(map[string]any{"chat_template_kwargs": kwargs}), "chat_template_kwargs"},
		{"chat_template_kwargs bytes", "/v1/chat/completions", chat(map[string]any{"chat_template_kwargs": bigKwarg}), "chat_template_kwargs.enable_thinking"},
		{"a million stops", "/v1/completions", comp(map[string]any{"stop": many(1_000_000, "x")}), "stop"},
		{"a long stop", "/v1/completions", comp(map[string]any{"stop": strings.Repeat("s", 2000)}), "stop"},
		{"stop_token_ids", "/generate", gen(map[string]any{"stop_token_ids": many(100_000, 3)}, nil), "sampling_params.stop_token_ids"},
		{"sglang stops", "/generate", gen(map[string]any{"stop": many(100_000, "x")}, nil), "sampling_params.stop"},
		{"rid list", "/generate", gen(map[string]any{}, map[string]any{"rid": many(1_000_000, 1)}), "rid"},
		{"rid string", "/generate", gen(map[string]any{}, map[string]any{"rid": strings.Repeat("r", 10_000)}), "rid"},
		{"model_path", "/update_weights_from_disk", js(map[string]any{"model_path": strings.Repeat("/a", 1<<20)}), "model_path"},
		{"logit_bias", "/v1/completions", comp(map[string]any{"logit_bias": func() map[string]int {
			m := map[string]int{}
			for i := range 5000 {
				m[strconv.Itoa(i)] = 1
			}
			return m
		}()}), "logit_bias"},
		{"token ids past any context", "/v1/completions", js(map[string]any{"max_tokens": 1, "prompt": many(3_000_000, 1)}), "prompt"},
		{"deep nesting", "/v1/chat/completions", `{"max_tokens":1,"messages":[{"role":"user","content":"hi"}],"chat_template_kwargs":{"a":` + strings.Repeat("[", 40) + strings.Repeat("]", 40) + `}}`, "chat_template_kwargs.a"},
		{"an unknown field's list", "/v1/completions", comp(map[string]any{"whatever": many(10_000, 1)}), "whatever"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if len(tc.body) > maxBodyBytes {
				t.Fatalf("body of %d bytes is over the body limit: the test needs a legal one", len(tc.body))
			}
			runtime.GC()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			start := time.Now()
			req := httptest.NewRequest("POST", "http://127.0.0.1"+tc.path, strings.NewReader(tc.body))
			req.Header.Set("Content-Type", "application/json")
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			took := time.Since(start)
			runtime.ReadMemStats(&after)
			body := rec.Body.String()
			named := strings.Contains(body, `"param":"`+tc.field+`"`) || strings.Contains(body, "field "+tc.field+":") // SGLang's reply has no param
			if rec.Code != http.StatusRequestEntityTooLarge || !named || !strings.Contains(body, "limit") && !strings.Contains(body, "more than") {
				t.Fatalf("status %d %.300s, want 413 naming %s and its limit", rec.Code, body, tc.field)
			}
			if len(body) > 4096 {
				t.Errorf("the refusal is %d bytes: it echoes the input", len(body))
			}
			// The body is read whole (up to 32 MiB); beyond that and a copy,
			// nothing may be spent on the field.
			if got, lim := after.TotalAlloc-before.TotalAlloc, uint64(3*len(tc.body)+(8<<20)); got > lim {
				t.Errorf("allocated %d KiB for a %d KiB body", got>>10, len(tc.body)>>10)
			}
			t.Logf("%s: %d KiB body refused in %v", tc.name, len(tc.body)>>10, took.Round(time.Millisecond))
		})
	}
}

// Bodies within every limit still work: a chat request with template
// arguments, stops and a client-chosen id.
func TestFieldLimitsLeaveOrdinaryRequestsAlone(t *testing.T) {
	for _, body := range []string{
		`{"max_tokens":1,"messages":[{"role":"user","content":"hi"}],"chat_template_kwargs":{"enable_thinking":false},"stop":["\n","</action>"]}`,
		`{"input_ids":[[1,2],[3]],"sampling_params":{"max_new_tokens":1,"stop":["x"],"stop_token_ids":[5,6]},"rid":["a","b"]}`,
		`{"model_path":"/tmp/ckpt","weight_version":"iter-3","flush_cache":true}`,
	} {
		if err := checkFieldLimits([]byte(body)); err != nil {
			t.Errorf("%s: %v", body, err)
		}
	}
}
