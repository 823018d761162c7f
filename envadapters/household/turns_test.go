package household

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/seedctl/seedctl/envadapters"
)

const turnsFirstObs = "You are in the middle of a room. Looking quickly around you, you see a cabinet 1, a cabinet 2, a cabinet 3, a cabinet 4, a countertop 1, a fridge 1, and a microwave 1.\n\nYour task is to: put a cool apple in countertop."

// TestPlaceOrder: the places line follows a permutation of the listing
// that is fixed for a room and key and differs between rooms and keys.
func TestPlaceOrder(t *testing.T) {
	listed := PlacesIn(turnsFirstObs)
	if len(listed) != 7 || listed[0] != "cabinet 1" || listed[6] != "microwave 1" {
		t.Fatalf("places %v", listed)
	}
	got := PlaceOrder(turnsFirstObs, "")
	if !slices.Equal(PlaceOrder(turnsFirstObs, ""), got) {
		t.Fatal("the order changes between calls")
	}
	sorted, want := slices.Clone(got), slices.Clone(listed)
	slices.Sort(sorted)
	slices.Sort(want)
	if !slices.Equal(sorted, want) {
		t.Fatalf("order %v is not a permutation of %v", got, listed)
	}
	// Rooms (here: the same room under other tasks) and episode keys get
	// different orders, and the order is rarely the listing's.
	distinct, asListed := map[string]bool{}, 0
	for _, task := range []string{"put a cool apple in countertop.", "heat some egg and put it in fridge.", "find two mug and put them in cabinet.", "look at apple under the desklamp.", "put a clean cup in microwave.", "put some plate on countertop."} {
		o := PlaceOrder(strings.Replace(turnsFirstObs, "put a cool apple in countertop.", task, 1), "")
		distinct[strings.Join(o, ",")] = true
		if slices.Equal(o, listed) {
			asListed++
		}
	}
	if len(distinct) < 4 || asListed > 1 {
		t.Errorf("%d distinct orders over 6 rooms, %d in listing order", len(distinct), asListed)
	}
	keys := map[string]bool{}
	for k := range 6 {
		keys[strings.Join(PlaceOrder(turnsFirstObs, fmt.Sprint("1/t/", k)), ",")] = true
	}
	if len(keys) < 4 {
		t.Errorf("%d distinct orders over 6 episode keys", len(keys))
	}
}

// TestTurnsWindow: a compact turn opens with the task line, shows the last
// steps one per line, leaves out the room listing, and its places line
// (the next place, in PlaceOrder) drops a place once its contents were
// seen: arriving at a closed one does not count, opening it does.
func TestTurnsWindow(t *testing.T) {
	turns, err := NewTurns("")
	if err != nil {
		t.Fatal(err)
	}
	order := PlaceOrder(turnsFirstObs, "k")
	past := []envadapters.EpisodeStep{
		{Action: "go to " + order[0], Observation: "You arrive at " + order[0] + ". On the " + order[0] + ", you see nothing."},
		{Action: "go to " + order[1], Observation: "You arrive at " + order[1] + ". The " + order[1] + " is closed."},
	}
	body, line := turns.Window(envadapters.WindowTurn{FirstObservation: turnsFirstObs, Past: past, Window: 1, Observation: past[1].Observation, Key: "k"})
	want := "Your task is to: put a cool apple in countertop.\nStep 2: go to " + order[1] + "\nNow: " + past[1].Observation
	if body != want {
		t.Errorf("body\n%s\nwant\n%s", body, want)
	}
	if want := fmt.Sprintf("Places not searched yet: %s and %d more.", order[1], len(order)-2); line != want {
		t.Errorf("places line %q, want %q", line, want)
	}
	past = append(past, envadapters.EpisodeStep{Action: "open " + order[1], Observation: "You open the " + order[1] + ". In it, you see nothing."})
	if _, line = turns.Window(envadapters.WindowTurn{FirstObservation: turnsFirstObs, Past: past, Window: 3, Observation: past[2].Observation, Key: "k"}); !strings.HasPrefix(line, "Places not searched yet: "+order[2]+" ") {
		t.Errorf("after opening %s: %q", order[1], line)
	}
	// Before the first step "Now:" is the opening sentence alone.
	if body, _ := turns.Window(envadapters.WindowTurn{FirstObservation: turnsFirstObs, Window: 3, Observation: turnsFirstObs}); !strings.HasSuffix(body, "\nNow: You are in the middle of a room.") || strings.Contains(body, "Looking quickly") {
		t.Errorf("first turn:\n%s", body)
	}
	// With notes, their lines follow the task line.
	turns.Notes = true
	got, _ := turns.Window(envadapters.WindowTurn{FirstObservation: turnsFirstObs, Past: past[:1], Window: 3, Observation: past[0].Observation})
	if !strings.HasPrefix(got, "Your task is to: put a cool apple in countertop.\nHolding: nothing.\n") {
		t.Errorf("notes missing or misplaced:\n%s", got)
	}
	if turns.Lists("go to fridge 1") || !turns.Lists("open fridge 1") {
		t.Error(`"go to" actions must be left out of the listed actions, others kept`)
	}
	for _, style := range []string{PlacesNext, PlacesAll, PlacesFew} {
		if tt, err := NewTurns(style); err != nil || tt.Style != style {
			t.Errorf("style %q: %+v, %v", style, tt, err)
		}
	}
	if _, err := NewTurns("every"); err == nil || !strings.Contains(err.Error(), `"every"`) {
		t.Errorf("unknown style: err %v", err)
	}
	// The environment states these turns (envadapters.Prompting.Turns).
	p := builtin{}.Prompting()
	if tt, err := p.Turns(""); err != nil || tt.(Turns).Style != PlacesNext {
		t.Errorf("Prompting().Turns(\"\") = %v, %v", tt, err)
	}
	if _, err := p.Turns("every"); err == nil {
		t.Error("Prompting().Turns accepted an unknown style")
	}
}
