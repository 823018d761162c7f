package inference

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/rs/zerolog"
	openai "github.com/sashabaranov/go-openai"
)

// ChatConfig points at an OpenAI-compatible chat endpoint, such as a hosted
// analyzer model for stage 1.
type ChatConfig struct {
	BaseURL     string // including /v1, e.g. https://api.example.com/v1
	Model       string
	APIKeyEnv   string // environment variable with the key; never logged
	MaxInFlight int
	Timeout     time.Duration
	RetryFor    time.Duration
}

// DefaultChatConfig returns defaults for base and model.
func DefaultChatConfig(base, model string) ChatConfig {
	return ChatConfig{BaseURL: base, Model: model, MaxInFlight: 8, Timeout: 5 * time.Minute, RetryFor: 5 * time.Minute}
}

// Validate names the first bad field.
func (c ChatConfig) Validate() error {
	if c.BaseURL == "" || c.Model == "" {
		return errors.New("chat config: base_url and model are required")
	}
	if c.MaxInFlight < 1 {
		return errors.New("chat config: max_in_flight must be at least 1")
	}
	if c.APIKeyEnv != "" {
		if _, ok := os.LookupEnv(c.APIKeyEnv); !ok {
			return fmt.Errorf("chat config: api_key_env names %s, which is not set", c.APIKeyEnv)
		}
	}
	return nil
}

// ChatMessage is one turn.
type ChatMessage struct {
	Role    string
	Content string
}

// ChatOptions are per-call sampling settings.
type ChatOptions struct {
	// Temperature 0 is greedy decoding. It is sent as the smallest
	// positive float32: go-openai leaves a zero temperature out of the
	// request, and the server would then sample at its default (vLLM:
	// 1, or the model's generation_config).
	Temperature float32
	MaxTokens   int
	Seed        *int
}

// ChatClient calls a chat endpoint with bounded concurrency and retries.
type ChatClient struct {
	cfg ChatConfig
	c   *openai.Client
	sem chan struct{}
	log zerolog.Logger
}

// NewChatClient builds a client for cfg.
func NewChatClient(cfg ChatConfig, log zerolog.Logger) (*ChatClient, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	key := ""
	if cfg.APIKeyEnv != "" {
		key = os.Getenv(cfg.APIKeyEnv)
	}
	oc := openai.DefaultConfig(key)
	oc.BaseURL = strings.TrimRight(cfg.BaseURL, "/")
	oc.HTTPClient = &http.Client{Timeout: cfg.Timeout}
	return &ChatClient{cfg: cfg, c: openai.NewClientWithConfig(oc), sem: make(chan struct{}, cfg.MaxInFlight), log: log}, nil
}

// Complete returns the assistant's reply to msgs.
func (c *ChatClient) Complete(ctx context.Context, msgs []ChatMessage, opt ChatOptions) (string, error) {
	select {
	case c.sem <- struct{}{}:
	case <-ctx.Done():
		return "", ctx.Err()
	}
	defer func() { <-c.sem }()
	temp := opt.Temperature
	if temp == 0 {
		temp = math.SmallestNonzeroFloat32 // sent, and greedy on every OpenAI-compatible server
	}
	req := openai.ChatCompletionRequest{Model: c.cfg.Model, Temperature: temp, MaxTokens: opt.MaxTokens, Seed: opt.Seed}
	for _, m := range msgs {
		req.Messages = append(req.Messages, openai.ChatCompletionMessage{Role: m.Role, Content: m.Content})
	}
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = 200 * time.Millisecond
	b.MaxElapsedTime = c.cfg.RetryFor
	var out string
	attempts := 0
	err := backoff.Retry(func() error {
		attempts++
		resp, err := c.c.CreateChatCompletion(ctx, req)
		if err != nil {
			if ctx.Err() != nil {
				return backoff.Permanent(ctx.Err())
			}
			var ae *openai.APIError
			var re *openai.RequestError
			switch {
			case errors.As(err, &ae) && !retryable(ae.HTTPStatusCode):
				return backoff.Permanent(err)
			case errors.As(err, &re) && !retryable(re.HTTPStatusCode):
				return backoff.Permanent(err)
			}
			c.log.Debug().Err(err).Int("attempt", attempts).Str("endpoint", c.cfg.BaseURL).Msg("chat request failed; retrying")
			return err
		}
		if len(resp.Choices) == 0 {
			return backoff.Permanent(fmt.Errorf("no choices in the reply: %w", ErrServer))
		}
		out = resp.Choices[0].Message.Content
		return nil
	}, backoff.WithContext(b, ctx))
	if err != nil {
		return "", fmt.Errorf("chat completion at %s (model %s, %d attempts): %w", c.cfg.BaseURL, c.cfg.Model, attempts, err)
	}
	return out, nil
}
