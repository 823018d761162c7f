package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/rs/zerolog"
	"github.com/urfave/cli/v2"

	"github.com/seedctl/seedctl/envadapters"
	"github.com/seedctl/seedctl/inference"
	"github.com/seedctl/seedctl/inference/server"
	"github.com/seedctl/seedctl/rollout"
	"github.com/seedctl/seedctl/skills"
)

// backendFlags choose the inference server: the embedded one over --model,
// or a running vLLM/SGLang at --base-url.
func backendFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "model", Usage: "checkpoint folder: served by the embedded server (--backend embedded) and read for its tokenizer"},
		&cli.StringFlag{Name: "backend", Value: "embedded", Usage: "embedded, vllm or sglang"},
		&cli.StringFlag{Name: "base-url", Usage: "URL of a running vLLM/SGLang server (without /v1)"},
		&cli.StringFlag{Name: "served-model", Usage: "model name the server serves"},
		&cli.StringFlag{Name: "api-key-env", Usage: "environment variable holding the server's API key"},
	}
}

func openBackend(ctx context.Context, c *cli.Context, log zerolog.Logger) (inference.Backend, *rollout.Policy, error) {
	dir := c.String("model")
	if dir == "" {
		return nil, nil, fmt.Errorf("--model DIR is required (the checkpoint, for its tokenizer and, with the embedded backend, its weights)")
	}
	cfg := inference.DefaultConfig(c.String("backend"))
	cfg.BaseURL, cfg.Model, cfg.APIKeyEnv = c.String("base-url"), c.String("served-model"), c.String("api-key-env")
	var b inference.Backend
	var err error
	if cfg.Kind == "embedded" {
		scfg := server.DefaultConfig(dir)
		scfg.MaxModelLen = 16384
		b, err = startEmbedded(ctx, scfg, cfg, log)
	} else {
		b, err = inference.NewRemote(cfg, log)
	}
	if err != nil {
		return nil, nil, err
	}
	p, err := rollout.LoadPolicy(dir, b)
	if err != nil {
		b.Close()
		return nil, nil, err
	}
	return b, p, nil
}

// progressLine prints rollout progress to w at most once a second.
func progressLine(w io.Writer, label string, maxTurns int) rollout.Progress {
	return rollout.ProgressLine(w, label, maxTurns, time.Second)
}

func collectCommand() *cli.Command {
	def := rollout.DefaultConfig()
	return &cli.Command{
		Name:  "collect",
		Usage: "run the policy on tasks (B tasks × G trajectories) and save token-level trajectories",
		Flags: append(append(backendFlags(), agentgymFlags()...),
			&cli.StringFlag{Name: "env", Value: "household"},
			&cli.StringFlag{Name: "split", Value: "train"},
			&cli.IntFlag{Name: "tasks", Value: 8, Usage: "number of tasks (B)"},
			&cli.IntFlag{Name: "offset", Usage: "first task index"},
			&cli.IntFlag{Name: "group", Value: def.GroupSize, Usage: "trajectories per task (G)"},
			&cli.StringFlag{Name: "mode", Value: def.Mode, Usage: "chat or window"},
			&cli.IntFlag{Name: "max-tokens", Value: def.MaxTokensPerTurn, Usage: "tokens per turn"},
			&cli.Float64Flag{Name: "temperature", Value: def.Temperature},
			&cli.IntFlag{Name: "max-steps", Usage: "step limit (default: the environment's)"},
			envOptFlag(),
			&cli.Int64Flag{Name: "seed", Value: def.Seed},
			&cli.StringFlag{Name: "out", Required: true, Usage: "folder for trajectories.jsonl and metrics.json"},
		),
		Action: func(c *cli.Context) error {
			log := logger(c)
			b, _, release, err := openEnvSource(c, c.Int("max-steps"))
			if err != nil {
				return cli.Exit("collect: "+err.Error(), 2)
			}
			defer release()
			split, err := envadapters.ParseSplit(c.String("split"))
			if err != nil {
				return cli.Exit("collect: "+err.Error(), 2)
			}
			cfg := def
			cfg.GroupSize, cfg.Mode, cfg.MaxTokensPerTurn = c.Int("group"), c.String("mode"), c.Int("max-tokens")
			if cfg.EnvOptions, err = envOptions(c); err != nil {
				return cli.Exit("collect: "+err.Error(), 2)
			}
			cfg.Temperature, cfg.Seed = c.Float64("temperature"), c.Int64("seed")
			cfg.MaxSteps = c.Int("max-steps")
			if err := cfg.Validate(); err != nil {
				return cli.Exit("collect: "+err.Error(), 2)
			}
			off, n := c.Int("offset"), c.Int("tasks")
			if off < 0 || n < 1 || off+n > b.SplitSize(split) {
				return cli.Exit(fmt.Sprintf("collect: tasks %d..%d are outside %s/%s (0..%d)", off, off+n-1, b.Name(), split, b.SplitSize(split)-1), 2)
			}
			all, err := b.Tasks(split, off+n)
			if err != nil {
				return cli.Exit("collect: "+err.Error(), 1)
			}
			backend, policy, err := openBackend(c.Context, c, log)
			if err != nil {
				return cli.Exit("collect: "+err.Error(), 1)
			}
			defer backend.Close()
			runner, err := rollout.NewRunner(cfg, b.Name(), b, policy, log)
			if err != nil {
				return cli.Exit("collect: "+err.Error(), 2)
			}
			start := time.Now()
			trajs, err := runner.Run(c.Context, all[off:], 0, progressLine(c.App.ErrWriter, "collect", c.Int("max-steps")))
			if err != nil {
				return cli.Exit("collect: "+err.Error(), 1)
			}
			m := rollout.Summarize(trajs, time.Since(start))
			out := c.String("out")
			if err := rollout.WriteJSONL(filepath.Join(out, "trajectories.jsonl"), trajs); err != nil {
				return cli.Exit("collect: "+err.Error(), 1)
			}
			mb, _ := json.MarshalIndent(m, "", "  ")
			if err := os.WriteFile(filepath.Join(out, "metrics.json"), append(mb, '\n'), 0o644); err != nil {
				return cli.Exit("collect: "+err.Error(), 1)
			}
			fmt.Fprintf(c.App.Writer, "collected %d trajectories into %s: success %.1f%%, mean steps %.1f, invalid actions %.1f%%, %d tokens, %.2f episodes/s\n",
				m.Episodes, out, 100*m.Success, m.MeanSteps, 100*m.InvalidRate, m.TokensGenerated, m.EpisodesPerSec)
			return nil
		},
	}
}

func analyzeCommand() *cli.Command {
	return &cli.Command{
		Name:  "analyze",
		Usage: "write hindsight skills for collected trajectories (stage-1 data)",
		Flags: append(backendFlags(),
			&cli.StringFlag{Name: "in", Required: true, Usage: "folder holding trajectories.jsonl (from seedctl collect)"},
			&cli.StringFlag{Name: "analyzer", Value: "oracle", Usage: "oracle (built-in envs), self (the policy at --model) or external (--analyzer-url)"},
			&cli.StringFlag{Name: "analyzer-url", Usage: "external: OpenAI-compatible base URL including /v1"},
			&cli.StringFlag{Name: "analyzer-model", Usage: "external: model name"},
			&cli.StringFlag{Name: "analyzer-key-env", Usage: "external: environment variable with the API key"},
			&cli.IntFlag{Name: "k", Value: skills.DefaultMaxStepSkills, Usage: "most step skills per trajectory"},
			&cli.BoolFlag{Name: "no-repair", Usage: "self and external: an answer that does not parse is no skill at once (no repair prompt)"},
			&cli.Float64Flag{Name: "gamma", Value: 0.95, Usage: "discount for critical-step returns"},
			&cli.StringFlag{Name: "out", Usage: "skills file (default: IN/skills.jsonl)"},
		),
		Action: func(c *cli.Context) error {
			log := logger(c)
			in := c.String("in")
			trajs, err := rollout.ReadJSONL(filepath.Join(in, "trajectories.jsonl"))
			if errors.Is(err, fs.ErrNotExist) {
				return cli.Exit(fmt.Sprintf("analyze: --in %s: no trajectories.jsonl there; pass the folder `seedctl collect --out DIR` wrote", in), 2)
			}
			if err != nil {
				return cli.Exit("analyze: "+err.Error(), 1)
			}
			k := c.Int("k")
			var an skills.Analyzer
			switch c.String("analyzer") {
			case "oracle":
				an = &skills.OracleAnalyzer{K: k}
			case "self":
				backend, policy, err := openBackend(c.Context, c, log)
				if err != nil {
					return cli.Exit("analyze: "+err.Error(), 1)
				}
				defer backend.Close()
				an = &skills.SelfAnalyzer{Policy: policy, MaxTokens: 256, Temperature: 0, K: k, Snapshot: c.String("model"), NoRepair: c.Bool("no-repair")}
			case "external":
				cc := inference.DefaultChatConfig(c.String("analyzer-url"), c.String("analyzer-model"))
				cc.APIKeyEnv = c.String("analyzer-key-env")
				client, err := inference.NewChatClient(cc, log)
				if err != nil {
					return cli.Exit("analyze: "+err.Error(), 2)
				}
				an = &skills.ExternalAnalyzer{Client: client, K: k, MaxTokens: 512, Model: cc.Model, NoRepair: c.Bool("no-repair")}
			default:
				return cli.Exit(fmt.Sprintf("analyze: --analyzer %q: want oracle, self or external", c.String("analyzer")), 2)
			}
			cc := skills.DefaultCriticalConfig()
			cc.Gamma, cc.K = c.Float64("gamma"), k
			var reqs []skills.Request
			for _, g := range skills.Groups(trajs) {
				crit := skills.CriticalSteps(g, cc)
				for _, t := range g {
					reqs = append(reqs, skills.Request{Traj: t, Candidates: crit[t.ID]})
				}
			}
			prog := progressLine(c.App.ErrWriter, "analyze", 0)
			var recs []skills.Record
			const chunk = 32
			for lo := 0; lo < len(reqs); lo += chunk {
				part, err := an.Analyze(c.Context, reqs[lo:min(lo+chunk, len(reqs))])
				if err != nil {
					return cli.Exit("analyze: "+err.Error(), 1)
				}
				recs = append(recs, part...)
				prog(rollout.Status{Done: len(recs), Total: len(reqs)})
			}
			out := c.String("out")
			if out == "" {
				out = filepath.Join(in, "skills.jsonl")
			}
			if err := skills.WriteStore(out, recs); err != nil {
				return cli.Exit("analyze: "+err.Error(), 1)
			}
			withSkill, repaired, failed := 0, 0, 0
			for _, r := range recs {
				if r.Skill != nil {
					withSkill++
				}
				if r.Repaired {
					repaired++
				}
				if r.ParseError != "" {
					failed++
				}
			}
			fmt.Fprintf(c.App.Writer, "analyzed %d trajectories with %s into %s: %d skills, %d repaired, %d unparseable\n",
				len(recs), an.Name(), out, withSkill, repaired, failed)
			return nil
		},
	}
}
