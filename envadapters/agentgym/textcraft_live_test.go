//go:build textcraft_live

package agentgym

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/seedctl/seedctl/envadapters"
)

// TestTextCraftExpertLive plays the planner on every goal of a real
// TextCraft server (scripts/textcraft-server.sh; `just textcraft-expert`),
// without and with the server's item-type table, and with -update writes
// the episodes to testdata/textcraft_expert.json for TestTextCraftExpert.
//
//	SEEDCTL_TEXTCRAFT_URL      the server (http://127.0.0.1:36001)
//	SEEDCTL_TEXTCRAFT_RECIPES  its agentenv_textcraft/recipes folder
func TestTextCraftExpertLive(t *testing.T) {
	url, dir := os.Getenv("SEEDCTL_TEXTCRAFT_URL"), os.Getenv("SEEDCTL_TEXTCRAFT_RECIPES")
	if url == "" || dir == "" {
		t.Fatal("set SEEDCTL_TEXTCRAFT_URL and SEEDCTL_TEXTCRAFT_RECIPES")
	}
	tags, err := ReadTextCraftTags(dir)
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(DefaultConfig(url, TextCraft))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	rec := textcraftRecording{Source: "AgentGym agentenv-textcraft (WooooDyy/AgentGym@3ef9235), started by scripts/textcraft-server.sh, played by PlanTextCraft through agentgym.Client", Tags: tags}
	won := map[int]int{}
	for i := range textcraftDataSize {
		st, err := c.Reset(ctx, envadapters.Task{Index: i})
		if err != nil {
			t.Fatal(err)
		}
		task, err := ParseTextCraft(st.Observation)
		if err != nil {
			t.Fatalf("index %d: %v", i, err)
		}
		ep := textcraftEpisode{Index: i, Goal: task.Goal, First: st.Observation}
		for mode := range 3 { // plain, tagged, stepwise (tagged)
			withTags := mode > 0
			var tb TextCraftTags
			if withTags {
				tb = tags
				// Play again from the goal's start.
				if _, err := c.Reset(ctx, envadapters.Task{Index: i}); err != nil {
					t.Fatal(err)
				}
			}
			var play textcraftPlay
			plan, err := PlanTextCraft(task, tb)
			if mode == 2 {
				plan, err = PlanTextCraftStepwise(task, tb)
			}
			if err != nil {
				play.PlanError = err.Error()
			}
			for _, a := range plan {
				s, err := c.Step(ctx, a)
				if err != nil {
					t.Fatal(err)
				}
				play.Steps = append(play.Steps, textcraftStep{Action: a, Observation: s.Observation, Won: s.Won})
				if s.Won {
					play.Won = true
					won[mode]++
					break
				}
			}
			switch mode {
			case 0:
				ep.Plain = play
			case 1:
				ep.Tagged = play
			default:
				ep.Stepwise = &play
			}
		}
		rec.Episodes = append(rec.Episodes, ep)
	}
	t.Logf("won %d of %d goals without the item-type table, %d with it, %d with it one craft at a time", won[0], textcraftDataSize, won[1], won[2])
	if *updateRecordings {
		b, _ := json.MarshalIndent(rec, "", " ")
		if err := os.WriteFile(filepath.Join("testdata", "textcraft_expert.json"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
