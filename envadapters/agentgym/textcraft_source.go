package agentgym

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/seedctl/seedctl/envadapters"
)

// TextCraftSource is a running TextCraft server seen as a built-in
// (envadapters.Builtin), for what needs one: the base-model corpus (the
// planner's demonstrations, the oracle's hints) and its grading. Task i of
// a split is the i-th index of that split's range; an episode ends at the
// max_steps option (the server never ends one but at the goal).
type TextCraftSource struct {
	URL    string
	Splits map[string]Range
	// Tags is the server's item-type table for the expert (nil: types
	// read off item names; ReadTextCraftTags).
	Tags TextCraftTags

	mu     sync.Mutex
	needed map[int]string // goal index → goal, where Tags changed the plan
}

// NewTextCraftSource is the server at url with its splits.
func NewTextCraftSource(url string, splits map[string]Range) *TextCraftSource {
	return &TextCraftSource{URL: url, Splits: splits, needed: map[int]string{}}
}

// NeededTags lists the goals (index → goal) the expert has planned whose
// plan the item-type table changed: what the corpus could not have been
// without the server's data.
func (s *TextCraftSource) NeededTags() map[int]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[int]string, len(s.needed))
	for k, v := range s.needed {
		out[k] = v
	}
	return out
}

// Name is the flavor's.
func (s *TextCraftSource) Name() string { return TextCraft }

// Description names the server.
func (s *TextCraftSource) Description() string {
	return "AgentGym's TextCraft server at " + s.URL + ": craft a goal item from listed crafting commands"
}

// Families: TextCraft's goals carry no family; one for all.
func (s *TextCraftSource) Families() []string { return []string{"craft"} }

// SplitSize is the split's number of indices.
func (s *TextCraftSource) SplitSize(split envadapters.Split) int {
	return s.Splits[string(split)].Len()
}

// Tasks are the split's first n indices.
func (s *TextCraftSource) Tasks(split envadapters.Split, n int) ([]envadapters.Task, error) {
	r := s.Splits[string(split)]
	if n < 0 || n > r.Len() {
		return nil, fmt.Errorf("textcraft: %d tasks asked of split %s, which has %d", n, split, r.Len())
	}
	out := make([]envadapters.Task, n)
	for i := range out {
		out[i] = envadapters.Task{Env: TextCraft, Split: split, Index: r.At(i), ID: envadapters.TaskID(TextCraft, split, r.At(i)), Family: "craft"}
	}
	return out, nil
}

// New is a client of the server whose episodes end at max_steps.
func (s *TextCraftSource) New(opts envadapters.Options) (envadapters.Env, error) {
	if err := opts.CheckKeys("max_steps"); err != nil {
		return nil, err
	}
	limit, err := opts.Int("max_steps", 30)
	if err != nil {
		return nil, err
	}
	c, err := New(DefaultConfig(s.URL, TextCraft))
	if err != nil {
		return nil, err
	}
	return &limitedEnv{Client: c, limit: limit}, nil
}

// Expert is the planner over env's first observation.
func (s *TextCraftSource) Expert(env envadapters.Env) (envadapters.Expert, error) {
	le, ok := env.(*limitedEnv)
	if !ok {
		return nil, errors.New("textcraft expert: the env is not this source's")
	}
	x, err := NewTextCraftExpert(le.FirstObservation(), s.Tags)
	if err != nil || s.Tags == nil {
		return x, err
	}
	task, _ := ParseTextCraft(le.FirstObservation())
	if plain, perr := PlanTextCraft(task, nil); perr != nil || !slices.Equal(plain, x.plan) {
		s.mu.Lock()
		if s.needed == nil {
			s.needed = map[int]string{}
		}
		s.needed[le.index] = task.Goal
		s.mu.Unlock()
	}
	return x, nil
}

// Prompting is the flavor's.
func (s *TextCraftSource) Prompting() envadapters.Prompting { return Flavors[TextCraft].Prompting() }

// Hindsight is the flavor's oracle (TextCraftOracle).
func (s *TextCraftSource) Hindsight(ep envadapters.Episode, candidates []int, k int) envadapters.Hindsight {
	return TextCraftOracle{}.Hindsight(ep, candidates, k)
}

// limitedEnv ends an episode at its step limit.
type limitedEnv struct {
	*Client
	limit, steps, index int
}

func (e *limitedEnv) Reset(ctx context.Context, task envadapters.Task) (envadapters.Step, error) {
	e.steps, e.index = 0, task.Index
	return e.Client.Reset(ctx, task)
}

func (e *limitedEnv) Step(ctx context.Context, action string) (envadapters.Step, error) {
	st, err := e.Client.Step(ctx, action)
	if err != nil {
		return st, err
	}
	if e.steps++; e.steps >= e.limit {
		st.Done = true
	}
	return st, nil
}
