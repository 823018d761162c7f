package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/seedctl/seedctl/inference/server/servertest"
	"github.com/seedctl/seedctl/trainer"
)

// writeTiny saves a random tiny Qwen2 checkpoint and loads it back for
// reference computations.
func writeTiny(t testing.TB, dir string, seed uint64) *trainer.Model {
	t.Helper()
	if err := servertest.WriteTinyCheckpoint(dir, seed); err != nil {
		t.Fatal(err)
	}
	m, err := trainer.LoadCheckpoint(dir, trainer.ModelOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

type testServer struct {
	*Server
	url   string
	model *trainer.Model
	dir   string
}

func newTestServer(t *testing.T, mutate func(*Config)) *testServer {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tiny")
	m := writeTiny(t, dir, 1)
	cfg := DefaultConfig(dir)
	if mutate != nil {
		mutate(&cfg)
	}
	s, err := New(cfg, zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel))
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(func() { hs.Close(); s.Shutdown(context.Background()) })
	return &testServer{Server: s, url: hs.URL, model: m, dir: dir}
}

func post(t *testing.T, url string, body any, headers ...string) (int, map[string]any) {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case string:
		rd = strings.NewReader(b)
	default:
		js, _ := json.Marshal(b)
		rd = bytes.NewReader(js)
	}
	req, _ := http.NewRequest("POST", url, rd)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	raw, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("POST %s: %d %q is not JSON", url, resp.StatusCode, raw)
	}
	return resp.StatusCode, out
}

// completionIDs returns the generated token ids (return_tokens_as_token_ids)
// and their log-probs from a completion choice.
func completionIDs(t *testing.T, choice map[string]any) ([]int, []float64) {
	t.Helper()
	lp, _ := choice["logprobs"].(map[string]any)
	if lp == nil {
		t.Fatalf("choice has no logprobs: %v", choice)
	}
	var ids []int
	var lps []float64
	for i, tok := range lp["tokens"].([]any) {
		var id int
		if _, err := fmt.Sscanf(tok.(string), "token_id:%d", &id); err != nil {
			t.Fatalf("token %q is not token_id:N", tok)
		}
		ids = append(ids, id)
		if v, ok := lp["token_logprobs"].([]any)[i].(float64); ok {
			lps = append(lps, v)
		} else {
			lps = append(lps, math.NaN())
		}
	}
	return ids, lps
}

func choices(t *testing.T, resp map[string]any) []map[string]any {
	t.Helper()
	cs, ok := resp["choices"].([]any)
	if !ok {
		t.Fatalf("no choices in %v", resp)
	}
	out := make([]map[string]any, len(cs))
	for i, c := range cs {
		out[i] = c.(map[string]any)
	}
	return out
}

var prompt = []int{5, 17, 3, 88, 41, 9, 60, 12}

func TestGreedyCompletionEqualsTrainer(t *testing.T) {
	s := newTestServer(t, nil)
	code, resp := post(t, s.url+"/v1/completions", map[string]any{
		"model": "tiny", "prompt": prompt, "max_tokens": 10, "temperature": 0, "ignore_eos": true,
		"logprobs": 0, "return_tokens_as_token_ids": true,
	})
	if code != 200 {
		t.Fatalf("status %d: %v", code, resp)
	}
	ids, lps := completionIDs(t, choices(t, resp)[0])
	want, err := s.model.Greedy(prompt, 10, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(ids) != fmt.Sprint(want) {
		t.Fatalf("served %v, trainer greedy %v", ids, want)
	}
	// The reported log-probs are the model's own.
	full := append(append([]int(nil), prompt...), ids...)
	targets := append(append([]int(nil), full[1:]...), -1)
	tl, _ := s.model.TokenLogProbs(trainer.Input{IDs: [][]int{full}}, [][]int{targets})
	for k := range ids {
		if d := math.Abs(lps[k] - float64(tl[0][len(prompt)-1+k])); d > 1e-4 {
			t.Errorf("token %d log-prob %v, trainer %v", k, lps[k], tl[0][len(prompt)-1+k])
		}
	}
	if u := resp["usage"].(map[string]any); u["completion_tokens"].(float64) != 10 || u["prompt_tokens"].(float64) != float64(len(prompt)) {
		t.Errorf("usage %v", u)
	}
}

func TestSeededSamplingIsReproducible(t *testing.T) {
	s := newTestServer(t, nil)
	run := func(seed int) string {
		_, resp := post(t, s.url+"/v1/completions", map[string]any{
			"prompt": prompt, "max_tokens": 12, "temperature": 1.0, "seed": seed, "ignore_eos": true,
			"logprobs": 0, "return_tokens_as_token_ids": true, "n": 2,
		})
		cs := choices(t, resp)
		a, _ := completionIDs(t, cs[0])
		b, _ := completionIDs(t, cs[1])
		return fmt.Sprint(a, b)
	}
	a, b, c := run(7), run(7), run(8)
	if a != b {
		t.Errorf("seed 7 gave %s then %s", a, b)
	}
	if a == c {
		t.Errorf("seeds 7 and 8 gave the same samples %s", a)
	}
}

// TestDrawingInLibtorchKeepsSeededOutputs: the same seeded requests, with
// tokens drawn inside libtorch and on the host (HostSampling), give the
// same tokens, log-probs to float32 rounding, and the same alternatives:
// greedy, T = 1, tempered, several samples per prompt, top log-probs; a
// top-p request (drawn on the host either way) among them.
func TestDrawingInLibtorchKeepsSeededOutputs(t *testing.T) {
	// The tiny model's steps are below the size from which the server
	// draws inside libtorch: draw there at any size.
	saved := libtorchDrawLogits
	libtorchDrawLogits = 0
	t.Cleanup(func() { libtorchDrawLogits = saved })
	dev := newTestServer(t, nil)
	host := newTestServer(t, func(c *Config) { c.HostSampling = true })
	bodies := []map[string]any{
		{"temperature": 0, "logprobs": 3},
		{"temperature": 1.0, "seed": 7, "n": 3, "logprobs": 2},
		{"temperature": 0.6, "seed": 11, "n": 2, "logprobs": 0},
		{"temperature": 1.4, "seed": 12, "logprobs": 1},
		{"temperature": 1.0, "top_p": 0.8, "seed": 5, "n": 2, "logprobs": 0},
	}
	type result struct {
		ids []int
		lps []float64
		top []any
	}
	get := func(s *testServer, body map[string]any) []result {
		req := map[string]any{"prompt": prompt, "max_tokens": 16, "ignore_eos": true, "return_tokens_as_token_ids": true}
		for k, v := range body {
			req[k] = v
		}
		code, resp := post(t, s.url+"/v1/completions", req)
		if code != 200 {
			t.Fatalf("%v: status %d %v", body, code, resp)
		}
		var out []result
		for _, c := range choices(t, resp) {
			ids, lps := completionIDs(t, c)
			top, _ := c["logprobs"].(map[string]any)["top_logprobs"].([]any)
			out = append(out, result{ids, lps, top})
		}
		return out
	}
	// Concurrently, so that the requests share decode steps.
	var wg sync.WaitGroup
	got, want := make([][]result, len(bodies)), make([][]result, len(bodies))
	for i, b := range bodies {
		wg.Add(2)
		go func() { defer wg.Done(); got[i] = get(dev, b) }()
		go func() { defer wg.Done(); want[i] = get(host, b) }()
	}
	wg.Wait()
	for i, b := range bodies {
		for k := range want[i] {
			g, w := got[i][k], want[i][k]
			if fmt.Sprint(g.ids) != fmt.Sprint(w.ids) {
				t.Errorf("%v choice %d: drawn in libtorch %v, on the host %v", b, k, g.ids, w.ids)
				continue
			}
			for j := range w.lps {
				if math.Abs(g.lps[j]-w.lps[j]) > 1e-4 {
					t.Errorf("%v choice %d token %d: log-prob %v, on the host %v", b, k, j, g.lps[j], w.lps[j])
				}
			}
			if len(g.top) != len(w.top) {
				t.Errorf("%v choice %d: %d alternatives lists, on the host %d", b, k, len(g.top), len(w.top))
				continue
			}
			for j := range w.top {
				gm, _ := g.top[j].(map[string]any)
				wm, _ := w.top[j].(map[string]any)
				if len(gm) != len(wm) {
					t.Errorf("%v choice %d token %d: alternatives %v, on the host %v", b, k, j, gm, wm)
				}
				for id, wv := range wm {
					if gv, ok := gm[id].(float64); !ok || math.Abs(gv-wv.(float64)) > 1e-4 {
						t.Errorf("%v choice %d token %d: alternative %s %v, on the host %v", b, k, j, id, gm[id], wv)
					}
				}
			}
		}
	}
}

func TestEchoScoresPrompt(t *testing.T) {
	s := newTestServer(t, nil)
	code, resp := post(t, s.url+"/v1/completions", map[string]any{
		"prompt": [][]int{prompt, prompt[:5]}, "max_tokens": 0, "echo": true, "logprobs": 0, "return_tokens_as_token_ids": true,
	})
	if code != 200 {
		t.Fatalf("%d %v", code, resp)
	}
	cs := choices(t, resp)
	if len(cs) != 2 {
		t.Fatalf("%d choices", len(cs))
	}
	ids, lps := completionIDs(t, cs[0])
	if fmt.Sprint(ids) != fmt.Sprint(prompt) || !math.IsNaN(lps[0]) {
		t.Fatalf("echo ids %v first logprob %v", ids, lps[0])
	}
	targets := append(append([]int(nil), prompt[1:]...), -1)
	tl, _ := s.model.TokenLogProbs(trainer.Input{IDs: [][]int{prompt}}, [][]int{targets})
	for k := 1; k < len(prompt); k++ {
		if d := math.Abs(lps[k] - float64(tl[0][k-1])); d > 1e-4 {
			t.Errorf("prompt token %d: served %v, trainer %v", k, lps[k], tl[0][k-1])
		}
	}
	_, short := completionIDs(t, cs[1])
	if len(short) != 5 || math.Abs(short[4]-lps[4]) > 1e-5 {
		t.Errorf("batched scoring of a shorter prompt: %v vs %v", short, lps[:5])
	}
}

func readSSE(t *testing.T, url string, body any) ([]map[string]any, bool) {
	t.Helper()
	js, _ := json.Marshal(body)
	resp, err := http.Post(url, "application/json", bytes.NewReader(js))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("stream content type %q", ct)
	}
	var chunks []map[string]any
	done := false
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "data: ") {
			continue
		}
		data := strings.TrimPrefix(line, "data: ")
		if data == "[DONE]" {
			done = true
			continue
		}
		var c map[string]any
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			t.Fatalf("chunk %q: %v", data, err)
		}
		chunks = append(chunks, c)
	}
	return chunks, done
}

func TestChatStreamMatchesNonStream(t *testing.T) {
	s := newTestServer(t, nil)
	body := map[string]any{
		"model": "tiny", "messages": []map[string]any{{"role": "user", "content": "Your task is to: put a mug in the fridge."}},
		"max_tokens": 12, "temperature": 0, "logprobs": true, "top_logprobs": 2, "skip_special_tokens": false,
	}
	code, resp := post(t, s.url+"/v1/chat/completions", body)
	if code != 200 {
		t.Fatalf("%d %v", code, resp)
	}
	c := choices(t, resp)[0]
	want := c["message"].(map[string]any)["content"].(string)
	content := c["logprobs"].(map[string]any)["content"].([]any)
	if len(content) == 0 || len(content[0].(map[string]any)["top_logprobs"].([]any)) != 2 {
		t.Fatalf("chat logprobs %v", c["logprobs"])
	}
	body["stream"] = true
	chunks, done := readSSE(t, s.url+"/v1/chat/completions", body)
	if !done {
		t.Fatal("stream did not end with [DONE]")
	}
	var got strings.Builder
	finish := ""
	for _, ch := range chunks {
		cc := ch["choices"].([]any)[0].(map[string]any)
		if d, ok := cc["delta"].(map[string]any)["content"].(string); ok {
			got.WriteString(d)
		}
		if f, ok := cc["finish_reason"].(string); ok {
			finish = f
		}
	}
	if want == "" || got.String() != want || finish == "" {
		t.Errorf("stream text %q (finish %q), non-stream %q", got.String(), finish, want)
	}
}

func TestConcurrentRequestsAreBatched(t *testing.T) {
	s := newTestServer(t, func(c *Config) { c.PrefixCacheEntries = 0 })
	const n = 12
	var wg sync.WaitGroup
	got := make([]string, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			p := append([]int{i + 1}, prompt[:i%5+2]...)
			_, resp := post(t, s.url+"/v1/completions", map[string]any{
				"prompt": p, "max_tokens": 16, "temperature": 0, "ignore_eos": true, "logprobs": 0, "return_tokens_as_token_ids": true,
			})
			ids, _ := completionIDs(t, choices(t, resp)[0])
			want, _ := s.model.Greedy(p, 16, nil, false)
			if fmt.Sprint(ids) != fmt.Sprint(want) {
				got[i] = fmt.Sprintf("prompt %v: served %v, alone %v", p, ids, want)
			}
		}(i)
	}
	wg.Wait()
	for _, g := range got {
		if g != "" {
			t.Error(g)
		}
	}
	st := s.Engine().Stats()
	if st.DecodeSteps == 0 || float64(st.BatchedSeqs)/float64(st.DecodeSteps) <= 1.5 {
		t.Errorf("mean batch %.2f over %d decode steps: requests were not batched", float64(st.BatchedSeqs)/float64(st.DecodeSteps), st.DecodeSteps)
	}
	if st.PrefillBatches == 0 || st.PrefilledSeqs != n || st.PrefillBatches >= n {
		t.Errorf("%d prompts prefilled in %d forwards: want all %d, in fewer forwards than prompts", st.PrefilledSeqs, st.PrefillBatches, n)
	}
	t.Logf("%d prompts prefilled in %d forwards; mean decode batch %.1f", st.PrefilledSeqs, st.PrefillBatches, float64(st.BatchedSeqs)/float64(st.DecodeSteps))
}

// The n samples of one prompt are prefilled once and forked: at
// temperature 0 each is the trainer's greedy continuation, and at
// temperature 1 with a seed they differ from one another.
func TestSamplesOfOnePromptShareItsPrefill(t *testing.T) {
	s := newTestServer(t, func(c *Config) { c.PrefixCacheEntries = 0 })
	_, resp := post(t, s.url+"/v1/completions", map[string]any{
		"prompt": prompt, "n": 4, "max_tokens": 8, "temperature": 0, "ignore_eos": true, "logprobs": 0, "return_tokens_as_token_ids": true,
	})
	want, _ := s.model.Greedy(prompt, 8, nil, false)
	cs := choices(t, resp)
	if len(cs) != 4 {
		t.Fatalf("%d choices, want 4", len(cs))
	}
	for i, c := range cs {
		if ids, _ := completionIDs(t, c); fmt.Sprint(ids) != fmt.Sprint(want) {
			t.Errorf("sample %d: %v, greedy %v", i, ids, want)
		}
	}
	if st := s.Engine().Stats(); st.PrefilledSeqs != 1 || st.Requests != 4 {
		t.Errorf("4 samples of one prompt: %d prompts prefilled for %d sequences, want 1 for 4", st.PrefilledSeqs, st.Requests)
	}
	_, resp = post(t, s.url+"/v1/completions", map[string]any{
		"prompt": prompt, "n": 4, "max_tokens": 8, "temperature": 1, "seed": 3, "ignore_eos": true, "logprobs": 0, "return_tokens_as_token_ids": true,
	})
	seen := map[string]bool{}
	for _, c := range choices(t, resp) {
		ids, _ := completionIDs(t, c)
		seen[fmt.Sprint(ids)] = true
	}
	if len(seen) < 2 {
		t.Errorf("4 sampled continuations at temperature 1 are all alike: %v", seen)
	}
}

func TestPrefixReuse(t *testing.T) {
	s := newTestServer(t, nil)
	ask := func(p []int) ([]int, []float64, float64) {
		_, resp := post(t, s.url+"/v1/completions", map[string]any{
			"prompt": p, "max_tokens": 6, "temperature": 0, "ignore_eos": true, "logprobs": 0, "return_tokens_as_token_ids": true,
		})
		ids, lps := completionIDs(t, choices(t, resp)[0])
		cached := resp["usage"].(map[string]any)["prompt_tokens_details"].(map[string]any)["cached_tokens"].(float64)
		return ids, lps, cached
	}
	long := append(append([]int(nil), prompt...), prompt...)
	first, _, c0 := ask(long)
	turn2 := append(append(append([]int(nil), long...), first...), 7, 8, 9)
	ids, lps, c1 := ask(turn2)
	if c0 != 0 || c1 < float64(len(long)) {
		t.Errorf("cached tokens: first %v, second %v (want ≥ %d)", c0, c1, len(long))
	}
	want, _ := s.model.Greedy(turn2, 6, nil, false)
	if fmt.Sprint(ids) != fmt.Sprint(want) {
		t.Errorf("with a reused prefix: %v, from scratch %v", ids, want)
	}
	full := append(append([]int(nil), turn2...), ids...)
	targets := append(append([]int(nil), full[1:]...), -1)
	tl, _ := s.model.TokenLogProbs(trainer.Input{IDs: [][]int{full}}, [][]int{targets})
	if d := math.Abs(lps[0] - float64(tl[0][len(turn2)-1])); d > 1e-4 {
		t.Errorf("first log-prob after reuse %v, trainer %v", lps[0], tl[0][len(turn2)-1])
	}
}

func TestUpdateWeightsChangesWhatIsServed(t *testing.T) {
	s := newTestServer(t, nil)
	score := func() []float64 {
		_, resp := post(t, s.url+"/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 0, "echo": true, "logprobs": 0, "return_tokens_as_token_ids": true})
		_, lps := completionIDs(t, choices(t, resp)[0])
		return lps
	}
	before := score()
	dir2 := filepath.Join(t.TempDir(), "v2")
	m2 := writeTiny(t, dir2, 99)
	code, resp := post(t, s.url+"/update_weights_from_disk", map[string]any{"model_path": dir2, "weight_version": "v2"})
	if code != 200 || resp["success"] != true {
		t.Fatalf("update: %d %v", code, resp)
	}
	after := score()
	targets := append(append([]int(nil), prompt[1:]...), -1)
	tl, _ := m2.TokenLogProbs(trainer.Input{IDs: [][]int{prompt}}, [][]int{targets})
	changed := false
	for k := 1; k < len(prompt); k++ {
		if math.Abs(after[k]-before[k]) > 1e-3 {
			changed = true
		}
		if d := math.Abs(after[k] - float64(tl[0][k-1])); d > 1e-4 {
			t.Errorf("after publish, token %d scores %v; the new weights give %v", k, after[k], tl[0][k-1])
		}
	}
	if !changed {
		t.Error("log-probs did not change after publishing different weights")
	}
	r, _ := http.Get(s.url + "/v1/models")
	var models map[string]any
	json.NewDecoder(r.Body).Decode(&models)
	r.Body.Close()
	if v := models["data"].([]any)[0].(map[string]any)["weight_version"]; v != "v2" || r.Header.Get("X-Weight-Version") != "v2" {
		t.Errorf("weight version %v, header %q", v, r.Header.Get("X-Weight-Version"))
	}
	code, resp = post(t, s.url+"/update_weights_from_disk", map[string]any{"model_path": filepath.Join(dir2, "nope")})
	if code != 400 || resp["success"] != false {
		t.Errorf("bad model_path: %d %v", code, resp)
	}
}

func TestBadRequests(t *testing.T) {
	s := newTestServer(t, nil)
	long := make([]int, 600)
	tests := []struct {
		path   string
		body   any
		status int
		want   string
	}{
		{"/v1/completions", `{"prompt": [1,2`, 400, "malformed JSON"},
		{"/v1/completions", map[string]any{"model": "gpt-4", "prompt": "hi"}, 404, "does not exist"},
		{"/v1/completions", map[string]any{"prompt": long}, 400, "maximum context length"},
		{"/v1/completions", map[string]any{"prompt": "hi", "temperature": -1}, 400, "temperature"},
		{"/v1/completions", map[string]any{"prompt": "hi", "top_p": 0}, 400, "top_p"},
		{"/v1/completions", map[string]any{"prompt": "hi", "n": 0}, 400, "n must be"},
		{"/v1/completions", map[string]any{"prompt": "hi", "logprobs": 99}, 400, "logprobs"},
		{"/v1/completions", map[string]any{"prompt": []int{1, 99999}}, 400, "outside the vocabulary"},
		{"/v1/completions", map[string]any{"prompt": 5}, 400, "prompt must be"},
		{"/v1/completions", map[string]any{"max_tokens": 3}, 400, "prompt is required"},
		{"/v1/completions", map[string]any{"prompt": "hi", "max_tokens": -2}, 400, "max_tokens"},
		{"/v1/completions", map[string]any{"prompt": "hi", "stop": 3}, 400, "stop"},
		{"/v1/chat/completions", map[string]any{"messages": []any{}}, 400, "messages"},
		{"/v1/chat/completions", map[string]any{"messages": []map[string]any{{"role": "wizard", "content": "x"}}}, 400, "role"},
		{"/v1/chat/completions", map[string]any{"messages": []map[string]any{{"role": "user", "content": "x"}}, "top_logprobs": 3}, 400, "logprobs"},
		{"/v1/nothing", map[string]any{}, 404, "no route"},
	}
	for _, tt := range tests {
		code, resp := post(t, s.url+tt.path, tt.body)
		e, _ := resp["error"].(map[string]any)
		if code != tt.status || e == nil || !strings.Contains(fmt.Sprint(e["message"]), tt.want) {
			t.Errorf("%s %v: %d %v; want %d mentioning %q", tt.path, tt.body, code, resp, tt.status, tt.want)
		}
	}
	// Still serving.
	if code, resp := post(t, s.url+"/v1/completions", map[string]any{"prompt": "hi", "max_tokens": 2}); code != 200 {
		t.Fatalf("after bad requests: %d %v", code, resp)
	}
}

func TestAPIKey(t *testing.T) {
	s := newTestServer(t, func(c *Config) { c.APIKey = "sekret" })
	if code, _ := post(t, s.url+"/v1/completions", map[string]any{"prompt": "hi", "max_tokens": 1}); code != 401 {
		t.Errorf("no key: %d", code)
	}
	if code, _ := post(t, s.url+"/v1/completions", map[string]any{"prompt": "hi", "max_tokens": 1}, "Authorization", "Bearer wrong"); code != 401 {
		t.Errorf("wrong key: %d", code)
	}
	if code, resp := post(t, s.url+"/v1/completions", map[string]any{"prompt": "hi", "max_tokens": 1}, "Authorization", "Bearer sekret"); code != 200 {
		t.Errorf("right key: %d %v", code, resp)
	}
	if r, err := http.Get(s.url + "/health"); err != nil || r.StatusCode != 200 {
		t.Errorf("health needs no key: %v %v", r, err)
	}
}

// TestInFlightRequestKeepsItsWeights: a generation that started before a
// weight update finishes on the weights it started with.
func TestInFlightRequestKeepsItsWeights(t *testing.T) {
	s := newTestServer(t, nil)
	ctx := context.Background()
	// A one-slot channel read slowly keeps the sequence in flight while the
	// swap happens.
	j := &genJob{ctx: ctx, prompt: prompt, maxTokens: 40, ignoreEOS: true, events: make(chan genEvent, 1), params: samplingParams{Temperature: 0}}
	if err := s.eng.submit(ctx, j); err != nil {
		t.Fatal(err)
	}
	dir2 := filepath.Join(t.TempDir(), "v2")
	m2 := writeTiny(t, dir2, 77)
	swapped := make(chan error, 1)
	go func() { swapped <- s.eng.Swap(ctx, dir2, "v2") }()
	var gen []int
	swapAt := -1
	for ev := range j.events {
		if swapAt < 0 {
			select {
			case err := <-swapped:
				if err != nil {
					t.Fatal(err)
				}
				swapAt = len(gen)
			default:
			}
		}
		if ev.done {
			if ev.err != nil || ev.snap.version != "0" {
				t.Fatalf("end %+v (version %q)", ev, ev.snap.version)
			}
			break
		}
		gen = append(gen, ev.tok.ID)
		time.Sleep(5 * time.Millisecond)
	}
	if swapAt < 0 {
		if err := <-swapped; err != nil {
			t.Fatal(err)
		}
	}
	if swapAt < 0 || swapAt >= 39 {
		t.Fatalf("the swap landed after token %d of 40: the test did not overlap them", swapAt)
	}
	t.Logf("weights swapped after token %d of 40", swapAt)
	if len(gen) != 40 {
		t.Fatalf("%d tokens", len(gen))
	}
	want, _ := s.model.Greedy(prompt, 40, nil, false)
	if fmt.Sprint(gen) != fmt.Sprint(want) {
		t.Errorf("in-flight generation changed after the swap:\n got %v\nold %v", gen, want)
	}
	// New requests see the new weights.
	_, resp := post(t, s.url+"/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 5, "temperature": 0, "ignore_eos": true, "logprobs": 0, "return_tokens_as_token_ids": true})
	ids, _ := completionIDs(t, choices(t, resp)[0])
	want2, _ := m2.Greedy(prompt, 5, nil, false)
	if fmt.Sprint(ids) != fmt.Sprint(want2) {
		t.Errorf("after the swap: %v, new weights give %v", ids, want2)
	}
}

// A request with more sequences than the batch holds waits in the
// engine's queue: no decode step runs more than MaxBatch of them, none
// is admitted more than MaxPrefills at a time, and every one finishes as
// if alone.
func TestSequencesBeyondTheBatchWait(t *testing.T) {
	s := newTestServer(t, func(c *Config) { c.MaxBatch, c.MaxPrefills, c.PrefixCacheEntries = 3, 2, 0 })
	var mu sync.Mutex
	widest := 0
	testHookAfterGrouping = func(e *Engine) {
		mu.Lock()
		widest = max(widest, len(e.active))
		mu.Unlock()
	}
	defer func() { testHookAfterGrouping = nil }()
	_, resp := post(t, s.url+"/v1/completions", map[string]any{
		"prompt": prompt, "n": 7, "max_tokens": 6, "temperature": 0, "ignore_eos": true, "logprobs": 0, "return_tokens_as_token_ids": true,
	})
	testHookAfterGrouping = nil
	want, _ := s.model.Greedy(prompt, 6, nil, false)
	cs := choices(t, resp)
	if len(cs) != 7 {
		t.Fatalf("%d choices, want 7", len(cs))
	}
	for i, c := range cs {
		if ids, _ := completionIDs(t, c); fmt.Sprint(ids) != fmt.Sprint(want) {
			t.Errorf("sample %d: %v, greedy %v", i, ids, want)
		}
	}
	st := s.Engine().Stats()
	mu.Lock()
	defer mu.Unlock()
	if widest > 3 || widest < 2 {
		t.Errorf("widest decode batch %d, want 2 or 3 (MaxBatch 3)", widest)
	}
	// At most two admitted at a time, each admission's samples sharing one
	// prefill: at least 4 prefills for 7 sequences, and fewer than 7 (the
	// batch's first two went together).
	if st.PrefilledSeqs < 4 || st.PrefilledSeqs > 6 || st.Requests != 7 {
		t.Errorf("%d prompts prefilled for %d sequences, want 4 to 6 for 7 (MaxPrefills 2, MaxBatch 3)", st.PrefilledSeqs, st.Requests)
	}
}

// Closing the engine ends the sequences still queued behind a full batch
// with ErrClosed, as it ends the ones decoding.
func TestCloseEndsQueuedSequences(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tiny")
	writeTiny(t, dir, 1)
	cfg := DefaultConfig(dir)
	cfg.MaxBatch, cfg.MaxPrefills = 1, 1
	e, err := NewEngine(cfg, zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	js := make([]*genJob, 3)
	for i := range js {
		js[i] = &genJob{ctx: ctx, prompt: prompt, maxTokens: 1 << 20, ignoreEOS: true, events: make(chan genEvent, 1<<16), params: samplingParams{Temperature: 0}}
	}
	// The engine holds in its first decode step until Close: the first
	// sequence is decoding, the others are queued.
	inStep := make(chan struct{})
	var once sync.Once
	testHookAfterGrouping = func(e *Engine) {
		once.Do(func() { close(inStep) })
		<-e.quit
	}
	defer func() { testHookAfterGrouping = nil }()
	if err := e.submit(ctx, js...); err != nil {
		t.Fatal(err)
	}
	<-inStep
	e.Close()
	for i, j := range js {
		var end *genEvent
		for end == nil {
			select {
			case ev := <-j.events:
				if ev.done {
					end = &ev
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("sequence %d: no end after Close", i)
			}
		}
		if !errors.Is(end.err, ErrClosed) {
			t.Errorf("sequence %d ended with %v, want ErrClosed", i, end.err)
		}
	}
}

// A weight update lands while the batch is full: the engine takes it
// between decode steps instead of after the batch drains.
func TestSwapLandsWhileTheBatchIsFull(t *testing.T) {
	s := newTestServer(t, func(c *Config) { c.MaxBatch = 1 })
	dir2 := filepath.Join(t.TempDir(), "v2")
	writeTiny(t, dir2, 77)
	ctx := context.Background()
	var mu sync.Mutex
	steps, swappedAt := 0, -1
	testHookAfterGrouping = func(e *Engine) {
		mu.Lock()
		defer mu.Unlock()
		steps++
		if swappedAt < 0 && e.current.version == "v2" {
			swappedAt = steps
		}
		time.Sleep(time.Millisecond) // room for the swap to arrive
	}
	defer func() { testHookAfterGrouping = nil }()
	j := &genJob{ctx: ctx, prompt: prompt, maxTokens: 400, ignoreEOS: true, events: make(chan genEvent, 1024), params: samplingParams{Temperature: 0}}
	if err := s.eng.submit(ctx, j); err != nil {
		t.Fatal(err)
	}
	<-j.events // decoding
	swapped := make(chan error, 1)
	go func() { swapped <- s.eng.Swap(ctx, dir2, "v2") }()
	for ev := range j.events {
		if ev.done {
			break
		}
	}
	if err := <-swapped; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if swappedAt < 0 {
		t.Fatalf("the swap waited for the full batch's %d decode steps to end", steps)
	}
	t.Logf("swapped before decode step %d of %d", swappedAt, steps)
}

// A web page the user visits cannot drive the server: a text/plain POST
// (sendable cross-site without a preflight), a foreign Origin, and a
// rebound Host on a loopback server are refused before any work; a
// client's own requests pass.
func TestRefusesCrossSiteRequests(t *testing.T) {
	s := newTestServer(t, nil)
	base := s.url
	port := base[strings.LastIndex(base, ":")+1:]
	body := `{"model_path": "/tmp/elsewhere"}`
	send := func(ct, host, origin string) int {
		req, _ := http.NewRequest("POST", base+"/update_weights_from_disk", strings.NewReader(body))
		if ct != "" {
			req.Header.Set("Content-Type", ct)
		}
		if host != "" {
			req.Host = host
		}
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, c := range []struct {
		name, ct, host, origin string
		want                   int
	}{
		{"text/plain from a page", "text/plain", "", "", http.StatusUnsupportedMediaType},
		{"no content type", "", "", "", http.StatusUnsupportedMediaType},
		{"a rebound host name", "application/json", "attacker.example:80", "", http.StatusForbidden},
		{"a foreign origin", "application/json", "", "http://attacker.example", http.StatusForbidden},
	} {
		if got := send(c.ct, c.host, c.origin); got != c.want {
			t.Errorf("%s: HTTP %d, want %d", c.name, got, c.want)
		}
	}
	// A client's own: JSON, addressed to the loopback server (the folder
	// does not exist, so the answer is the server's refusal of it, not 403/415).
	if got := send("application/json; charset=utf-8", "", ""); got == http.StatusForbidden || got == http.StatusUnsupportedMediaType {
		t.Errorf("a client's JSON request was refused as cross-site (HTTP %d)", got)
	}
	if got := send("application/json", "localhost:"+port, "http://localhost:"+port); got == http.StatusForbidden {
		t.Error("a same-origin request naming localhost was refused")
	}
}

// Request fields: a field this server does not implement is refused by
// name, never ignored (OpenAI's and vLLM's extensions included), but for
// no-op values of vLLM's sampling extensions and the end-user id.
func TestUnimplementedFieldsAreRefusedByName(t *testing.T) {
	ts := newTestServer(t, nil)
	base := func(extra map[string]any) map[string]any {
		b := map[string]any{"prompt": []int{1, 2, 3}, "max_tokens": 1}
		for k, v := range extra {
			b[k] = v
		}
		return b
	}
	for _, tc := range []struct {
		extra map[string]any
		field string // "" : accepted
	}{
		{map[string]any{"min_p": 0.1}, "min_p"},
		{map[string]any{"repetition_penalty": 1.3}, "repetition_penalty"},
		{map[string]any{"functions": []any{map[string]any{"name": "f"}}}, "functions"},
		{map[string]any{"function_call": "auto"}, "function_call"},
		{map[string]any{"reasoning_effort": "low"}, "reasoning_effort"},
		{map[string]any{"guided_json": map[string]any{}}, "guided_json"},
		{map[string]any{"min_p": 0, "repetition_penalty": 1, "user": "u-1"}, ""},
	} {
		code, out := post(t, ts.url+"/v1/completions", base(tc.extra))
		if tc.field == "" {
			if code != 200 {
				t.Errorf("%v: %d %v, want 200", tc.extra, code, out)
			}
			continue
		}
		e, _ := out["error"].(map[string]any)
		if code != 400 || e == nil || e["param"] != tc.field || !strings.Contains(fmt.Sprint(e["message"]), tc.field) {
			t.Errorf("%v: %d %v, want 400 naming %s", tc.extra, code, out, tc.field)
		}
	}
	code, out := post(t, ts.url+"/v1/chat/completions", map[string]any{"messages": []map[string]string{{"role": "user", "content": "hi"}}, "max_tokens": 1, "reasoning_effort": "high"})
	if e, _ := out["error"].(map[string]any); code != 400 || e == nil || e["param"] != "reasoning_effort" {
		t.Errorf("chat with reasoning_effort: %d %v", code, out)
	}
}

// A lone UTF-16 surrogate escape is refused (Go's decoder would make it
// U+FFFD silently); a surrogate pair is a character and passes.
func TestLoneSurrogateEscapesAreRefused(t *testing.T) {
	ts := newTestServer(t, nil)
	for body, ok := range map[string]bool{
		`{"prompt":"a\ud800b","max_tokens":1}`:         false,
		`{"prompt":"a\udc00","max_tokens":1}`:          false,
		`{"prompt":"\ud83d\ude00 ok","max_tokens":1}`:  true,
		`{"prompt":"a\\ud800 is text","max_tokens":1}`: true, // an escaped backslash, then text
	} {
		code, out := post(t, ts.url+"/v1/completions", body)
		if ok && code != 200 || !ok && (code != 400 || !strings.Contains(fmt.Sprint(out), "surrogate")) {
			t.Errorf("%s: %d %v", body, code, out)
		}
	}
	code, out := post(t, ts.url+"/generate", `{"input_ids":[1,2],"sampling_params":{"max_new_tokens":1,"stop":"\udfff"}}`)
	if code != 400 || !strings.Contains(fmt.Sprint(out), "surrogate") {
		t.Errorf("/generate with a lone surrogate: %d %v", code, out)
	}
}

// A max_tokens so large that prompt + completion overflows is refused
// with the numbers as sent, never a negative total.
func TestHugeMaxTokensErrorHasNoOverflow(t *testing.T) {
	ts := newTestServer(t, nil)
	code, out := post(t, ts.url+"/v1/completions", `{"prompt":[1,2,3],"max_tokens":9223372036854775807}`)
	msg := fmt.Sprint(out)
	if code != 400 || !strings.Contains(msg, "9223372036854775807") || strings.Contains(msg, "-9223372036854775") {
		t.Errorf("%d %s", code, msg)
	}
}

func TestTopLevelKeys(t *testing.T) {
	body := `{"a":1, "b" : {"c":2,"d":[{"e":3}]}, "f\"g":"h:\"i\"", "j":["k:"]}`
	got := strings.Join(topLevelKeys([]byte(body)), ",")
	if got != `a,b,f"g,j` {
		t.Errorf("keys %q", got)
	}
}
