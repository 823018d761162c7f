package inference

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rs/zerolog"
)

// LocalServer is an OpenAI-compatible server in this process that speaks
// SGLang's dialect: the embedded server (inference/server), which the
// process's assembly (cmd) builds and hands over. Taking it through this
// interface keeps the server — and libtorch under it — out of everything
// that imports inference.
type LocalServer interface {
	// Listen binds addr ("127.0.0.1:0": a free loopback port).
	Listen(addr string) error
	// Addr is the bound address; Serve serves until Shutdown.
	Addr() string
	Serve() error
	Shutdown(ctx context.Context) error
	// ModelName is the served model id; RequiresKey says whether requests
	// need a bearer key.
	ModelName() string
	RequiresKey() bool
}

// NewEmbedded starts srv on a free loopback port and returns a backend
// talking to it over HTTP, exactly as it would talk to vLLM or SGLang.
// Publishing uses the server's update_weights_from_disk. Closing the
// backend shuts the server down.
func NewEmbedded(ctx context.Context, srv LocalServer, cfg Config, log zerolog.Logger) (Backend, error) {
	cfg.Kind = "embedded"
	if cfg.APIKeyEnv == "" && srv.RequiresKey() {
		srv.Shutdown(context.Background())
		return nil, errors.New("inference: the embedded server has an API key; set Config.APIKeyEnv to the variable holding it")
	}
	if err := srv.Listen("127.0.0.1:0"); err != nil {
		srv.Shutdown(context.Background())
		return nil, err
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve() }()
	cfg.BaseURL = "http://" + srv.Addr()
	if cfg.Model == "" {
		cfg.Model = srv.ModelName()
	}
	if err := cfg.Validate(); err != nil {
		srv.Shutdown(context.Background())
		return nil, err
	}
	b := &sglangBackend{openAICompat: newOpenAICompat(cfg, log)}
	b.stop = func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return srv.Shutdown(ctx)
	}
	hctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := b.Health(hctx); err != nil {
		b.Close()
		select {
		case e := <-serveErr:
			return nil, fmt.Errorf("starting the embedded server: %w", e)
		default:
		}
		return nil, fmt.Errorf("starting the embedded server: %w", err)
	}
	log.Info().Str("url", cfg.BaseURL).Str("model", cfg.Model).Msg("embedded inference server up")
	return b, nil
}
