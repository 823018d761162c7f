package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"strconv"
	"sync"

	"github.com/seedctl/seedctl/envadapters"
	"github.com/seedctl/seedctl/envadapters/agentgym"
	"github.com/seedctl/seedctl/internal/atomicfile"
	"github.com/seedctl/seedctl/rollout"
)

// goalsFile is the run folder's record of the goal a remote server stated
// for each task index it was reset to.
const goalsFile = "env_goals.json"

// goalBook holds the index → goal record of a remote environment: what the
// run folder recorded (and env.goals_file gives), extended as new indices
// are reset, and checked on every reset. AgentGym servers map indices to
// goals by their data files (TextCraft: in the order os.listdir lists its
// recipes), so the same index can be another goal on another machine or
// commit; training or evaluating on it would compare unlike with unlike.
type goalBook struct {
	mu    sync.Mutex
	path  string // "" : not persisted
	from  map[int]string
	goals map[int]string
}

// readGoals reads an index → goal JSON object ({"12": "craft x", …}).
func readGoals(path string) (map[int]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var raw map[string]string
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("reading %s: want an object of index → goal: %w", path, err)
	}
	out := make(map[int]string, len(raw))
	for k, v := range raw {
		i, err := strconv.Atoi(k)
		if err != nil || i < 0 {
			return nil, fmt.Errorf("reading %s: key %q is not a task index", path, k)
		}
		out[i] = v
	}
	return out, nil
}

// openGoalBook starts from the run folder's record at path (absent: empty)
// and the goals given by givenPath ("" none), which must agree.
func openGoalBook(path, givenPath string) (*goalBook, error) {
	g := &goalBook{path: path, goals: map[int]string{}, from: map[int]string{}}
	if givenPath != "" {
		given, err := readGoals(givenPath)
		if err != nil {
			return nil, fmt.Errorf("env.goals_file: %w", err)
		}
		for i, goal := range given {
			g.goals[i], g.from[i] = goal, givenPath
		}
	}
	if path == "" {
		return g, nil
	}
	rec, err := readGoals(path)
	if errors.Is(err, fs.ErrNotExist) {
		return g, nil
	}
	if err != nil {
		return nil, err
	}
	for i, goal := range rec {
		if old, ok := g.goals[i]; ok && old != goal {
			return nil, fmt.Errorf("task index %d: %s records goal %q, env.goals_file %s gives %q", i, path, goal, givenPath, old)
		}
		g.goals[i] = goal
		if _, ok := g.from[i]; !ok {
			g.from[i] = path
		}
	}
	return g, nil
}

// check compares the goal obs states for index with the record, adding it
// when the index is new.
func (g *goalBook) check(index int, obs string) error {
	goal := agentgym.GoalOf(obs)
	if goal == "" {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if want, ok := g.goals[index]; ok {
		if want != goal {
			return fmt.Errorf("the server maps task index %d to goal %q, but %s records %q: it is not the server (AgentGym commit, or its data files' order on this machine) the run was made against", index, goal, g.from[index], want)
		}
		return nil
	}
	g.goals[index], g.from[index] = goal, g.path
	if g.path == "" {
		return nil
	}
	keys := make([]int, 0, len(g.goals))
	for i := range g.goals {
		keys = append(keys, i)
	}
	sort.Ints(keys)
	ordered := make(map[string]string, len(keys))
	for _, i := range keys {
		ordered[strconv.Itoa(i)] = g.goals[i]
	}
	b, err := json.MarshalIndent(ordered, "", " ")
	if err != nil {
		return err
	}
	if err := atomicfile.WriteBytes(g.path, append(b, '\n')); err != nil {
		return fmt.Errorf("recording task index %d's goal: %w", index, err)
	}
	return nil
}

// goalChecked is a factory whose environments check each reset's goal.
type goalChecked struct {
	inner rollout.EnvFactory
	book  *goalBook
}

func (f goalChecked) New(opts envadapters.Options) (envadapters.Env, error) {
	e, err := f.inner.New(opts)
	if err != nil {
		return nil, err
	}
	return goalCheckedEnv{Env: e, book: f.book}, nil
}

type goalCheckedEnv struct {
	envadapters.Env
	book *goalBook
}

func (e goalCheckedEnv) Reset(ctx context.Context, task envadapters.Task) (envadapters.Step, error) {
	st, err := e.Env.Reset(ctx, task)
	if err != nil {
		return st, err
	}
	if err := e.book.check(task.Index, st.Observation); err != nil {
		return envadapters.Step{}, fmt.Errorf("%s: %w", task.ID, err)
	}
	return st, nil
}
