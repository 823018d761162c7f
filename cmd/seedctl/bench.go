package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/seedctl/seedctl/benchmarks"
	"github.com/seedctl/seedctl/learner"
	"github.com/seedctl/seedctl/orchestrator"
)

func benchCommand() *cli.Command {
	return &cli.Command{
		Name:  "bench",
		Usage: "reproduce the paper's tables (methods × data shares × seeds) on a config; resumable",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "config", Usage: "base run config (default: the embedded default)"},
			&cli.StringFlag{Name: "model", Usage: "base policy checkpoint for the embedded default (default: the committed tiny household model)"},
			&cli.BoolFlag{Name: "quick", Usage: "GRPO and SEED with all the tasks, SEED with 40% of them, one seed (about 20 minutes)"},
			&cli.StringFlag{Name: "out", Usage: "results folder (default bench/results/<date>-<host>); an existing one is resumed"},
			&cli.DurationFlag{Name: "budget", Usage: "start no new experiment after this long (0: none)"},
			&cli.IntFlag{Name: "iterations", Usage: "stage-2 iterations per run (embedded default: 4, a single run makes 8)"},
			&cli.IntFlag{Name: "eval-episodes", Usage: "tasks per eval split"},
			&cli.StringFlag{Name: "device", Value: "cpu"},
			&cli.StringSliceFlag{Name: "algos", Usage: "T1 methods to run (default: all; with --quick grpo,seed; none: only the --shares columns)"},
			&cli.Float64SliceFlag{Name: "shares", Usage: "T2 data shares besides 1 (default 0.2,0.4,0.6,0.8; with --quick 0.4; 1 runs none)"},
			&cli.StringSliceFlag{Name: "share-algos", Usage: "methods run at the T2 shares (default grpo,seed; with --quick seed)"},
			&cli.Int64SliceFlag{Name: "seeds", Usage: "seeds (default 1,2,3; with --quick 1); finished runs of the folder are reused"},
			&cli.Float64SliceFlag{Name: "sweep-lambda", Usage: "T8: SEED with all the tasks on the first seed once per λ here (β as the config's), beside the base run"},
			&cli.Float64SliceFlag{Name: "sweep-beta", Usage: "T8: the same once per β here (λ as the config's)"},
			&cli.BoolFlag{Name: "report", Usage: "rewrite the tables and plots from the finished experiments in --out; run nothing"},
			envOptFlag(),
		},
		Action: func(c *cli.Context) error {
			log := logger(c)
			warnForcedAVX2(log, c.String("device"))
			var base orchestrator.Config
			var err error
			if f := c.String("config"); f != "" {
				base, err = orchestrator.Load(f)
			} else if base, err = defaultRunConfig(c, log); err == nil {
				base = benchmarks.Embedded(base)
			}
			if err != nil {
				return cli.Exit("bench: "+err.Error(), 2)
			}
			if err := addEnvOptFlags(c, &base.Env.Options); err != nil {
				return cli.Exit("bench: "+err.Error(), 2)
			}
			if c.IsSet("iterations") {
				base.Iterations = c.Int("iterations")
			}
			if c.IsSet("eval-episodes") {
				base.Eval.Episodes = c.Int("eval-episodes")
			}
			spec := benchmarks.Full(base)
			if c.Bool("quick") {
				spec = benchmarks.Quick(base)
			}
			var algos []string
			var shares []float64
			var seeds []int64
			var shareAlgos []string
			if c.IsSet("share-algos") {
				shareAlgos = c.StringSlice("share-algos")
			}
			if c.IsSet("algos") {
				algos = c.StringSlice("algos")
				if len(algos) == 1 && algos[0] == "none" {
					algos = []string{} // the share columns alone
				}
			}
			if c.IsSet("shares") {
				shares = c.Float64Slice("shares")
			}
			if c.IsSet("seeds") {
				seeds = c.Int64Slice("seeds")
			}
			spec = spec.Select(algos, shares, shareAlgos, seeds)
			if c.IsSet("sweep-lambda") {
				spec.Lambdas = c.Float64Slice("sweep-lambda")
			}
			if c.IsSet("sweep-beta") {
				spec.Betas = c.Float64Slice("sweep-beta")
			}
			if err := spec.Validate(); err != nil {
				return cli.Exit("bench: "+err.Error(), 2)
			}
			if c.IsSet("budget") {
				spec.Budget = c.Duration("budget")
			}
			spec.ReportOnly = c.Bool("report")
			out := c.String("out")
			if out == "" {
				host, _ := os.Hostname()
				out = filepath.Join("bench", "results", time.Now().Format("2006-01-02")+"-"+host)
			}
			deps := orchestrator.Deps{NewLearner: learner.Local(c.String("device")), Log: log, Progress: c.App.ErrWriter,
				OpenBackend: openBackendFor(base.Backend, base.RL.DType, time.Duration(base.RetryFor), log)}
			start := time.Now()
			if _, err := benchmarks.Run(c.Context, spec, out, deps, c.App.ErrWriter, log); err != nil {
				return cli.Exit("bench: "+err.Error()+" (rerun with --out "+out+" to resume)", 1)
			}
			fmt.Fprintf(c.App.Writer, "bench finished in %s: %s\n", time.Since(start).Round(time.Second), filepath.Join(out, "results.md"))
			return nil
		},
	}
}
