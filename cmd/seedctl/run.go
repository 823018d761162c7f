package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"github.com/urfave/cli/v2"

	"github.com/seedctl/seedctl/basemodel"
	"github.com/seedctl/seedctl/inference"
	"github.com/seedctl/seedctl/inference/server"
	"github.com/seedctl/seedctl/learner"
	"github.com/seedctl/seedctl/orchestrator"
	"github.com/seedctl/seedctl/trainer"
)

// backendConfig is the inference client's config for a run's backend
// section (retryFor 0: the client's default).
func backendConfig(cfg orchestrator.BackendConfig, retryFor time.Duration) inference.Config {
	ic := inference.DefaultConfig(cfg.Kind)
	ic.BaseURL, ic.Model, ic.APIKeyEnv = cfg.BaseURL, cfg.Model, cfg.APIKeyEnv
	if cfg.MaxInFlight > 0 {
		ic.MaxInFlight = cfg.MaxInFlight
	}
	if retryFor > 0 {
		ic.RetryFor = retryFor
	}
	if cfg.VLLMPublish != "" {
		ic.VLLMPublish = cfg.VLLMPublish
	}
	ic.Colocated = cfg.Colocated
	return ic
}

// remotePool is a pool of cfg.Endpoints, each a remote backend of ic's
// kind with its own served folder (cfg.ServedDirs, vLLM reload).
func remotePool(cfg orchestrator.BackendConfig, ic inference.Config, log zerolog.Logger) (*inference.Pool, error) {
	bs := make([]inference.Backend, len(cfg.Endpoints))
	for i, u := range cfg.Endpoints {
		ici := ic
		ici.BaseURL = u
		if i < len(cfg.ServedDirs) {
			ici.ServedDir = cfg.ServedDirs[i]
		}
		b, err := inference.NewRemote(ici, log.With().Str("endpoint", u).Logger())
		if err != nil {
			return nil, fmt.Errorf("backend.endpoints[%d] %s: %w", i, u, err)
		}
		bs[i] = b
	}
	return inference.NewPool(cfg.Endpoints, bs, log)
}

// openBackendFor makes the orchestrator's backend opener for a config.
func openBackendFor(cfg orchestrator.BackendConfig, dtype string, retryFor time.Duration, log zerolog.Logger) func(ctx context.Context, dir string) (inference.Backend, error) {
	return func(ctx context.Context, dir string) (inference.Backend, error) {
		ic := backendConfig(cfg, retryFor)
		switch {
		case cfg.Kind == "embedded":
			scfg := server.DefaultConfig(dir)
			scfg.MaxModelLen = 16384
			// The trainer's precision (rl.dtype): a bfloat16 policy is
			// sampled in bfloat16, as vLLM serves it, and the publish
			// check compares like with like.
			scfg.DType = dtype
			return startEmbedded(ctx, scfg, ic, log)
		case len(cfg.Launch) > 0:
			// vLLM reload: started from a served copy of dir written into
			// served_dir, so it serves dir with no publish.
			ic.ServedDir = cfg.ServedDir
			return inference.Launch(ctx, inference.LaunchSpec{Command: cfg.Launch[0], ModelDir: dir, ExtraArgs: cfg.Launch[1:]}, ic, log)
		case len(cfg.Endpoints) > 0:
			// Several running servers: a pool, every one made to serve dir.
			p, err := remotePool(cfg, ic, log)
			if err == nil {
				err = p.Publish(ctx, dir, filepath.Base(dir))
			}
			return p, err
		default:
			// A running server: make it serve dir (a resumed run's
			// checkpoint, or the base model again, which is harmless).
			ic.ServedDir = cfg.ServedDir
			b, err := inference.NewRemote(ic, log)
			if err == nil {
				err = b.Publish(ctx, dir, filepath.Base(dir))
			}
			return b, err
		}
	}
}

// defaultRunConfig is the embedded default: the committed household base
// model, embedded server, oracle stage 1.
func defaultRunConfig(c *cli.Context, log zerolog.Logger) (orchestrator.Config, error) {
	cfg := orchestrator.Default()
	if c.String("model") != "" {
		cfg.Model = c.String("model")
		if r, ok := basemodel.ReadRecipe(cfg.Model); ok {
			// A bootstrapped model: prompt it as it was trained.
			cfg.Rollout.Mode, cfg.Rollout.Window, cfg.Rollout.PlacesLine = r.Mode, r.Window, r.Corpus.PlacesLine
		}
		return cfg, nil
	}
	// The committed base (basemodel.EnsureCommitted): the same weights on
	// every machine, unpacked into the user cache on first use.
	dir, cb, err := basemodel.EnsureCommitted("")
	if err != nil {
		return cfg, fmt.Errorf("unpacking the committed base model: %w", err)
	}
	r, ok := basemodel.ReadRecipe(dir)
	if !ok {
		return cfg, fmt.Errorf("the committed base model at %s has no recipe.json", dir)
	}
	f := cb.Figures
	fmt.Fprintf(c.App.Writer, "base model %s (committed; measured greedy on %d tasks: eval-seen %.1f%%, eval-unseen %.1f%%, with oracle skills %.1f%%)\n",
		cb.Name, f.Episodes, 100*f.Seen, 100*f.Unseen, 100*f.SeenOracle)
	cfg.Model = dir
	cfg.Rollout.Mode, cfg.Rollout.Window, cfg.Rollout.PlacesLine = r.Mode, r.Window, r.Corpus.PlacesLine
	return cfg, nil
}

func runCommand() *cli.Command {
	return &cli.Command{
		Name:  "run",
		Usage: "train with SEED (or a baseline): stage-1 skill SFT, then stage-2 iterations; with no flags, the embedded default on CPU",
		Flags: append(cliFlags(runConfigFlags),
			&cli.StringFlag{Name: "config", Usage: "JSON run config (see configs/); default: the embedded default"},
			&cli.StringFlag{Name: "resume", Usage: "continue the run in this directory from its last finished iteration"},
			&cli.StringFlag{Name: "base-eval-from", Usage: "take the base evaluation from this finished run's folder when it was measured under the same protocol (model, environment, prompts, eval seed), instead of playing it again; otherwise it is played"},
			&cli.StringSliceFlag{Name: "accept-config-change", Usage: "with --resume: continue although config.json changed since the run started, naming exactly the changed keys (dotted, comma-separated, e.g. rl.lr,iterations); state.json records the change"},
			&cli.StringFlag{Name: "name", Usage: "run name (folder under runs_dir)"},
			&cli.StringFlag{Name: "model", Usage: "base policy checkpoint (default: the committed tiny household model)"},
			&cli.StringFlag{Name: "update", Usage: "stage-2 update: public (the public SEED code's: the default's without GiGPO's step-level term) or legacy (seedctl's before it: trajectory returns, one step per iteration; to compare)"},
			envOptFlag(),
			&cli.StringFlag{Name: "device", Value: "cpu", Usage: "trainer device: cpu or cuda"},
			&cli.IntFlag{Name: "nproc", Value: 1, Usage: "learner ranks on this host (data parallelism over libtorch's c10d, Gloo, CPU): each trains on 1/N of every step's rows"},
			&cli.BoolFlag{Name: "zero", Usage: "with --nproc N: shard AdamW's moments across the ranks (ZeRO-1; each rank keeps about 1/N)"},
			&cli.IntFlag{Name: "world-size", Usage: "all learner ranks, on every host (default: --nproc); the ranks beyond this host's dial --listen (seedctl learner-node there)"},
			&cli.StringFlag{Name: "listen", Value: "127.0.0.1:29501", Usage: "with --world-size: where the other hosts' ranks dial in (HOST:PORT; loopback unless told, e.g. :29501 or 10.0.0.1:29501); they authenticate with the secret in $SEEDCTL_RANK_SECRET"},
			&cli.StringFlag{Name: "master-addr", Usage: "with --world-size: this host's address as the other hosts reach it (c10d's rendezvous)"},
			&cli.IntFlag{Name: "master-port", Usage: "with --world-size: c10d's rendezvous port on this host (default 29500; one host's ranks meet in a private file store and open no port)"},
			&cli.DurationFlag{Name: "dist-timeout", Value: learner.DefaultDistTimeout, Usage: "bound on the rendezvous, waiting for other hosts' ranks, and every collective: a dead rank stops the run after it"},
		),
		Action: func(c *cli.Context) error {
			log := logger(c)
			dist := learner.DistOptions{Device: c.String("device"), NProc: c.Int("nproc"), World: c.Int("world-size"), Listen: c.String("listen"),
				MasterAddr: c.String("master-addr"), MasterPort: c.Int("master-port"), Zero: c.Bool("zero"), Timeout: c.Duration("dist-timeout")}
			if dist.World > dist.NProc && dist.MasterPort == 0 {
				dist.MasterPort = 29500
			}
			ranks := dist.Ranks()
			if err := dist.Validate(); err != nil {
				return cli.Exit("run: "+err.Error(), 2)
			}
			if err := dist.CheckBuild(trainer.DistAvailable); err != nil {
				return cli.Exit("run: "+err.Error(), 2)
			}
			learners := learner.Local(c.String("device"))
			if ranks > 1 {
				learners = learner.Dist(dist, log)
			}
			warnForcedAVX2(log, c.String("device"))
			deps := orchestrator.Deps{NewLearner: learners, Log: log, Progress: c.App.ErrWriter}
			if dir := c.String("resume"); dir != "" {
				if err := checkRunFolder("--resume", dir); err != nil {
					return cli.Exit("run: "+err.Error(), 2)
				}
				cfg, err := orchestrator.Load(filepath.Join(dir, "config.json"))
				if err != nil {
					return cli.Exit("run --resume: "+err.Error(), 2)
				}
				deps.OpenBackend = openBackendFor(cfg.Backend, cfg.RL.DType, time.Duration(cfg.RetryFor), log)
				deps.AcceptConfigChange = c.StringSlice("accept-config-change")
				res, err := orchestrator.Resume(c.Context, dir, deps)
				return reportRun(c, res, err)
			}
			var cfg orchestrator.Config
			var err error
			if f := c.String("config"); f != "" {
				if cfg, err = orchestrator.Load(f); err != nil {
					return cli.Exit(fmt.Sprintf("run: --config %s: %v (configs/ holds the shipped configs; seedctl config default prints one to edit)", f, err), 2)
				}
				if c.String("model") != "" {
					cfg.Model = c.String("model")
				}
			} else if cfg, err = defaultRunConfig(c, log); err != nil {
				return cli.Exit("run: "+err.Error(), 1)
			}
			if err := applyRunFlags(c, &cfg); err != nil {
				return cli.Exit("run: "+withRunFlag(c, err).Error(), 2)
			}
			if err := cfg.Validate(); err != nil {
				return cli.Exit("run: "+withRunFlag(c, err).Error(), 2)
			}
			deps.OpenBackend = openBackendFor(cfg.Backend, cfg.RL.DType, time.Duration(cfg.RetryFor), log)
			if from := c.String("base-eval-from"); from != "" {
				be, err := orchestrator.ReadBaseEval(from)
				if err != nil {
					return cli.Exit("run: --base-eval-from: "+err.Error(), 2)
				}
				if be == nil {
					return cli.Exit("run: --base-eval-from "+from+": that run has no base evaluation yet", 2)
				}
				deps.BaseEval = be // reused only if measured under this run's protocol (same model, env, prompts, eval seed)
			}
			res, err := orchestrator.Start(c.Context, cfg, deps)
			return reportRun(c, res, err)
		},
	}
}

func applyRunFlags(c *cli.Context, cfg *orchestrator.Config) error {
	if err := addEnvOptFlags(c, &cfg.Env.Options); err != nil {
		return err
	}
	if err := applyConfigFlags(c, runConfigFlags, cfg); err != nil {
		return err
	}
	if v := c.String("name"); v != "" {
		cfg.Name = v
	} else if c.String("config") == "" {
		cfg.Name = fmt.Sprintf("%s-%s-%s", cfg.Env.Name, cfg.Algo, time.Now().Format("20060102-150405"))
	}
	if v := c.String("update"); v != "" {
		if err := cfg.UseUpdate(v); err != nil {
			return err
		}
	}
	return nil
}

func reportRun(c *cli.Context, res *orchestrator.Result, err error) error {
	if err != nil {
		return cli.Exit("run: "+err.Error(), 1)
	}
	fmt.Fprintf(c.App.Writer, "run %s finished in %s\n", res.Dir, res.Duration.Round(time.Second))
	fmt.Fprintf(c.App.Writer, "%s\n", res.EvalProtocol)
	base := ""
	if h := res.State.BaseWeights; len(h) >= 12 {
		base = " (weights sha256 " + h[:12] + ")"
	}
	fmt.Fprintf(c.App.Writer, "base policy:    eval-seen success %.1f%%, eval-unseen %.1f%%%s\n", 100*res.Base.Seen, 100*res.Base.Unseen, base)
	fmt.Fprintf(c.App.Writer, "trained policy: eval-seen success %.1f%%, eval-unseen %.1f%%\n", 100*res.Final.Seen, 100*res.Final.Unseen)
	if res.Final.SampledTemperature > 0 {
		fmt.Fprintf(c.App.Writer, "sampled at T=%g: eval-seen success %.1f%% (base %.1f%%)\n", res.Final.SampledTemperature, 100*res.Final.SeenSampled, 100*res.Base.SeenSampled)
	}
	fmt.Fprintf(c.App.Writer, "report: %s (tables: %s)\n", orchestrator.HTMLReportPath(res.Dir), filepath.Join(res.Dir, "report", "results.md"))
	return nil
}

func configCommand() *cli.Command {
	return &cli.Command{
		Name:  "config",
		Usage: "run configurations",
		Subcommands: []*cli.Command{
			{
				Name:      "check",
				Usage:     "parse and validate run configs; paths that do not exist on this machine are reported",
				ArgsUsage: "FILE...",
				Flags: []cli.Flag{&cli.BoolFlag{Name: "strict", Usage: "missing model folders are errors"},
					&cli.Float64SliceFlag{Name: "device-memory", Usage: "GiB of accelerator memory to check the memory plan against, e.g. 80 or 80,141 (configs that do not fit fail, with the knob to turn)"},
					&cli.BoolFlag{Name: "probe", Usage: "also contact the running servers the config names (backend, external analyzer, env servers, retriever)"}},
				Action: func(c *cli.Context) error {
					if c.NArg() == 0 {
						return cli.Exit("config check: give at least one FILE", 2)
					}
					bad := 0
					for _, f := range c.Args().Slice() {
						cfg, err := orchestrator.Load(f)
						if err == nil {
							err = cfg.Validate()
						}
						if err != nil {
							bad++
							fmt.Fprintf(c.App.Writer, "%s: INVALID: %v\n", f, err)
							continue
						}
						var notes []string
						if _, err := os.Stat(filepath.Join(cfg.Model, "config.json")); err != nil {
							notes = append(notes, fmt.Sprintf("model %s is not on this machine", cfg.Model))
							if c.Bool("strict") {
								bad++
							}
						}
						if cfg.Stage1.Analyzer.APIKeyEnv != "" && os.Getenv(cfg.Stage1.Analyzer.APIKeyEnv) == "" {
							notes = append(notes, fmt.Sprintf("analyzer key variable %s is not set", cfg.Stage1.Analyzer.APIKeyEnv))
						}
						status := "ok"
						if len(notes) > 0 {
							status = "ok (" + strings.Join(notes, "; ") + ")"
						}
						fmt.Fprintf(c.App.Writer, "%s: %s: algo %s, env %s/%s, backend %s, %d iterations × %d tasks × %d\n", f, status, cfg.Algo, cfg.Env.Kind, cfg.Env.Name, cfg.Backend.Kind, cfg.Iterations, cfg.TasksPerIteration, cfg.Rollout.GroupSize)
						for _, line := range cfg.Recipe() {
							fmt.Fprintf(c.App.Writer, "  %s\n", line)
						}
						if cfg.Backend.Kind != "embedded" || c.IsSet("device-memory") {
							bad += reportMemory(c.App.Writer, cfg, c.Float64Slice("device-memory"))
						}
						if c.Bool("probe") {
							bad += probeConfig(c.Context, c.App.Writer, f, cfg, logger(c))
						}
					}
					if bad > 0 {
						return cli.Exit(fmt.Sprintf("config check: %d failures in %d configs", bad, c.NArg()), 1)
					}
					return nil
				},
			},
			{
				Name:  "default",
				Usage: "print the embedded default configuration as JSON (a starting point for --config)",
				Action: func(c *cli.Context) error {
					b, _ := json.MarshalIndent(orchestrator.Default(), "", "  ")
					fmt.Fprintln(c.App.Writer, string(b))
					return nil
				},
			},
		},
	}
}

// startEmbedded builds the embedded server on scfg's checkpoint and the
// backend that talks to it: the one place the process reaches the server
// (and libtorch) for inference.
func startEmbedded(ctx context.Context, scfg server.Config, ic inference.Config, log zerolog.Logger) (inference.Backend, error) {
	srv, err := server.New(scfg, log.With().Str("component", "embedded-server").Logger())
	if err != nil {
		return nil, err
	}
	return inference.NewEmbedded(ctx, srv, ic, log)
}
