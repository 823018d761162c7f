package inference

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// GenRequest is one generation from a prompt given as token ids.
type GenRequest struct {
	Prompt       []int
	MaxTokens    int
	Temperature  float64
	TopP         float64 // 0 means 1
	Seed         *int64
	Stop         []string
	StopTokenIDs []int
	// IgnoreEOS keeps generating past the end-of-sequence token
	// (vLLM's and SGLang's ignore_eos; benchmarks that need full lengths).
	IgnoreEOS bool
}

// GenResult is what came back, token for token: the ids the server
// sampled, their log-probs under the serving policy (the ℓold of GRPO), the
// decoded text and why it ended ("stop" or "length").
type GenResult struct {
	IDs          []int
	LogProbs     []float64
	Text         string
	FinishReason string
	CachedTokens int
}

// Backend is the inference server as the rest of seedctl sees it.
type Backend interface {
	// Generate runs the requests concurrently (bounded) and returns results
	// in request order.
	Generate(ctx context.Context, reqs []GenRequest) ([]GenResult, error)
	// Score returns teacher-forced log-probs of every token of each sequence
	// given the tokens before it; entry 0 of each is NaN.
	Score(ctx context.Context, seqs [][]int) ([][]float64, error)
	// Release frees the server's accelerator memory before a training step
	// on the same GPUs (no-op where nothing is shared).
	Release(ctx context.Context) error
	// Publish makes the checkpoint in dir the served policy, named version.
	Publish(ctx context.Context, dir, version string) error
	// Health returns nil when the server answers.
	Health(ctx context.Context) error
	// Close stops what the backend started.
	Close() error
}

// Config selects and configures a backend.
type Config struct {
	Kind    string // "embedded", "vllm" or "sglang"
	BaseURL string // e.g. http://127.0.0.1:8000 (without /v1)
	// Model is the served model name sent with requests.
	Model string
	// APIKeyEnv names the environment variable holding the bearer key; the
	// key itself never appears in configs or logs.
	APIKeyEnv string
	// MaxInFlight bounds concurrent HTTP requests.
	MaxInFlight int
	// RequestTimeout bounds one HTTP request; RetryFor bounds retrying.
	RequestTimeout time.Duration
	RetryFor       time.Duration
	// ScoreBatch is how many sequences one scoring request carries.
	ScoreBatch int
	// ScoreMaxTokens: 0 for servers that accept max_tokens 0 with echo
	// (embedded); 1 for vLLM/SGLang, whose extra token is dropped.
	ScoreMaxTokens int

	// VLLMPublish is "reload" (sleep → reload_weights → wake; the served
	// folder is overwritten with the published checkpoint) or "lora"
	// (runtime LoRA adapters; dir must hold an adapter).
	VLLMPublish string
	// ServedDir is the folder the vLLM server was started from ("reload").
	ServedDir string
	// Colocated: the server shares GPUs with the trainer, so Release frees
	// its memory and Publish restores it.
	Colocated bool
}

// DefaultConfig has the defaults for kind.
func DefaultConfig(kind string) Config {
	c := Config{Kind: kind, MaxInFlight: 64, RequestTimeout: 10 * time.Minute, RetryFor: 2 * time.Minute, ScoreBatch: 16, VLLMPublish: "reload"}
	if kind != "embedded" {
		c.ScoreMaxTokens = 1
	}
	return c
}

// Validate names the first bad field.
func (c Config) Validate() error {
	switch c.Kind {
	case "embedded", "vllm", "sglang":
	default:
		return fmt.Errorf("inference config: kind %q: want embedded, vllm or sglang", c.Kind)
	}
	if c.Kind != "embedded" && c.BaseURL == "" {
		return fmt.Errorf("inference config: base_url is required for %s", c.Kind)
	}
	if c.MaxInFlight < 1 || c.ScoreBatch < 1 {
		return errors.New("inference config: max_in_flight and score_batch must be at least 1")
	}
	if c.ScoreMaxTokens < 0 || c.ScoreMaxTokens > 1 {
		return errors.New("inference config: score_max_tokens must be 0 or 1")
	}
	if c.Kind == "vllm" {
		switch c.VLLMPublish {
		case "reload":
		case "lora":
		default:
			return fmt.Errorf("inference config: vllm_publish %q: want reload or lora", c.VLLMPublish)
		}
	}
	if c.APIKeyEnv != "" {
		if _, ok := os.LookupEnv(c.APIKeyEnv); !ok {
			return fmt.Errorf("inference config: api_key_env names %s, which is not set", c.APIKeyEnv)
		}
	}
	return nil
}

func (c Config) apiKey() string {
	if c.APIKeyEnv == "" {
		return ""
	}
	return os.Getenv(c.APIKeyEnv)
}

// openAICompat implements Generate, Score and Health over /v1/completions
// with token ids in and token ids out, which vLLM, SGLang and the embedded
// server all speak.
type openAICompat struct {
	cfg  Config
	http *httpClient
	log  zerolog.Logger

	mu    sync.RWMutex
	model string // may change with LoRA publishing
}

func newOpenAICompat(cfg Config, log zerolog.Logger) *openAICompat {
	return &openAICompat{cfg: cfg, http: newHTTPClient(cfg.BaseURL, cfg.apiKey(), cfg.RequestTimeout, cfg.RetryFor, log), log: log, model: cfg.Model}
}

func (o *openAICompat) modelName() string {
	o.mu.RLock()
	defer o.mu.RUnlock()
	return o.model
}

func (o *openAICompat) setModel(m string) {
	o.mu.Lock()
	o.model = m
	o.mu.Unlock()
}

type completionResponse struct {
	Choices []struct {
		Index        int    `json:"index"`
		Text         string `json:"text"`
		FinishReason string `json:"finish_reason"`
		Logprobs     *struct {
			Tokens        []string   `json:"tokens"`
			TokenLogprobs []*float64 `json:"token_logprobs"`
		} `json:"logprobs"`
	} `json:"choices"`
	Usage struct {
		PromptTokensDetails *struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
}

// parseTokenIDs reads "token_id:N" tokens (return_tokens_as_token_ids).
func parseTokenIDs(toks []string) ([]int, error) {
	ids := make([]int, len(toks))
	for i, t := range toks {
		s, ok := strings.CutPrefix(t, "token_id:")
		if !ok {
			return nil, fmt.Errorf("token %q is not token_id:N (does the server support return_tokens_as_token_ids?): %w", t, ErrServer)
		}
		n, err := strconv.Atoi(s)
		if err != nil {
			return nil, fmt.Errorf("token %q: %w", t, ErrServer)
		}
		ids[i] = n
	}
	return ids, nil
}

func (o *openAICompat) generateOne(ctx context.Context, r GenRequest) (GenResult, error) {
	body := map[string]any{
		"model": o.modelName(), "prompt": r.Prompt, "max_tokens": r.MaxTokens, "temperature": r.Temperature,
		"logprobs": 0, "return_tokens_as_token_ids": true,
	}
	if r.TopP > 0 {
		body["top_p"] = r.TopP
	}
	if r.Seed != nil {
		body["seed"] = *r.Seed
	}
	if len(r.Stop) > 0 {
		body["stop"] = r.Stop
	}
	if len(r.StopTokenIDs) > 0 {
		body["stop_token_ids"] = r.StopTokenIDs
	}
	if r.IgnoreEOS {
		body["ignore_eos"] = true
	}
	var resp completionResponse
	if err := o.http.do(ctx, "POST", "/v1/completions", body, &resp); err != nil {
		return GenResult{}, err
	}
	if len(resp.Choices) != 1 || resp.Choices[0].Logprobs == nil {
		return GenResult{}, fmt.Errorf("%s/v1/completions: want one choice with logprobs, got %d: %w", o.cfg.BaseURL, len(resp.Choices), ErrServer)
	}
	ch := resp.Choices[0]
	ids, err := parseTokenIDs(ch.Logprobs.Tokens)
	if err != nil {
		return GenResult{}, fmt.Errorf("%s/v1/completions: %w", o.cfg.BaseURL, err)
	}
	lps := make([]float64, len(ids))
	for i := range ids {
		if i >= len(ch.Logprobs.TokenLogprobs) || ch.Logprobs.TokenLogprobs[i] == nil {
			return GenResult{}, fmt.Errorf("%s/v1/completions: no log-prob for generated token %d: %w", o.cfg.BaseURL, i, ErrServer)
		}
		lps[i] = *ch.Logprobs.TokenLogprobs[i]
	}
	res := GenResult{IDs: ids, LogProbs: lps, Text: ch.Text, FinishReason: ch.FinishReason}
	if d := resp.Usage.PromptTokensDetails; d != nil {
		res.CachedTokens = d.CachedTokens
	}
	return res, nil
}

// forEach runs fn(i) for i < n with at most limit at once, stopping at the
// first error.
func forEach(ctx context.Context, n, limit int, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sem := make(chan struct{}, limit)
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for i := 0; i < n; i++ {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			if err := fn(ctx, i); err != nil {
				once.Do(func() { first = err; cancel() })
			}
		}(i)
	}
	wg.Wait()
	if first != nil {
		return first
	}
	return ctx.Err()
}

func (o *openAICompat) Generate(ctx context.Context, reqs []GenRequest) ([]GenResult, error) {
	return generateEach(ctx, reqs, o.cfg.MaxInFlight, o.generateOne)
}

// generateEach runs one generation request per GenRequest, at most limit
// at once, stopping at the first error.
func generateEach(ctx context.Context, reqs []GenRequest, limit int, one func(context.Context, GenRequest) (GenResult, error)) ([]GenResult, error) {
	out := make([]GenResult, len(reqs))
	err := forEach(ctx, len(reqs), limit, func(ctx context.Context, i int) error {
		r, err := one(ctx, reqs[i])
		if err != nil {
			return fmt.Errorf("generating for request %d: %w", i, err)
		}
		out[i] = r
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// scoreBatches cuts seqs into batches of size, refuses empty sequences,
// and runs fn on each batch [lo, hi), at most limit at once.
func scoreBatches(ctx context.Context, seqs [][]int, size, limit int, fn func(ctx context.Context, lo, hi int) error) error {
	nb := (len(seqs) + size - 1) / size
	return forEach(ctx, nb, limit, func(ctx context.Context, b int) error {
		lo, hi := b*size, min((b+1)*size, len(seqs))
		for i := lo; i < hi; i++ {
			if len(seqs[i]) == 0 {
				return fmt.Errorf("scoring sequence %d: it is empty", i)
			}
		}
		return fn(ctx, lo, hi)
	})
}

func (o *openAICompat) Score(ctx context.Context, seqs [][]int) ([][]float64, error) {
	out := make([][]float64, len(seqs))
	err := scoreBatches(ctx, seqs, o.cfg.ScoreBatch, o.cfg.MaxInFlight, func(ctx context.Context, lo, hi int) error {
		body := map[string]any{
			"model": o.modelName(), "prompt": seqs[lo:hi], "max_tokens": o.cfg.ScoreMaxTokens, "echo": true,
			"logprobs": 0, "return_tokens_as_token_ids": true, "temperature": 0,
		}
		var resp completionResponse
		if err := o.http.do(ctx, "POST", "/v1/completions", body, &resp); err != nil {
			return fmt.Errorf("scoring sequences %d-%d: %w", lo, hi-1, err)
		}
		if len(resp.Choices) != hi-lo {
			return fmt.Errorf("scoring sequences %d-%d: %d choices for %d prompts: %w", lo, hi-1, len(resp.Choices), hi-lo, ErrServer)
		}
		for _, ch := range resp.Choices {
			i := lo + ch.Index
			if ch.Index < 0 || i >= hi || ch.Logprobs == nil {
				return fmt.Errorf("scoring: choice index %d out of range or without logprobs: %w", ch.Index, ErrServer)
			}
			n := len(seqs[i])
			if len(ch.Logprobs.TokenLogprobs) < n {
				return fmt.Errorf("scoring sequence %d: %d log-probs for %d tokens: %w", i, len(ch.Logprobs.TokenLogprobs), n, ErrServer)
			}
			ids, err := parseTokenIDs(ch.Logprobs.Tokens[:n])
			if err != nil {
				return fmt.Errorf("scoring sequence %d: %w", i, err)
			}
			lp := make([]float64, n)
			lp[0] = math.NaN()
			for k := 1; k < n; k++ {
				if ids[k] != seqs[i][k] {
					return fmt.Errorf("scoring sequence %d: the server echoed token %d as %d, sent %d (re-tokenized?): %w", i, k, ids[k], seqs[i][k], ErrServer)
				}
				if ch.Logprobs.TokenLogprobs[k] == nil {
					return fmt.Errorf("scoring sequence %d: no log-prob for token %d: %w", i, k, ErrServer)
				}
				lp[k] = *ch.Logprobs.TokenLogprobs[k]
			}
			out[i] = lp
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (o *openAICompat) Health(ctx context.Context) error {
	// /health answers with an empty body on vLLM, SGLang and the embedded server.
	return o.http.do(ctx, "GET", "/health", nil, nil)
}

// ErrStaleWeights means the server does not serve the weights just published.
var ErrStaleWeights = errors.New("published weights are not the ones served")

// VerifyServed scores probe on b and compares with want (the trainer's own
// log-probs for the published weights): a guard against servers that
// silently keep old weights (vLLM #32718).
func VerifyServed(ctx context.Context, b Backend, probe []int, want []float64, tol float64) error {
	got, err := b.Score(ctx, [][]int{probe})
	if err != nil {
		return fmt.Errorf("verifying published weights: %w", err)
	}
	worst := 0.0
	for k := 1; k < len(probe) && k < len(want); k++ {
		worst = math.Max(worst, math.Abs(got[0][k]-want[k]))
	}
	if worst > tol {
		return fmt.Errorf("verifying published weights: a probe's log-probs differ by %.3g (tolerance %.1g): %w", worst, tol, ErrStaleWeights)
	}
	return nil
}

// URL is the server's base URL (for a launched server, the free port it
// was given).
func (o *openAICompat) URL() string { return o.cfg.BaseURL }
