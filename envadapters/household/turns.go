package household

import (
	"fmt"
	"hash/fnv"
	"sort"
	"strings"

	"github.com/seedctl/seedctl/envadapters"
)

// Places-line styles (rollout.places_line, basemodel's corpus.places_line):
// how the household's window turns name the places not searched yet.
const (
	// PlacesNext names the next place not searched and how many more
	// (recipes v11–v12; the default).
	PlacesNext = "next"
	// PlacesAll names every place not searched (recipe v13).
	PlacesAll = "all"
	// PlacesFew names the first FewPlaces places not searched and a count.
	PlacesFew = "few"
)

// FewPlaces is how many candidates a PlacesFew line names.
const FewPlaces = 3

// compactPlaces is how many unsearched places a line names when its
// style sets no count (the full list was a third of every turn).
const compactPlaces = 6

// Turns is the household's own rendering of turns (envadapters.Turns), what
// the tiny household bases are trained on: "go to …" is left out of the
// listed actions (the first observation names every place), and a
// window-mode turn is compact —
//
//	Your task is to: put a cool plate in cabinet.
//	Step 1: go to cabinet 1 -> You arrive at cabinet 1. The cabinet 1 is closed.
//	Step 2: open cabinet 1
//	Now: You open the cabinet 1. The cabinet 1 is open. In it, you see nothing.
//	Admissible actions: …
//	Places not searched yet: cabinet 2 and 5 more.
//	<action request>
//
// The first observation's room listing is left out (every place it names
// is on the places line until its contents were seen); each past step is
// one "action -> observation" line, and the current observation is not
// repeated as the last step's. Before the first step, "Now:" is the first
// observation's opening sentence. The places line names the places in a
// fixed pseudo-random order per room (PlaceOrder), right before the action
// request, where a tiny model copies its next destination from.
type Turns struct {
	// Style is the places line's: PlacesNext, PlacesAll or PlacesFew.
	Style string
	// Notes adds NoteLines after the task line (measured off for every
	// base: docs/experiments.md, "Tiny base policies").
	Notes bool
}

// NewTurns returns the turns of a places-line style ("" is PlacesNext).
func NewTurns(style string) (Turns, error) {
	switch style {
	case "":
		return Turns{Style: PlacesNext}, nil
	case PlacesNext, PlacesAll, PlacesFew:
		return Turns{Style: style}, nil
	}
	return Turns{}, fmt.Errorf("places line %q: want %q, %q or %q", style, PlacesNext, PlacesFew, PlacesAll)
}

// Few is how many places the style's line names before "and N more"
// (FewPlaces for PlacesFew, else 0).
func (t Turns) Few() int {
	if t.Style == PlacesFew {
		return FewPlaces
	}
	return 0
}

// Lists leaves "go to …" out of the listed admissible actions.
func (Turns) Lists(action string) bool { return !strings.HasPrefix(action, "go to ") }

// Window renders a compact window turn (see Turns).
func (t Turns) Window(in envadapters.WindowTurn) (string, string) {
	var b strings.Builder
	task := ""
	if i := strings.Index(in.FirstObservation, envadapters.TaskLinePrefix); i >= 0 {
		task = strings.TrimSpace(in.FirstObservation[i:])
		if j := strings.IndexByte(task, '\n'); j >= 0 {
			task = task[:j]
		}
	}
	if task != "" {
		b.WriteString(task + "\n")
	}
	if t.Notes {
		b.WriteString(NoteLines(task, in.Past))
	}
	n := len(in.Past)
	for k := max(0, n-in.Window); k < n; k++ {
		fmt.Fprintf(&b, "Step %d: %s", k+1, in.Past[k].Action)
		if k < n-1 {
			b.WriteString(" -> " + oneLine(in.Past[k].Observation))
		}
		b.WriteString("\n")
	}
	now := strings.TrimSpace(in.Observation)
	if n == 0 {
		// "You are in the middle of a room. Looking quickly around you, …"
		if head, _, ok := strings.Cut(now, " Looking quickly around you"); ok {
			now = head
		} else if i := strings.Index(now, envadapters.TaskLinePrefix); i >= 0 {
			now = strings.TrimSpace(now[:i])
		}
	}
	b.WriteString("Now: " + oneLine(now))
	return b.String(), t.placesLine(in.FirstObservation, in.Past, in.Key)
}

// placesLine is the "Places not searched yet: …" line (without newline).
func (t Turns) placesLine(firstObs string, past []envadapters.EpisodeStep, key string) string {
	left := Unsearched(firstObs, past, key)
	few := t.Few()
	switch {
	case few > 0 && len(left) > few:
		return fmt.Sprintf("Places not searched yet: %s and %d more.", strings.Join(left[:few], ", "), len(left)-few)
	case (t.Style == PlacesAll || few > 0) && len(left) > 0:
		return "Places not searched yet: " + strings.Join(left, ", ") + "."
	case t.Style == PlacesNext && len(left) > 1:
		return fmt.Sprintf("Places not searched yet: %s and %d more.", left[0], len(left)-1)
	case len(left) > compactPlaces:
		return fmt.Sprintf("Places not searched yet: %s and %d more.", strings.Join(left[:compactPlaces], ", "), len(left)-compactPlaces)
	case len(left) > 0:
		return "Places not searched yet: " + strings.Join(left, ", ") + "."
	}
	return "Places not searched yet: none."
}

// PlacesIn lists the places a first observation names ("… you see a
// cabinet 1, a drawer 2, and a sinkbasin 1."), in order.
func PlacesIn(firstObs string) []string {
	places, _ := envadapters.SeenItems(firstObs)
	return places
}

// PlaceOrder is the order in which the places line names the places
// firstObs lists: a fixed pseudo-random permutation keyed by the first
// observation (the same at every step of an episode, different between
// rooms) and key (a per-episode key, envadapters.WindowTurn.Key; "" one
// order per room). In listing order a tiny model learns to count ("go to
// cabinet 8" after cabinet 7, in a room with seven) rather than to copy the
// line's first place (recipe v11). Searching experts that demonstrate for
// these turns follow the same order.
func PlaceOrder(firstObs, key string) []string {
	places := PlacesIn(firstObs)
	rank := make(map[string]uint64, len(places))
	for _, p := range places {
		h := fnv.New64a()
		h.Write([]byte(firstObs))
		h.Write([]byte{0})
		if key != "" {
			h.Write([]byte(key))
			h.Write([]byte{0})
		}
		h.Write([]byte(p))
		rank[p] = h.Sum64()
	}
	sort.SliceStable(places, func(i, j int) bool { return rank[places[i]] < rank[places[j]] })
	return places
}

// Unsearched lists the places firstObs names whose contents no past step
// has shown, in PlaceOrder(firstObs, key): a place counts as searched once
// the agent arrived there and it was not closed, or opened it. (Arriving at
// a closed cabinet and leaving shows nothing; a searcher must come back.)
func Unsearched(firstObs string, past []envadapters.EpisodeStep, key string) []string {
	done := map[string]bool{}
	for _, s := range past {
		if p, ok := strings.CutPrefix(s.Action, "go to "); ok && strings.HasPrefix(s.Observation, "You arrive at") && !strings.Contains(s.Observation, " is closed") {
			done[p] = true
		}
		if p, ok := strings.CutPrefix(s.Action, "open "); ok && strings.HasPrefix(s.Observation, "You open") {
			done[p] = true
		}
	}
	var left []string
	for _, p := range PlaceOrder(firstObs, key) {
		if !done[p] {
			left = append(left, p)
		}
	}
	return left
}

// oneLine joins an observation's lines with spaces.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
