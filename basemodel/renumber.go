package basemodel

import (
	"math/rand/v2"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/seedctl/seedctl/envadapters/household"
)

// objectRE matches a household object instance ("plate 2"); places are
// not object types, so "cabinet 4" never matches.
var objectRE = regexp.MustCompile(`\b(` + strings.Join(household.ObjectTypes(), "|") + `) (\d+)\b`)

// renumberObjects permutes the instance numbers of each object type in
// every text of ep, consistently: each type present with highest number n
// gets a random permutation of 1..max(n, 3). Admissible lists are sorted
// again, as the environment sorts them.
func renumberObjects(ep *Episode, r *rand.Rand) {
	texts := ep.texts()
	highest := map[string]int{}
	for _, t := range texts {
		for _, m := range objectRE.FindAllStringSubmatch(*t, -1) {
			n, _ := strconv.Atoi(m[2])
			highest[m[1]] = max(highest[m[1]], n)
		}
	}
	types := make([]string, 0, len(highest))
	for t := range highest {
		types = append(types, t)
	}
	sort.Strings(types) // map order must not reach the random stream
	perm := map[string][]int{}
	for _, t := range types {
		perm[t] = r.Perm(max(highest[t], 3))
	}
	for _, t := range texts {
		*t = objectRE.ReplaceAllStringFunc(*t, func(s string) string {
			typ, num, _ := strings.Cut(s, " ") // a match is "type number"
			n, _ := strconv.Atoi(num)
			if n < 1 {
				return s
			}
			return typ + " " + strconv.Itoa(perm[typ][n-1]+1)
		})
	}
	for k := range ep.Steps {
		sort.Strings(ep.Steps[k].Admissible)
	}
}

// texts points at every string of ep that can name an object.
func (e *Episode) texts() []*string {
	out := []*string{&e.FirstObs, &e.EpisodeHint, &e.AnalysisPrompt, &e.AnalysisAnswer}
	for k := range e.Steps {
		s := &e.Steps[k]
		out = append(out, &s.Obs, &s.Action, &s.Target, &s.Response, &s.After, &s.StepHint)
		for j := range s.Admissible {
			out = append(out, &s.Admissible[j])
		}
	}
	return out
}
