// Package envadapters defines the environments SEED trains agents in: the
// Env interface, task splits, a registry of environments by name, and the
// scripted experts that solve the built-in ones. Built-ins live in
// sub-packages (household, ...); remote environments (AgentGym servers) are
// reached through the agentgym adapter.
package envadapters

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// Split is a task split.
type Split string

const (
	Train      Split = "train"
	EvalSeen   Split = "eval_seen"   // held-out tasks from the training distribution
	EvalUnseen Split = "eval_unseen" // held-out object types and layouts
)

// ParseSplit accepts train, eval_seen / seen, eval_unseen / unseen.
func ParseSplit(s string) (Split, error) {
	switch strings.ToLower(strings.ReplaceAll(s, "-", "_")) {
	case "train":
		return Train, nil
	case "eval_seen", "seen":
		return EvalSeen, nil
	case "eval_unseen", "unseen":
		return EvalUnseen, nil
	}
	return "", fmt.Errorf("split %q: want train, eval_seen or eval_unseen", s)
}

// Splits lists all splits.
var Splits = []Split{Train, EvalSeen, EvalUnseen}

// Task identifies one task and carries its metadata.
type Task struct {
	Env        string `json:"env"`
	Split      Split  `json:"split"`
	Index      int    `json:"index"`
	ID         string `json:"id"`     // "<env>/<split>/<index>"
	Family     string `json:"family"` // e.g. pick_heat_then_place
	Difficulty int    `json:"difficulty"`
	Goal       string `json:"goal"` // the task line, e.g. "put a hot egg in fridge."
}

// Step is what the environment returns after reset or an action.
type Step struct {
	Observation string   `json:"observation"`
	Admissible  []string `json:"admissible,omitempty"`
	Reward      float64  `json:"reward"`
	Done        bool     `json:"done"`
	Won         bool     `json:"won"`
	// Invalid: the action was not understood or not possible here (the env
	// answered with its "Nothing happens."-style feedback).
	Invalid bool `json:"invalid,omitempty"`
	// Err is set when the environment itself failed (e.g. a remote server
	// went away after retries); the episode ends as failed, not lost.
	Err string `json:"error,omitempty"`
	// Score is a graded result where the env has one (WebShop 0-100).
	Score float64 `json:"score,omitempty"`
	// State, where the environment reports it, names what the agent's
	// situation holds that the observation text may not show (the
	// household's: where the agent is, what it carries and in what
	// condition, whether the lamp is on). Step-level advantages can
	// group steps by observation and state (rl.step_group_key). Empty
	// where the environment has none (remote servers).
	State string `json:"state,omitempty"`
}

// Env is one episode-running environment instance. Instances are not safe
// for concurrent use; run one per episode.
type Env interface {
	// Reset starts task and returns the first observation, which includes
	// the task line "Your task is to: ...".
	Reset(ctx context.Context, task Task) (Step, error)
	// Step applies one action. Garbage actions are steps with Invalid set,
	// never errors; errors mean the environment itself is broken.
	Step(ctx context.Context, action string) (Step, error)
	Close() error
}

// Expert is a scripted policy that solves a built-in's tasks.
type Expert interface {
	// Act returns the next action for the env's current state.
	Act() (string, error)
}

// Options configure an environment (e.g. max_steps); unknown keys are errors.
type Options map[string]string

// Builtin is an environment seedctl implements itself.
type Builtin interface {
	Name() string
	Description() string
	// Families lists the task families.
	Families() []string
	// Tasks returns tasks [0, n) of a split, deterministically.
	Tasks(split Split, n int) ([]Task, error)
	// SplitSize is how many distinct tasks a split holds.
	SplitSize(split Split) int
	// New makes an environment instance.
	New(opts Options) (Env, error)
	// Expert returns the scripted expert for env, which must come from New
	// and have been Reset.
	Expert(env Env) (Expert, error)
}

var (
	regMu    sync.RWMutex
	registry = map[string]Builtin{}
)

// Register adds a built-in; built-in packages call it from init.
func Register(b Builtin) {
	regMu.Lock()
	defer regMu.Unlock()
	if _, dup := registry[b.Name()]; dup {
		panic("envadapters: duplicate environment " + b.Name())
	}
	registry[b.Name()] = b
}

// ErrUnknownEnv means no environment has that name.
var ErrUnknownEnv = errors.New("unknown environment")

// Lookup finds a built-in by name.
func Lookup(name string) (Builtin, error) {
	regMu.RLock()
	defer regMu.RUnlock()
	b, ok := registry[name]
	if !ok {
		return nil, fmt.Errorf("environment %q: %w (known: %s)", name, ErrUnknownEnv, strings.Join(namesLocked(), ", "))
	}
	return b, nil
}

// Names lists registered built-ins, sorted.
func Names() []string {
	regMu.RLock()
	defer regMu.RUnlock()
	return namesLocked()
}

func namesLocked() []string {
	out := make([]string, 0, len(registry))
	for n := range registry {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// TaskID formats a task id.
func TaskID(env string, split Split, index int) string {
	return fmt.Sprintf("%s/%s/%d", env, split, index)
}

// Int reads an integer option with a default, naming the option on error.
func (o Options) Int(key string, def int) (int, error) {
	v, ok := o[key]
	if !ok || strings.TrimSpace(v) == "" {
		return def, nil
	}
	var n int
	if _, err := fmt.Sscanf(v, "%d", &n); err != nil || fmt.Sprint(n) != strings.TrimSpace(v) {
		return 0, fmt.Errorf("option %s=%q: want an integer", key, v)
	}
	return n, nil
}

// With returns a copy of o with key set to value (o is not changed).
func (o Options) With(key, value string) Options {
	out := make(Options, len(o)+1)
	for k, v := range o {
		out[k] = v
	}
	out[key] = value
	return out
}

// Float reads a number option with a default, naming the option on error.
func (o Options) Float(key string, def float64) (float64, error) {
	v, ok := o[key]
	if !ok || strings.TrimSpace(v) == "" {
		return def, nil
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("option %s=%q: want a number", key, v)
	}
	return f, nil
}

// CheckKeys rejects options outside allowed.
func (o Options) CheckKeys(allowed ...string) error {
	ok := map[string]bool{}
	for _, a := range allowed {
		ok[a] = true
	}
	for k := range o {
		if !ok[k] {
			return fmt.Errorf("option %q is not known (allowed: %s)", k, strings.Join(allowed, ", "))
		}
	}
	return nil
}
