package inference

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/seedctl/seedctl/inference/vllmfake"
)

func testLog(t *testing.T) zerolog.Logger {
	return zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
}

// fakeServer records every call and answers like vLLM/SGLang would.
type fakeServer struct {
	mu    sync.Mutex
	calls []string // "METHOD path body"
	// fail makes the first n calls to a path answer with a status.
	failPath   string
	failStatus int
	failN      int
	stale      bool // score with the old weights after publish
	published  bool
	// sleeping: vLLM's sleep mode (POST /sleep until POST
	// /wake_up?tags=kv_cache), reported by GET /is_sleeping; generation
	// and scoring answer 503 meanwhile, as vLLM's protected endpoints do.
	sleeping     bool
	noIsSleeping bool // GET /is_sleeping answers 404 (vLLM outside dev mode)
	updateOK     bool
	srv          *httptest.Server
}

func newFake(t *testing.T) *fakeServer {
	f := &fakeServer{updateOK: true}
	f.srv = httptest.NewServer(http.HandlerFunc(f.handle))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeServer) log() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

// completion answers /v1/completions: generation returns token ids 7, 8, 9
// with log-probs -0.5 each; echo scoring returns -1 (or -2 once published
// and not stale) for every prompt token.
func (f *fakeServer) completion(w http.ResponseWriter, body map[string]any) {
	prompts := [][]any{}
	switch p := body["prompt"].(type) {
	case []any:
		if len(p) > 0 {
			if _, nested := p[0].([]any); nested {
				for _, x := range p {
					prompts = append(prompts, x.([]any))
				}
			} else {
				prompts = append(prompts, p)
			}
		}
	}
	var choices []map[string]any
	for i, p := range prompts {
		var toks []string
		var lps []any
		if body["echo"] == true {
			v := -1.0
			if f.published && !f.stale {
				v = -2.0
			}
			for k, id := range p {
				toks = append(toks, fmt.Sprintf("token_id:%d", int(id.(float64))))
				if k == 0 {
					lps = append(lps, nil)
				} else {
					lps = append(lps, v)
				}
			}
		}
		if body["echo"] != true || body["max_tokens"].(float64) > 0 {
			for _, id := range []int{7, 8, 9} {
				toks = append(toks, fmt.Sprintf("token_id:%d", id))
				lps = append(lps, -0.5)
			}
		}
		choices = append(choices, map[string]any{"index": i, "text": "abc", "finish_reason": "length",
			"logprobs": map[string]any{"tokens": toks, "token_logprobs": lps}})
	}
	json.NewEncoder(w).Encode(map[string]any{"choices": choices, "usage": map[string]any{"prompt_tokens_details": map[string]any{"cached_tokens": 2}}})
}

// SGLang's /generate fields (GenerateReqInput) and sampling parameters
// (SamplingParams), from its sampling_params reference: a request with
// any other field is refused, as SGLang's dataclasses refuse them.
var (
	sglangFields   = map[string]bool{"text": true, "input_ids": true, "input_embeds": true, "image_data": true, "sampling_params": true, "rid": true, "return_logprob": true, "logprob_start_len": true, "top_logprobs_num": true, "return_text_in_logprobs": true, "stream": true, "lora_path": true}
	sglangSampling = map[string]bool{"max_new_tokens": true, "stop": true, "stop_token_ids": true, "temperature": true, "top_p": true, "top_k": true, "min_p": true, "frequency_penalty": true, "presence_penalty": true, "repetition_penalty": true, "min_new_tokens": true, "ignore_eos": true, "skip_special_tokens": true, "no_stop_trim": true, "n": true}
)

// generate answers SGLang's /generate like SGLang: generation samples
// 7, 8, 9 at log-prob -0.5; with logprob_start_len 0 every prompt token
// gets a log-prob (null for the first; -1, or -2 once published and not
// stale); a batch of input_ids gets a list of answers.
func (f *fakeServer) generate(w http.ResponseWriter, body map[string]any) {
	for k := range body {
		if !sglangFields[k] {
			w.WriteHeader(400)
			fmt.Fprintf(w, `{"error": {"message": "GenerateReqInput has no field %s"}}`, k)
			return
		}
	}
	sp, _ := body["sampling_params"].(map[string]any)
	for k := range sp {
		if !sglangSampling[k] {
			w.WriteHeader(400)
			fmt.Fprintf(w, `{"error": {"message": "SamplingParams has no field %s"}}`, k)
			return
		}
	}
	one := func(p []any) map[string]any {
		meta := map[string]any{"finish_reason": map[string]any{"type": "length", "length": 3}, "cached_tokens": 2, "prompt_tokens": len(p)}
		var out [][]any
		for _, id := range []int{7, 8, 9} {
			out = append(out, []any{-0.5, id, nil})
		}
		meta["output_token_logprobs"] = out
		if start, _ := body["logprob_start_len"].(float64); start == 0 {
			v := -1.0
			if f.published && !f.stale {
				v = -2.0
			}
			var in [][]any
			for k, id := range p {
				if k == 0 {
					in = append(in, []any{nil, id, nil})
				} else {
					in = append(in, []any{v, id, nil})
				}
			}
			meta["input_token_logprobs"] = in
		}
		return map[string]any{"text": "abc", "output_ids": []int{7, 8, 9}, "meta_info": meta}
	}
	ids, _ := body["input_ids"].([]any)
	if len(ids) > 0 {
		if _, nested := ids[0].([]any); nested {
			var outs []map[string]any
			for _, p := range ids {
				outs = append(outs, one(p.([]any)))
			}
			json.NewEncoder(w).Encode(outs)
			return
		}
	}
	json.NewEncoder(w).Encode(one(ids))
}

func (f *fakeServer) handle(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	path := r.URL.Path
	if r.URL.RawQuery != "" {
		path += "?" + r.URL.RawQuery
	}
	f.mu.Lock()
	f.calls = append(f.calls, strings.TrimSpace(r.Method+" "+path+" "+string(raw)))
	fail := f.failPath == r.URL.Path && f.failN > 0
	if fail {
		f.failN--
	}
	f.mu.Unlock()
	if fail {
		w.WriteHeader(f.failStatus)
		fmt.Fprintf(w, `{"error": {"message": "injected failure %d"}}`, f.failStatus)
		return
	}
	var body map[string]any
	json.Unmarshal(raw, &body)
	f.mu.Lock()
	sleeping, noIsSleeping := f.sleeping, f.noIsSleeping
	switch path {
	case "/sleep?level=2":
		f.sleeping = true
	case "/wake_up?tags=kv_cache":
		f.sleeping = false
	}
	f.mu.Unlock()
	switch r.URL.Path {
	case "/health":
	case "/is_sleeping":
		if noIsSleeping {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintf(w, `{"is_sleeping": %v}`, sleeping)
	case "/v1/completions":
		// vLLM 0.32 holds requests while asleep (recordings 43, 62):
		// answered once woken, or never.
		for sleeping {
			select {
			case <-r.Context().Done():
				return
			case <-time.After(5 * time.Millisecond):
			}
			f.mu.Lock()
			sleeping = f.sleeping
			f.mu.Unlock()
		}
		f.completion(w, body)
	case "/generate":
		f.generate(w, body)
	case "/update_weights_from_disk":
		f.published = true
		json.NewEncoder(w).Encode(map[string]any{"success": f.updateOK, "message": "ok or not"})
	case "/collective_rpc", "/v1/load_lora_adapter":
		f.published = true
		fmt.Fprint(w, `{}`)
	default:
		fmt.Fprint(w, `{}`)
	}
}

func TestGenerateAndScoreParseTokenIDs(t *testing.T) {
	f := newFake(t)
	cfg := DefaultConfig("vllm")
	cfg.BaseURL, cfg.Model = f.srv.URL, "policy"
	b, err := NewRemote(cfg, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	seed := int64(3)
	res, err := b.Generate(context.Background(), []GenRequest{{Prompt: []int{1, 2}, MaxTokens: 3, Seed: &seed}, {Prompt: []int{4}, MaxTokens: 3, IgnoreEOS: true}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 || fmt.Sprint(res[0].IDs) != "[7 8 9]" || res[0].LogProbs[2] != -0.5 || res[0].CachedTokens != 2 {
		t.Fatalf("results %+v", res)
	}
	sc, err := b.Score(context.Background(), [][]int{{1, 2, 3}, {4, 5}})
	if err != nil {
		t.Fatal(err)
	}
	if !math.IsNaN(sc[0][0]) || sc[0][2] != -1 || len(sc[1]) != 2 {
		t.Fatalf("scores %v", sc)
	}
	var gen, noEOS map[string]any
	for _, c := range f.log() {
		if strings.HasPrefix(c, "POST /v1/completions") && strings.Contains(c, `"seed":3`) {
			json.Unmarshal([]byte(strings.TrimPrefix(c, "POST /v1/completions ")), &gen)
		}
		if strings.HasPrefix(c, "POST /v1/completions") && strings.Contains(c, `"prompt":[4]`) {
			json.Unmarshal([]byte(strings.TrimPrefix(c, "POST /v1/completions ")), &noEOS)
		}
	}
	if gen["return_tokens_as_token_ids"] != true || gen["logprobs"].(float64) != 0 || gen["model"] != "policy" {
		t.Errorf("generation request %v", gen)
	}
	if _, ok := gen["ignore_eos"]; ok || noEOS["ignore_eos"] != true {
		t.Errorf("ignore_eos: %v in a request without IgnoreEOS, %v with it", gen["ignore_eos"], noEOS["ignore_eos"])
	}
}

func TestVLLMReloadPublishSequence(t *testing.T) {
	f := newFake(t)
	served := t.TempDir()
	newCkpt := t.TempDir()
	os.WriteFile(filepath.Join(served, "model-00001-of-00002.safetensors"), []byte("old"), 0o644)
	os.WriteFile(filepath.Join(served, "model.safetensors.index.json"), []byte("{}"), 0o644)
	if err := vllmfake.WriteCheckpoint(newCkpt, vllmfake.CheckpointSpec{Seed: 2, Optimizer: true}); err != nil {
		t.Fatal(err)
	}

	cfg := DefaultConfig("vllm")
	cfg.BaseURL, cfg.Model, cfg.ServedDir, cfg.Colocated = f.srv.URL, "policy", served, true
	b, _ := NewRemote(cfg, testLog(t))
	ctx := context.Background()
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Publish(ctx, newCkpt, "v1"); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"POST /sleep?level=2",
		"POST /wake_up?tags=weights",
		`POST /collective_rpc {"method":"reload_weights"}`,
		"POST /wake_up?tags=kv_cache",
		"POST /reset_prefix_cache",
	}
	if got := f.log(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("vLLM calls:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	want0, _ := os.ReadFile(filepath.Join(newCkpt, "model.safetensors"))
	if b, _ := os.ReadFile(filepath.Join(served, "model.safetensors")); string(b) != string(want0) {
		t.Errorf("served folder holds %d bytes of weights, not the checkpoint's %d", len(b), len(want0))
	}
	for _, gone := range []string{"model-00001-of-00002.safetensors", "model.safetensors.index.json", "optimizer.safetensors"} {
		if _, err := os.Stat(filepath.Join(served, gone)); err == nil {
			t.Errorf("stale %s left in the served folder", gone)
		}
	}
	// Not released: publish goes straight to reload.
	f.mu.Lock()
	f.calls = nil
	f.mu.Unlock()
	if err := b.Publish(ctx, newCkpt, "v2"); err != nil {
		t.Fatal(err)
	}
	if got := f.log(); len(got) != 2 || !strings.HasPrefix(got[0], "POST /collective_rpc") {
		t.Errorf("publish without release: %v", got)
	}
}

// A colocated vLLM left asleep by an earlier process (put to sleep before
// an update, then the process died) answers generation with 503s. A new
// backend does not know; its first publish asks GET /is_sleeping and
// wakes the server. Later publishes do not ask again.
func TestVLLMFirstPublishWakesAServerLeftAsleep(t *testing.T) {
	cases := []struct {
		name         string
		asleep       bool
		noIsSleeping bool
		failStatus   int
		want         []string
		wantErr      string
	}{
		{name: "asleep", asleep: true, want: []string{
			"GET /is_sleeping",
			"POST /wake_up?tags=weights",
			`POST /collective_rpc {"method":"reload_weights"}`,
			"POST /wake_up?tags=kv_cache",
			"POST /reset_prefix_cache",
		}},
		{name: "awake", want: []string{
			"GET /is_sleeping",
			`POST /collective_rpc {"method":"reload_weights"}`,
			"POST /reset_prefix_cache",
		}},
		{name: "no is_sleeping endpoint", noIsSleeping: true, want: []string{
			"GET /is_sleeping",
			`POST /collective_rpc {"method":"reload_weights"}`,
			"POST /reset_prefix_cache",
		}},
		{name: "is_sleeping fails", failStatus: 400, want: []string{"GET /is_sleeping"},
			wantErr: "asking vLLM whether it is asleep"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t)
			f.sleeping, f.noIsSleeping = tc.asleep, tc.noIsSleeping
			if tc.failStatus != 0 {
				f.failPath, f.failStatus, f.failN = "/is_sleeping", tc.failStatus, 1
			}
			served := t.TempDir()
			cfg := DefaultConfig("vllm")
			cfg.BaseURL, cfg.Model, cfg.ServedDir, cfg.Colocated = f.srv.URL, "policy", served, true
			cfg.RetryFor = 200 * time.Millisecond
			b, err := NewRemote(cfg, testLog(t))
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			err = b.Publish(ctx, served, "v1")
			if got := f.log(); strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Fatalf("vLLM calls:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("publish error %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if _, err := b.Generate(ctx, []GenRequest{{Prompt: []int{1}, MaxTokens: 3}}); err != nil {
				t.Fatalf("generation after the publish: %v", err)
			}
			// The state is known now: the next publish does not ask.
			f.mu.Lock()
			f.calls = nil
			f.mu.Unlock()
			if err := b.Publish(ctx, served, "v2"); err != nil {
				t.Fatal(err)
			}
			if got := f.log(); len(got) != 2 || !strings.HasPrefix(got[0], "POST /collective_rpc") {
				t.Errorf("second publish: %v", got)
			}
		})
	}
}

func TestVLLMLoRAPublish(t *testing.T) {
	f := newFake(t)
	a1, a2 := t.TempDir(), t.TempDir()
	for _, d := range []string{a1, a2} {
		os.WriteFile(filepath.Join(d, "adapter_config.json"), []byte(`{}`), 0o644)
	}
	cfg := DefaultConfig("vllm")
	cfg.BaseURL, cfg.Model, cfg.VLLMPublish = f.srv.URL, "base", "lora"
	b, _ := NewRemote(cfg, testLog(t))
	ctx := context.Background()
	if err := b.Publish(ctx, a1, "step-1"); err != nil {
		t.Fatal(err)
	}
	b.Generate(ctx, []GenRequest{{Prompt: []int{1}, MaxTokens: 1}})
	if err := b.Publish(ctx, a2, "step-2"); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(f.log(), "\n")
	for _, w := range []string{
		`POST /v1/load_lora_adapter {"load_inplace":true,"lora_name":"step-1","lora_path":"` + a1 + `"}`,
		`"model":"step-1"`,
		`POST /v1/load_lora_adapter {"load_inplace":true,"lora_name":"step-2","lora_path":"` + a2 + `"}`,
		`POST /v1/unload_lora_adapter {"lora_name":"step-1"}`,
	} {
		if !strings.Contains(got, w) {
			t.Errorf("calls lack %s:\n%s", w, got)
		}
	}
	if err := b.Publish(ctx, t.TempDir(), "step-3"); err == nil || !strings.Contains(err.Error(), "adapter_config.json") {
		t.Errorf("publishing a non-adapter: %v", err)
	}
}

func TestSGLangPublishSequence(t *testing.T) {
	f := newFake(t)
	cfg := DefaultConfig("sglang")
	cfg.BaseURL, cfg.Colocated = f.srv.URL, true
	b, _ := NewRemote(cfg, testLog(t))
	ctx := context.Background()
	b.Release(ctx)
	ckpt := t.TempDir()
	if err := vllmfake.WriteCheckpoint(ckpt, vllmfake.CheckpointSpec{Seed: 7, Optimizer: true}); err != nil {
		t.Fatal(err)
	}
	if err := b.Publish(ctx, ckpt, "7"); err != nil {
		t.Fatal(err)
	}
	// SGLang loads every *.safetensors of model_path: it is given a served
	// copy (the model's files only), never the checkpoint folder.
	served := b.(*sglangBackend).scratch
	want := []string{
		`POST /release_memory_occupation {"tags":["kv_cache","weights"]}`,
		`POST /resume_memory_occupation {"tags":["weights"]}`,
		`POST /update_weights_from_disk {"flush_cache":true,"model_path":"` + served + `","weight_version":"7"}`,
		`POST /resume_memory_occupation {"tags":["kv_cache"]}`,
	}
	if got := f.log(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("SGLang calls:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if _, err := os.Stat(filepath.Join(served, "optimizer.safetensors")); err == nil {
		t.Error("the optimizer state was published to SGLang")
	}
	f.updateOK = false
	if err := b.Publish(ctx, ckpt, "8"); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Errorf("refused update: %v", err)
	}
}

func TestRetriesAndErrors(t *testing.T) {
	f := newFake(t)
	cfg := DefaultConfig("sglang")
	cfg.BaseURL, cfg.RetryFor = f.srv.URL, 5*time.Second
	b, _ := NewRemote(cfg, testLog(t))
	ctx := context.Background()

	f.failPath, f.failStatus, f.failN = "/generate", 503, 2
	if _, err := b.Generate(ctx, []GenRequest{{Prompt: []int{1}, MaxTokens: 3}}); err != nil {
		t.Fatalf("two 503s then success: %v", err)
	}
	f.failPath, f.failStatus, f.failN = "/generate", 429, 1
	if _, err := b.Generate(ctx, []GenRequest{{Prompt: []int{1}, MaxTokens: 3}}); err != nil {
		t.Fatalf("a 429 then success: %v", err)
	}
	f.failPath, f.failStatus, f.failN = "/generate", 400, 5
	n := len(f.log())
	_, err := b.Generate(ctx, []GenRequest{{Prompt: []int{1}, MaxTokens: 3}})
	if err == nil || !strings.Contains(err.Error(), "injected failure 400") || len(f.log()) != n+1 {
		t.Errorf("400: err %v after %d calls (want one call, the server's message)", err, len(f.log())-n)
	}

	dead := DefaultConfig("vllm")
	dead.BaseURL, dead.RetryFor = "http://127.0.0.1:1", 700*time.Millisecond
	db, _ := NewRemote(dead, testLog(t))
	start := time.Now()
	err = db.Health(ctx)
	if err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") || !errors.Is(err, ErrServer) {
		t.Errorf("unreachable server: %v", err)
	}
	if el := time.Since(start); el > 10*time.Second {
		t.Errorf("gave up after %s; want about RetryFor", el)
	}
}

func TestVerifyServedCatchesStaleWeights(t *testing.T) {
	f := newFake(t)
	cfg := DefaultConfig("sglang")
	cfg.BaseURL = f.srv.URL
	b, _ := NewRemote(cfg, testLog(t))
	ctx := context.Background()
	probe := []int{1, 2, 3}
	want := []float64{0, -2, -2}
	ckpt := t.TempDir()
	vllmfake.WriteCheckpoint(ckpt, vllmfake.CheckpointSpec{Seed: 1})
	if err := b.Publish(ctx, ckpt, "1"); err != nil {
		t.Fatal(err)
	}
	if err := VerifyServed(ctx, b, probe, want, 1e-4); err != nil {
		t.Fatalf("fresh weights: %v", err)
	}
	f.stale = true
	if err := VerifyServed(ctx, b, probe, want, 1e-4); !errors.Is(err, ErrStaleWeights) {
		t.Fatalf("stale weights: err = %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []Config{
		{Kind: "tgi", MaxInFlight: 1, ScoreBatch: 1},
		{Kind: "vllm", MaxInFlight: 1, ScoreBatch: 1},
		{Kind: "vllm", BaseURL: "http://x", MaxInFlight: 0, ScoreBatch: 1},
		{Kind: "vllm", BaseURL: "http://x", MaxInFlight: 1, ScoreBatch: 1, VLLMPublish: "nccl"},
		{Kind: "sglang", BaseURL: "http://x", MaxInFlight: 1, ScoreBatch: 1, APIKeyEnv: "SEEDCTL_TEST_NO_SUCH_VAR"},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}

// The SGLang backend speaks SGLang's native /generate: token ids in, the
// sampled ids and log-probs from meta_info out, and teacher-forced
// scoring through logprob_start_len 0 (its OpenAI endpoint has no
// return_tokens_as_token_ids). The fake refuses any field SGLang lacks.
func TestSGLangNativeGenerateAndScore(t *testing.T) {
	f := newFake(t)
	cfg := DefaultConfig("sglang")
	cfg.BaseURL = f.srv.URL
	b, _ := NewRemote(cfg, testLog(t))
	ctx := context.Background()
	seed := int64(3)
	res, err := b.Generate(ctx, []GenRequest{{Prompt: []int{1, 2}, MaxTokens: 3, Temperature: 1, TopP: 0.9, Seed: &seed, Stop: []string{"\n"}, StopTokenIDs: []int{5}, IgnoreEOS: true}})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(res[0].IDs) != "[7 8 9]" || fmt.Sprint(res[0].LogProbs) != "[-0.5 -0.5 -0.5]" || res[0].FinishReason != "length" || res[0].CachedTokens != 2 {
		t.Errorf("generation %+v", res[0])
	}
	lps, err := b.Score(ctx, [][]int{{4, 5, 6}, {7, 8}})
	if err != nil {
		t.Fatal(err)
	}
	if !math.IsNaN(lps[0][0]) || lps[0][1] != -1 || lps[0][2] != -1 || len(lps[1]) != 2 || lps[1][1] != -1 {
		t.Errorf("scores %v", lps)
	}
	log := strings.Join(f.log(), "\n")
	if strings.Contains(log, "/v1/completions") || !strings.Contains(log, `"logprob_start_len":0`) || !strings.Contains(log, `"logprob_start_len":-1`) || !strings.Contains(log, `"ignore_eos":true`) {
		t.Errorf("calls:\n%s", log)
	}
}

// scoreOnly is a Backend whose Score returns fixed log-probs.
type scoreOnly struct {
	Backend
	lp []float64
}

func (s scoreOnly) Score(context.Context, [][]int) ([][]float64, error) {
	return [][]float64{s.lp}, nil
}

// The check is two-sided: served log-probs above the trainer's are as
// stale as those below (a one-sided check lets half the old weights pass).
func TestVerifyServedIsTwoSided(t *testing.T) {
	ctx := context.Background()
	probe := []int{1, 2, 3}
	want := []float64{0, -2, -1.5}
	for _, tc := range []struct {
		name  string
		lp    []float64
		stale bool
	}{
		{"same", []float64{math.NaN(), -2, -1.5}, false},
		{"within tolerance", []float64{math.NaN(), -2 + 5e-5, -1.5 - 5e-5}, false},
		{"higher", []float64{math.NaN(), -2, -1.2}, true},
		{"lower", []float64{math.NaN(), -2.4, -1.5}, true},
	} {
		err := VerifyServed(ctx, scoreOnly{lp: tc.lp}, probe, want, 1e-4)
		if got := errors.Is(err, ErrStaleWeights); got != tc.stale {
			t.Errorf("%s: err %v, want stale %v", tc.name, err, tc.stale)
		}
	}
}
