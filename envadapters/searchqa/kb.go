// Package searchqa is a Search-R1-like environment: questions over a
// generated knowledge base, answered by searching a BM25 index of its
// passages (<search> q </search> → <information> … </information>) and
// replying <answer> … </answer>. Reward is exact match; F1 is reported as
// the score. 1-hop and 2-hop questions; eval_unseen holds out question
// compositions.
package searchqa

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
)

// entity is one thing the knowledge base knows about.
type entity struct {
	id    int
	name  string
	kind  string
	facts map[string]string // relation → object name
	order []string          // relation order in the passage
}

// relation describes a fact type: subject kind → object kind, the question
// asked about it, and the sentence the passage states it with.
type relation struct {
	name     string
	subj     string
	obj      string // a kind, or "year"
	question string // %s = subject
	sentence string // %[1]s subject, %[2]s object
	phrase   string // for 2-hop questions: "the %s of X" → "the founder of"
}

var relations = []relation{
	{name: "born_in", subj: "person", obj: "city", question: "Where was %s born?", sentence: "%[1]s was born in %[2]s.", phrase: "birthplace"},
	{name: "works_for", subj: "person", obj: "company", question: "Which company does %s work for?", sentence: "%[1]s works for %[2]s.", phrase: "employer"},
	{name: "studied_at", subj: "person", obj: "university", question: "Where did %s study?", sentence: "%[1]s studied at %[2]s.", phrase: "university"},
	{name: "founded_by", subj: "company", obj: "person", question: "Who founded %s?", sentence: "%[1]s was founded by %[2]s.", phrase: "founder"},
	{name: "headquartered_in", subj: "company", obj: "city", question: "In which city is %s headquartered?", sentence: "%[1]s is headquartered in %[2]s.", phrase: "headquarters city"},
	{name: "founded_year", subj: "company", obj: "year", question: "In what year was %s founded?", sentence: "%[1]s was established in %[2]s.", phrase: "founding year"},
	{name: "located_in", subj: "city", obj: "country", question: "In which country is %s?", sentence: "%[1]s is a city in %[2]s.", phrase: "country"},
	{name: "capital", subj: "country", obj: "city", question: "What is the capital of %s?", sentence: "The capital of %[1]s is %[2]s.", phrase: "capital"},
	{name: "written_by", subj: "book", obj: "person", question: "Who wrote %s?", sentence: "%[1]s is a novel written by %[2]s.", phrase: "author"},
	{name: "flows_through", subj: "river", obj: "city", question: "Which city does %s flow through?", sentence: "%[1]s flows through %[2]s.", phrase: "city"},
	{name: "uni_in", subj: "university", obj: "city", question: "In which city is %s?", sentence: "%[1]s is located in %[2]s.", phrase: "home city"},
}

// compositions are 2-hop questions: first relation, then second on its object.
type composition struct {
	first, second string
	question      string // %s = subject
	unseen        bool
}

var compositions = []composition{
	{"founded_by", "born_in", "Where was the founder of %s born?", false},
	{"headquartered_in", "located_in", "In which country is the headquarters city of %s?", false},
	{"works_for", "founded_by", "Who founded the company that %s works for?", false},
	{"born_in", "located_in", "In which country was %s born?", false},
	{"works_for", "headquartered_in", "In which city is the employer of %s headquartered?", false},
	{"flows_through", "located_in", "In which country is the city that %s flows through?", false},
	{"written_by", "born_in", "Where was the author of %s born?", true},
	{"studied_at", "uni_in", "In which city did %s go to university?", true},
	{"works_for", "founded_year", "In what year was the company %s works for founded?", true},
	{"founded_by", "studied_at", "Where did the founder of %s study?", true},
}

func relByName(n string) relation {
	for _, r := range relations {
		if r.name == n {
			return r
		}
	}
	panic("searchqa: unknown relation " + n)
}

var syllables = []string{"ka", "lo", "mi", "ra", "ven", "tor", "ash", "bel", "cor", "dun", "el", "fa", "gor", "hal", "is", "jor", "kel", "lun", "mor", "nar", "os", "pel", "quin", "ros", "sal", "tam", "ul", "var", "wen", "yor", "zed", "bri", "sto", "tha", "vi"}

// kb is the whole generated world: entities and one passage per entity.
type kb struct {
	entities []*entity
	byKind   map[string][]*entity
	byName   map[string]*entity
}

const worldSeed = 20260401

var kindCounts = map[string]int{"person": 1400, "company": 450, "city": 300, "country": 40, "book": 350, "river": 120, "university": 90}

// buildKB generates the knowledge base deterministically.
func buildKB() *kb {
	r := rand.New(rand.NewPCG(worldSeed, 7))
	k := &kb{byKind: map[string][]*entity{}, byName: map[string]*entity{}}
	used := map[string]bool{}
	word := func(n int) string {
		var b strings.Builder
		for i := 0; i < n; i++ {
			b.WriteString(syllables[r.IntN(len(syllables))])
		}
		s := b.String()
		return strings.ToUpper(s[:1]) + s[1:]
	}
	unique := func(f func() string) string {
		for {
			s := f()
			if !used[s] {
				used[s] = true
				return s
			}
		}
	}
	namers := map[string]func() string{
		"person": func() string { return word(2) + " " + word(2+r.IntN(2)) },
		"company": func() string {
			return word(2) + " " + []string{"Industries", "Labs", "Works", "Systems", "Foods", "Motors"}[r.IntN(6)]
		},
		"city": func() string {
			return word(2) + []string{"", "ford", "ton", "burg", "haven", "port"}[r.IntN(6)]
		},
		"country": func() string { return word(2+r.IntN(2)) + []string{"ia", "land", "stan", "a"}[r.IntN(4)] },
		"book": func() string {
			return "The " + []string{"Silent", "Hidden", "Last", "Broken", "Golden", "Winter", "Northern", "Burning"}[r.IntN(8)] + " " + word(2)
		},
		"river":      func() string { return "the " + word(2) + " River" },
		"university": func() string { return "the University of " + word(3) },
	}
	kinds := make([]string, 0, len(kindCounts))
	for kd := range kindCounts {
		kinds = append(kinds, kd)
	}
	sort.Strings(kinds)
	for _, kd := range kinds {
		for i := 0; i < kindCounts[kd]; i++ {
			e := &entity{id: len(k.entities), name: unique(namers[kd]), kind: kd, facts: map[string]string{}}
			k.entities = append(k.entities, e)
			k.byKind[kd] = append(k.byKind[kd], e)
			k.byName[e.name] = e
		}
	}
	// Every entity gets every relation whose subject it is.
	for _, e := range k.entities {
		for _, rel := range relations {
			if rel.subj != e.kind {
				continue
			}
			var obj string
			if rel.obj == "year" {
				obj = fmt.Sprint(1850 + r.IntN(170))
			} else {
				objs := k.byKind[rel.obj]
				obj = objs[r.IntN(len(objs))].name
			}
			e.facts[rel.name] = obj
			e.order = append(e.order, rel.name)
		}
		r.Shuffle(len(e.order), func(i, j int) { e.order[i], e.order[j] = e.order[j], e.order[i] })
	}
	// Capitals must lie in their country.
	for _, c := range k.byKind["country"] {
		cap := k.byName[c.facts["capital"]]
		cap.facts["located_in"] = c.name
	}
	return k
}

// passage is the entity's article: a title line and its facts as sentences,
// with a little filler so passages are not one-liners.
func (k *kb) passage(e *entity) string {
	var b strings.Builder
	for _, rn := range e.order {
		rel := relByName(rn)
		fmt.Fprintf(&b, rel.sentence+" ", capFirst(e.name), e.facts[rn])
	}
	filler := map[string]string{
		"person": "%s is known locally for community work.", "company": "%s employs several hundred people.",
		"city": "%s has a busy market square.", "country": "%s has a temperate climate.", "book": "%s received mixed reviews.",
		"river": "%s is popular with anglers.", "university": "%s offers courses in many fields.",
	}[e.kind]
	fmt.Fprintf(&b, filler, capFirst(e.name))
	return strings.TrimSpace(b.String())
}

func capFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// title is how results name a passage.
func title(e *entity) string { return capFirst(e.name) }
