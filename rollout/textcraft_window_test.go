package rollout

import (
	"strings"
	"testing"

	"github.com/seedctl/seedctl/envadapters/agentgym"
)

// A window turn as the rollout renders it for TextCraft: the commands and
// the goal, the last steps, the current observation, the inventory line
// before the action request; a style TextCraft does not have is refused.
func TestTextCraftWindowTurn(t *testing.T) {
	first := "Crafting commands:\ncraft 1 magenta dye using 1 allium\ncraft 2 pink dye using 1 peony\n\nGoal: craft magenta dye."
	tmpl := TemplateFor(agentgym.TextCraft)
	if tmpl.Turns == nil {
		t.Fatal("TextCraft's template has no turns of its own")
	}
	past := []Step{
		{Action: "get 1 peony", Observation: "Got 1 peony"},
		{Action: "get 1 allium", Observation: "Got 1 allium"},
	}
	got := WindowText(tmpl, first, past, 1, "Got 1 allium", nil)
	want := first + "\n\nStep 2: get 1 allium\nNow: Got 1 allium\nInventory: 1 peony, 1 allium.\n" + tmpl.ActionRequest
	if got != want {
		t.Errorf("turn:\n%s\nwant:\n%s", got, want)
	}
	if got := WindowText(tmpl, first, nil, 3, first, nil); got != first+"\nInventory: empty.\n"+tmpl.ActionRequest {
		t.Errorf("first turn:\n%s", got)
	}
	if _, err := tmpl.WithPlacesLine("few"); err == nil || !strings.Contains(err.Error(), "inventory") {
		t.Errorf("places line few for TextCraft: %v", err)
	}
}
