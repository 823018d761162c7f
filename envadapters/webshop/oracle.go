package webshop

import (
	"fmt"
	"strings"

	"github.com/seedctl/seedctl/envadapters"
)

// ---- webshop ------------------------------------------------------------------

// Hindsight is the WebShop oracle (envadapters.Oracle), from the actions
// and pages the episode shows.
func (builtin) Hindsight(t envadapters.Episode, candidates []int, k int) envadapters.Hindsight {
	sk := envadapters.Hindsight{StepSkills: map[int]string{}}
	clicked, bought := false, false
	invalid := 0
	for _, st := range t.Steps {
		if strings.HasPrefix(strings.ToLower(st.Action), "click[b0") {
			clicked = true
		}
		if strings.Contains(st.Observation, "Thank you for shopping") {
			bought = true
		}
		if !st.Valid {
			invalid++
		}
	}
	if t.Won {
		sk.Summary = fmt.Sprintf("The agent bought a product meeting every constraint in %d steps.", len(t.Steps))
		sk.EpisodeSkill = envadapters.Pick(t.ID, "win", "Search with the product type and the requested attributes, open a matching result, click each requested option, then buy now.",
			"Query for the item and its key features, open the best match, select all requested options and only then click buy now.")
	} else {
		sk.Summary = fmt.Sprintf("The agent did not buy a fully matching product (score %.0f).", t.Score)
		switch {
		case invalid >= 2:
			sk.EpisodeSkill = envadapters.Pick(t.ID, "lose", "Use search[...] only on the search page and click[...] only on buttons that are listed.", "Stick to listed buttons with click[...]; free text and missing buttons do nothing.")
		case !clicked:
			sk.EpisodeSkill = envadapters.Pick(t.ID, "lose", "Open a result whose title matches the requested product before trying anything else.", "Do not stay on the results page: click the result that matches the instruction.")
		case bought:
			sk.EpisodeSkill = envadapters.Pick(t.ID, "lose", "Before buying, select every requested option and check the price limit; missing options lower the score.", "Click each option named in the instruction on the item page, then buy now.")
		default:
			sk.EpisodeSkill = envadapters.Pick(t.ID, "lose", "Once the item and options are right, click buy now instead of browsing further.", "Finish the purchase before running out of steps: choose options and click buy now.")
		}
	}
	for _, c := range candidates {
		if len(sk.StepSkills) < k {
			sk.StepSkills[c] = envadapters.Pick(t.ID, fmt.Sprint("s", c), "Pick the action that moves toward buying the matching item with its options.", "Choose the listed button that gets you closer to the requested product.")
		}
	}
	return sk
}
