package webshop

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"regexp"
	"strings"
	"sync"

	"github.com/seedctl/seedctl/envadapters"
	"github.com/seedctl/seedctl/envadapters/textindex"
)

// Name is the registry name.
const Name = "webshop"

// DefaultMaxSteps is WebShop's usual episode length.
const DefaultMaxSteps = 15

const (
	perPage    = 10
	maxResults = 50
)

var splitSizes = map[envadapters.Split]int{envadapters.Train: 10000, envadapters.EvalSeen: 1000, envadapters.EvalUnseen: 1000}

type shop struct {
	catalog []*product
	byASIN  map[string]*product
	index   *textindex.Index
}

var (
	shopOnce sync.Once
	theShop  *shop
	shopErr  error
)

func getShop() (*shop, error) {
	shopOnce.Do(func() {
		s := &shop{catalog: buildCatalog(), byASIN: map[string]*product{}}
		docs := make([]textindex.Doc, len(s.catalog))
		for i, p := range s.catalog {
			s.byASIN[p.asin] = p
			docs[i] = textindex.Doc{ID: p.asin, Text: p.searchText()}
		}
		s.index, shopErr = textindex.Build(docs)
		theShop = s
	})
	return theShop, shopErr
}

func goalFor(s *shop, split envadapters.Split, i int) goal {
	h := fnv.New64a()
	fmt.Fprintf(h, "webshop/%s/%d", split, i)
	return makeGoal(s.catalog, h.Sum64(), split != envadapters.Train, split == envadapters.EvalUnseen)
}

type builtin struct{}

func init() { envadapters.Register(builtin{}) }

func (builtin) Name() string { return Name }
func (builtin) Description() string {
	return "WebShop-like shopping: search a generated catalog, open items, choose options, buy; WebShop's 0-100 score"
}
func (builtin) Families() []string {
	out := make([]string, len(categories))
	for i, c := range categories {
		out[i] = c.name
	}
	return out
}

// Prompting: search[…] and click[…] actions in <action> tags, the page's
// buttons listed.
func (builtin) Prompting() envadapters.Prompting {
	return envadapters.Prompting{
		System:         "You are an expert online shopper. Find and buy the product that fits the instruction.",
		ActionRequest:  "Give your next action, search[query] or click[button], inside <action> and </action>.",
		ListAdmissible: true,
		Intro:          "You are an expert autonomous agent shopping in the WebShop e-commerce environment.",
	}
}
func (builtin) SplitSize(s envadapters.Split) int { return splitSizes[s] }

func (builtin) Tasks(split envadapters.Split, n int) ([]envadapters.Task, error) {
	size, ok := splitSizes[split]
	if !ok || n < 0 || n > size {
		return nil, fmt.Errorf("webshop: %d tasks of split %q (size %d)", n, split, size)
	}
	s, err := getShop()
	if err != nil {
		return nil, err
	}
	out := make([]envadapters.Task, n)
	for i := range out {
		g := goalFor(s, split, i)
		out[i] = envadapters.Task{Env: Name, Split: split, Index: i, ID: envadapters.TaskID(Name, split, i),
			Family: g.target.cat.name, Difficulty: len(g.attrs) + len(g.options), Goal: g.text}
	}
	return out, nil
}

func (builtin) New(opts envadapters.Options) (envadapters.Env, error) {
	if err := opts.CheckKeys("max_steps"); err != nil {
		return nil, fmt.Errorf("webshop: %w", err)
	}
	n, err := opts.Int("max_steps", DefaultMaxSteps)
	if err != nil || n < 1 {
		return nil, fmt.Errorf("webshop: option max_steps: want a positive integer (%v)", err)
	}
	s, err := getShop()
	if err != nil {
		return nil, err
	}
	return &Env{maxSteps: n, shop: s}, nil
}

func (builtin) Expert(e envadapters.Env) (envadapters.Expert, error) {
	env, ok := e.(*Env)
	if !ok || env.goal == nil {
		return nil, errors.New("webshop: the expert needs a webshop env that has been reset")
	}
	return &expert{env: env}, nil
}

type page int

const (
	searchPage page = iota
	resultsPage
	itemPage
	detailPage
)

// Env is one shopping episode.
type Env struct {
	maxSteps int
	shop     *shop
	goal     *goal
	page     page
	results  []*product
	total    int
	pageNo   int
	item     *product
	chosen   map[string]string
	detail   string
	steps    int
	done     bool
}

func (e *Env) Reset(_ context.Context, t envadapters.Task) (envadapters.Step, error) {
	size, ok := splitSizes[t.Split]
	if t.Env != "" && t.Env != Name || !ok || t.Index < 0 || t.Index >= size {
		return envadapters.Step{}, fmt.Errorf("webshop: cannot reset to task %q (split %q, index %d)", t.ID, t.Split, t.Index)
	}
	g := goalFor(e.shop, t.Split, t.Index)
	e.goal, e.page, e.results, e.item, e.chosen, e.steps, e.done = &g, searchPage, nil, nil, map[string]string{}, 0, false
	return envadapters.Step{Observation: e.render(), Admissible: e.admissible()}, nil
}

func (e *Env) Close() error { return nil }

func (e *Env) instruction() string {
	return "Your task is to: " + e.goal.text
}

// render writes the current page in WebShop's text mode ([SEP]-separated).
func (e *Env) render() string {
	parts := []string{"WebShop", e.instruction()}
	switch e.page {
	case searchPage:
		parts = append(parts, "Search")
	case resultsPage:
		parts = append(parts, "Back to Search", fmt.Sprintf("Page %d (Total results: %d)", e.pageNo+1, e.total))
		if e.pageNo > 0 {
			parts = append(parts, "< Prev")
		}
		if (e.pageNo+1)*perPage < len(e.results) {
			parts = append(parts, "Next >")
		}
		for _, p := range e.pageItems() {
			parts = append(parts, p.asin, p.title, fmt.Sprintf("$%.2f", p.price))
		}
	case itemPage:
		parts = append(parts, "Back to Search", "< Prev")
		for _, t := range e.item.optionTypes() {
			parts = append(parts, t)
			for _, v := range e.item.options[t] {
				if e.chosen[t] == v {
					v = "[" + v + "]"
				}
				parts = append(parts, v)
			}
		}
		parts = append(parts, e.item.title, fmt.Sprintf("Price: $%.2f", e.item.price), "Rating: N.A.", "Description", "Features", "Reviews", "Buy Now")
	case detailPage:
		parts = append(parts, "Back to Search", "< Prev", e.detail)
	}
	return strings.Join(parts, " [SEP] ")
}

func (e *Env) pageItems() []*product {
	lo := e.pageNo * perPage
	hi := min(lo+perPage, len(e.results))
	if lo >= hi {
		return nil
	}
	return e.results[lo:hi]
}

// clickables are what can be clicked on this page, lower-cased.
func (e *Env) clickables() []string {
	switch e.page {
	case resultsPage:
		out := []string{"back to search"}
		if e.pageNo > 0 {
			out = append(out, "< prev")
		}
		if (e.pageNo+1)*perPage < len(e.results) {
			out = append(out, "next >")
		}
		for _, p := range e.pageItems() {
			out = append(out, strings.ToLower(p.asin))
		}
		return out
	case itemPage:
		out := []string{"back to search", "< prev"}
		for _, t := range e.item.optionTypes() {
			out = append(out, e.item.options[t]...)
		}
		return append(out, "description", "features", "reviews", "buy now")
	case detailPage:
		return []string{"back to search", "< prev"}
	}
	return nil
}

func (e *Env) admissible() []string {
	if e.page == searchPage {
		return []string{"search[<your query>]"}
	}
	cs := e.clickables()
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = "click[" + c + "]"
	}
	return out
}

var actionRe = regexp.MustCompile(`(?is)^\s*(search|click)\s*\[(.*)\]\s*$`)

func (e *Env) Step(_ context.Context, action string) (envadapters.Step, error) {
	if e.goal == nil {
		return envadapters.Step{}, errors.New("webshop: step before reset")
	}
	if e.done {
		return envadapters.Step{Observation: "The episode is over.", Done: true, Invalid: true}, nil
	}
	e.steps++
	st := envadapters.Step{}
	if why := e.apply(action, &st); why != "" {
		st.Invalid = true
		st.Observation = fmt.Sprintf("Invalid action (%s). [SEP] %s", why, e.render())
	} else if !st.Done {
		st.Observation = e.render()
	}
	if e.steps >= e.maxSteps && !st.Done {
		st.Done = true
	}
	e.done = st.Done
	if !st.Done {
		st.Admissible = e.admissible()
	}
	return st, nil
}

// apply carries out an action; it returns why an action was invalid.
func (e *Env) apply(action string, st *envadapters.Step) string {
	m := actionRe.FindStringSubmatch(action)
	if m == nil {
		return "use search[query] or click[button]"
	}
	verb, arg := strings.ToLower(m[1]), strings.TrimSpace(m[2])
	if verb == "search" {
		if e.page != searchPage {
			return "there is no search bar on this page"
		}
		if arg == "" || len(arg) > 500 {
			return "empty or too long query"
		}
		hits, total, err := e.shop.index.Search(arg, maxResults, 0)
		if err != nil {
			return "search failed"
		}
		e.results = e.results[:0]
		for _, h := range hits {
			e.results = append(e.results, e.shop.byASIN[h.ID])
		}
		e.total, e.pageNo, e.page = min(total, maxResults), 0, resultsPage
		return ""
	}
	arg = strings.ToLower(arg)
	ok := false
	for _, c := range e.clickables() {
		ok = ok || c == arg
	}
	if !ok {
		return fmt.Sprintf("nothing to click named %q here", arg)
	}
	switch {
	case arg == "back to search":
		e.page, e.item = searchPage, nil
	case arg == "next >":
		e.pageNo++
	case arg == "< prev":
		switch e.page {
		case resultsPage:
			e.pageNo--
		case itemPage:
			e.page, e.item = resultsPage, nil
		case detailPage:
			e.page = itemPage
		}
	case e.page == resultsPage:
		e.item, e.page, e.chosen = e.shop.byASIN[strings.ToUpper(arg)], itemPage, map[string]string{}
	case arg == "description":
		e.page, e.detail = detailPage, e.item.desc
	case arg == "features":
		e.page, e.detail = detailPage, e.item.feature
	case arg == "reviews":
		e.page, e.detail = detailPage, "No reviews yet."
	case arg == "buy now":
		score, why := reward(*e.goal, e.item, e.chosen)
		st.Done, st.Reward, st.Score = true, score, 100*score
		st.Won = score >= 1-1e-9
		st.Observation = fmt.Sprintf("Thank you for shopping with us! [SEP] Your score (min 0.0, max 1.0) [SEP] %.2f [SEP] (%s)", score, why)
	default: // an option value
		for _, t := range e.item.optionTypes() {
			for _, v := range e.item.options[t] {
				if v == arg {
					e.chosen[t] = v
				}
			}
		}
	}
	return ""
}

// expert searches for the goal, pages to the target, sets the options, buys.
type expert struct {
	env      *Env
	searches int
}

func (x *expert) Act() (string, error) {
	e := x.env
	g := e.goal
	switch e.page {
	case searchPage:
		x.searches++
		if x.searches > 1 { // the goal's words were not enough: search the title
			return fmt.Sprintf("search[%s]", g.target.title), nil
		}
		return fmt.Sprintf("search[%s %s]", strings.Join(g.attrs, " "), g.target.noun), nil
	case resultsPage:
		for _, p := range e.pageItems() {
			if p == g.target {
				return "click[" + strings.ToLower(p.asin) + "]", nil
			}
		}
		if (e.pageNo+1)*perPage < len(e.results) {
			return "click[next >]", nil
		}
		return "click[back to search]", nil // then search by title
	case itemPage:
		if e.item != g.target {
			return "click[< prev]", nil
		}
		for _, t := range e.item.optionTypes() {
			if e.chosen[t] != g.options[t] {
				return "click[" + g.options[t] + "]", nil
			}
		}
		return "click[buy now]", nil
	default:
		return "click[< prev]", nil
	}
}
