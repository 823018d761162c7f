package example

import (
	"context"
	"flag"
	"testing"

	"github.com/seedctl/seedctl/envadapters"
	"github.com/seedctl/seedctl/envadapters/envtest"
)

var update = flag.Bool("update", false, "rewrite testdata golden transcripts")

// TestGoldenTranscripts: the expert's episodes, as the other built-ins pin
// theirs.
func TestGoldenTranscripts(t *testing.T) { envtest.GoldenTranscripts(t, builtin{}, 2, *update) }

// The expert wins every task; a wrong room's switch does not win; the
// oracle names the right room after a win and the wrong one after a loss.
func TestLights(t *testing.T) {
	ctx := context.Background()
	b := builtin{}
	for _, split := range envadapters.Splits {
		tasks, _ := b.Tasks(split, b.SplitSize(split))
		for _, task := range tasks {
			e, _ := b.New(nil)
			st, _ := e.Reset(ctx, task)
			x, _ := b.Expert(e)
			ep := envadapters.Episode{ID: task.ID, Task: task}
			for !st.Done {
				a, _ := x.Act()
				st, _ = e.Step(ctx, a)
				ep.Steps = append(ep.Steps, envadapters.EpisodeStep{Action: a, Observation: st.Observation, Valid: !st.Invalid})
			}
			if !st.Won || len(ep.Steps) > 2 {
				t.Errorf("%s: the expert won %v in %d steps", task.ID, st.Won, len(ep.Steps))
			}
			ep.Won = true
			if h := b.Hindsight(ep, nil, 0); h.EpisodeSkill == "" {
				t.Errorf("%s: no skill after a win", task.ID)
			}
		}
	}
	tasks, _ := b.Tasks(envadapters.Train, 1) // the kitchen
	e, _ := b.New(envadapters.Options{"max_steps": "2"})
	e.Reset(ctx, tasks[0])
	st, _ := e.Step(ctx, "flip()") // in the hall
	ep := envadapters.Episode{ID: "x", Task: tasks[0], Steps: []envadapters.EpisodeStep{{Action: "flip()", Observation: st.Observation, Valid: true}}}
	if st.Won {
		t.Error("the hall's switch won the kitchen task")
	}
	if h := b.Hindsight(ep, nil, 0); h.EpisodeSkill != "Flipping in the hall does nothing for the kitchen: walk(kitchen) before flip()." {
		t.Errorf("hindsight after the wrong switch: %q", h.EpisodeSkill)
	}
	if _, err := b.New(envadapters.Options{"colour": "red"}); err == nil {
		t.Error("an unknown option was accepted")
	}
}

// The reply syntax is the environment's own: the call on the last
// "CALL:" line, read by Calls; walk(ROOM) names the place it goes to.
func TestCalls(t *testing.T) {
	for _, tt := range []struct {
		text, want string
		ok         bool
	}{
		{"I should go to the kitchen.\nCALL: walk(kitchen)", "walk(kitchen)", true},
		{"CALL: walk(hall)\nno, better:\nCALL: flip()  ", "flip()", true},
		{"<action>flip()</action>", "", false},
		{"CALL:   ", "", false},
		{"", "", false},
	} {
		got, ok := (Calls{}).Extract(tt.text, nil)
		if got != tt.want || ok != tt.ok || (Calls{}).HasBlock(tt.text) != tt.ok {
			t.Errorf("Extract(%q) = %q, %v; want %q, %v", tt.text, got, ok, tt.want, tt.ok)
		}
	}
	for a, want := range map[string]string{"walk(kitchen)": "kitchen", "walk( Study )": "study", "walk(attic)": "", "flip()": "", "go to kitchen": ""} {
		if got, _ := walkTo(a); got != want {
			t.Errorf("walkTo(%q) = %q, want %q", a, got, want)
		}
	}
}
