package inference

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rs/zerolog"

	"github.com/seedctl/seedctl/inference/server"
)

// NewEmbedded starts the embedded server in-process on a free loopback port
// and returns a backend talking to it over HTTP, exactly as it would talk to
// vLLM or SGLang. Publishing uses the server's update_weights_from_disk.
func NewEmbedded(ctx context.Context, scfg server.Config, cfg Config, log zerolog.Logger) (Backend, error) {
	cfg.Kind = "embedded"
	srv, err := server.New(scfg, log.With().Str("component", "embedded-server").Logger())
	if err != nil {
		return nil, err
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
	if cfg.APIKeyEnv == "" && scfg.APIKey != "" {
		return nil, errors.New("inference: the embedded server has an API key; set Config.APIKeyEnv to the variable holding it")
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
