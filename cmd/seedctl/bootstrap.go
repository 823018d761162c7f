package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/seedctl/seedctl/basemodel"
	"github.com/seedctl/seedctl/envadapters"
	"github.com/seedctl/seedctl/envadapters/agentgym"
	"github.com/seedctl/seedctl/orchestrator"
	"github.com/seedctl/seedctl/rollout"
)

// stageProgress prints a stage's progress with rate and ETA, at most once
// every two seconds per stage.
func stageProgress(w io.Writer) basemodel.Progress {
	starts := map[string]time.Time{}
	last := map[string]time.Time{}
	return func(stage string, done, total int, detail string) {
		now := time.Now()
		if _, ok := starts[stage]; !ok {
			starts[stage] = now
		}
		if now.Sub(last[stage]) < 2*time.Second && done < total {
			return
		}
		last[stage] = now
		el := now.Sub(starts[stage]).Seconds()
		eta := "?"
		if done > 0 {
			eta = (time.Duration(el/float64(done)*float64(total-done)) * time.Second).Round(time.Second).String()
		}
		fmt.Fprintf(w, "bootstrap %s: %d/%d (%s elapsed, ETA %s) %s\n", stage, done, total, (time.Duration(el) * time.Second).Round(time.Second), eta, detail)
	}
}

// textcraftSource is the running TextCraft server a run config's env
// section names, with the item-type table of recipesDir ("" none).
func textcraftSource(configPath, recipesDir string) (*agentgym.TextCraftSource, error) {
	if configPath == "" {
		return nil, errors.New("--env textcraft needs --env-config: a run config naming the TextCraft server (env.url) and its splits")
	}
	cfg, err := orchestrator.Load(configPath)
	if err != nil {
		return nil, err
	}
	if cfg.Env.Kind != "agentgym" || cfg.Env.Name != agentgym.TextCraft {
		return nil, fmt.Errorf("--env-config %s: env is %s %s, not agentgym textcraft", configPath, cfg.Env.Kind, cfg.Env.Name)
	}
	splits, err := cfg.Env.RemoteSplits()
	if err != nil {
		return nil, err
	}
	src := agentgym.NewTextCraftSource(cfg.Env.URL, splits)
	if recipesDir != "" {
		if src.Tags, err = agentgym.ReadTextCraftTags(recipesDir); err != nil {
			return nil, err
		}
	}
	return src, nil
}

// describeRanges is a split map as one line.
func describeRanges(splits map[string]agentgym.Range) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(splits)) {
		parts = append(parts, k+" "+splits[k].String())
	}
	return strings.Join(parts, ", ")
}

func bootstrapCommand() *cli.Command {
	return &cli.Command{
		Name:  "bootstrap",
		Usage: "build (or reuse) the tiny base policy for a built-in environment: expert corpus, tokenizer, pre-training",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "env", Value: "household"},
			&cli.StringFlag{Name: "size", Value: "tiny", Usage: "tiny or small"},
			&cli.StringFlag{Name: "out", Usage: "checkpoint folder (default: the user cache, keyed by recipe)"},
			&cli.IntFlag{Name: "episodes", Usage: "override the corpus size"},
			&cli.Float64Flag{Name: "epochs", Usage: "override the pre-training epochs"},
			&cli.IntFlag{Name: "batch-tokens", Usage: "override the padded tokens per optimizer step"},
			&cli.Float64Flag{Name: "lr", Usage: "override the peak learning rate"},
			&cli.Float64Flag{Name: "noise", Value: -1, Usage: "override the share of random actions in demonstrations"},
			&cli.Float64Flag{Name: "hint-share", Value: -1, Usage: "override the share of demonstrations with hints in context"},
			&cli.Float64Flag{Name: "renumber", Value: -1, Usage: "override the share of household demonstrations with permuted object numbers"},
			&cli.Uint64Flag{Name: "seed", Usage: "override the recipe's seed (the corpus's and the weights' initialisation)"},
			&cli.BoolFlag{Name: "prompt-loss", Usage: "train on every token (observations too), not only the responses"},
			&cli.IntFlag{Name: "micro-batch-tokens", Usage: "run each step as micro-batches of rows of similar length, at most this many padded tokens each (0: one padded batch per step; 2048: 1.3x faster here)"},
			&cli.BoolFlag{Name: "repeat-as-weight", Usage: "train repeated examples (rare decisions, hinted first steps) once with their repeat count as loss weight"},
			&cli.IntFlag{Name: "dagger-rounds", Value: -1, Usage: "override the rounds of refinement on the model's own states (0: none; see model refine)"},
			&cli.Float64Flag{Name: "search-follow", Usage: "with --places-line few or all: the share of the demonstrations' search steps that go to the first place the line names (the rest: a random place it names)"},
			&cli.StringFlag{Name: "places-line", Usage: "override the household prompt's places line: next (the next place not searched and a count), few (the next three and a count) or all (every place not searched); with few or all, demonstrations pick among the places named (see --search-follow)"},
			&cli.BoolFlag{Name: "rebuild", Usage: "build even when a cached model exists"},
			&cli.StringFlag{Name: "env-config", Usage: "with --env textcraft: a run config whose env section names the running TextCraft server and its splits (the corpus plays its first training goals)"},
			&cli.IntFlag{Name: "orders", Usage: "with --env textcraft: record each demonstration this many times, its crafting commands in a fresh order each time after the first"},
			&cli.StringFlag{Name: "textcraft-recipes", Usage: "with --env textcraft: AgentGym's agentenv_textcraft/recipes folder; the expert reads the server's item-type table from it (without it, types are read off item names: 478 of 544 goals)"},
			&cli.IntFlag{Name: "grade-episodes", Value: 200, Usage: "after building, measure the model on this many tasks of each eval split (greedy, plain and, on eval_seen, with oracle skills) and print it beside the committed base (0: not; household only)"},
		},
		Action: func(c *cli.Context) error {
			log := logger(c)
			warnForcedAVX2(log, "cpu")
			r, err := basemodel.DefaultRecipe(c.String("env"), c.String("size"))
			if err != nil {
				return cli.Exit("model bootstrap: "+err.Error(), 2)
			}
			if n := c.Int("episodes"); n > 0 {
				r.Corpus.Episodes = n
			}
			if e := c.Float64("epochs"); e > 0 {
				r.SFT.Epochs = e
			}
			if n := c.Int("batch-tokens"); n > 0 {
				r.SFT.BatchTokens = n
				r.SFT.MaxLen = min(r.SFT.MaxLen, n)
			}
			if lr := c.Float64("lr"); lr > 0 {
				r.SFT.LR = lr
			}
			if c.IsSet("noise") {
				r.Corpus.Noise = c.Float64("noise")
			}
			if c.IsSet("hint-share") {
				r.Corpus.HintShare = c.Float64("hint-share")
			}
			if c.IsSet("seed") {
				r.Seed, r.Corpus.Seed = c.Uint64("seed"), c.Uint64("seed")
			}
			if c.IsSet("renumber") {
				r.Corpus.Renumber = c.Float64("renumber")
			}
			if c.IsSet("places-line") {
				r.Corpus.PlacesLine = c.String("places-line")
			}
			if c.IsSet("search-follow") {
				r.Corpus.SearchFollow = c.Float64("search-follow")
			}
			if c.IsSet("micro-batch-tokens") {
				r.SFT.MicroBatchTokens = c.Int("micro-batch-tokens")
			}
			if c.IsSet("repeat-as-weight") {
				r.RepeatAsWeight = c.Bool("repeat-as-weight")
			}
			if c.IsSet("prompt-loss") {
				r.PromptLoss = c.Bool("prompt-loss")
			}
			if n := c.Int("dagger-rounds"); n == 0 {
				r.DAgger = basemodel.DAggerConfig{}
			} else if n > 0 {
				if r.DAgger.Rounds == 0 {
					r.DAgger = basemodel.DefaultDAgger()
				}
				r.DAgger.Rounds = n
			}
			var tc *agentgym.TextCraftSource
			if r.Env == agentgym.TextCraft {
				if tc, err = textcraftSource(c.String("env-config"), c.String("textcraft-recipes")); err != nil {
					return cli.Exit("model bootstrap: "+err.Error(), 2)
				}
				r.Source = tc
				if c.IsSet("orders") {
					r.Corpus.Orders = c.Int("orders")
				}
				r.SourceInfo = fmt.Sprintf("agentgym textcraft at %s, splits from %s (%s), item-type table: %v", tc.URL, c.String("env-config"), describeRanges(tc.Splits), tc.Tags != nil)
			} else if c.IsSet("env-config") || c.IsSet("textcraft-recipes") {
				return cli.Exit("model bootstrap: --env-config and --textcraft-recipes go with --env textcraft", 2)
			}
			if err := r.Corpus.Validate(); err != nil {
				return cli.Exit("model bootstrap: "+err.Error(), 2)
			}
			if err := r.DAgger.Validate(); err != nil {
				return cli.Exit("model bootstrap: "+err.Error(), 2)
			}
			if err := r.SFT.Validate(); err != nil {
				return cli.Exit("model bootstrap: "+err.Error(), 2)
			}
			out := c.String("out")
			start := time.Now()
			var dir string
			var built bool
			if c.Bool("rebuild") {
				if out == "" {
					base, err := basemodel.CacheDir()
					if err != nil {
						return cli.Exit("model bootstrap: "+err.Error(), 1)
					}
					out = base + "/" + r.Key()
				}
				err, dir, built = basemodel.Build(c.Context, r, out, log, stageProgress(c.App.ErrWriter)), out, true
			} else {
				dir, built, err = basemodel.Ensure(c.Context, r, out, log, stageProgress(c.App.ErrWriter))
			}
			if err != nil {
				return cli.Exit("model bootstrap: "+err.Error(), 1)
			}
			hash, err := basemodel.WeightsHash(dir)
			if err != nil {
				return cli.Exit("model bootstrap: hashing the weights: "+err.Error(), 1)
			}
			verb := "reused"
			if built {
				verb = "built"
			}
			fmt.Fprintf(c.App.Writer, "%s %s base model %s at %s in %s (weights sha256 %s)\n", verb, r.Env, basemodel.BaseName(r.Env, r.Size, hash), dir, time.Since(start).Round(time.Second), hash)
			if tc != nil && built && tc.Tags != nil {
				// Which demonstrations the server's item-type table made.
				needed := tc.NeededTags()
				b, _ := json.MarshalIndent(needed, "", " ")
				if err := os.WriteFile(filepath.Join(dir, "textcraft_tags_needed.json"), append(b, '\n'), 0o644); err != nil {
					return cli.Exit("model bootstrap: "+err.Error(), 1)
				}
				fmt.Fprintf(c.App.Writer, "%d of the corpus's goals needed the item-type table (%s)\n", len(needed), filepath.Join(dir, "textcraft_tags_needed.json"))
			}
			if n := c.Int("grade-episodes"); n > 0 && r.Env == orchestrator.Default().Env.Name {
				f, err := gradeBase(c, dir, n)
				if err != nil {
					return cli.Exit("model bootstrap: grading the model: "+err.Error(), 1)
				}
				cb, err := basemodel.Committed()
				if err != nil {
					return cli.Exit("model bootstrap: "+err.Error(), 1)
				}
				printGrades(c.App.Writer, basemodel.BaseName(r.Env, r.Size, hash), f, cb)
			}
			return nil
		},
	}
}

// gradeBase measures a household base on the embedded default's eval
// protocol (greedy, 20 steps, its environment options and places order,
// eval seed 1): plain on both eval splits, with oracle skills on
// eval_seen.
func gradeBase(c *cli.Context, dir string, episodes int) (basemodel.Figures, error) {
	def := orchestrator.Default()
	f := basemodel.Figures{Episodes: episodes}
	for _, g := range []struct {
		split envadapters.Split
		hints string
		into  *float64
	}{{envadapters.EvalSeen, "", &f.Seen}, {envadapters.EvalUnseen, "", &f.Unseen}, {envadapters.EvalSeen, "oracle", &f.SeenOracle}} {
		label := "grade " + string(g.split)
		if g.hints != "" {
			label += " with " + g.hints + " skills"
		}
		res, err := basemodel.Evaluate(c.Context, basemodel.EvalConfig{
			ModelDir: dir, Env: def.Env.Name, Split: g.split, Episodes: episodes, Hints: g.hints, Temperature: 0,
			MaxTokens: def.Rollout.MaxTokens, Seed: 1, MaxSteps: def.Env.MaxSteps, EnvOptions: envadapters.Options(def.Env.Options),
			PlacesOrder: def.Rollout.PlacesOrder,
		}, logger(c), progressLine(c.App.ErrWriter, label, def.Env.MaxSteps))
		if err != nil {
			return f, err
		}
		*g.into = res.Metrics.Success
	}
	return f, nil
}

// printGrades prints a built base's figures beside the committed base's.
func printGrades(w io.Writer, name string, f basemodel.Figures, cb basemodel.CommittedBase) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "greedy, %d tasks per split\t%s (this build)\t%s (committed, %d tasks)\n", f.Episodes, name, cb.Name, cb.Figures.Episodes)
	row := func(what string, a, b float64) { fmt.Fprintf(tw, "%s\t%.1f%%\t%.1f%%\n", what, 100*a, 100*b) }
	row("eval_seen", f.Seen, cb.Figures.Seen)
	row("eval_unseen", f.Unseen, cb.Figures.Unseen)
	row("eval_seen with oracle skills", f.SeenOracle, cb.Figures.SeenOracle)
	fmt.Fprintf(tw, "oracle gain (points)\t%+.1f\t%+.1f\n", 100*f.OracleGain(), 100*cb.Figures.OracleGain())
	fmt.Fprintf(tw, "parseable skills after stage 1\t(a run's iteration 1: skill_parse_ok)\t%.1f%%\n", 100*cb.Figures.SkillParse)
	tw.Flush()
}

func refineCommand() *cli.Command {
	d := basemodel.DefaultDAgger()
	return &cli.Command{
		Name:  "refine",
		Usage: "refine a bootstrapped base model on its own states (DAgger: it plays training tasks, the expert labels every step, it trains on the labels)",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "model", Required: true, Usage: "bootstrapped base model folder"},
			&cli.StringFlag{Name: "out", Required: true, Usage: "folder for the refined model"},
			&cli.IntFlag{Name: "rounds", Value: d.Rounds},
			&cli.IntFlag{Name: "episodes", Value: d.Episodes, Usage: "episodes played per round"},
			&cli.Float64Flag{Name: "epochs", Value: d.Epochs, Usage: "epochs over each round's examples"},
			&cli.Float64Flag{Name: "lr", Value: d.LR, Usage: "peak learning rate"},
			&cli.Float64Flag{Name: "keep-agreeing", Value: d.KeepAgreeing, Usage: "share of steps the model already got right that are trained on too"},
			&cli.Float64Flag{Name: "replay", Value: d.Replay, Usage: "corpus examples mixed in per relabelled one"},
			&cli.IntFlag{Name: "max-steps", Value: d.MaxSteps, Usage: "step limit of played episodes"},
		},
		Action: func(c *cli.Context) error {
			dc := d
			dc.Rounds, dc.Episodes, dc.Epochs, dc.LR = c.Int("rounds"), c.Int("episodes"), c.Float64("epochs"), c.Float64("lr")
			dc.KeepAgreeing, dc.Replay, dc.MaxSteps = c.Float64("keep-agreeing"), c.Float64("replay"), c.Int("max-steps")
			if dc.Rounds < 1 {
				return cli.Exit("model refine: rounds must be positive", 2)
			}
			if err := dc.Validate(); err != nil {
				return cli.Exit("model refine: "+err.Error(), 2)
			}
			start := time.Now()
			if err := basemodel.Refine(c.Context, c.String("model"), c.String("out"), dc, logger(c), stageProgress(c.App.ErrWriter)); err != nil {
				return cli.Exit("model refine: "+err.Error(), 1)
			}
			hash, _ := basemodel.WeightsHash(c.String("out"))
			fmt.Fprintf(c.App.Writer, "refined %s into %s in %s (weights sha256 %s)\n", c.String("model"), c.String("out"), time.Since(start).Round(time.Second), hash[:16])
			return nil
		},
	}
}

func evalCommand() *cli.Command {
	return &cli.Command{
		Name:  "eval",
		Usage: "success of a model on a split of an environment (a built-in, or an AgentGym server's with --agentgym-url), with or without oracle hints in context",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "model", Required: true},
			&cli.StringFlag{Name: "env", Value: "household"},
			&cli.StringFlag{Name: "split", Value: "eval_seen"},
			&cli.IntFlag{Name: "episodes", Value: 200},
			&cli.IntFlag{Name: "offset"},
			&cli.StringFlag{Name: "hints", Usage: "oracle: put the oracle's skill about an expert run of the same task in context; oracle-other: about a training task of the same family and goal object (does the knowledge transfer?)"},
			&cli.Float64Flag{Name: "temperature", Value: 0},
			&cli.IntFlag{Name: "group", Value: 1, Usage: "play each task this many times (use with --temperature 1): prints how alike a group's openings are and the share of flat groups"},
			&cli.IntFlag{Name: "max-tokens", Value: 48},
			&cli.StringFlag{Name: "mode", Usage: "chat or window (default: what the model was bootstrapped for, else chat)"},
			&cli.IntFlag{Name: "max-steps", Value: 20, Usage: "episode step limit (20: the embedded default's; 0: the environment's own)"},
			envOptFlag(),
			&cli.StringFlag{Name: "places-order", Value: orchestrator.Default().Rollout.PlacesOrder, Usage: "room (one order of the places line per room, as demonstrated) or episode (each episode draws its own: a group's samples are pointed at different first places; the embedded default's)"},
			&cli.StringFlag{Name: "save", Usage: "write the trajectories (JSONL) and the result (JSON) into this folder"},
			&cli.StringFlag{Name: "dtype", Value: "float32", Usage: "the embedded server's serving precision: float32 or bfloat16"},
			agentgymFlags()[0], agentgymFlags()[1],
		},
		Action: func(c *cli.Context) error {
			log := logger(c)
			split, err := envadapters.ParseSplit(c.String("split"))
			if err != nil {
				return cli.Exit("eval: "+err.Error(), 2)
			}
			if d := c.String("dtype"); d != "float32" && d != "bfloat16" {
				return cli.Exit(fmt.Sprintf("eval: --dtype %s: want float32 or bfloat16", d), 2)
			}
			src, builtin, release, err := openEnvSource(c, c.Int("max-steps"))
			if err != nil {
				return cli.Exit("eval: "+err.Error(), 2)
			}
			defer release()
			var source basemodel.Source
			if builtin == nil {
				source = src
			}
			if builtin == nil && c.String("env") == agentgym.TextCraft && c.String("hints") != "" {
				// The oracle's hints need an expert run of each task: the
				// TextCraft server as a built-in (the planner, by names).
				splits, err := parseSplits(c.String("splits"))
				if err != nil {
					return cli.Exit("eval: "+err.Error(), 2)
				}
				ec := orchestrator.EnvConfig{Kind: "agentgym", Name: agentgym.TextCraft, URL: c.String("agentgym-url"), MaxSteps: c.Int("max-steps"), Splits: splits}
				resolved, err := ec.RemoteSplits()
				if err != nil {
					return cli.Exit("eval: "+err.Error(), 2)
				}
				source = agentgym.NewTextCraftSource(ec.URL, resolved)
			}
			opts, err := evalEnvOptions(c)
			if err != nil {
				return cli.Exit("eval: "+err.Error(), 2)
			}
			res, err := basemodel.Evaluate(c.Context, basemodel.EvalConfig{
				ModelDir: c.String("model"), Env: c.String("env"), Split: split, Episodes: c.Int("episodes"), Offset: c.Int("offset"),
				Hints: c.String("hints"), Group: c.Int("group"), Temperature: c.Float64("temperature"), MaxTokens: c.Int("max-tokens"), Mode: c.String("mode"), Seed: 1, MaxSteps: c.Int("max-steps"), EnvOptions: opts,
				PlacesOrder: c.String("places-order"), Source: source, DType: c.String("dtype"),
			}, log, progressLine(c.App.ErrWriter, "eval", c.Int("max-steps")))
			if err != nil {
				return cli.Exit("eval: "+err.Error(), 1)
			}
			hints := "plain prompts"
			if c.String("hints") != "" {
				hints = c.String("hints") + " hints in context"
			}
			if dir := c.String("save"); dir != "" {
				if err := res.Save(dir); err != nil {
					return cli.Exit("eval: "+err.Error(), 1)
				}
			}
			w := c.App.Writer
			fmt.Fprintf(w, "%s %s (%s), %d episodes, %s: success %.1f%%, mean steps %.1f, invalid actions %.1f%% (%s)\n",
				c.String("env"), split, describeEvalSetting(opts, c.String("places-order")), res.Metrics.Episodes, hints, 100*res.Metrics.Success, res.Metrics.MeanSteps, 100*res.Metrics.InvalidRate, res.Elapsed.Round(time.Second))
			if c.Int("group") > 1 {
				m := res.Metrics
				fmt.Fprintf(w, "groups of %d at T=%g: first-action agreement %.2f, median distinct first places %.1f, flat failing %.1f%%, flat winning %.1f%%\n",
					c.Int("group"), c.Float64("temperature"), m.FirstActionAgreement, m.FirstPlaces, 100*m.FlatFailing, 100*m.FlatWinning)
			}
			if res.Donors != nil {
				won, n := 0, 0
				for _, t := range res.Trajs {
					if _, ok := res.Donors[t.Task.ID]; ok {
						n++
						if t.Won {
							won++
						}
					}
				}
				fmt.Fprintf(w, "%d of %d tasks had a donor (a training task of the same family and goal object); on them: success %.1f%% (%d/%d)\n",
					len(res.Donors), res.Metrics.Episodes/max(1, c.Int("group")), 100*float64(won)/float64(max(n, 1)), won, n)
			}
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "FAMILY\tWON\tEPISODES\tSUCCESS")
			for _, f := range res.Families() {
				c := res.PerFamily[f]
				fmt.Fprintf(tw, "%s\t%d\t%d\t%.1f%%\n", f, c[0], c[1], 100*float64(c[0])/float64(c[1]))
			}
			return tw.Flush()
		},
	}
}

func accuracyCommand() *cli.Command {
	return &cli.Command{
		Name:  "accuracy",
		Usage: "held-out step accuracy of a bootstrapped base model: greedy reply = the expert's, plain and with hints, per verb",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "model", Required: true},
			&cli.IntFlag{Name: "episodes", Value: 40, Usage: "held-out demonstrations (training tasks after the corpus's)"},
			&cli.BoolFlag{Name: "misses", Usage: "print wrong replies"},
		},
		Action: func(c *cli.Context) error {
			a, err := basemodel.MeasureModel(c.Context, c.String("model"), c.Int("episodes"))
			if err != nil {
				return cli.Exit("model accuracy: "+err.Error(), 1)
			}
			w := c.App.Writer
			fmt.Fprintf(w, "plain %.1f%% of %d steps, hinted %.1f%% of %d steps\n", 100*a.Plain, a.PlainSteps, 100*a.Hinted, a.HintedSteps)
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "VERB\tRIGHT\tSTEPS\tACCURACY")
			verbs := make([]string, 0, len(a.ByVerb))
			for v := range a.ByVerb {
				verbs = append(verbs, v)
			}
			sort.Strings(verbs)
			for _, v := range verbs {
				n := a.ByVerb[v]
				fmt.Fprintf(tw, "%s\t%d\t%d\t%.1f%%\n", v, n[0], n[1], 100*float64(n[0])/float64(n[1]))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if c.Bool("misses") {
				for _, m := range a.Misses {
					fmt.Fprintln(w, m)
				}
			}
			return nil
		},
	}
}

// evalEnvOptions are eval's environment options: for the embedded
// default's environment its options (household: placement_prior=0.8)
// under --env-opt and --max-steps, so that eval measures what a default
// run trains on; for other environments --env-opt alone.
func evalEnvOptions(c *cli.Context) (envadapters.Options, error) {
	opts, err := envOptions(c)
	if err != nil {
		return nil, err
	}
	def := orchestrator.Default().Env
	if c.String("env") != def.Name {
		return opts, nil
	}
	out := envadapters.Options{}
	for k, v := range def.Options {
		out[k] = v
	}
	for k, v := range opts {
		out[k] = v
	}
	return out, nil
}

// describeEvalSetting names an eval's environment options (max_steps left
// out: the line gives mean steps) and places order, for its result line.
func describeEvalSetting(opts envadapters.Options, order string) string {
	var kv []string
	for _, k := range slices.Sorted(maps.Keys(opts)) {
		if k != "max_steps" {
			kv = append(kv, k+"="+opts[k])
		}
	}
	if order == "" {
		order = rollout.PlacesOrderRoom
	}
	return strings.Join(append(kv, "places order "+order), ", ")
}
