package agentgym

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/seedctl/seedctl/envadapters"
)

// On the real server's recorded tasks, the simulator answers the recorded
// plays as the server did, step by step: the same strings for gets,
// crafts and the win. Every play the server accepted throughout must be
// answered alike; plays it refused somewhere may differ (the server knows
// all of Minecraft's recipes and item types, so "get 1 magenta dye" is
// refused there when no listed command makes it), and so may plays on
// tasks whose commands name item types ("planks" for any planks, which
// the simulator does not model): they are counted.
func TestTextCraftSimAnswersAsTheServer(t *testing.T) {
	rec := readTextCraftRecording(t)
	same, differ := 0, 0
	for _, ep := range rec.Episodes {
		task, err := ParseTextCraft(ep.First)
		if err != nil {
			t.Fatal(err)
		}
		usesType := false
		for _, r := range task.Recipes {
			for _, in := range r.Inputs {
				if _, ok := rec.Tags[in.Name]; ok {
					usesType = true
				}
			}
		}
		plays := []textcraftPlay{ep.Plain, ep.Tagged}
		if ep.Stepwise != nil {
			plays = append(plays, *ep.Stepwise)
		}
		for _, play := range plays {
			accepted := !usesType
			for _, s := range play.Steps {
				accepted = accepted && !IsInvalid(TextCraft, s.Observation)
			}
			e := &simEnv{limit: 100, depth: 3, task: task, first: ep.First}
			ok := true
			for i, s := range play.Steps {
				got, won := e.answer(s.Action)
				if got != s.Observation || won != s.Won {
					ok = false
					if accepted {
						t.Fatalf("index %d step %d %q: the server said %q (won %v), the simulator %q (%v)", ep.Index, i, s.Action, s.Observation, s.Won, got, won)
					}
					break
				}
			}
			switch {
			case ok:
				same++
			default:
				differ++
			}
		}
	}
	t.Logf("%d recorded plays answered alike; %d differ, each one refused somewhere or on a task with item types", same, differ)
	// The server draws each reset's distractor commands afresh, so how
	// many plays avoid item types varies by recording: 884 of 1,088 in the
	// first, 1,306 of 1,632 with the stepwise plays in the second.
	if same < (same+differ)*3/4 {
		t.Errorf("only %d of %d recorded plays answered alike", same, same+differ)
	}
	// Answers the recording lacks, in the server's words (environment.py).
	e := &simEnv{limit: 100, depth: 3, task: TextCraftTask{Goal: "oak door", Recipes: []TextCraftRecipe{{Count: 3, Output: "oak door", Inputs: []TextCraftItem{{6, "oak planks"}}}, {Count: 4, Output: "oak planks", Inputs: []TextCraftItem{{1, "oak logs"}}}}}}
	for _, c := range []struct{ action, want string }{
		{"inventory", "Inventory: You are not carrying anything."},
		{"get 2 oak planks", "Could not find oak planks"},
		{"get 1 unobtainium", "Could not find unobtainium"},
		{"jump", "Could not execute jump"},
		{"craft 4 oak planks using oak logs", "Wrong item format: oak logs"},
		{"get 2 oak logs", "Got 2 oak logs"},
		{"craft 4 oak planks using 2 oak logs", "Could not find a valid recipe for ItemTagWithCount(item_tag=ItemTag(tag=None, item_id='minecraft:oak_planks'), count=4)"},
		{"craft 4 oak planks using 1 oak logs", "Crafted 4 minecraft:oak_planks"},
		{"craft 4 oak planks using 1 oak logs", "Crafted 4 minecraft:oak_planks"},
		{"inventory", "Inventory: [oak planks] (8) "},
		{"craft 3 oak door using 9 oak planks", "Could not find enough items to craft minecraft:oak_door"},
	} {
		if got, _ := e.answer(c.action); got != c.want {
			t.Errorf("%q: %q, want %q", c.action, got, c.want)
		}
	}
	if got, won := e.answer("craft 3 oak door using 6 oak planks"); got != "Crafted 3 minecraft:oak_door" || !won {
		t.Errorf("the goal's craft: %q, won %v", got, won)
	}
}

// Generated tasks: deterministic per split and index, in the server's
// format (ParseTextCraft reads them back), every item name distinct, and
// the planner wins each one through the simulator within its plan.
func TestTextCraftSimTasksAreSolvable(t *testing.T) {
	sim := TextCraftSim{}
	ctx := context.Background()
	depths := map[int]int{}
	for _, split := range []envadapters.Split{envadapters.Train, envadapters.EvalSeen} {
		tasks, err := sim.Tasks(split, 300)
		if err != nil {
			t.Fatal(err)
		}
		for _, task := range tasks {
			env, err := sim.New(envadapters.Options{"max_steps": "60"})
			if err != nil {
				t.Fatal(err)
			}
			st, err := env.Reset(ctx, task)
			if err != nil {
				t.Fatal(err)
			}
			again, _ := env.Reset(ctx, task)
			if again.Observation != st.Observation {
				t.Fatalf("%s: two resets gave two tasks", task.ID)
			}
			parsed, err := ParseTextCraft(st.Observation)
			if err != nil || parsed.Observation() != st.Observation {
				t.Fatalf("%s: %v; the observation does not read back:\n%s", task.ID, err, st.Observation)
			}
			x, err := sim.Expert(env)
			if err != nil {
				t.Fatalf("%s: %v\n%s", task.ID, err, st.Observation)
			}
			plan := len(x.(*TextCraftExpert).plan)
			depths[plan]++
			won := false
			for range plan {
				a, _ := x.Act()
				s, err := env.Step(ctx, a)
				if err != nil {
					t.Fatalf("%s: %q: %v\n%s", task.ID, a, err, st.Observation)
				}
				if s.Invalid {
					t.Fatalf("%s: the plan's %q refused: %q\n%s", task.ID, a, s.Observation, st.Observation)
				}
				if won = s.Won; won {
					break
				}
			}
			if !won {
				t.Fatalf("%s: the planner's %d actions did not craft the goal\n%s", task.ID, plan, st.Observation)
			}
		}
	}
	t.Logf("plan lengths: %v", depths)
	a := GenerateTextCraftTask(rand.New(rand.NewPCG(1, 3)), 3).Observation()
	b := GenerateTextCraftTask(rand.New(rand.NewPCG(2, 3)), 3).Observation()
	if a == b || !strings.HasPrefix(a, "Crafting commands:\n") {
		t.Errorf("two seeds, one task, or not the server's format:\n%s", a)
	}
}
