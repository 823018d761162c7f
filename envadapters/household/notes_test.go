package household

import (
	"testing"

	"github.com/seedctl/seedctl/envadapters"
)

// TestTakeNotes: holding, treatment and last-seen places follow the
// observations, and only objects the task names are noted.
func TestTakeNotes(t *testing.T) {
	task := "Your task is to: put two apple in countertop."
	steps := []envadapters.EpisodeStep{
		{Action: "go to countertop 1", Observation: "You arrive at countertop 1. On the countertop 1, you see a apple 2, and a mug 1."},
		{Action: "go to fridge 1", Observation: "You arrive at fridge 1. The fridge 1 is closed."},
		{Action: "open fridge 1", Observation: "You open the fridge 1. The fridge 1 is open. In it, you see a apple 1, and a egg 3."},
		{Action: "take apple 1 from fridge 1", Observation: "You pick up the apple 1 from the fridge 1."},
		{Action: "go to microwave 1", Observation: "You arrive at microwave 1. On the microwave 1, you see nothing."},
		{Action: "heat apple 1 with microwave 1", Observation: "You heat the apple 1 using the microwave 1."},
		{Action: "go to countertop 1", Observation: "You arrive at countertop 1. On the countertop 1, you see a mug 1."},
		{Action: "move apple 1 to countertop 1", Observation: "You move the apple 1 to the countertop 1."},
		{Action: "take apple 9 from countertop 1", Observation: "Nothing happens."},
	}
	cases := []struct {
		n    int
		want string
	}{
		{0, "Holding: nothing.\nSeen: none.\n"},
		{1, "Holding: nothing.\nSeen: apple 2 in countertop 1.\n"},
		{3, "Holding: nothing.\nSeen: apple 2 in countertop 1, apple 1 in fridge 1.\n"},
		{4, "Holding: apple 1.\nSeen: apple 2 in countertop 1.\n"},
		{6, "Holding: apple 1 (heated).\nSeen: apple 2 in countertop 1.\n"},
		{7, "Holding: apple 1 (heated).\nSeen: none.\n"}, // apple 2 is gone from the countertop
		{9, "Holding: nothing.\nSeen: apple 1 in countertop 1 (heated).\n"},
	}
	for _, c := range cases {
		if got := TakeNotes(task, steps[:c.n]).Lines(); got != c.want {
			t.Errorf("after %d steps:\n got %q\nwant %q", c.n, got, c.want)
		}
	}
}

// NoteLines is what a compact window turn gets from Template.Notes.
func TestNoteLines(t *testing.T) {
	past := []envadapters.EpisodeStep{{Action: "go to fridge 1", Observation: "You arrive at fridge 1. The fridge 1 is open. In it, you see a apple 1."}}
	if got, want := NoteLines("Your task is to: put a cool apple in countertop.", past), "Holding: nothing.\nSeen: apple 1 in fridge 1.\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
