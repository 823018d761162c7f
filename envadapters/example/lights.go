// Package example is the environment docs/adding-an-environment.md builds:
// "lights", a house whose rooms each have a switch; the task names the
// room whose light to turn on. Its actions are calls — walk(ROOM),
// flip() — and a reply names its action on a last line "CALL: …", a
// syntax none of the built-ins uses, read by the package's own Actions. Everything seedctl needs to know about an
// environment is here — tasks, episodes, the scripted expert, the
// oracle's hindsight and the prompts — and the package's init registers
// it. It is not part of seedctl's built-ins (no blank import in
// orchestrator/env.go), so it stays out of `seedctl env list`; the
// guide's test imports it.
package example

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/seedctl/seedctl/envadapters"
)

// Name is the environment's registry name.
const Name = "lights"

var rooms = []string{"kitchen", "hall", "bedroom", "bathroom", "study", "garage"}

func init() { envadapters.Register(builtin{}) }

type builtin struct{}

func (builtin) Name() string { return Name }
func (builtin) Description() string {
	return "a toy house: walk to the named room and flip its light on (the adding-an-environment guide's example)"
}
func (builtin) Families() []string { return []string{"switch_on"} }

// Splits: train and eval_seen draw rooms 0-3, eval_unseen the others.
func (builtin) SplitSize(s envadapters.Split) int {
	if s == envadapters.EvalUnseen {
		return 2
	}
	return 4
}

func (b builtin) Tasks(split envadapters.Split, n int) ([]envadapters.Task, error) {
	if n < 0 || n > b.SplitSize(split) {
		return nil, fmt.Errorf("lights: %d tasks of %s: it has %d", n, split, b.SplitSize(split))
	}
	out := make([]envadapters.Task, n)
	for i := range out {
		room := rooms[i]
		if split == envadapters.EvalUnseen {
			room = rooms[4+i]
		}
		out[i] = envadapters.Task{Env: Name, Split: split, Index: i, ID: envadapters.TaskID(Name, split, i), Family: "switch_on",
			Difficulty: 1, Goal: "turn on the light in the " + room + "."}
	}
	return out, nil
}

// New makes an instance; max_steps (default 6) bounds an episode.
func (builtin) New(opts envadapters.Options) (envadapters.Env, error) {
	if err := opts.CheckKeys("max_steps"); err != nil {
		return nil, err
	}
	n, err := opts.Int("max_steps", 6)
	if err != nil {
		return nil, err
	}
	return &env{maxSteps: n}, nil
}

type env struct {
	target, at string
	on         map[string]bool
	steps      int
	maxSteps   int
}

func (e *env) Reset(_ context.Context, t envadapters.Task) (envadapters.Step, error) {
	room := strings.TrimSuffix(strings.TrimPrefix(t.Goal, "turn on the light in the "), ".")
	e.target, e.at, e.on, e.steps = room, "hall", map[string]bool{}, 0
	obs := fmt.Sprintf("You are in the hall. The house has a %s.\nYour task is to: %s", strings.Join(rooms, ", a "), t.Goal)
	return envadapters.Step{Observation: obs, Admissible: e.admissible()}, nil
}

func (e *env) admissible() []string {
	out := []string{"flip()"}
	for _, r := range rooms {
		if r != e.at {
			out = append(out, "walk("+r+")")
		}
	}
	return out
}

// walkTo is the room of a walk(ROOM) call.
func walkTo(action string) (string, bool) {
	a := strings.ToLower(strings.Join(strings.Fields(action), ""))
	if r, ok := strings.CutPrefix(a, "walk("); ok && strings.HasSuffix(r, ")") && contains(rooms, strings.TrimSuffix(r, ")")) {
		return strings.TrimSuffix(r, ")"), true
	}
	return "", false
}

func (e *env) Step(_ context.Context, action string) (envadapters.Step, error) {
	if e.on == nil {
		return envadapters.Step{}, errors.New("lights: step before reset")
	}
	e.steps++
	st := envadapters.Step{}
	room, walk := walkTo(action)
	switch {
	case strings.ToLower(strings.Join(strings.Fields(action), "")) == "flip()":
		e.on[e.at] = true
		st.Observation = "The light in the " + e.at + " is on."
	case walk:
		e.at = room
		st.Observation = "You are in the " + e.at + "."
	default:
		st.Observation, st.Invalid = "Nothing happens.", true
	}
	if e.on[e.target] {
		st.Won, st.Done, st.Reward = true, true, 1
	}
	if e.steps >= e.maxSteps {
		st.Done = true
	}
	st.Admissible = e.admissible()
	return st, nil
}

func (e *env) Close() error { return nil }

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if x == y {
			return true
		}
	}
	return false
}

// Expert walks to the target room and flips its light on.
func (builtin) Expert(ev envadapters.Env) (envadapters.Expert, error) {
	e, ok := ev.(*env)
	if !ok || e.on == nil {
		return nil, errors.New("lights: the expert needs an instance of this environment, reset")
	}
	return expert{e}, nil
}

type expert struct{ e *env }

func (x expert) Act() (string, error) {
	if x.e.at != x.e.target {
		return "walk(" + x.e.target + ")", nil
	}
	return "flip()", nil
}

// Prompting: calls chosen from the admissible list, named on a last
// "CALL:" line (Calls); walk(ROOM) goes to ROOM (the first_places
// diagnostic).
func (builtin) Prompting() envadapters.Prompting {
	return envadapters.Prompting{
		System:         "You turn lights on in a house.",
		ActionRequest:  "Think if you like, then end your reply with one line CALL: followed by one of the admissible calls.",
		ListAdmissible: true,
		Actions:        Calls{},
		Place:          walkTo,
	}
}

// Calls reads the action of a reply: the call on its last "CALL:" line.
type Calls struct{}

// Extract returns the last "CALL:" line's call; ok is false without one.
func (Calls) Extract(text string, _ []string) (string, bool) {
	lines := strings.Split(text, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if c, ok := strings.CutPrefix(strings.TrimSpace(lines[i]), "CALL:"); ok {
			c = strings.TrimSpace(c)
			return c, c != ""
		}
	}
	return "", false
}

// HasBlock says whether a reply has a non-empty "CALL:" line.
func (c Calls) HasBlock(text string) bool {
	_, ok := c.Extract(text, nil)
	return ok
}

// Hindsight reads the episode's text: where the agent switched, whether
// it reached the room the task names.
func (builtin) Hindsight(ep envadapters.Episode, candidates []int, k int) envadapters.Hindsight {
	room := strings.TrimSuffix(strings.TrimPrefix(ep.Task.Goal, "turn on the light in the "), ".")
	h := envadapters.Hindsight{StepSkills: map[int]string{}}
	reached, wrong := false, ""
	for _, s := range ep.Steps {
		if s.Observation == "You are in the "+room+"." {
			reached = true
		}
		if strings.HasPrefix(s.Observation, "The light in the ") && !strings.Contains(s.Observation, room) {
			wrong = strings.TrimSuffix(strings.TrimPrefix(s.Observation, "The light in the "), " is on.")
		}
	}
	switch {
	case ep.Won:
		h.Summary = fmt.Sprintf("The agent turned on the %s light in %d steps.", room, len(ep.Steps))
		h.EpisodeSkill = envadapters.Pick(ep.ID, "win", "Walk to the room the task names first, then flip the light there.",
			"Walk straight to the named room and flip its switch; other rooms do not count.")
	case wrong != "":
		h.Summary = "The agent switched on a light in the wrong room."
		h.EpisodeSkill = fmt.Sprintf("Flipping in the %s does nothing for the %s: walk(%s) before flip().", wrong, room, room)
	case !reached:
		h.Summary = "The agent never reached the room."
		h.EpisodeSkill = "Call walk with the task's room before anything else."
	default:
		h.Summary = "The agent reached the room but did not switch the light on."
		h.EpisodeSkill = "Once in the named room, call flip() at once."
	}
	for _, c := range candidates {
		if len(h.StepSkills) < k {
			h.StepSkills[c] = fmt.Sprintf("Call walk(%s), or flip() if you are there.", room)
		}
	}
	return h
}
