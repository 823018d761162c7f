package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/seedctl/seedctl/envadapters"
	"github.com/seedctl/seedctl/envadapters/agentgym"
	// The built-ins, registered where runs look them up (OpenEnv and
	// Config.Validate).
	_ "github.com/seedctl/seedctl/envadapters/builtins"
)

// OpenEnv makes a run's environment: a built-in by name, or an AgentGym
// server (task i of a split is the server's index start+i of that split's
// range, env.splits or the flavor's defaults), whose envs are pooled: one
// per concurrent episode, reset for each episode, released when the run
// ends.
func OpenEnv(c EnvConfig) (Env, error) {
	switch c.Kind {
	case "", "builtin":
		b, err := envadapters.Lookup(c.Name)
		if err != nil {
			return Env{}, err
		}
		return Env{Name: b.Name(), Tasks: b, Factory: b}, nil
	case "agentgym":
		splits, err := c.RemoteSplits()
		if err != nil {
			return Env{}, err
		}
		pool, err := agentgym.NewPool(agentgym.DefaultConfig(c.URL, c.Name))
		if err != nil {
			return Env{}, err
		}
		return Env{Name: c.Name, Tasks: remoteTasks{env: c.Name, splits: splits}, Factory: pool, Close: pool.Close}, nil
	}
	return Env{}, fmt.Errorf("env kind %q: want builtin or agentgym", c.Kind)
}

// RemoteSplits resolves and checks an AgentGym env's index ranges: each
// split's from env.splits, else the flavor's default; every range inside
// the server's data; train disjoint from both eval splits. The errors
// name the field and the fix.
func (c EnvConfig) RemoteSplits() (map[string]agentgym.Range, error) {
	info, ok := agentgym.Flavors[c.Name]
	if !ok {
		return nil, fmt.Errorf("config: env.name %q: AgentGym flavors are alfworld, webshop, sciworld, textcraft and babyai", c.Name)
	}
	if len(c.SplitSizes) > 0 {
		return nil, errors.New("config: env.split_sizes numbered every split from index 0, so evaluation ran on training tasks; " +
			"give env.splits {\"train\": {\"start\", \"count\"}, \"eval_seen\": …, \"eval_unseen\": …}, or leave both out for the flavor's defaults")
	}
	out := map[string]agentgym.Range{}
	for _, s := range []string{"train", "eval_seen", "eval_unseen"} {
		r, ok := c.Splits[s]
		if !ok {
			if r, ok = info.Splits[s]; !ok {
				return nil, fmt.Errorf("config: env.splits.%s is required for agentgym %s (%s)", s, c.Name, info.Source)
			}
		}
		switch {
		case r.Check() != "":
			return nil, fmt.Errorf("config: env.splits.%s %s: %s", s, r, r.Check())
		case info.DataSize > 0 && r.End() > info.DataSize:
			return nil, fmt.Errorf("config: env.splits.%s %s reaches index %d; agentgym %s has indices 0-%d (%s)", s, r, r.End()-1, c.Name, info.DataSize-1, info.Source)
		case s == "train" && r.Len() < 1:
			return nil, errors.New("config: env.splits.train must have at least one task")
		}
		out[s] = r
	}
	for k := range c.Splits {
		if _, ok := out[k]; !ok {
			return nil, fmt.Errorf("config: env.splits.%s: the splits are train, eval_seen and eval_unseen", k)
		}
	}
	for _, s := range []string{"eval_seen", "eval_unseen"} {
		if out["train"].Overlaps(out[s]) {
			return nil, fmt.Errorf("config: env.splits.train (%s) and env.splits.%s (%s) share indices: evaluation would run on training tasks",
				out["train"], s, out[s])
		}
	}
	if out["eval_seen"].Overlaps(out["eval_unseen"]) {
		return nil, fmt.Errorf("config: env.splits.eval_seen (%s) and env.splits.eval_unseen (%s) share indices: the two evaluations would not be distinct",
			out["eval_seen"], out["eval_unseen"])
	}
	return out, nil
}

// describeSplits is config check's line on a remote env's index ranges.
func describeSplits(splits map[string]agentgym.Range) string {
	keys := make([]string, 0, len(splits))
	for k := range splits {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, k+" "+splits[k].String())
	}
	return strings.Join(parts, ", ")
}

// remoteTasks numbers a remote environment's tasks per split: task i of a
// split is index start+i on the server.
type remoteTasks struct {
	env    string
	splits map[string]agentgym.Range
}

func (r remoteTasks) SplitSize(s envadapters.Split) int { return r.splits[string(s)].Len() }

func (r remoteTasks) Tasks(s envadapters.Split, n int) ([]envadapters.Task, error) {
	rg := r.splits[string(s)]
	if n > rg.Len() {
		return nil, fmt.Errorf("%s/%s: %d tasks asked, the split has %d (env.splits.%s)", r.env, s, n, rg.Len(), s)
	}
	out := make([]envadapters.Task, n)
	for i := range out {
		out[i] = envadapters.Task{Env: r.env, Split: s, Index: rg.At(i), ID: envadapters.TaskID(r.env, s, rg.At(i))}
	}
	return out, nil
}

// ProbeRemoteEnv resets one environment of an AgentGym config's server to
// its first training task and checks that the server answers as the
// configured flavor and, with env.goals_file, with the goal that file gives
// the index. The error wraps agentgym.ErrNoFlavorMarks when the flavor
// cannot be told by its observations.
func ProbeRemoteEnv(ctx context.Context, c EnvConfig) (string, error) {
	splits, err := c.RemoteSplits()
	if err != nil {
		return "", err
	}
	cl, err := agentgym.New(agentgym.DefaultConfig(c.URL, c.Name))
	if err != nil {
		return "", err
	}
	defer cl.Close()
	index := splits["train"].At(0)
	st, err := cl.Reset(ctx, envadapters.Task{Index: index})
	if err != nil {
		return "", err
	}
	if err := agentgym.CheckFlavor(c.Name, st.Observation); err != nil {
		return "", err
	}
	goal := agentgym.GoalOf(st.Observation)
	if c.GoalsFile != "" {
		book, err := openGoalBook("", c.GoalsFile)
		if err != nil {
			return "", err
		}
		if err := book.check(index, st.Observation); err != nil {
			return "", err
		}
		return fmt.Sprintf("task index %d answers as %s, goal %q as env.goals_file gives it", index, c.Name, goal), nil
	}
	return fmt.Sprintf("task index %d answers as %s (goal %q)", index, c.Name, goal), nil
}
