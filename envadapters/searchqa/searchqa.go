package searchqa

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"unicode"

	"github.com/seedctl/seedctl/envadapters"
	"github.com/seedctl/seedctl/envadapters/textindex"
)

// Name is the registry name.
const Name = "searchqa"

// DefaultMaxSteps bounds searches plus the answer (Search-R1 allows 4 turns).
const DefaultMaxSteps = 6

// TopK passages per search.
const TopK = 3

// InvalidFeedback is returned for output with neither a search nor an answer.
const InvalidFeedback = "Invalid action. To search, put a query between <search> and </search>. To answer, put the answer between <answer> and </answer>."

// Searcher finds passages; the built-in BM25 index or a remote retriever.
type Searcher interface {
	Search(ctx context.Context, query string, k int) ([]Passage, error)
}

// Passage is a retrieved document.
type Passage struct {
	ID    string
	Title string
	Text  string
	Score float64
}

var splitSizes = map[envadapters.Split]int{envadapters.Train: 20000, envadapters.EvalSeen: 2000, envadapters.EvalUnseen: 2000}

// Families: one- and two-hop questions.
const (
	OneHop = "1hop"
	TwoHop = "2hop"
)

type world struct {
	kb    *kb
	index *textindex.Index
	docs  map[string]*entity
}

var (
	worldOnce sync.Once
	theWorld  *world
	worldErr  error
)

// getWorld builds the knowledge base and its index once per process.
func getWorld() (*world, error) {
	worldOnce.Do(func() {
		k := buildKB()
		w := &world{kb: k, docs: map[string]*entity{}}
		docs := make([]textindex.Doc, len(k.entities))
		for i, e := range k.entities {
			id := strconv.Itoa(e.id)
			docs[i] = textindex.Doc{ID: id, Text: title(e) + ". " + k.passage(e)}
			w.docs[id] = e
		}
		w.index, worldErr = textindex.Build(docs)
		theWorld = w
	})
	return theWorld, worldErr
}

// Search implements Searcher over the built-in corpus.
func (w *world) Search(_ context.Context, q string, k int) ([]Passage, error) {
	hits, _, err := w.index.Search(q, k, 0)
	if err != nil {
		return nil, err
	}
	out := make([]Passage, len(hits))
	for i, h := range hits {
		e := w.docs[h.ID]
		out[i] = Passage{ID: h.ID, Title: title(e), Text: w.kb.passage(e), Score: h.Score}
	}
	return out, nil
}

// question is one generated task.
type question struct {
	text    string
	answer  string
	family  string
	subject *entity
	path    []string // relation names
	bridge  string   // 2-hop: the intermediate entity
}

func seedFor(split envadapters.Split, i int) uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "searchqa/%s/%d", split, i)
	return h.Sum64()
}

// partition keeps training and evaluation questions about different
// subjects: an entity belongs to eval when its id hashes into the last 20%.
func evalEntity(e *entity) bool {
	h := fnv.New32a()
	fmt.Fprintf(h, "%d", e.id)
	return h.Sum32()%5 == 0
}

func makeQuestion(w *world, split envadapters.Split, i int) question {
	r := rand.New(rand.NewPCG(seedFor(split, i), 11))
	wantEval := split != envadapters.Train
	pick := func(kind string) *entity {
		for {
			es := w.kb.byKind[kind]
			e := es[r.IntN(len(es))]
			if evalEntity(e) == wantEval {
				return e
			}
		}
	}
	twoHop := i%2 == 1 || split == envadapters.EvalUnseen
	if !twoHop {
		rel := relations[r.IntN(len(relations))]
		s := pick(rel.subj)
		return question{text: fmt.Sprintf(rel.question, s.name), answer: s.facts[rel.name], family: OneHop, subject: s, path: []string{rel.name}}
	}
	var cands []composition
	for _, c := range compositions {
		if c.unseen == (split == envadapters.EvalUnseen) {
			cands = append(cands, c)
		}
	}
	c := cands[r.IntN(len(cands))]
	first := relByName(c.first)
	s := pick(first.subj)
	bridge := w.kb.byName[s.facts[c.first]]
	return question{text: fmt.Sprintf(c.question, s.name), answer: bridge.facts[c.second], family: TwoHop, subject: s,
		path: []string{c.first, c.second}, bridge: bridge.name}
}

type builtin struct{}

func init() { envadapters.Register(builtin{}) }

func (builtin) Name() string { return Name }
func (builtin) Description() string {
	return "Search-R1-like QA: search a generated knowledge base (BM25), answer 1-hop and 2-hop questions; exact match"
}
func (builtin) Families() []string { return []string{OneHop, TwoHop} }

// Prompting: <search> and <answer> blocks, as Search-R1's prompts.
func (builtin) Prompting() envadapters.Prompting {
	return envadapters.Prompting{
		System:        "You answer questions by searching a knowledge base.",
		ActionRequest: "Reply with <search> query </search> to search, or <answer> answer </answer> to answer.",
		Actions:       SearchOrAnswer{},
	}
}

// SearchOrAnswer is Search-R1's reply syntax: the first <search>…</search>
// or <answer>…</answer> block, passed on whole (Step parses it).
type SearchOrAnswer struct{}

var searchOrAnswer = regexp.MustCompile(`(?is)<(search|answer)>.*?</(search|answer)>`)

// Extract passes the first <search> or <answer> block on.
func (SearchOrAnswer) Extract(text string, _ []string) (string, bool) {
	if m := searchOrAnswer.FindString(text); m != "" {
		return m, true
	}
	return "", false
}

// HasBlock says whether text holds a <search> or <answer> block.
func (SearchOrAnswer) HasBlock(text string) bool  { return searchOrAnswer.MatchString(text) }
func (builtin) SplitSize(s envadapters.Split) int { return splitSizes[s] }

func (builtin) Tasks(split envadapters.Split, n int) ([]envadapters.Task, error) {
	size, ok := splitSizes[split]
	if !ok || n < 0 || n > size {
		return nil, fmt.Errorf("searchqa: %d tasks of split %q (size %d)", n, split, size)
	}
	w, err := getWorld()
	if err != nil {
		return nil, err
	}
	out := make([]envadapters.Task, n)
	for i := range out {
		q := makeQuestion(w, split, i)
		d := 1
		if q.family == TwoHop {
			d = 2
		}
		out[i] = envadapters.Task{Env: Name, Split: split, Index: i, ID: envadapters.TaskID(Name, split, i), Family: q.family, Difficulty: d, Goal: "answer the question: " + q.text}
	}
	return out, nil
}

func (builtin) New(opts envadapters.Options) (envadapters.Env, error) {
	if err := opts.CheckKeys("max_steps", "retriever_url", "topk"); err != nil {
		return nil, fmt.Errorf("searchqa: %w", err)
	}
	n, err := opts.Int("max_steps", DefaultMaxSteps)
	if err != nil || n < 1 {
		return nil, fmt.Errorf("searchqa: option max_steps: want a positive integer (%v)", err)
	}
	k, err := opts.Int("topk", TopK)
	if err != nil || k < 1 || k > 20 {
		return nil, fmt.Errorf("searchqa: option topk: want 1..20 (%v)", err)
	}
	w, err := getWorld()
	if err != nil {
		return nil, err
	}
	env := &Env{maxSteps: n, topk: k, world: w, searcher: w}
	if u := opts["retriever_url"]; u != "" {
		rc, err := NewRetrieverClient(DefaultRetrieverConfig(u))
		if err != nil {
			return nil, fmt.Errorf("searchqa: %w", err)
		}
		env.searcher = rc
	}
	return env, nil
}

func (builtin) Expert(e envadapters.Env) (envadapters.Expert, error) {
	env, ok := e.(*Env)
	if !ok || env.q == nil {
		return nil, errors.New("searchqa: the expert needs a searchqa env that has been reset")
	}
	return &expert{env: env}, nil
}

// Env is one question-answering episode.
type Env struct {
	maxSteps int
	topk     int
	world    *world
	searcher Searcher
	q        *question
	steps    int
	done     bool
	searches []string
}

var (
	answerRe = regexp.MustCompile(`(?is)<answer>(.*?)</answer>`)
	searchRe = regexp.MustCompile(`(?is)<search>(.*?)</search>`)
)

func (e *Env) Reset(_ context.Context, t envadapters.Task) (envadapters.Step, error) {
	size, ok := splitSizes[t.Split]
	if t.Env != "" && t.Env != Name || !ok || t.Index < 0 || t.Index >= size {
		return envadapters.Step{}, fmt.Errorf("searchqa: cannot reset to task %q (split %q, index %d)", t.ID, t.Split, t.Index)
	}
	q := makeQuestion(e.world, t.Split, t.Index)
	e.q, e.steps, e.done, e.searches = &q, 0, false, nil
	obs := fmt.Sprintf("Your task is to: answer the question: %s\nSearch the knowledge base with <search> query </search>; the top results come back between <information> and </information>. When you know the answer, reply with <answer> answer </answer>.", q.text)
	return envadapters.Step{Observation: obs}, nil
}

func (e *Env) Close() error { return nil }

func (e *Env) Step(ctx context.Context, action string) (envadapters.Step, error) {
	if e.q == nil {
		return envadapters.Step{}, errors.New("searchqa: step before reset")
	}
	if e.done {
		return envadapters.Step{Observation: "The episode is over.", Done: true, Invalid: true}, nil
	}
	e.steps++
	var st envadapters.Step
	if m := answerRe.FindStringSubmatch(action); m != nil {
		em, f1 := ExactMatch(m[1], e.q.answer), F1(m[1], e.q.answer)
		st = envadapters.Step{Observation: fmt.Sprintf("You answered: %s", strings.TrimSpace(m[1])), Done: true, Score: f1}
		if em {
			st.Reward, st.Won = 1, true
		}
		e.done = true
		return st, nil
	}
	if m := searchRe.FindStringSubmatch(action); m != nil && strings.TrimSpace(m[1]) != "" {
		q := strings.TrimSpace(m[1])
		if len(q) > 500 {
			q = q[:500]
		}
		e.searches = append(e.searches, q)
		ps, err := e.searcher.Search(ctx, q, e.topk)
		if err != nil {
			// A broken search tool ends the episode as failed; it is not lost.
			e.done = true
			return envadapters.Step{Observation: "The search tool failed.", Done: true, Err: err.Error()}, nil
		}
		st.Observation = formatInformation(ps)
	} else {
		st = envadapters.Step{Observation: InvalidFeedback, Invalid: true}
	}
	if e.steps >= e.maxSteps {
		e.done = true
		st.Done = true
	}
	return st, nil
}

func formatInformation(ps []Passage) string {
	var b strings.Builder
	b.WriteString("<information>")
	for i, p := range ps {
		if i > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "Doc %d (Title: %s) %s", i+1, p.Title, p.Text)
	}
	if len(ps) == 0 {
		b.WriteString("No results.")
	}
	b.WriteString("</information>")
	return b.String()
}

// expert searches for the subject (and then the bridge entity) with the
// relation's keywords, and answers from what it knows.
type expert struct{ env *Env }

func (x *expert) Act() (string, error) {
	e := x.env
	q := e.q
	switch {
	case len(e.searches) == 0:
		return fmt.Sprintf("<search> %s %s </search>", q.subject.name, relByName(q.path[0]).phrase), nil
	case q.family == TwoHop && len(e.searches) == 1:
		return fmt.Sprintf("<search> %s %s </search>", q.bridge, relByName(q.path[1]).phrase), nil
	default:
		return fmt.Sprintf("<answer> %s </answer>", q.answer), nil
	}
}

// normalizeAnswer follows SQuAD: lower case, no punctuation, no articles,
// single spaces.
func normalizeAnswer(s string) string {
	s = strings.ToLower(s)
	s = strings.Map(func(r rune) rune {
		if unicode.IsPunct(r) {
			return -1
		}
		return r
	}, s)
	var words []string
	for _, w := range strings.Fields(s) {
		if w != "a" && w != "an" && w != "the" {
			words = append(words, w)
		}
	}
	return strings.Join(words, " ")
}

// ExactMatch compares normalized answers.
func ExactMatch(pred, gold string) bool { return normalizeAnswer(pred) == normalizeAnswer(gold) }

// F1 is the token-overlap F1 of normalized answers.
func F1(pred, gold string) float64 {
	p, g := strings.Fields(normalizeAnswer(pred)), strings.Fields(normalizeAnswer(gold))
	if len(p) == 0 || len(g) == 0 {
		if len(p) == len(g) {
			return 1
		}
		return 0
	}
	count := map[string]int{}
	for _, w := range g {
		count[w]++
	}
	common := 0
	for _, w := range p {
		if count[w] > 0 {
			common++
			count[w]--
		}
	}
	if common == 0 {
		return 0
	}
	prec, rec := float64(common)/float64(len(p)), float64(common)/float64(len(g))
	return 2 * prec * rec / (prec + rec)
}
