package envadapters

import (
	"fmt"
	"hash/fnv"
	"strings"
	"sync"
)

// Episode is what an oracle reads of a finished episode: the text the
// agent saw and did, never hidden environment state.
type Episode struct {
	ID   string // the trajectory's id (wording varies by it: Pick)
	Task Task
	// FirstObservation is what the reset showed (a remote task's goal and
	// its data, such as TextCraft's crafting commands, are only there).
	FirstObservation string
	Steps            []EpisodeStep
	Won              bool
	Score            float64
}

// EpisodeStep is one step of an Episode.
type EpisodeStep struct {
	Action, Observation string
	Valid               bool
}

// Hindsight is an oracle's advice about an episode: what happened, the
// episode-level skill (a workflow after a win, an avoidance rule after a
// loss) and advice for some of its steps.
type Hindsight struct {
	Summary, EpisodeSkill string
	StepSkills            map[int]string
}

// Oracle is a built-in that writes hindsight about its own episodes from
// their text and its task family's recipe: the embedded default's stage-1
// analyzer, and the source of the privileged teacher's skills. candidates
// are the critical steps to advise on, at most k of them.
type Oracle interface {
	Hindsight(ep Episode, candidates []int, k int) Hindsight
}

// TransferKeyer is a built-in whose tasks are grouped finer than by
// family for transferable advice (skills.TransferIndex, the
// oracle-other-skill teacher): tasks with the same key give each other
// advice. Without it a task's key is its family.
type TransferKeyer interface {
	TransferKey(t Task) string
}

var (
	oracleMu sync.RWMutex
	oracles  = map[string]Oracle{}
)

// RegisterOracle adds the oracle of an environment that is not a built-in
// (an AgentGym flavor whose episodes seedctl can read); its package calls
// it from init.
func RegisterOracle(env string, o Oracle) {
	oracleMu.Lock()
	defer oracleMu.Unlock()
	if _, dup := oracles[env]; dup {
		panic("envadapters: duplicate oracle " + env)
	}
	oracles[env] = o
}

// OracleFor is env's oracle: a built-in's own (Oracle), else a registered
// one; ok is false when there is none.
func OracleFor(env string) (Oracle, bool) {
	if b, err := Lookup(env); err == nil {
		o, ok := b.(Oracle)
		return o, ok
	}
	oracleMu.RLock()
	defer oracleMu.RUnlock()
	o, ok := oracles[env]
	return o, ok
}

// Pick chooses one of options deterministically per episode id and
// purpose, so an oracle's wording varies across episodes and a model
// cannot learn one template.
func Pick(id, purpose string, options ...string) string {
	h := fnv.New32a()
	fmt.Fprintf(h, "%s/%s", id, purpose)
	return options[int(h.Sum32())%len(options)]
}

// SeenItems parses an ALFWorld-style listing, "… you see a x 1, a y 2,
// and a z 3." (or "nothing"); ok is false when the text lists nothing.
func SeenItems(obs string) ([]string, bool) {
	_, rest, ok := strings.Cut(obs, "you see ")
	if !ok {
		return nil, false
	}
	list, _, _ := strings.Cut(rest, ".")
	if strings.TrimSpace(list) == "nothing" {
		return nil, true
	}
	var out []string
	for _, item := range strings.Split(list, ",") {
		item = strings.TrimSpace(item)
		item = strings.TrimPrefix(item, "and ")
		item = strings.TrimPrefix(strings.TrimPrefix(item, "a "), "an ")
		if item != "" {
			out = append(out, item)
		}
	}
	return out, true
}
