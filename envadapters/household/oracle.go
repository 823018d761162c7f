package household

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/seedctl/seedctl/envadapters"
)

// ---- household ----------------------------------------------------------------

var goalRe = regexp.MustCompile(`^(?:put (?:a|some|two) (?:(clean|hot|cool) )?(\w+) (?:in|on) (\w+)|(clean|heat|cool) some (\w+) and put it (?:in|on) (\w+)|find two (\w+) and put them (?:in|on) (\w+)|look at (\w+) under the (\w+)|examine the (\w+) with the (\w+))\.?$`)

type hhGoal struct{ obj, target, prep, lamp string }

func parseHouseholdGoal(goal string) hhGoal {
	m := goalRe.FindStringSubmatch(strings.TrimSpace(goal))
	if m == nil {
		return hhGoal{obj: "object", target: "target"}
	}
	g := hhGoal{}
	switch {
	case m[2] != "":
		g.obj, g.target, g.prep = m[2], m[3], m[1]
	case m[5] != "":
		g.obj, g.target, g.prep = m[5], m[6], map[string]string{"clean": "clean", "heat": "hot", "cool": "cool"}[m[4]]
	case m[7] != "":
		g.obj, g.target = m[7], m[8]
	case m[9] != "":
		g.obj, g.lamp = m[9], m[10]
	case m[11] != "":
		g.obj, g.lamp = m[11], m[12]
	}
	return g
}

var appliance = map[string]string{"clean": "sinkbasin", "hot": "microwave", "cool": "fridge"}
var verb = map[string]string{"clean": "clean", "hot": "heat", "cool": "cool"}

// observed facts from the trajectory text.
type hhSeen struct {
	foundAt   string // receptacle the object was taken from
	seenAt    string // first receptacle an observation showed the object in
	lampAt    string // where an observation showed the lamp
	took      int    // step of the first successful take, -1 if none
	prepared  int    // step of the successful heat/cool/clean, -1
	invalid   int
	repeats   int
	lastMoved string
}

func readHousehold(t envadapters.Episode, g hhGoal) hhSeen {
	s := hhSeen{took: -1, prepared: -1}
	prev := ""
	run := 0
	for i, st := range t.Steps {
		if !st.Valid {
			s.invalid++
		}
		if at := placeSeen(st.Observation, g.obj); at != "" && s.seenAt == "" {
			s.seenAt = at
		}
		if g.lamp != "" && s.lampAt == "" {
			s.lampAt = placeSeen(st.Observation, g.lamp)
		}
		if st.Action == prev && st.Action != "" {
			run++
			if run >= 2 {
				s.repeats++
			}
		} else {
			run = 0
		}
		prev = st.Action
		if s.took < 0 && strings.HasPrefix(st.Observation, "You pick up the "+g.obj) {
			s.took = i
			if j := strings.Index(st.Observation, " from the "); j >= 0 {
				s.foundAt = strings.TrimSuffix(st.Observation[j+len(" from the "):], ".")
			}
		}
		if s.prepared < 0 && g.prep != "" && strings.HasPrefix(st.Observation, "You "+verb[g.prep]+" the "+g.obj) {
			s.prepared = i
		}
		if strings.HasPrefix(st.Observation, "You move the ") {
			s.lastMoved = st.Observation
		}
	}
	return s
}

var placeRe = regexp.MustCompile(`^You (?:arrive at|open the) ([a-z]+ \d+)\.`)

// placeSeen returns the receptacle an arrival or opening observation
// describes, when it lists an object of type obj.
func placeSeen(obs, obj string) string {
	m := placeRe.FindStringSubmatch(obs)
	if m == nil || !strings.Contains(obs, " a "+obj+" ") {
		return ""
	}
	return m[1]
}

// recepType drops a receptacle's number: "cabinet 3" → "cabinet".
func recepType(name string) string {
	f := strings.Fields(name)
	if len(f) == 0 {
		return name
	}
	return f[0]
}

// Hindsight is the household oracle (envadapters.Oracle): what the
// trajectory shows — where the object was found or seen, whether it was
// treated, invalid and repeated actions — and the task family's recipe.
func (builtin) Hindsight(t envadapters.Episode, candidates []int, k int) envadapters.Hindsight {
	g := parseHouseholdGoal(t.Task.Goal)
	s := readHousehold(t, g)
	sk := envadapters.Hindsight{StepSkills: map[int]string{}}
	where := "a receptacle"
	if s.foundAt != "" {
		where = s.foundAt
	}
	if t.Won {
		sk.Summary = fmt.Sprintf("The agent found the %s in %s and completed the task in %d steps.", g.obj, where, len(t.Steps))
		switch {
		case g.lamp != "":
			lampAt := s.lampAt
			if lampAt == "" {
				lampAt = "its place"
			}
			sk.EpisodeSkill = envadapters.Pick(t.ID, "win", fmt.Sprintf("The %s is in %s and the %s is on %s: take the %s there and use the lamp while holding it.", g.obj, where, g.lamp, lampAt, g.obj),
				fmt.Sprintf("Get the %s from %s, go to %s where the %s stands, and use the %s with the %s in hand.", g.obj, where, lampAt, g.lamp, g.lamp, g.obj))
		case g.prep != "":
			sk.EpisodeSkill = envadapters.Pick(t.ID, "win", fmt.Sprintf("The %s is in %s: take it, %s it with the %s, then go to the %s and move it there.", g.obj, where, verb[g.prep], appliance[g.prep], g.target),
				fmt.Sprintf("Go to %s for the %s, bring it to the %s to %s it, and only then place it at the %s.", where, g.obj, appliance[g.prep], verb[g.prep], g.target))
		default:
			sk.EpisodeSkill = envadapters.Pick(t.ID, "win", fmt.Sprintf("The %s is in %s: go there first, take it, then go to the %s and move it there.", g.obj, where, g.target),
				fmt.Sprintf("Get the %s from %s, carry it to the %s and put it there with a move action.", g.obj, where, g.target))
			if strings.HasPrefix(t.Task.Goal, "put two") || strings.HasPrefix(t.Task.Goal, "find two") {
				sk.EpisodeSkill += " Then fetch a second one the same way."
			}
		}
	} else {
		sk.Summary = fmt.Sprintf("The agent did not complete the task within %d steps.", len(t.Steps))
		switch {
		case s.invalid >= 2:
			sk.EpisodeSkill = envadapters.Pick(t.ID, "lose", "Only use actions from the admissible list, written exactly; invented commands do nothing.",
				"Copy one admissible action exactly each turn; anything else is ignored and wastes a step.")
		case s.took < 0 && s.seenAt != "":
			sk.EpisodeSkill = envadapters.Pick(t.ID, "lose", fmt.Sprintf("The %s was in %s and was never picked up: go to %s and take it as soon as you see it.", g.obj, s.seenAt, s.seenAt),
				fmt.Sprintf("A %s was visible at %s; take it from there instead of searching on.", g.obj, s.seenAt))
		case s.took < 0:
			sk.EpisodeSkill = envadapters.Pick(t.ID, "lose", fmt.Sprintf("When the %s is not in sight, open closed containers such as cabinets and drawers one by one instead of revisiting places.", g.obj),
				fmt.Sprintf("Search systematically for the %s: go to each unvisited receptacle and open it if it is closed.", g.obj))
		case g.prep != "" && s.prepared < 0:
			sk.EpisodeSkill = envadapters.Pick(t.ID, "lose", fmt.Sprintf("The %s must be %sed at the %s before it is placed; do that right after picking it up.", g.obj, strings.TrimSuffix(verb[g.prep], "e"), appliance[g.prep]),
				fmt.Sprintf("Do not deliver the %s untreated: go to the %s and %s it first.", g.obj, appliance[g.prep], verb[g.prep]))
		case g.lamp != "":
			sk.EpisodeSkill = envadapters.Pick(t.ID, "lose", fmt.Sprintf("Keep holding the %s, go to the %s and use the lamp; looking elsewhere does not count.", g.obj, g.lamp),
				fmt.Sprintf("The task needs the %s switched on while you hold the %s; go there directly.", g.lamp, g.obj))
		case s.repeats > 0:
			sk.EpisodeSkill = envadapters.Pick(t.ID, "lose", "Do not repeat an action that changed nothing; move on to the next useful step.",
				"Repeating the same action is a warning sign: choose a different admissible action that makes progress.")
		default:
			sk.EpisodeSkill = envadapters.Pick(t.ID, "lose", fmt.Sprintf("After getting the %s, go straight to the %s and move it there before the steps run out.", g.obj, g.target),
				fmt.Sprintf("Once you hold the %s, stop exploring and deliver it to the %s.", g.obj, g.target))
		}
	}
	for _, c := range candidates {
		if len(sk.StepSkills) >= k {
			break
		}
		var adv string
		switch {
		case s.took < 0 || c <= s.took:
			adv = envadapters.Pick(t.ID, fmt.Sprint("s", c), fmt.Sprintf("Look for the %s inside a receptacle you have not opened yet.", g.obj),
				fmt.Sprintf("Go to an unexplored receptacle and open it to find the %s.", g.obj))
		case g.prep != "" && (s.prepared < 0 || c <= s.prepared):
			adv = fmt.Sprintf("Take the %s to the %s and %s it now.", g.obj, appliance[g.prep], verb[g.prep])
		case g.lamp != "":
			adv = fmt.Sprintf("Carry the %s to the %s and use it.", g.obj, g.lamp)
		default:
			adv = fmt.Sprintf("Go to the %s and move the %s there.", g.target, g.obj)
		}
		sk.StepSkills[c] = adv
	}
	return sk
}
