package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/seedctl/seedctl/envadapters"
	"github.com/seedctl/seedctl/envadapters/agentgym"
	_ "github.com/seedctl/seedctl/envadapters/builtins" // registers the built-ins
)

func envCommand() *cli.Command {
	return &cli.Command{
		Name:  "env",
		Usage: "list, play and serve the built-in environments",
		Subcommands: []*cli.Command{
			{
				Name:  "list",
				Usage: "the built-in environments, their families and split sizes",
				Action: func(c *cli.Context) error {
					tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
					fmt.Fprintln(tw, "ENV\tTRAIN\tEVAL_SEEN\tEVAL_UNSEEN\tFAMILIES\tDESCRIPTION")
					for _, n := range envadapters.Names() {
						b, _ := envadapters.Lookup(n)
						fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%s\n", n, b.SplitSize(envadapters.Train), b.SplitSize(envadapters.EvalSeen),
							b.SplitSize(envadapters.EvalUnseen), strings.Join(b.Families(), ","), b.Description())
					}
					return tw.Flush()
				},
			},
			{
				Name:  "play",
				Usage: "play a task in the terminal: read the observation, type an action (or its number)",
				Flags: append([]cli.Flag{
					&cli.StringFlag{Name: "env", Value: "household"},
					&cli.StringFlag{Name: "split", Value: "train"},
					&cli.IntFlag{Name: "task", Usage: "task index within the split"},
					&cli.BoolFlag{Name: "expert", Usage: "let the scripted expert play and print the transcript"},
					&cli.IntFlag{Name: "max-steps", Usage: "step limit (default: the environment's)"},
					envOptFlag(),
				}, agentgymFlags()...),
				Action: func(c *cli.Context) error {
					opts, err := envOptions(c)
					if err != nil {
						return cli.Exit("env play: "+err.Error(), 2)
					}
					src, builtin, release, err := openEnvSource(c, c.Int("max-steps"))
					if err != nil {
						return cli.Exit("env play: "+err.Error(), 2)
					}
					defer release()
					return playEnv(c.Context, c.App.Reader, c.App.Writer, src, builtin, c.String("split"), c.Int("task"), opts, c.Bool("expert"), c.Int("max-steps"))
				},
			},
			{
				Name:  "serve",
				Usage: "serve a built-in over AgentGym's HTTP protocol (for Python trainers such as AgentGym or verl-agent)",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "env", Value: "household"},
					&cli.StringFlag{Name: "split", Value: "train", Usage: "game N of /reset is task N of this split"},
					&cli.StringFlag{Name: "addr", Value: "127.0.0.1:36001"},
					&cli.IntFlag{Name: "max-steps", Usage: "step limit (default: the environment's)"},
					envOptFlag(),
				},
				Action: func(c *cli.Context) error {
					log := logger(c)
					opts, err := envOptions(c)
					if err != nil {
						return cli.Exit("env serve: "+err.Error(), 2)
					}
					b, err := envadapters.Lookup(c.String("env"))
					if err != nil {
						return cli.Exit("env serve: "+err.Error(), 2)
					}
					split, err := envadapters.ParseSplit(c.String("split"))
					if err != nil {
						return cli.Exit("env serve: "+err.Error(), 2)
					}
					s, err := agentgym.NewServer(b, split, opts, log)
					if err != nil {
						return cli.Exit("env serve: "+err.Error(), 2)
					}
					ln, err := net.Listen("tcp", c.String("addr"))
					if err != nil {
						return cli.Exit("env serve: "+err.Error(), 1)
					}
					// Slow or idle clients are cut, as the inference server cuts
					// them: headers in 10 s, a body in 60 s, idle connections
					// after 120 s.
					srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 60 * time.Second, IdleTimeout: 120 * time.Second}
					fmt.Fprintf(c.App.Writer, "serving %s (%s, %d tasks) over AgentGym's protocol at http://%s\n", b.Name(), split, b.SplitSize(split), ln.Addr())
					go func() {
						<-c.Context.Done()
						ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
						defer cancel()
						srv.Shutdown(ctx)
					}()
					if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
						return cli.Exit("env serve: "+err.Error(), 1)
					}
					return nil
				},
			},
		},
	}
}

// envOptFlag is the repeatable --env-opt KEY=VALUE flag: an environment
// option such as household's placement_prior=0.8.
func envOptFlag() cli.Flag {
	return &cli.StringSliceFlag{Name: "env-opt", Usage: "environment option KEY=VALUE, repeatable (household: placement_prior=0.8)"}
}

// envOptFlags reads the --env-opt flags.
func envOptFlags(c *cli.Context) (envadapters.Options, error) {
	opts := envadapters.Options{}
	for _, kv := range c.StringSlice("env-opt") {
		k, v, ok := strings.Cut(kv, "=")
		if k = strings.TrimSpace(k); !ok || k == "" {
			return nil, fmt.Errorf("--env-opt %q: want KEY=VALUE", kv)
		}
		opts[k] = strings.TrimSpace(v)
	}
	return opts, nil
}

// addEnvOptFlags sets the --env-opt options in a run config's
// env.options, over what the config has.
func addEnvOptFlags(c *cli.Context, into *map[string]string) error {
	opts, err := envOptFlags(c)
	if err != nil {
		return err
	}
	for k, v := range opts {
		if *into == nil {
			*into = map[string]string{}
		}
		(*into)[k] = v
	}
	return nil
}

// envOptions reads --env-opt and --max-steps (0 keeps the env's own
// limit) into env options.
func envOptions(c *cli.Context) (envadapters.Options, error) {
	opts, err := envOptFlags(c)
	if err != nil {
		return nil, err
	}
	if n := c.Int("max-steps"); n != 0 {
		return opts.With("max_steps", strconv.Itoa(n)), nil
	}
	return opts, nil
}

// playEnv runs one episode with a person (or the expert) at the keyboard.
// A remote env (builtin nil) has an expert only for TextCraft (the planner
// over its first observation); maxSteps ends the episode there (its server
// never does).
func playEnv(ctx context.Context, in io.Reader, out io.Writer, b envSource, builtin envadapters.Builtin, splitName string, index int, opts envadapters.Options, expert bool, maxSteps int) error {
	name := b.Name()
	if expert && builtin == nil && name != agentgym.TextCraft {
		return cli.Exit("env play: --expert: "+name+" is not a built-in, so it has no scripted expert", 2)
	}
	split, err := envadapters.ParseSplit(splitName)
	if err != nil {
		return cli.Exit("env play: "+err.Error(), 2)
	}
	if index < 0 || index >= b.SplitSize(split) {
		return cli.Exit(fmt.Sprintf("env play: --task %d: %s/%s has tasks 0..%d", index, name, split, b.SplitSize(split)-1), 2)
	}
	tasks, err := b.Tasks(split, index+1)
	if err != nil {
		return cli.Exit("env play: "+err.Error(), 1)
	}
	task := tasks[index]
	env, err := b.New(opts)
	if err != nil {
		return cli.Exit("env play: "+err.Error(), 2)
	}
	defer env.Close()
	st, err := env.Reset(ctx, task)
	if err != nil {
		return cli.Exit("env play: "+err.Error(), 1)
	}
	fmt.Fprintf(out, "[%s, family %s, difficulty %d]\n\n%s\n", task.ID, task.Family, task.Difficulty, st.Observation)
	var x envadapters.Expert
	switch {
	case expert && builtin != nil:
		if x, err = builtin.Expert(env); err != nil {
			return cli.Exit("env play: "+err.Error(), 1)
		}
	case expert:
		if x, err = agentgym.NewTextCraftExpert(st.Observation, nil); err != nil {
			return cli.Exit("env play: expert: "+err.Error(), 1)
		}
	}
	sc := bufio.NewScanner(in)
	steps := 0
	for !st.Done {
		var action string
		if x != nil {
			if action, err = x.Act(); err != nil {
				return cli.Exit("env play: expert: "+err.Error(), 1)
			}
			fmt.Fprintf(out, "\n> %s\n", action)
		} else {
			fmt.Fprintln(out, "\nAdmissible actions:")
			for i, a := range st.Admissible {
				fmt.Fprintf(out, "  %2d. %s\n", i+1, a)
			}
			fmt.Fprint(out, "> ")
			if !sc.Scan() {
				fmt.Fprintln(out, "\n(input ended)")
				return nil
			}
			action = strings.TrimSpace(sc.Text())
			if n, err := strconv.Atoi(action); err == nil && n >= 1 && n <= len(st.Admissible) {
				action = st.Admissible[n-1]
				fmt.Fprintf(out, "(%s)\n", action)
			}
		}
		if st, err = env.Step(ctx, action); err != nil {
			return cli.Exit("env play: "+err.Error(), 1)
		}
		steps++
		fmt.Fprintln(out, st.Observation)
		if maxSteps > 0 && steps >= maxSteps && !st.Done {
			fmt.Fprintf(out, "\n(step limit %d reached)\n", maxSteps)
			break
		}
	}
	result := "failed"
	if st.Won {
		result = "solved"
	}
	fmt.Fprintf(out, "\nEpisode over: %s in %d steps (reward %g).\n", result, steps, st.Reward)
	return nil
}
