package searchqa

import (
	"fmt"
	"strings"

	"github.com/seedctl/seedctl/envadapters"
)

// ---- searchqa -----------------------------------------------------------------

// Hindsight is the SearchQA oracle (envadapters.Oracle), from the searches
// and the answer the episode shows.
func (builtin) Hindsight(t envadapters.Episode, candidates []int, k int) envadapters.Hindsight {
	sk := envadapters.Hindsight{StepSkills: map[int]string{}}
	twoHop := t.Task.Family == "2hop"
	searches, answered := 0, false
	for _, st := range t.Steps {
		if strings.Contains(strings.ToLower(st.Action), "<search>") {
			searches++
		}
		if strings.HasPrefix(st.Observation, "You answered") {
			answered = true
		}
	}
	if t.Won {
		sk.Summary = fmt.Sprintf("The agent answered correctly after %d searches.", searches)
		if twoHop {
			sk.EpisodeSkill = envadapters.Pick(t.ID, "win", "Search the named entity first, read off the intermediate entity, search that one, then answer with the exact name found.",
				"For a two-step question, find the linking entity with a first search and the answer with a second.")
		} else {
			sk.EpisodeSkill = envadapters.Pick(t.ID, "win", "Search for the entity named in the question with the asked relation, then copy the answer from the top passage.",
				"One search on the question's entity is enough; answer with the exact phrase from the passage.")
		}
	} else {
		sk.Summary = "The agent did not give the correct answer."
		switch {
		case searches == 0:
			sk.EpisodeSkill = envadapters.Pick(t.ID, "lose", "Always search before answering; guesses without evidence are wrong.", "Never answer from memory: run a search on the question's entity first.")
		case twoHop && searches < 2:
			sk.EpisodeSkill = envadapters.Pick(t.ID, "lose", "A question about the X of the Y of Z needs two searches: do not answer after the first.", "After the first search names an intermediate entity, search that entity before answering.")
		case !answered:
			sk.EpisodeSkill = envadapters.Pick(t.ID, "lose", "Answer inside answer tags once a passage states the fact, before the turns run out.", "Stop searching when the evidence is found and give the answer.")
		default:
			sk.EpisodeSkill = envadapters.Pick(t.ID, "lose", "Copy the answer exactly as the passage states it, without extra words.", "Check that the answer matches the relation asked, not a neighbouring fact.")
		}
	}
	for _, c := range candidates {
		if len(sk.StepSkills) < k {
			sk.StepSkills[c] = envadapters.Pick(t.ID, fmt.Sprint("s", c), "Search for the entity the question depends on at this point.", "Use a search query naming the entity and the relation you still need.")
		}
	}
	return sk
}
