package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/seedctl/seedctl/inference/server"
)

func serveCommand() *cli.Command {
	return &cli.Command{
		Name:  "serve",
		Usage: "serve a Hugging Face checkpoint over an OpenAI-compatible API (the embedded server)",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "model", Required: true, Usage: "checkpoint folder"},
			&cli.StringFlag{Name: "addr", Value: "127.0.0.1:8000", Usage: "listen address; loopback unless you mean otherwise"},
			&cli.StringFlag{Name: "api-key-env", Usage: "environment variable holding a bearer key clients must send"},
			&cli.StringFlag{Name: "served-model-name", Usage: "model id in the API (default: the folder name)"},
			&cli.IntFlag{Name: "max-model-len", Usage: "prompt + completion token limit (default: the checkpoint's, capped at 8192)"},
			&cli.IntFlag{Name: "max-batch", Value: 64, Usage: "sequences decoded together"},
			&cli.StringFlag{Name: "dtype", Value: "float32", Usage: "float32 or bfloat16"},
			&cli.StringFlag{Name: "device", Value: "cpu", Usage: "cpu or cuda"},
			&cli.StringFlag{Name: "weight-version", Value: "0", Usage: "version reported for the initial weights"},
			&cli.IntFlag{Name: "max-sequences", Value: server.DefaultConfig("").MaxSequences, Usage: "most prompts × n one request may ask for"},
			&cli.IntFlag{Name: "score-batch-tokens", Value: server.DefaultConfig("").ScoreBatchTokens, Usage: "padded tokens of one scoring forward (echo with logprobs)"},
		},
		Action: func(c *cli.Context) error {
			log := logger(c)
			cfg := server.DefaultConfig(c.String("model"))
			cfg.ModelName = c.String("served-model-name")
			cfg.MaxModelLen = c.Int("max-model-len")
			cfg.MaxBatch = c.Int("max-batch")
			cfg.DType, cfg.Device = c.String("dtype"), c.String("device")
			cfg.Version = c.String("weight-version")
			cfg.MaxSequences, cfg.ScoreBatchTokens = c.Int("max-sequences"), c.Int("score-batch-tokens")
			if env := c.String("api-key-env"); env != "" {
				key, ok := os.LookupEnv(env)
				if !ok || key == "" {
					return cli.Exit(fmt.Sprintf("serve: --api-key-env %s: the variable is not set", env), 2)
				}
				cfg.APIKey = key
			}
			addr := c.String("addr")
			if host, _, err := net.SplitHostPort(addr); err != nil {
				return cli.Exit(fmt.Sprintf("serve: --addr %q: %v", addr, err), 2)
			} else if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
				log.Warn().Str("addr", addr).Bool("api_key", cfg.APIKey != "").Msg("listening beyond loopback")
			}
			srv, err := server.New(cfg, log)
			if err != nil {
				return cli.Exit("serve: "+err.Error(), 1)
			}
			if err := srv.Listen(addr); err != nil {
				srv.Shutdown(context.Background())
				return cli.Exit("serve: "+err.Error(), 1)
			}
			fmt.Fprintf(c.App.Writer, "serving %s at http://%s/v1 (model %q)\n", cfg.ModelDir, srv.Addr(), srv.ModelName())
			errc := make(chan error, 1)
			go func() { errc <- srv.Serve() }()
			select {
			case err := <-errc:
				srv.Shutdown(context.Background())
				if err != nil {
					return cli.Exit("serve: "+err.Error(), 1)
				}
				return nil
			case <-c.Context.Done():
				log.Info().Msg("shutting down")
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				return srv.Shutdown(ctx)
			}
		},
	}
}
