package household

import (
	"strings"

	"github.com/seedctl/seedctl/envadapters"
)

// Notes is what a searcher would jot down about a household episode, read
// from the trajectory text only (actions and observations, never hidden
// environment state): what the agent holds, what it did to it, and where it
// last saw the objects its task names. A short window of recent steps
// loses both after a few steps; a pick-two task or a long walk back to a
// place seen earlier needs them. NoteLines puts them in a compact window
// turn (Turns.Notes); off by default: measured with recipe v8,
// they raised plain success but took away the gain from hints
// (docs/experiments.md, "Tiny base policies").
type Notes struct {
	Holding string            // "" when empty-handed
	Treated map[string]string // object → "heated", "cooled", "cleaned"
	// Seen lists task-named objects with where they were last seen, in
	// the order they were first seen.
	Seen []SeenAt
}

// treatedBy is the note an appliance verb leaves on an object.
var treatedBy = map[string]string{"heat": "heated", "cool": "cooled", "clean": "cleaned"}

// SeenAt is one object and the place it was last seen in.
type SeenAt struct{ Object, Place string }

// TakeNotes reads the notes off a task line and the past steps.
func TakeNotes(task string, past []envadapters.EpisodeStep) Notes {
	words := map[string]bool{}
	for _, w := range strings.FieldsFunc(strings.ToLower(task), func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9')
	}) {
		words[w] = true
	}
	named := func(obj string) bool {
		typ := obj
		if i := strings.LastIndexByte(obj, ' '); i > 0 {
			typ = obj[:i]
		}
		return words[typ]
	}
	n := Notes{Treated: map[string]string{}}
	place := map[string]string{}
	var order []string
	noted := map[string]bool{}
	see := func(obj, at string) {
		if !noted[obj] {
			noted[obj] = true
			order = append(order, obj)
		}
		place[obj] = at
	}
	for _, s := range past {
		obs := strings.Join(strings.Fields(s.Observation), " ")
		switch {
		case strings.HasPrefix(obs, "You pick up the "):
			obj, _, ok := strings.Cut(strings.TrimPrefix(obs, "You pick up the "), " from the ")
			if ok {
				n.Holding = obj
				delete(place, obj)
			}
		case strings.HasPrefix(obs, "You move the ") || strings.HasPrefix(obs, "You put the "):
			rest := strings.TrimPrefix(strings.TrimPrefix(obs, "You move the "), "You put the ")
			for _, sep := range []string{" to the ", " in/on the ", " in the ", " on the "} {
				if obj, at, ok := strings.Cut(rest, sep); ok {
					n.Holding = ""
					if named(obj) {
						see(obj, strings.TrimSuffix(at, "."))
					}
					break
				}
			}
		case strings.HasPrefix(obs, "You heat the ") || strings.HasPrefix(obs, "You cool the ") || strings.HasPrefix(obs, "You clean the "):
			verb, rest, _ := strings.Cut(strings.TrimPrefix(obs, "You "), " the ")
			if obj, _, ok := strings.Cut(rest, " using the "); ok {
				n.Treated[obj] = treatedBy[verb]
			}
		}
		at := placeOf(s.Action, obs)
		items, ok := envadapters.SeenItems(obs)
		if at == "" || !ok {
			continue
		}
		listed := map[string]bool{}
		for _, it := range items {
			listed[it] = true
			if named(it) && it != n.Holding {
				see(it, at)
			}
		}
		for obj, p := range place {
			if p == at && !listed[obj] {
				delete(place, obj) // no longer there
			}
		}
	}
	for _, obj := range order {
		if p, ok := place[obj]; ok {
			n.Seen = append(n.Seen, SeenAt{obj, p})
		}
	}
	return n
}

// placeOf is the place an observation describes: the action's target for
// go to / open / examine, else the place "You arrive at" names.
func placeOf(action, obs string) string {
	for _, verb := range []string{"go to ", "open ", "examine "} {
		if p, ok := strings.CutPrefix(strings.TrimSpace(action), verb); ok {
			return p
		}
	}
	if p, ok := strings.CutPrefix(obs, "You arrive at "); ok {
		p, _, _ = strings.Cut(p, ".")
		return p
	}
	return ""
}

// Lines renders the notes as two prompt lines:
//
//	Holding: apple 1 (cooled).
//	Seen: apple 2 in cabinet 3, desklamp 1 in sidetable 1.
func (n Notes) Lines() string {
	var b strings.Builder
	b.WriteString("Holding: ")
	if n.Holding == "" {
		b.WriteString("nothing")
	} else {
		b.WriteString(n.Holding)
		if t := n.Treated[n.Holding]; t != "" {
			b.WriteString(" (" + t + ")")
		}
	}
	b.WriteString(".\nSeen: ")
	if len(n.Seen) == 0 {
		b.WriteString("none")
	}
	for i, s := range n.Seen {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(s.Object + " in " + s.Place)
		if t := n.Treated[s.Object]; t != "" {
			b.WriteString(" (" + t + ")")
		}
	}
	b.WriteString(".\n")
	return b.String()
}

// NoteLines is the notes' prompt lines for Turns.Notes.
func NoteLines(task string, past []envadapters.EpisodeStep) string {
	return TakeNotes(task, past).Lines()
}
