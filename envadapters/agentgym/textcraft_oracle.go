package agentgym

import (
	"fmt"
	"strings"

	"github.com/seedctl/seedctl/envadapters"
)

func init() { envadapters.RegisterOracle(TextCraft, TextCraftOracle{}) }

// TextCraftOracle writes hindsight about TextCraft episodes from their
// text only (envadapters.Oracle): the first observation's crafting
// commands and goal, the actions and the server's answers. After a win the
// episode skill is the workflow that crafted the goal; after a loss, a
// rule against the first refused action (what the refusal means and what
// to write instead), or, when nothing was refused, against running out of
// steps. Step advice goes to refused candidate steps first. It is the
// stage-1 analyzer of an agentgym textcraft run with
// stage1.analyzer.kind oracle.
type TextCraftOracle struct{}

// TextCraftExpert is a scripted expert for one TextCraft episode: the
// planner's actions (PlanTextCraft) from its first observation, in order.
type TextCraftExpert struct {
	plan []string
}

// NewTextCraftExpert plans the episode whose reset showed firstObs; tags
// (nil: read types off the names) is the server's item-type table.
func NewTextCraftExpert(firstObs string, tags TextCraftTags) (*TextCraftExpert, error) {
	return newTextCraftExpert(firstObs, tags, PlanTextCraft)
}

// newTextCraftExpert plans firstObs's episode with plan.
func newTextCraftExpert(firstObs string, tags TextCraftTags, plan func(TextCraftTask, TextCraftTags) ([]string, error)) (*TextCraftExpert, error) {
	task, err := ParseTextCraft(firstObs)
	if err != nil {
		return nil, err
	}
	actions, err := plan(task, tags)
	if err != nil {
		return nil, err
	}
	return &TextCraftExpert{plan: actions}, nil
}

// Act is the plan's next action; past its end (a plan that did not craft
// the goal: one read by names alone), "inventory", which changes nothing,
// until the episode's step limit ends it.
func (x *TextCraftExpert) Act() (string, error) {
	if len(x.plan) == 0 {
		return "inventory", nil
	}
	a := x.plan[0]
	x.plan = x.plan[1:]
	return a, nil
}

// refused says whether a TextCraft answer refused the action.
func refused(obs string) bool { return IsInvalid(TextCraft, obs) }

// Hindsight is the TextCraft oracle.
func (TextCraftOracle) Hindsight(ep envadapters.Episode, candidates []int, k int) envadapters.Hindsight {
	task, perr := ParseTextCraft(ep.FirstObservation)
	goal := task.Goal
	if perr != nil {
		goal = GoalOf(ep.FirstObservation)
	}
	firstBad := -1
	nBad := 0
	for i, s := range ep.Steps {
		if refused(s.Observation) || !s.Valid {
			nBad++
			if firstBad < 0 {
				firstBad = i
			}
		}
	}
	h := envadapters.Hindsight{StepSkills: map[int]string{}}
	switch {
	case ep.Won:
		h.Summary = fmt.Sprintf("Crafted %s in %d steps (%d refused).", goal, len(ep.Steps), nBad)
	case firstBad >= 0:
		h.Summary = fmt.Sprintf("Did not craft %s in %d steps; %d actions were refused, the first %q (%q).", goal, len(ep.Steps), nBad, ep.Steps[firstBad].Action, ep.Steps[firstBad].Observation)
	default:
		h.Summary = fmt.Sprintf("Did not craft %s: the %d steps ran out with no action refused.", goal, len(ep.Steps))
	}
	switch {
	case ep.Won:
		h.EpisodeSkill = envadapters.Pick(ep.ID, "tc-win",
			"To craft "+goal+": ",
			"A workflow that crafts "+goal+": ",
			"What worked for "+goal+": ") + workflow(ep.Steps) + "."
	case firstBad >= 0:
		h.EpisodeSkill = correction(task, ep.Steps[firstBad].Action, ep.Steps[firstBad].Observation)
	default:
		h.EpisodeSkill = envadapters.Pick(ep.ID, "tc-slow",
			"Do not spend steps on repeated inventory checks or gets: go through the recipe of "+goal+" once, fetching each base item in the count its command needs, then crafting upward.",
			"The steps ran out: fetch what the commands for "+goal+" need in one get per item, then craft each intermediate item once, ending with "+goal+".")
		if plan, err := PlanTextCraft(task, nil); err == nil && len(plan) > 0 {
			h.EpisodeSkill += " Start with: " + strings.Join(plan[:min(3, len(plan))], "; ") + "."
		}
	}
	// Step advice: refused candidates first, then the others.
	var order []int
	for _, c := range candidates {
		if c >= 0 && c < len(ep.Steps) && refused(ep.Steps[c].Observation) {
			order = append(order, c)
		}
	}
	for _, c := range candidates {
		if c >= 0 && c < len(ep.Steps) && !refused(ep.Steps[c].Observation) {
			order = append(order, c)
		}
	}
	for _, c := range order {
		if len(h.StepSkills) >= k {
			break
		}
		s := ep.Steps[c]
		switch {
		case refused(s.Observation):
			h.StepSkills[c] = correction(task, s.Action, s.Observation)
		case ep.Won && c == len(ep.Steps)-1:
			h.StepSkills[c] = "This craft makes " + goal + " and wins: do it once every input is in the inventory."
		case strings.HasPrefix(s.Action, "craft "):
			h.StepSkills[c] = "Crafting here was right: " + strings.TrimPrefix(s.Observation, "Crafted ") + " went into the inventory."
		case strings.HasPrefix(s.Action, "get "):
			h.StepSkills[c] = "Getting a base item in the count its command needs saves steps: " + s.Observation + "."
		default:
			h.StepSkills[c] = "Checking the inventory changes nothing; act only when you need to know what you hold."
		}
	}
	return h
}

// workflow lists an episode's accepted actions in order, a repeat of the
// same action counted ("craft … (3 times)").
func workflow(steps []envadapters.EpisodeStep) string {
	var parts []string
	last, n := "", 0
	flush := func() {
		switch {
		case n == 1:
			parts = append(parts, last)
		case n > 1:
			parts = append(parts, fmt.Sprintf("%s (%d times)", last, n))
		}
	}
	for _, s := range steps {
		if refused(s.Observation) || s.Action == "inventory" {
			continue
		}
		if s.Action == last {
			n++
			continue
		}
		flush()
		last, n = s.Action, 1
	}
	flush()
	return strings.Join(parts, "; ")
}

// correction is what a refused action's answer means and what to write
// instead, in terms of the episode's crafting commands.
func correction(task TextCraftTask, action, obs string) string {
	switch {
	case strings.HasPrefix(obs, "Could not find enough items to craft"):
		return fmt.Sprintf("%q was refused for missing inputs: before crafting, get or craft every input in the counts its command lists.", action)
	case strings.HasPrefix(obs, "Could not find a valid recipe"):
		return fmt.Sprintf("%q matches no recipe: copy a listed crafting command exactly, inputs and counts as listed, naming the kind you made where the command names a type.", action)
	case strings.HasPrefix(obs, "Wrong item format"):
		return fmt.Sprintf("%q has an input without a count: write each input as \"N item\", separated by commas.", action)
	case strings.HasPrefix(obs, "Could not find "):
		item := strings.TrimSpace(strings.TrimPrefix(obs, "Could not find "))
		for _, r := range task.Recipes {
			if r.Output == item {
				return fmt.Sprintf("%s cannot be fetched: craft it with its command (craft %d %s using …).", item, r.Count, item)
			}
		}
		for _, r := range task.Recipes {
			if strings.HasSuffix(r.Output, " "+item) {
				return fmt.Sprintf("%s names a type of item, which cannot be fetched: craft one of its kinds, such as %s, and name that kind in the commands that ask for %s.", item, r.Output, item)
			}
		}
		return fmt.Sprintf("%s cannot be fetched: get only items that no crafting command makes, and check that the input which asked for %s was read as its command names it.", item, item)
	case strings.HasPrefix(obs, "Could not execute"):
		return fmt.Sprintf("%q is no action: use get N ITEM, craft N ITEM using N ITEM, … or inventory.", action)
	}
	return fmt.Sprintf("%q was refused (%s): follow the crafting commands as listed.", action, obs)
}
