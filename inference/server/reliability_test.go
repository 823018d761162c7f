package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// hostileRequests are bad requests that each once crashed the server, was
// accepted, or answered 500; every one must get a 4xx naming the problem.
func hostileRequests() []struct {
	path   string
	body   any
	status int
	want   string
} {
	many := make([][]int, 2000)
	for i := range many {
		many[i] = []int{1}
	}
	seventeen := make([][]int, 17)
	for i := range seventeen {
		seventeen[i] = []int{1, 2}
	}
	longText := strings.Repeat("hello world ", 400) // > 512 tokens once rendered
	return []struct {
		path   string
		body   any
		status int
		want   string
	}{
		// A chat prompt over the context without max_tokens: the default
		// max_tokens went negative and the whole prompt was prefilled.
		{"/v1/chat/completions", map[string]any{"messages": []map[string]any{{"role": "user", "content": longText}}}, 400, "maximum context length"},
		// max_tokens so large that prompt + max_tokens overflowed.
		{"/v1/completions", map[string]any{"prompt": "hi", "max_tokens": int64(math.MaxInt64)}, 400, "maximum context length"},
		{"/v1/chat/completions", map[string]any{"messages": []map[string]any{{"role": "user", "content": "x"}}, "max_tokens": int64(math.MaxInt64)}, 400, "maximum context length"},
		// Empty prompts: were 500s deep in the engine.
		{"/v1/completions", map[string]any{"prompt": ""}, 400, "empty"},
		{"/v1/completions", map[string]any{"prompt": "", "echo": true, "logprobs": 0, "max_tokens": 0}, 400, "empty"},
		{"/v1/completions", map[string]any{"prompt": []string{"a", ""}}, 400, "empty"},
		// prompts × n unbounded: results were allocated up front.
		{"/v1/completions", map[string]any{"prompt": many, "max_tokens": 1}, 400, "more than 1024 prompts"},
		{"/v1/completions", map[string]any{"prompt": seventeen, "n": 64, "max_tokens": 1}, 400, "sequences one request"},
		// Invalid UTF-8 was silently replaced.
		{"/v1/completions", "{\"prompt\": \"caf\xe9\"}", 400, "UTF-8"},
		// Accepted and ignored before.
		{"/v1/chat/completions", map[string]any{"messages": []map[string]any{{"role": "user", "content": "x"}}, "tools": []any{map[string]any{"type": "function"}}}, 400, "tools"},
		{"/v1/chat/completions", map[string]any{"messages": []map[string]any{{"role": "user", "content": "x"}}, "response_format": map[string]any{"type": "json_object"}}, 400, "response_format"},
		{"/v1/completions", map[string]any{"prompt": "hi", "logit_bias": map[string]int{"5": 100}}, 400, "logit_bias"},
		{"/v1/completions", map[string]any{"prompt": "hi", "best_of": 3}, 400, "best_of"},
		{"/v1/completions", map[string]any{"prompt": "hi", "suffix": "end"}, 400, "suffix"},
		{"/v1/completions", map[string]any{"prompt": "hi", "stream_options": map[string]any{"include_usage": true}}, 400, "stream_options"},
	}
}

func TestHostileRequestsGet4xx(t *testing.T) {
	s := newTestServer(t, nil)
	for _, tt := range hostileRequests() {
		code, resp := post(t, s.url+tt.path, tt.body)
		e, _ := resp["error"].(map[string]any)
		if code != tt.status || e == nil || !strings.Contains(fmt.Sprint(e["message"]), tt.want) {
			b := fmt.Sprint(tt.body)
			t.Errorf("%s %.120s: %d %.300v; want %d mentioning %q", tt.path, b, code, resp, tt.status, tt.want)
		}
	}
	if code, resp := post(t, s.url+"/v1/completions", map[string]any{"prompt": "hi", "max_tokens": 2}); code != 200 {
		t.Fatalf("after hostile requests: %d %v", code, resp)
	}
}

// A request cancelled between decodeStep's look at the contexts and the
// decode is decoded once more and finished on the next step; it used to be
// finished (its cache freed) and then decoded: a nil dereference on the
// engine goroutine that took the process down.
func TestCancelDuringDecodeStep(t *testing.T) {
	s := newTestServer(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	fired := make(chan struct{})
	testHookAfterGrouping = func(e *Engine) {
		if len(e.active) > 0 {
			select {
			case <-fired:
			default:
				cancel()
				close(fired)
			}
		}
	}
	defer func() { testHookAfterGrouping = nil }()
	p, err := genParams{}.parse(8, s.model.Config().VocabSize)
	if err != nil {
		t.Fatal(err)
	}
	p.ignoreEOS = true
	if _, err := s.generate(ctx, [][]int{prompt}, p, 0, nil); err == nil {
		t.Fatal("a cancelled request finished without an error")
	}
	<-fired
	testHookAfterGrouping = nil
	if code, resp := post(t, s.url+"/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 3}); code != 200 {
		t.Fatalf("after the cancellation: %d %v", code, resp)
	}
}

// Echo scoring in micro-batches of bounded tokens gives the log-probs of
// scoring all prompts at once.
func TestEchoScoringMicroBatches(t *testing.T) {
	batch := [][]int{prompt, prompt[:5], {7, 3, 9}, {4}}
	score := func(limit int) [][]any {
		s := newTestServer(t, func(c *Config) { c.ScoreBatchTokens = limit })
		code, resp := post(t, s.url+"/v1/completions", map[string]any{"prompt": batch, "max_tokens": 0, "echo": true, "logprobs": 0, "return_tokens_as_token_ids": true})
		if code != 200 {
			t.Fatalf("limit %d: %d %v", limit, code, resp)
		}
		var out [][]any
		for _, c := range choices(t, resp) {
			out = append(out, c["logprobs"].(map[string]any)["token_logprobs"].([]any))
		}
		return out
	}
	one, many := score(4096), score(8)
	for i := range one {
		if len(one[i]) != len(batch[i]) || one[i][0] != nil {
			t.Fatalf("prompt %d: %v", i, one[i])
		}
		for k := 1; k < len(one[i]); k++ {
			if math.Abs(one[i][k].(float64)-many[i][k].(float64)) > 1e-4 {
				t.Errorf("prompt %d token %d: %v in one forward, %v in micro-batches", i, k, one[i][k], many[i][k])
			}
		}
	}
}

func TestOpenAIClientCalls(t *testing.T) {
	s := newTestServer(t, nil)
	// models.retrieve
	for name, want := range map[string]int{s.name: 200, "someone-else": 404} {
		resp, err := http.Get(s.url + "/v1/models/" + name)
		if err != nil {
			t.Fatal(err)
		}
		var card map[string]any
		json.NewDecoder(resp.Body).Decode(&card)
		resp.Body.Close()
		if resp.StatusCode != want || (want == 200 && card["id"] != s.name) {
			t.Errorf("GET /v1/models/%s: %d %v, want %d", name, resp.StatusCode, card, want)
		}
	}
	// role developer is the system role
	code, resp := post(t, s.url+"/v1/chat/completions", map[string]any{"messages": []map[string]any{{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "hi"}}, "max_tokens": 2})
	if code != 200 {
		t.Errorf("developer role: %d %v", code, resp)
	}
	// stream_options.include_usage: a last chunk with no choices and the usage
	for _, path := range []string{"/v1/completions", "/v1/chat/completions"} {
		body := map[string]any{"prompt": prompt, "max_tokens": 3, "ignore_eos": true, "stream": true, "stream_options": map[string]any{"include_usage": true}}
		if path == "/v1/chat/completions" {
			body = map[string]any{"messages": []map[string]any{{"role": "user", "content": "hi"}}, "max_tokens": 3, "ignore_eos": true, "stream": true, "stream_options": map[string]any{"include_usage": true}}
		}
		events, done := readSSE(t, s.url+path, body)
		if !done || len(events) == 0 {
			t.Fatalf("%s: stream without [DONE]", path)
		}
		last := events[len(events)-1]
		u, _ := last["usage"].(map[string]any)
		if u == nil || u["completion_tokens"] != float64(3) || len(last["choices"].([]any)) != 0 {
			t.Errorf("%s: last chunk %v, want usage with 3 completion tokens and no choices", path, last)
		}
	}
}

// text_offset counts characters, not bytes.
func TestTextOffsetCountsCharacters(t *testing.T) {
	var l completionLogprobs
	for _, tok := range []string{"caf", "é", "😀", "x"} {
		l.add(tok, nil, nil)
	}
	if fmt.Sprint(l.TextOffset) != "[0 3 4 5]" {
		t.Errorf("text_offset %v, want [0 3 4 5]", l.TextOffset)
	}
}

// The sampler's nucleus (top-k, then top-p) is the head of the full
// sorted order, found without sorting the whole vocabulary.
func TestNucleusMatchesFullSort(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := 0; trial < 200; trial++ {
		n := 50 + rng.IntN(2000)
		w := make([]float64, n)
		total := 0.0
		spread := []float64{0.5, 3, 12}[trial%3]
		for i := range w {
			w[i] = math.Exp(-spread * rng.Float64() * 10)
			total += w[i]
		}
		p := samplingParams{Temperature: 1, TopP: []float64{1, 0.9, 0.5, 0.99}[trial%4], TopK: []int{0, 1, 40, 0, 5000}[trial%5]}
		ids := make([]int, n)
		for i := range ids {
			ids[i] = i
		}
		sort.Slice(ids, func(a, b int) bool {
			if w[ids[a]] != w[ids[b]] {
				return w[ids[a]] > w[ids[b]]
			}
			return ids[a] < ids[b]
		})
		if p.TopK > 0 && p.TopK < n {
			ids = ids[:p.TopK]
		}
		if p.TopP < 1 {
			cum := 0.0
			for i, c := range ids {
				cum += w[c] / total
				if cum >= p.TopP {
					ids = ids[:i+1]
					break
				}
			}
		}
		if got := nucleus(w, total, p); fmt.Sprint(got) != fmt.Sprint(ids) {
			t.Fatalf("trial %d (n %d, %+v): nucleus %v, full sort %v", trial, n, p, got, ids)
		}
	}
}

// Without a cut the sampler draws each token with its probability.
func TestSamplerFrequencies(t *testing.T) {
	logits := []float32{2, 1, 0, -1, 0.5}
	lp := logSoftmax(logits)
	rng := rand.New(rand.NewPCG(5, 6))
	const draws = 40000
	counts := make([]int, len(logits))
	for range draws {
		c, err := sample(logits, samplingParams{Temperature: 1, TopP: 1}, rng)
		if err != nil {
			t.Fatal(err)
		}
		counts[c.ID]++
	}
	for i, c := range counts {
		p := math.Exp(lp[i])
		sd := math.Sqrt(p * (1 - p) / draws)
		if f := float64(c) / draws; math.Abs(f-p) > 5*sd {
			t.Errorf("token %d: frequency %.4f, probability %.4f (±%.4f)", i, f, p, sd)
		}
	}
}

// A client trickling its body, or idling on a keep-alive connection, is
// cut off after the read or idle timeout instead of holding a connection
// for ever.
func TestSlowClientsAreCut(t *testing.T) {
	dir := t.TempDir() + "/tiny"
	writeTiny(t, dir, 1)
	cfg := DefaultConfig(dir)
	cfg.ReadTimeout, cfg.IdleTimeout = 500*time.Millisecond, 500*time.Millisecond
	s, err := New(cfg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Listen("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	go s.Serve()
	defer s.Shutdown(context.Background())
	closedWithin := func(conn net.Conn, d time.Duration) bool {
		conn.SetReadDeadline(time.Now().Add(d))
		buf := make([]byte, 4096)
		for {
			if _, err := conn.Read(buf); err != nil {
				var ne net.Error
				return !(errors.As(err, &ne) && ne.Timeout())
			}
		}
	}
	// Trickle: headers promise 1,000 bytes, one arrives per 100 ms.
	conn, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{")
	go func() {
		for range 50 {
			time.Sleep(100 * time.Millisecond)
			if _, err := conn.Write([]byte(" ")); err != nil {
				return
			}
		}
	}()
	if !closedWithin(conn, 4*time.Second) {
		t.Error("a trickled body kept its connection open past the read timeout")
	}
	// Idle keep-alive: one request, then silence.
	idle, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	fmt.Fprintf(idle, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
	if !closedWithin(idle, 4*time.Second) {
		t.Error("an idle keep-alive connection stayed open past the idle timeout")
	}
}

// fullSortSample is the sampler before: every token sorted by probability
// at every step. Kept for the benchmark's side-by-side ratio.
func fullSortSample(logits []float32, p samplingParams, rng *rand.Rand) int {
	lp := logSoftmax(logits)
	type cand struct {
		id int
		p  float64
	}
	cands := make([]cand, len(lp))
	for i, l := range lp {
		cands[i] = cand{i, math.Exp(l / p.Temperature)}
	}
	sort.Slice(cands, func(a, b int) bool {
		if cands[a].p != cands[b].p {
			return cands[a].p > cands[b].p
		}
		return cands[a].id < cands[b].id
	})
	r := rng.Float64()
	for _, c := range cands {
		r -= c.p
		if r <= 0 {
			return c.id
		}
	}
	return cands[len(cands)-1].id
}

// BenchmarkSampleQwenVocab: one token from Qwen's 151,936-entry vocabulary,
// greedy, at T=1 (one pass), at T=1 with top-p 0.9 (partial sort), each by
// the sampler the engine keeps (its buffer reused) and by the sampler
// before it (every log-prob first: two passes of exp and two allocations
// of the vocabulary's size), and the old full sort, side by side.
func BenchmarkSampleQwenVocab(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	logits := make([]float32, 151936)
	for i := range logits {
		logits[i] = float32(rng.NormFloat64() * 3)
	}
	var s sampler
	for _, c := range []struct {
		name string
		p    samplingParams
	}{
		{"greedy", samplingParams{Temperature: 0, TopP: 1}},
		{"T1", samplingParams{Temperature: 1, TopP: 1}},
		{"T1-topp0.9", samplingParams{Temperature: 1, TopP: 0.9}},
	} {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				s.sample(logits, c.p, rng)
			}
		})
		b.Run(c.name+"-before", func(b *testing.B) {
			for range b.N {
				sampleBefore(logits, c.p, rng)
			}
		})
	}
	b.Run("T1-full-sort-before", func(b *testing.B) {
		for range b.N {
			fullSortSample(logits, samplingParams{Temperature: 1, TopP: 1}, rng)
		}
	})
}

func TestCountPrompts(t *testing.T) {
	for raw, want := range map[string]int{`"hi"`: 1, `[1, 2, 3, 4]`: 1, `[[1, 2], [3], [4, 5, 6]]`: 3, `["a", "b"]`: 2, `[]`: 0, `[[1], [2], [3], [4], [5]]`: 4} {
		if got := countPrompts(json.RawMessage(raw), 4); got != want {
			t.Errorf("countPrompts(%s, 4) = %d, want %d", raw, got, want)
		}
	}
}

// The embedded server's /generate speaks SGLang's native shape: token ids
// in, output ids with log-probs in meta_info out, prompt log-probs from
// logprob_start_len; a batch of input_ids answers a list. Its log-probs
// are the completions endpoint's.
func TestSGLangGenerate(t *testing.T) {
	s := newTestServer(t, nil)
	code, one := post(t, s.url+"/generate", map[string]any{"input_ids": prompt, "sampling_params": map[string]any{"max_new_tokens": 4, "temperature": 0, "ignore_eos": true}, "return_logprob": true, "logprob_start_len": 0})
	if code != 200 {
		t.Fatalf("%d %v", code, one)
	}
	meta := one["meta_info"].(map[string]any)
	outLP, inLP := meta["output_token_logprobs"].([]any), meta["input_token_logprobs"].([]any)
	if len(outLP) != 4 || len(one["output_ids"].([]any)) != 4 || len(inLP) != len(prompt) || inLP[0].([]any)[0] != nil {
		t.Fatalf("answer %v", one)
	}
	code, ref := post(t, s.url+"/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 0, "echo": true, "logprobs": 0, "return_tokens_as_token_ids": true})
	if code != 200 {
		t.Fatal(ref)
	}
	_, lps := completionIDs(t, choices(t, ref)[0])
	for k := 1; k < len(prompt); k++ {
		e := inLP[k].([]any)
		if int(e[1].(float64)) != prompt[k] || math.Abs(e[0].(float64)-lps[k]) > 1e-5 {
			t.Errorf("prompt token %d: /generate %v, completions %v", k, e, lps[k])
		}
	}
	code, batch := postAny(t, s.url+"/generate", map[string]any{"input_ids": [][]int{prompt, prompt[:3]}, "sampling_params": map[string]any{"max_new_tokens": 1, "temperature": 0}, "return_logprob": true, "logprob_start_len": 0})
	if code != 200 || len(batch.([]any)) != 2 {
		t.Fatalf("batch: %d %v", code, batch)
	}
	if code, bad := post(t, s.url+"/generate", map[string]any{"input_ids": prompt, "sampling_params": map[string]any{"max_new_tokens": 1, "seed": 3}}); code != 400 {
		t.Errorf("an unknown sampling parameter: %d %v", code, bad)
	}
}

func postAny(t *testing.T, url string, body any) (int, any) {
	t.Helper()
	js, _ := json.Marshal(body)
	resp, err := http.Post(url, "application/json", strings.NewReader(string(js)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out any
	json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

// TestBodiesThatCannotFitAreRefusedBeforeTheWork: legal bodies under the
// 32 MiB limit whose text cannot fit the context (a million messages, a
// 30 MB prompt or message) are refused with a 400 naming the field before
// they are templated or encoded: the request allocates about what its
// body and JSON decoding need, not gigabytes ([hardening] 1: one 28.6 MiB
// chat body peaked at 2.12 GB, a 30 MB prompt added 1.3 GB).
func TestBodiesThatCannotFitAreRefusedBeforeTheWork(t *testing.T) {
	if testing.Short() {
		t.Skip("builds 30 MB bodies")
	}
	ts := newTestServer(t, func(c *Config) { c.MaxModelLen = 1024 })
	h := ts.Handler()
	big := strings.Repeat("word ", 6_000_000) // 30 MB
	var many strings.Builder
	many.WriteString(`{"max_tokens":1,"messages":[`)
	for i := range 1_000_000 {
		if i > 0 {
			many.WriteByte(',')
		}
		many.WriteString(`{"role":"user","content":"hi"}`)
	}
	many.WriteString(`]}`)
	var prompts strings.Builder // 7 million one-token prompts for /generate
	prompts.WriteString(`{"sampling_params":{"max_new_tokens":1},"input_ids":[`)
	for i := range 7_000_000 {
		if i > 0 {
			prompts.WriteByte(',')
		}
		prompts.WriteString(`[1]`)
	}
	prompts.WriteString(`]}`)
	js := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	for _, tc := range []struct {
		name, path, body, field string
	}{
		{"a million messages", "/v1/chat/completions", many.String(), "messages"},
		{"one 30 MB message", "/v1/chat/completions", js(map[string]any{"max_tokens": 1, "messages": []map[string]string{{"role": "user", "content": big}}}), "messages"},
		{"a 30 MB prompt", "/v1/completions", js(map[string]any{"max_tokens": 1, "prompt": big}), "prompt"},
		{"a 30 MB prompt in a list", "/v1/completions", js(map[string]any{"max_tokens": 1, "prompt": []string{"hi", big}}), "prompt"},
		{"seven million prompts to /generate", "/generate", prompts.String(), "input_ids"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if len(tc.body) > maxBodyBytes {
				t.Fatalf("body of %d bytes is over the limit: the test needs a legal one", len(tc.body))
			}
			runtime.GC()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			req := httptest.NewRequest("POST", "http://127.0.0.1"+tc.path, strings.NewReader(tc.body))
			req.Header.Set("Content-Type", "application/json")
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			runtime.ReadMemStats(&after)
			if (rec.Code != http.StatusBadRequest && rec.Code != http.StatusRequestEntityTooLarge) || !strings.Contains(rec.Body.String(), `"param":"`+tc.field+`"`) {
				msg := firstLine(rec.Body.String())
				t.Fatalf("status %d %s, want 400 or 413 naming %s", rec.Code, msg[:min(300, len(msg))], tc.field)
			}
			const limit = 300 << 20 // the body read, its JSON decoding and a copy
			if got := after.TotalAlloc - before.TotalAlloc; got > limit {
				t.Errorf("the request allocated %d MiB, want at most %d MiB", got>>20, limit>>20)
			} else {
				t.Logf("allocated %d MiB for a %d MiB body", got>>20, len(tc.body)>>20)
			}
		})
	}
}

func TestCountElements(t *testing.T) {
	for raw, want := range map[string]int{
		`[]`: 0, ` [ ] `: 0, `{"a":1}`: 0, `"x"`: 0, `[1]`: 1, `[1, 2, 3]`: 3,
		`[{"role":"user","content":"a, b"}, {"content":"[{,]}\"quoted, \\\" ,"}]`: 2,
		`[[1, 2], [3, [4, 5]], {"k": [6, 7]}]`:                                    3,
		`[1,2,3,4,5,6,7,8,9]`:                                                     5, // stops at the limit
	} {
		if got := countElements([]byte(raw), 5); got != want {
			t.Errorf("countElements(%s, 5) = %d, want %d", raw, got, want)
		}
	}
}
