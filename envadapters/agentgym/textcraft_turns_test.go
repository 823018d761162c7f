package agentgym

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/seedctl/seedctl/envadapters"
)

// TestTextCraftHeld: what the steps imply, step by step — gets, a craft
// that takes its inputs, a refused craft that changes nothing, a leftover
// that reaches zero, the server's own inventory answer replacing it.
func TestTextCraftHeld(t *testing.T) {
	steps := []envadapters.EpisodeStep{
		{Action: "get 2 peony", Observation: "Got 2 peony"},
		{Action: "craft 2 pink dye using 1 peony", Observation: "Crafted 2 minecraft:pink_dye"},
		{Action: "craft 8 pink stained glass using 8 glass, 1 pink dye", Observation: "Could not find enough items to craft minecraft:pink_stained_glass"},
		{Action: "get 1 allium", Observation: "Got 1 allium"},
		{Action: "craft 2 pink dye using 1 peony", Observation: "Crafted 2 minecraft:pink_dye"},
		{Action: "inventory", Observation: "Inventory: [pink dye] (4) [allium] (1) "},
		{Action: "craft 1 magenta dye using 1 allium", Observation: "Crafted 1 minecraft:magenta_dye"},
	}
	want := []string{"2 peony", "1 peony, 2 pink dye", "1 peony, 2 pink dye", "1 peony, 2 pink dye, 1 allium",
		"4 pink dye, 1 allium", "4 pink dye, 1 allium", "4 pink dye, 1 magenta dye"}
	for k := range steps {
		if got := TextCraftHeld(steps[:k+1]).String(); got != want[k] {
			t.Errorf("after step %d (%s -> %s): %q, want %q", k+1, steps[k].Action, steps[k].Observation, got, want[k])
		}
	}
	if got := TextCraftHeld(nil).String(); got != "empty" {
		t.Errorf("before any step: %q", got)
	}
}

// On the real server's recorded exchanges, the inventory the steps imply
// is the one the server answers "inventory" with.
func TestTextCraftHeldMatchesTheServer(t *testing.T) {
	var past []envadapters.EpisodeStep
	checked := 0
	for _, ex := range exchanges(t, "textcraft") {
		var body struct {
			Action string `json:"action"`
		}
		var resp struct {
			Observation string `json:"observation"`
		}
		json.Unmarshal(ex.Body, &body)
		json.Unmarshal(ex.Response, &resp)
		switch ex.Path {
		case "/reset", "/create":
			past = nil
		case "/step":
			if body.Action == "inventory" {
				server := TextCraftHeld([]envadapters.EpisodeStep{{Action: "inventory", Observation: resp.Observation}})
				if got := TextCraftHeld(past).String(); got != server.String() {
					t.Errorf("after %d steps the turns say %q, the server %q", len(past), got, resp.Observation)
				}
				checked++
			}
			past = append(past, envadapters.EpisodeStep{Action: body.Action, Observation: resp.Observation})
		}
	}
	if checked == 0 {
		t.Fatal("the recording has no inventory answer to check against")
	}
}

// In every recorded expert episode of the real server, each craft it
// accepted finds its inputs in the inventory the earlier steps imply.
func TestTextCraftHeldCoversAcceptedCrafts(t *testing.T) {
	rec := readTextCraftRecording(t)
	crafts := 0
	for _, ep := range rec.Episodes {
		var past []envadapters.EpisodeStep
		for _, s := range ep.Tagged.Steps {
			if c := textcraftCommand.FindStringSubmatch(s.Action); c != nil && strings.HasPrefix(s.Observation, "Crafted") {
				held := map[string]int{}
				for _, it := range TextCraftHeld(past) {
					held[it.Name] = it.Count
				}
				for _, in := range strings.Split(c[3], ",") {
					im := textcraftInput.FindStringSubmatch(strings.TrimSpace(in))
					var n int
					json.Unmarshal([]byte(im[1]), &n)
					if held[im[2]] < n {
						t.Fatalf("index %d: %q accepted by the server with %v held", ep.Index, s.Action, TextCraftHeld(past))
					}
				}
				crafts++
			}
			past = append(past, envadapters.EpisodeStep{Action: s.Action, Observation: s.Observation})
		}
	}
	t.Logf("%d accepted crafts checked", crafts)
}
