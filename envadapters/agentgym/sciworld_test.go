package agentgym

import (
	"encoding/json"
	"os"
	"testing"
)

// sciworldProbeIndex is the SciWorld task the refusal probe plays (task
// use-thermometer, variation 180: it starts in the art studio).
const sciworldProbeIndex = 300

// sciworldProbe is a probe of the real SciWorld server's refusals, each
// action labelled with whether the server could not carry it out
// (refused): the label is ours, from what the answer says. Opening what is
// open is understood and changes nothing; ScienceWorld's gold paths do
// it, so it is not a refusal.
var sciworldProbe = []struct {
	Action  string
	Refused bool
}{
	{"look around", false},
	{"open table", true},            // The table is not openable.
	{"eat table", true},             // … is not edible.
	{"activate table", true},        // … is not something that can be activated.
	{"deactivate table", true},      // the same answer
	{"read table", true},            // It's not clear how to read that.
	{"flush bowl", true},            // It's not clear how to flush that.
	{"use bowl on table", true},     // I'm not sure how to use the bowl.
	{"pick up agent", true},         // The agent is not moveable.
	{"pick up air", true},           // You can't pick up a gas directly.
	{"move bowl to bowl", true},     // You can't move something into itself.
	{"mix bowl", true},              // That container is empty, so there are no items to mix.
	{"dunk bowl into table", true},  // The table does not contain any liquids to dunk into.
	{"teleport to kitchen", true},   // No known action matches that input.
	{"go to hallway", true},         // The door is not open.
	{"open large cupboard", false},  // The large cupboard is now open.
	{"open large cupboard", false},  // … is already open (a no-op, not a refusal)
	{"close large cupboard", false}, // … is now closed.
	{"close large cupboard", false}, // … is already closed
	{"open door to hallway", false}, // The door is now open.
	{"look in table", false},        // Inside the table is: nothing
	{"inventory", false},            // In your inventory, you see: …
	{"go to hallway", false},        // You move to the hallway.
}

type sciworldRefusals struct {
	Source string              `json:"source"`
	Index  int                 `json:"index"`
	First  string              `json:"first_observation"`
	Steps  []sciworldProbeStep `json:"steps"`
}

type sciworldProbeStep struct {
	Action      string `json:"action"`
	Observation string `json:"observation"`
	Refused     bool   `json:"refused"`
}

// TestSciWorldRefusals: on the real server's answers to the probe
// (recorded by TestSciWorldRefusalsLive), the client reads a step as
// invalid exactly when it refused the action — before, 3 of the 14
// refusals passed as accepted actions.
func TestSciWorldRefusals(t *testing.T) {
	b, err := os.ReadFile("testdata/sciworld_refusals.json")
	if err != nil {
		t.Fatal(err)
	}
	var rec sciworldRefusals
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	if len(rec.Steps) != len(sciworldProbe) {
		t.Fatalf("%d recorded steps, the probe has %d (re-record: go test -tags sciworld_live -run SciWorldRefusalsLive -update)", len(rec.Steps), len(sciworldProbe))
	}
	if err := CheckFlavor(SciWorld, rec.First); err != nil {
		t.Fatalf("the recording's first observation: %v", err)
	}
	refused, read := 0, 0
	for i, s := range rec.Steps {
		if s.Action != sciworldProbe[i].Action || s.Refused != sciworldProbe[i].Refused {
			t.Fatalf("step %d: recorded %q (refused %v), the probe says %q (%v)", i, s.Action, s.Refused, sciworldProbe[i].Action, sciworldProbe[i].Refused)
		}
		if got := IsInvalid(SciWorld, s.Observation); got != s.Refused {
			t.Errorf("%q -> %q: read as invalid=%v, want %v", s.Action, s.Observation, got, s.Refused)
		}
		if s.Refused {
			refused++
		}
		if IsInvalid(SciWorld, s.Observation) {
			read++
		}
	}
	t.Logf("refused %d of %d probe steps; the client reads %d as invalid", refused, len(rec.Steps), read)
}
