// Command seedctl trains LLM agents with SEED: GRPO plus self-evolving
// on-policy distillation from hindsight skills the policy writes itself.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"

	"github.com/rs/zerolog"
	"github.com/urfave/cli/v2"

	"github.com/seedctl/seedctl/trainer"
)

func main() {
	// Before anything else: OpenBLAS chose its kernels when the process
	// loaded, and a restart is the only way to choose others.
	if err := trainer.FixBLASCore(func(msg string) { fmt.Fprintln(os.Stderr, "seedctl:", msg) }); err != nil {
		fmt.Fprintln(os.Stderr, "seedctl: warning:", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newApp().RunContext(ctx, os.Args); err != nil {
		var ec cli.ExitCoder
		if errors.As(err, &ec) {
			if msg := ec.Error(); msg != "" {
				fmt.Fprintln(os.Stderr, "seedctl:", msg)
			}
			os.Exit(ec.ExitCode())
		}
		fmt.Fprintln(os.Stderr, "seedctl:", err)
		os.Exit(1)
	}
}

// loggerKey is where the app's Before hook stores the configured logger in
// the cli context's metadata.
const loggerKey = "logger"

// profileKey holds the --cpuprofile file while the profile runs.
const profileKey = "cpuprofile"

func newApp() *cli.App {
	app := &cli.App{
		Name:    "seedctl",
		Usage:   "train LLM agents with SEED (GRPO + self-evolving on-policy distillation)",
		Version: versionString(),
		// Errors are printed once, by main, after the logger has had its say.
		ExitErrHandler:       func(*cli.Context, error) {},
		EnableBashCompletion: true,
		Flags: []cli.Flag{
			&cli.StringFlag{
				Name:    "log-level",
				Value:   "info",
				Usage:   "minimum level of log events: trace, debug, info, warn, error",
				EnvVars: []string{"SEEDCTL_LOG_LEVEL"},
			},
			&cli.StringFlag{
				Name:    "log-format",
				Value:   "console",
				Usage:   "console (for people) or json (one event per line, for machines)",
				EnvVars: []string{"SEEDCTL_LOG_FORMAT"},
			},
			&cli.StringFlag{
				Name:  "cpuprofile",
				Usage: "write a Go CPU profile of the command to this file (go tool pprof -top seedctl FILE)",
			},
		},
		Before: func(c *cli.Context) error {
			log, err := newLogger(os.Stderr, c.String("log-level"), c.String("log-format"))
			if err != nil {
				return cli.Exit(err.Error(), 2)
			}
			c.App.Metadata = map[string]any{loggerKey: log}
			if f := c.String("cpuprofile"); f != "" {
				out, err := os.Create(f)
				if err != nil {
					return cli.Exit(fmt.Sprintf("--cpuprofile %s: %v", f, err), 2)
				}
				if err := pprof.StartCPUProfile(out); err != nil {
					out.Close()
					return cli.Exit(fmt.Sprintf("--cpuprofile %s: %v", f, err), 2)
				}
				c.App.Metadata[profileKey] = out
			}
			return nil
		},
		After: func(c *cli.Context) error {
			if out, ok := c.App.Metadata[profileKey].(*os.File); ok {
				pprof.StopCPUProfile()
				return out.Close()
			}
			return nil
		},
		Commands: []*cli.Command{
			versionCommand(),
			doctorCommand(),
			modelCommand(),
			serveCommand(),
			envCommand(),
			collectCommand(),
			analyzeCommand(),
			evalCommand(),
			runCommand(),
			configCommand(),
			benchCommand(),
			reportCommand(),
			learnerRankCommand(),
			learnerNodeCommand(),
		},
	}
	addExamples(app)
	addFlagChecks("", app.Commands)
	return app
}

// logger returns the logger configured by the global flags.
func logger(c *cli.Context) zerolog.Logger {
	if l, ok := c.App.Metadata[loggerKey].(zerolog.Logger); ok {
		return l
	}
	return zerolog.Nop()
}
