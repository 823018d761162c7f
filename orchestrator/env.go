package orchestrator

import (
	"fmt"

	"github.com/seedctl/seedctl/envadapters"
	"github.com/seedctl/seedctl/envadapters/agentgym"
)

// OpenEnv makes a run's environment: a built-in by name, or an AgentGym
// server (tasks are its indices per split, as configured).
func OpenEnv(c EnvConfig) (Env, error) {
	switch c.Kind {
	case "", "builtin":
		b, err := envadapters.Lookup(c.Name)
		if err != nil {
			return Env{}, err
		}
		return Env{Name: b.Name(), Tasks: b, Factory: b}, nil
	case "agentgym":
		cfg := agentgym.DefaultConfig(c.URL, c.Name)
		if err := cfg.Validate(); err != nil {
			return Env{}, err
		}
		return Env{Name: c.Name, Tasks: remoteTasks{env: c.Name, sizes: c.SplitSizes}, Factory: agentgymFactory{cfg}}, nil
	}
	return Env{}, fmt.Errorf("env kind %q: want builtin or agentgym", c.Kind)
}

// remoteTasks numbers a remote environment's tasks per split.
type remoteTasks struct {
	env   string
	sizes map[string]int
}

func (r remoteTasks) SplitSize(s envadapters.Split) int { return r.sizes[string(s)] }

func (r remoteTasks) Tasks(s envadapters.Split, n int) ([]envadapters.Task, error) {
	if n > r.sizes[string(s)] {
		return nil, fmt.Errorf("%s/%s: %d tasks asked, %d configured (env.split_sizes)", r.env, s, n, r.sizes[string(s)])
	}
	out := make([]envadapters.Task, n)
	for i := range out {
		out[i] = envadapters.Task{Env: r.env, Split: s, Index: i, ID: envadapters.TaskID(r.env, s, i)}
	}
	return out, nil
}

type agentgymFactory struct{ cfg agentgym.Config }

func (f agentgymFactory) New(envadapters.Options) (envadapters.Env, error) {
	return agentgym.New(f.cfg)
}
