package agentgym

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/seedctl/seedctl/envadapters"
)

// TextCraftInventory is the style of TextCraft's window turns (the run's
// rollout.places_line; "" is this one, the only one).
const TextCraftInventory = "inventory"

// TextCraftTurns is seedctl's rendering of TextCraft's window-mode turns
// (envadapters.Turns): the first observation whole (the crafting commands
// a policy copies its actions from, and the goal), the last steps as
// "action -> observation" lines, the current observation, and an
// inventory line before the action request —
//
//	Crafting commands:
//	craft 1 magenta dye using 1 allium
//	…
//
//	Goal: craft magenta dye.
//	Step 1: get 1 allium -> Got 1 allium
//	Now: Crafted 1 minecraft:magenta_dye
//	Inventory: 1 magenta dye.
//	<action request>
//
// The inventory is what the episode's own steps imply — "Got N X" adds N
// X, "Crafted N minecraft:x" adds the craft's output and takes its inputs,
// the answer to "inventory" replaces it — so a policy whose window shows
// only the last steps still knows what it holds (AgentGym's own prompt
// keeps the whole history instead). It is read from the observations the
// policy saw, nothing the server did not say.
type TextCraftTurns struct{}

// NewTextCraftTurns is the Turns of a style ("" or TextCraftInventory).
func NewTextCraftTurns(style string) (envadapters.Turns, error) {
	if style != "" && style != TextCraftInventory {
		return nil, fmt.Errorf("textcraft turns %q: want %q (TextCraft's turns have an inventory line, no places line)", style, TextCraftInventory)
	}
	return TextCraftTurns{}, nil
}

// Lists names every action (TextCraft's server sends no list anyway).
func (TextCraftTurns) Lists(string) bool { return true }

// Window renders a turn (see TextCraftTurns).
func (TextCraftTurns) Window(in envadapters.WindowTurn) (string, string) {
	var b strings.Builder
	b.WriteString(strings.TrimSpace(in.FirstObservation))
	n := len(in.Past)
	if n > 0 {
		b.WriteString("\n")
	}
	for k := max(0, n-in.Window); k < n; k++ {
		fmt.Fprintf(&b, "\nStep %d: %s", k+1, in.Past[k].Action)
		if k < n-1 {
			b.WriteString(" -> " + strings.Join(strings.Fields(in.Past[k].Observation), " "))
		}
	}
	if n > 0 {
		b.WriteString("\nNow: " + strings.Join(strings.Fields(in.Observation), " "))
	}
	return b.String(), "Inventory: " + TextCraftHeld(in.Past).String() + "."
}

// TextCraftStock is an inventory: item names and counts, in the order the
// items were first had.
type TextCraftStock []TextCraftItem

// String is "2 pink dye, 1 allium", or "empty".
func (s TextCraftStock) String() string {
	parts := make([]string, 0, len(s))
	for _, it := range s {
		parts = append(parts, fmt.Sprintf("%d %s", it.Count, it.Name))
	}
	if len(parts) == 0 {
		return "empty"
	}
	return strings.Join(parts, ", ")
}

func (s TextCraftStock) add(name string, n int) TextCraftStock {
	i := slices.IndexFunc(s, func(it TextCraftItem) bool { return it.Name == name })
	if i < 0 {
		if n <= 0 {
			return s
		}
		return append(s, TextCraftItem{Count: n, Name: name})
	}
	s[i].Count += n
	if s[i].Count <= 0 {
		return slices.Delete(s, i, i+1)
	}
	return s
}

var (
	textcraftGot       = regexp.MustCompile(`^Got (\d+) (.+?)\s*$`)
	textcraftCrafted   = regexp.MustCompile(`^Crafted (\d+) (\S+)\s*$`)
	textcraftInventory = regexp.MustCompile(`\[([^\]]+)\] \((\d+)\)`)
)

// TextCraftHeld is the inventory past's steps imply (see TextCraftTurns).
// A craft's inputs are taken as its action names them; the server checks
// them the same way before it crafts.
func TextCraftHeld(past []envadapters.EpisodeStep) TextCraftStock {
	var s TextCraftStock
	for _, st := range past {
		obs := strings.TrimSpace(st.Observation)
		switch {
		case strings.HasPrefix(obs, "Inventory:"):
			s = nil
			for _, m := range textcraftInventory.FindAllStringSubmatch(obs, -1) {
				n, _ := strconv.Atoi(m[2])
				s = s.add(textcraftName(strings.TrimSpace(m[1])), n)
			}
		case textcraftGot.MatchString(obs):
			m := textcraftGot.FindStringSubmatch(obs)
			n, _ := strconv.Atoi(m[1])
			s = s.add(m[2], n)
		case textcraftCrafted.MatchString(obs):
			m := textcraftCrafted.FindStringSubmatch(obs)
			n, _ := strconv.Atoi(m[1])
			if c := textcraftCommand.FindStringSubmatch(strings.TrimSpace(st.Action)); c != nil {
				for _, in := range strings.Split(c[3], ",") {
					if im := textcraftInput.FindStringSubmatch(strings.TrimSpace(in)); im != nil {
						k, _ := strconv.Atoi(im[1])
						s = s.add(im[2], -k)
					}
				}
				s = s.add(c[2], n)
			} else {
				s = s.add(textcraftName(m[2]), n)
			}
		}
	}
	return s
}
