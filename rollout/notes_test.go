package rollout

import (
	"strings"
	"testing"

	"github.com/seedctl/seedctl/envadapters"
)

// TestCompactWindowNotes: with Template.Notes its lines follow the places
// line, read from the task line and the past steps; without, they are
// absent.
func TestCompactWindowNotes(t *testing.T) {
	past := []Step{{Action: "go to fridge 1", Observation: "You arrive at fridge 1. The fridge 1 is open. In it, you see a apple 1."}}
	tmpl := TemplateFor("household")
	if got := WindowText(tmpl, firstObs, past, 3, past[0].Observation, nil); strings.Contains(got, "Notes on") {
		t.Errorf("notes without Template.Notes:\n%s", got)
	}
	tmpl.Notes = func(task string, past []envadapters.EpisodeStep) string {
		return "Notes on" + strings.TrimPrefix(task, TaskLinePrefix) + " after " + past[len(past)-1].Action + ".\n"
	}
	got := WindowText(tmpl, firstObs, past, 3, past[0].Observation, nil)
	if !strings.Contains(got, "countertop.\nNotes on put a cool apple in countertop. after go to fridge 1.\nStep 1:") {
		t.Errorf("notes missing or misplaced:\n%s", got)
	}
	// The recipe-v9 layout: the places line after the task line, then the notes.
	tmpl.UnvisitedLast, tmpl.ShufflePlaces, tmpl.NextPlace = false, false, false
	got = WindowText(tmpl, firstObs, past, 3, past[0].Observation, nil)
	if !strings.Contains(got, "countertop.\nPlaces not searched yet: cabinet 1, cabinet 2, cabinet 3, cabinet 4, countertop 1, microwave 1.\nNotes on put a cool apple in countertop. after go to fridge 1.\nStep 1:") {
		t.Errorf("v9 layout: places line or notes misplaced:\n%s", got)
	}
}
