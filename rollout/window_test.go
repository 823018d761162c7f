package rollout

import (
	"flag"
	"fmt"
	"github.com/seedctl/seedctl/envadapters/household"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata golden files")

const firstObs = "You are in the middle of a room. Looking quickly around you, you see a cabinet 1, a cabinet 2, a cabinet 3, a cabinet 4, a countertop 1, a fridge 1, and a microwave 1.\n\nYour task is to: put a cool apple in countertop."

// TestCompactWindowText: the compact window turns (golden), and the state a
// policy needs is in them — the task, the places left, the last steps and
// where the agent is now — without repeating the current observation.
func TestCompactWindowText(t *testing.T) {
	tmpl := TemplateFor("household")
	past := []Step{
		{Action: "go to cabinet 1", Observation: "You arrive at cabinet 1. The cabinet 1 is closed."},
		{Action: "open cabinet 1", Observation: "You open the cabinet 1. The cabinet 1 is open. In it, you see nothing."},
		{Action: "go to fridge 1", Observation: "You arrive at fridge 1. The fridge 1 is closed."},
		{Action: "open fridge 1", Observation: "You open the fridge 1. The fridge 1 is open. In it, you see a apple 1."},
	}
	var b strings.Builder
	for n := 0; n <= len(past); n++ {
		obs := firstObs
		adm := []string{"inventory", "look"}
		if n > 0 {
			obs = past[n-1].Observation
			adm = []string{"close fridge 1", "inventory", "look", "take apple 1 from fridge 1"}
		}
		got := WindowText(tmpl, firstObs, past[:n], 3, obs, adm)
		if !strings.HasPrefix(got, "Your task is to: put a cool apple in countertop.\n") {
			t.Errorf("step %d: the turn does not open with the task line:\n%s", n, got)
		}
		if strings.Contains(got, "Looking quickly around you") {
			t.Errorf("step %d: the room listing is repeated:\n%s", n, got)
		}
		if n > 0 && strings.Count(got, oneLine(obs)) != 1 {
			t.Errorf("step %d: the current observation appears %d times:\n%s", n, strings.Count(got, obs), got)
		}
		if n > 3 && strings.Contains(got, "Step 1:") {
			t.Errorf("step %d: a step outside the window is shown", n)
		}
		withSkill := InsertSkills(got, tmpl.ActionRequest, "The apple is in fridge 1.", "Take the apple now.")
		next := "Now:"
		if n > 0 {
			next = fmt.Sprintf("Step %d:", max(1, n-2))
		}
		if !strings.Contains(withSkill, "countertop.\nSkill from experience: The apple is in fridge 1.\n"+next) {
			t.Errorf("step %d: the episode skill is not right after the task line:\n%s", n, withSkill)
		}
		// The places line names the next place and how many more, right
		// before the action request (Template.NextPlace).
		if !regexp.MustCompile(`\nNow: [^\n]*\nAdmissible actions: [^\n]*\nPlaces not searched yet: [a-z]+ [0-9]+ and [0-9]+ more\.\n` + regexp.QuoteMeta(tmpl.ActionRequest) + `$`).MatchString(got) {
			t.Errorf("step %d: the places line is not the next place right before the action request:\n%s", n, got)
		}
		b.WriteString("=== " + string(rune('0'+n)) + " steps\n" + withSkill + "\n")
	}
	path := filepath.Join("testdata", "compact_window.golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if string(want) != b.String() {
		t.Errorf("compact window turns differ from %s (run with -update if intended):\n%s", path, b.String())
	}
}

// TestWindowTextShowsTheCurrentObservationOnce: in plain window turns
// (webshop, searchqa) the last step's observation is the current one, and
// pages of search results are long: it is shown once, as the current
// observation; older steps keep theirs.
func TestWindowTextShowsTheCurrentObservationOnce(t *testing.T) {
	tmpl := TemplateFor("webshop")
	past := []Step{
		{Action: "search[red shoes]", Observation: "Page 1 [SEP] B01 [SEP] Red Shoes [SEP] $20.00"},
		{Action: "click[b01]", Observation: "Red Shoes [SEP] size [SEP] 7 [SEP] 8 [SEP] Buy Now"},
	}
	got := WindowText(tmpl, "WebShop [SEP] find red shoes", past, 3, past[1].Observation, []string{"click[7]", "click[buy now]"})
	if n := strings.Count(got, "Red Shoes [SEP] size"); n != 1 {
		t.Errorf("current observation shown %d times:\n%s", n, got)
	}
	for _, want := range []string{"[Step 1] Action: search[red shoes]\nObservation: Page 1 [SEP] B01", "[Step 2] Action: click[b01]\nCurrent observation: Red Shoes"} {
		if !strings.Contains(got, want) {
			t.Errorf("turn lacks %q:\n%s", want, got)
		}
	}
}

// TestPlacesLineStyles: Config.PlacesLine selects the household's places line — the
// next place and a count, or every place not searched yet — always the
// last line before the action request; a template without a places line
// refuses a style, and a wrong style is named.
func TestPlacesLineStyles(t *testing.T) {
	hh := TemplateFor("household")
	order := household.PlaceOrder(firstObs, "")
	past := []Step{
		{Action: "go to " + order[0], Observation: "You arrive at " + order[0] + ". On the " + order[0] + ", you see nothing."},
		{Action: "go to fridge 1", Observation: "You arrive at fridge 1. The fridge 1 is closed."}, // closed: not searched
	}
	left := order[1:]
	for _, tc := range []struct{ style, line string }{
		{"", fmt.Sprintf("Places not searched yet: %s and %d more.", left[0], len(left)-1)},
		{household.PlacesNext, fmt.Sprintf("Places not searched yet: %s and %d more.", left[0], len(left)-1)},
		{household.PlacesAll, "Places not searched yet: " + strings.Join(left, ", ") + "."},
		{household.PlacesFew, fmt.Sprintf("Places not searched yet: %s and %d more.", strings.Join(left[:3], ", "), len(left)-3)},
	} {
		tmpl, err := hh.WithPlacesLine(tc.style)
		if err != nil {
			t.Fatalf("style %q: %v", tc.style, err)
		}
		got := WindowText(tmpl, firstObs, past, 3, past[1].Observation, []string{"open fridge 1", "look"})
		if want := "\nAdmissible actions: open fridge 1; look\n" + tc.line + "\n" + tmpl.ActionRequest; !strings.HasSuffix(got, want) {
			t.Errorf("style %q: turn ends\n%s\nwant it to end\n%s", tc.style, got, want)
		}
		if strings.Count(got, "Places not searched yet") != 1 {
			t.Errorf("style %q: the places line appears %d times", tc.style, strings.Count(got, "Places not searched yet"))
		}
	}
	// Every place searched: the all-places line says none.
	all, _ := hh.WithPlacesLine(household.PlacesAll)
	var done []Step
	for _, p := range order {
		done = append(done, Step{Action: "go to " + p, Observation: "You arrive at " + p + ". On the " + p + ", you see nothing."})
	}
	if got := WindowText(all, firstObs, done, 3, done[len(done)-1].Observation, nil); !strings.HasSuffix(got, "\nPlaces not searched yet: none.\n"+all.ActionRequest) {
		t.Errorf("all searched:\n%s", got)
	}
	if _, err := TemplateFor("webshop").WithPlacesLine(household.PlacesAll); err == nil || !strings.Contains(err.Error(), "no places line") {
		t.Errorf("webshop with a places line: err %v", err)
	}
	if _, err := hh.WithPlacesLine("some"); err == nil || !strings.Contains(err.Error(), `"some"`) {
		t.Errorf("bad style: err %v", err)
	}
}
