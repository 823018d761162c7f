package household

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"

	"github.com/seedctl/seedctl/envadapters"
)

// Name is the registry name.
const Name = "household"

// DefaultMaxSteps is ALFWorld's step limit in the SEED reference setting.
const DefaultMaxSteps = 30

// NothingHappens is ALFWorld's answer to an action it cannot carry out.
const NothingHappens = "Nothing happens."

// Split sizes: plenty of distinct rooms for training, held-out evaluation.
var splitSizes = map[envadapters.Split]int{envadapters.Train: 20000, envadapters.EvalSeen: 2000, envadapters.EvalUnseen: 2000}

type builtin struct{}

func init() { envadapters.Register(builtin{}) }

func (builtin) Name() string { return Name }
func (builtin) Description() string {
	return "ALFWorld-like household tasks: find, clean, heat, cool, examine under a lamp, and place objects (6 families)"
}
func (builtin) Families() []string { return append([]string(nil), Families...) }

// Prompting: a place-searching environment with an admissible-action list,
// whose window turns are its own (Turns).
func (builtin) Prompting() envadapters.Prompting {
	return envadapters.Prompting{
		System:         "You are a household agent.",
		ActionRequest:  "Next action (go to a place, or an admissible action) in <action></action>:",
		ListAdmissible: true,
		Intro:          "You are an expert agent acting in the ALFRED embodied household environment.",
		Place:          GoesTo,
		Turns: func(style string) (envadapters.Turns, error) {
			t, err := NewTurns(style)
			if err != nil {
				return nil, err
			}
			return t, nil
		},
	}
}

// TransferKey groups tasks by family and the object type the goal names
// (skills.TransferIndex): another task's advice about the same kind of
// object in the same family transfers, about another object does not.
func (builtin) TransferKey(t envadapters.Task) string {
	return t.Family + "/" + GoalObject(t.Goal)
}

// GoalObject is the object type a task's goal names ("" if none).
func GoalObject(goal string) string {
	for _, w := range strings.Fields(strings.TrimSuffix(goal, ".")) {
		if objectType[w] {
			return w
		}
	}
	return ""
}

var objectType = func() map[string]bool {
	m := map[string]bool{}
	for _, o := range ObjectTypes() {
		m[o] = true
	}
	return m
}()

// GoesTo names the place a "go to PLACE" action goes to.
func GoesTo(action string) (string, bool) {
	p, ok := strings.CutPrefix(action, "go to ")
	if !ok || p == "" {
		return "", false
	}
	return p, true
}

func (builtin) SplitSize(split envadapters.Split) int { return splitSizes[split] }

func (builtin) Tasks(split envadapters.Split, n int) ([]envadapters.Task, error) {
	size, ok := splitSizes[split]
	if !ok {
		return nil, fmt.Errorf("household: unknown split %q", split)
	}
	if n < 0 || n > size {
		return nil, fmt.Errorf("household: %d tasks asked of split %s, which has %d", n, split, size)
	}
	out := make([]envadapters.Task, n)
	for i := range out {
		out[i] = taskFor(split, i)
	}
	return out, nil
}

// taskFor is task i of split with uniform placement. The placement prior
// changes where objects start, not the task line or family; Reset
// recomputes the difficulty, which depends on where the goal object is.
func taskFor(split envadapters.Split, i int) envadapters.Task {
	return taskOf(split, i, generate(split, i, 0))
}

func taskOf(split envadapters.Split, i int, w *world) envadapters.Task {
	return envadapters.Task{
		Env: Name, Split: split, Index: i, ID: envadapters.TaskID(Name, split, i),
		Family: w.goal.family, Difficulty: difficulty(w), Goal: w.goal.text,
	}
}

// Signature fingerprints a task's room and goal (for split-disjointness tests).
func Signature(split envadapters.Split, index int) string {
	return generate(split, index, 0).signature()
}

func (builtin) New(opts envadapters.Options) (envadapters.Env, error) {
	if err := opts.CheckKeys("max_steps", OptPlacementPrior); err != nil {
		return nil, fmt.Errorf("household: %w", err)
	}
	n, err := opts.Int("max_steps", DefaultMaxSteps)
	if err != nil {
		return nil, fmt.Errorf("household: %w", err)
	}
	if n < 1 {
		return nil, fmt.Errorf("household: option max_steps=%d must be at least 1", n)
	}
	prior, err := opts.Float(OptPlacementPrior, 0)
	if err != nil {
		return nil, fmt.Errorf("household: %w", err)
	}
	if prior < 0 || prior > 1 {
		return nil, fmt.Errorf("household: option %s=%g must be between 0 and 1", OptPlacementPrior, prior)
	}
	return &Env{maxSteps: n, prior: prior}, nil
}

func (builtin) Expert(e envadapters.Env) (envadapters.Expert, error) {
	h, ok := e.(*Env)
	if !ok || h.w == nil {
		return nil, errors.New("household: the expert needs a household env that has been reset")
	}
	return &expert{env: h}, nil
}

// OptPlacementPrior is the option that makes object placement follow
// per-type habits: the share of objects put where their type is usually
// kept (the same receptacle type in every room) instead of anywhere.
// 0, the default, is uniform placement; then the place where an episode
// found its object says nothing about the next episode's, and a hindsight
// skill has nothing about places to pass on. With a prior it has, as in
// ALFWorld, where apples are mostly in fridges and on counters.
const OptPlacementPrior = "placement_prior"

// Env is one household episode.
type Env struct {
	maxSteps int
	prior    float64
	w        *world
	task     envadapters.Task
	at       *recep
	held     *object
	lampOn   bool
	steps    int
	done     bool
	won      bool
}

// ErrNotReset means Step was called before Reset.
var ErrNotReset = errors.New("household: step before reset")

func (e *Env) Reset(_ context.Context, t envadapters.Task) (envadapters.Step, error) {
	size, ok := splitSizes[t.Split]
	if t.Env != "" && t.Env != Name || !ok || t.Index < 0 || t.Index >= size {
		return envadapters.Step{}, fmt.Errorf("household: cannot reset to task %q (split %q, index %d)", t.ID, t.Split, t.Index)
	}
	e.w = generate(t.Split, t.Index, e.prior)
	e.task = taskOf(t.Split, t.Index, e.w)
	e.at, e.held, e.lampOn, e.steps, e.done, e.won = nil, nil, false, 0, false, false
	names := make([]string, len(e.w.receps))
	for i, rc := range e.w.receps {
		names[i] = rc.name
	}
	obs := fmt.Sprintf("You are in the middle of a room. Looking quickly around you, you see %s.\n\nYour task is to: %s", listItems(names), e.w.goal.text)
	return envadapters.Step{Observation: obs, Admissible: e.admissible(), State: e.state()}, nil
}

// state is the agent's situation as the Step's State line: where it is,
// what it carries and in what condition, and the lamp. A receptacle's
// contents and open door show in the observation that describes it; what
// the agent carries does not after "go to", so without this line arriving
// somewhere with the object in hand and empty-handed read the same.
func (e *Env) state() string {
	at := "middle of the room"
	if e.at != nil {
		at = e.at.name
	}
	held := "nothing"
	if o := e.held; o != nil {
		held = o.name
		var cond []string
		if o.hot {
			cond = append(cond, "hot")
		}
		if o.cool {
			cond = append(cond, "cool")
		}
		if o.clean {
			cond = append(cond, "clean")
		}
		if len(cond) > 0 {
			held += " (" + strings.Join(cond, ", ") + ")"
		}
	}
	lamp := "off"
	if e.lampOn {
		lamp = "on"
	}
	return fmt.Sprintf("at: %s; carrying: %s; lamp: %s", at, held, lamp)
}

func (e *Env) Close() error { return nil }

// Task is the task of the current episode.
func (e *Env) Task() envadapters.Task { return e.task }

// listItems writes "a x 1", "a x 1, and a y 2", "a x 1, a y 2, and a z 3".
func listItems(names []string) string {
	if len(names) == 0 {
		return "nothing"
	}
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = "a " + n
	}
	if len(parts) == 1 {
		return parts[0]
	}
	return strings.Join(parts[:len(parts)-1], ", ") + ", and " + parts[len(parts)-1]
}

func contentNames(rc *recep) []string {
	out := make([]string, len(rc.contents))
	for i, o := range rc.contents {
		out[i] = o.name
	}
	return out
}

// describe is what one sees at a receptacle.
func describe(rc *recep) string {
	if rc.openable && !rc.open {
		return fmt.Sprintf("The %s is closed.", rc.name)
	}
	if rc.openable {
		return fmt.Sprintf("The %s is open. In it, you see %s.", rc.name, listItems(contentNames(rc)))
	}
	return fmt.Sprintf("On the %s, you see %s.", rc.name, listItems(contentNames(rc)))
}

// normalize lower-cases, trims, collapses spaces and drops a final period.
func normalize(a string) string {
	a = strings.ToLower(strings.TrimSpace(a))
	a = strings.TrimRight(a, ".!")
	return strings.Join(strings.Fields(a), " ")
}

func (e *Env) Step(_ context.Context, action string) (envadapters.Step, error) {
	if e.w == nil {
		return envadapters.Step{}, ErrNotReset
	}
	if e.done {
		return envadapters.Step{Observation: "The episode is over.", Done: true, Won: e.won, Invalid: true}, nil
	}
	e.steps++
	obs, ok := e.apply(normalize(action))
	st := envadapters.Step{Observation: obs, Invalid: !ok, State: e.state()}
	if !ok {
		st.Observation = NothingHappens
	}
	if e.satisfied() {
		e.won, e.done = true, true
		st.Reward, st.Won = 1, true
	}
	if e.steps >= e.maxSteps {
		e.done = true
	}
	st.Done = e.done
	if !e.done {
		st.Admissible = e.admissible()
	}
	return st, nil
}

// apply carries out an action; ok is false when nothing happens.
func (e *Env) apply(a string) (string, bool) {
	w := e.w
	verb, rest, _ := strings.Cut(a, " ")
	switch {
	case a == "look":
		if e.at == nil {
			return "You are in the middle of a room. Looking quickly around you, you see nothing.", true
		}
		return fmt.Sprintf("You are facing the %s. Next to it, you see nothing.", e.at.name), true
	case a == "inventory":
		if e.held == nil {
			return "You are not carrying anything.", true
		}
		return fmt.Sprintf("You are carrying: a %s.", e.held.name), true
	case strings.HasPrefix(a, "go to "):
		rc := w.byName[strings.TrimPrefix(a, "go to ")]
		if rc == nil || rc == e.at {
			return "", false
		}
		e.at = rc
		return fmt.Sprintf("You arrive at %s. %s", rc.name, describe(rc)), true
	case verb == "open" || verb == "close":
		rc := w.byName[rest]
		if rc == nil || rc != e.at || !rc.openable || rc.open == (verb == "open") {
			return "", false
		}
		rc.open = verb == "open"
		if rc.open {
			return fmt.Sprintf("You open the %s. %s", rc.name, describe(rc)), true
		}
		return fmt.Sprintf("You close the %s.", rc.name), true
	case verb == "take":
		on, from, found := strings.Cut(rest, " from ")
		o, rc := w.objects[on], w.byName[from]
		if !found || o == nil || rc == nil || o.lamp || e.held != nil || rc != e.at || o.loc != rc || rc.openable && !rc.open {
			return "", false
		}
		rc.contents = removeObj(rc.contents, o)
		o.loc, e.held = nil, o
		return fmt.Sprintf("You pick up the %s from the %s.", o.name, rc.name), true
	case verb == "move" || verb == "put":
		var on, to string
		var found bool
		if verb == "move" {
			on, to, found = strings.Cut(rest, " to ")
		} else if on, to, found = strings.Cut(rest, " in/on "); !found {
			if on, to, found = strings.Cut(rest, " in "); !found {
				on, to, found = strings.Cut(rest, " on ")
			}
		}
		o, rc := w.objects[on], w.byName[to]
		if !found || o == nil || rc == nil || e.held != o || rc != e.at || rc.openable && !rc.open {
			return "", false
		}
		rc.contents = append(rc.contents, o)
		o.loc, e.held = rc, nil
		return fmt.Sprintf("You move the %s to the %s.", o.name, rc.name), true
	case verb == "heat" || verb == "cool" || verb == "clean":
		on, with, found := strings.Cut(rest, " with ")
		o, rc := w.objects[on], w.byName[with]
		need := map[string]string{"heat": "microwave", "cool": "fridge", "clean": "sinkbasin"}[verb]
		if !found || o == nil || rc == nil || e.held != o || rc != e.at || rc.typ != need {
			return "", false
		}
		switch verb {
		case "heat":
			o.hot, o.cool = true, false
		case "cool":
			o.cool, o.hot = true, false
		case "clean":
			o.clean = true
		}
		return fmt.Sprintf("You %s the %s using the %s.", verb, o.name, rc.name), true
	case verb == "use":
		l := w.objects[rest]
		if l == nil || !l.lamp || l.loc != e.at {
			return "", false
		}
		e.lampOn = true
		return fmt.Sprintf("You turn on the %s.", l.name), true
	case verb == "examine":
		if rc := w.byName[rest]; rc != nil && rc == e.at {
			return describe(rc), true
		}
		if o := w.objects[rest]; o != nil && (o == e.held || o.loc == e.at && e.at != nil && (!e.at.openable || e.at.open)) {
			if o == e.held && e.lampOn && w.lamp != nil && w.lamp.loc == e.at {
				return fmt.Sprintf("You look at the %s under the %s.", o.name, w.lamp.name), true
			}
			return fmt.Sprintf("There's nothing special about %s.", o.name), true
		}
		return "", false
	}
	return "", false
}

func removeObj(xs []*object, o *object) []*object {
	out := xs[:0:0]
	for _, x := range xs {
		if x != o {
			out = append(out, x)
		}
	}
	return out
}

// satisfied checks the goal on the current state.
func (e *Env) satisfied() bool {
	g := e.w.goal
	if g.family == LookInLight {
		return e.lampOn && e.held != nil && e.held.typ == g.obj && e.w.lamp != nil && e.w.lamp.loc == e.at
	}
	n := 0
	for _, rc := range e.w.receps {
		if rc.typ != g.target {
			continue
		}
		for _, o := range rc.contents {
			if o.typ == g.obj && hasProperty(o, g.family) {
				n++
			}
		}
	}
	if g.family == PickTwo {
		return n >= 2
	}
	return n >= 1
}

func hasProperty(o *object, fam string) bool {
	switch fam {
	case PickClean:
		return o.clean
	case PickHeat:
		return o.hot
	case PickCool:
		return o.cool
	}
	return true
}

// admissible lists the actions that do something now, as ALFWorld does.
func (e *Env) admissible() []string {
	var out []string
	for _, rc := range e.w.receps {
		if rc != e.at {
			out = append(out, "go to "+rc.name)
		}
	}
	out = append(out, "inventory", "look")
	if rc := e.at; rc != nil {
		out = append(out, "examine "+rc.name)
		if rc.openable {
			if rc.open {
				out = append(out, "close "+rc.name)
			} else {
				out = append(out, "open "+rc.name)
			}
		}
		visible := !rc.openable || rc.open
		if visible && e.held == nil {
			for _, o := range rc.contents {
				if !o.lamp {
					out = append(out, fmt.Sprintf("take %s from %s", o.name, rc.name))
				}
			}
		}
		for _, o := range rc.contents {
			if o.lamp {
				out = append(out, "use "+o.name)
			}
		}
		if h := e.held; h != nil {
			out = append(out, "examine "+h.name)
			if visible {
				out = append(out, fmt.Sprintf("move %s to %s", h.name, rc.name))
			}
			switch rc.typ {
			case "microwave":
				out = append(out, fmt.Sprintf("heat %s with %s", h.name, rc.name))
			case "fridge":
				out = append(out, fmt.Sprintf("cool %s with %s", h.name, rc.name))
			case "sinkbasin":
				out = append(out, fmt.Sprintf("clean %s with %s", h.name, rc.name))
			}
		}
	}
	sort.Strings(out)
	return out
}

// Mistake returns an action a weak policy plausibly tries here that does
// nothing: taking the goal object by a number that is not in sight, or
// going to the place it is already at. Demonstrations show such mistakes
// (and the expert going on after "Nothing happens.") so that a policy
// trained on them has seen how to recover; "" when no such action exists
// (nothing held and no place yet).
func (e *Env) Mistake(r *rand.Rand) string {
	if e.w == nil || e.done || e.at == nil {
		return ""
	}
	g := e.w.goal
	if e.held == nil && r.IntN(3) > 0 {
		adm := e.admissible()
		for range 4 {
			name := fmt.Sprintf("%s %d", g.obj, 1+r.IntN(3))
			a := fmt.Sprintf("take %s from %s", name, e.at.name)
			if !slices.Contains(adm, a) {
				return a
			}
		}
	}
	return "go to " + e.at.name
}
