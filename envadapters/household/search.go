package household

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"

	"github.com/seedctl/seedctl/envadapters"
)

// searchPriority orders where the searching expert looks first: open
// surfaces before closed containers, as a person would.
var searchPriority = map[string]int{
	"countertop": 0, "diningtable": 1, "desk": 2, "sidetable": 3, "coffeetable": 4, "dresser": 5, "shelf": 6,
	"tvstand": 7, "bed": 8, "sofa": 9, "armchair": 10, "ottoman": 11, "cabinet": 12, "drawer": 13, "fridge": 14,
	"microwave": 15, "sinkbasin": 16, "stoveburner": 17, "garbagecan": 18, "safe": 19, "laundryhamper": 20,
	"toilet": 21, "bathtubbasin": 22, "towelholder": 23, "handtowelholder": 24, "coffeemachine": 25, "toaster": 26,
}

// SearchExpert plays from what it has observed only: it does not know
// where objects are until it has looked. It searches receptacles in a fixed
// order (open surfaces first), takes the goal object when it sees it, treats
// it at the right appliance, and delivers it. With Noise > 0 it takes a
// random admissible action instead, that share of the time. Demonstrations
// for the tiny base policies come from it.
type SearchExpert struct {
	env   *Env
	r     *rand.Rand
	Noise float64
	// Random reports whether the last Act was a random action (noise), so
	// demonstrations can show its consequences without teaching it.
	Random bool
	seen   map[*recep]bool
	order  []*recep
	// anyOrder picks the next place to search uniformly among those not
	// searched yet (NewRandomSearchExpert) instead of the first in order,
	// except for the share follow of search steps (NewMixedSearchExpert).
	anyOrder bool
	follow   float64
	// among > 0 draws from the first among places not searched yet only.
	among int
}

// NewSearchExpert returns a searching expert for a reset env that looks in
// open surfaces first.
func NewSearchExpert(e envadapters.Env, seed uint64, noise float64) (*SearchExpert, error) {
	return newSearchExpert(e, seed, noise, true)
}

// NewListingSearchExpert searches in the order the first observation lists
// the receptacles: after visiting one it goes to the next in that list, a
// pattern small models pick up by copying from their context.
func NewListingSearchExpert(e envadapters.Env, seed uint64, noise float64) (*SearchExpert, error) {
	return newSearchExpert(e, seed, noise, false)
}

// NewOrderedSearchExpert searches the receptacles in the given order of
// names (the order a prompt's places-not-searched line shows them in);
// receptacles the order does not name come last, in listing order.
func NewOrderedSearchExpert(e envadapters.Env, seed uint64, noise float64, order []string) (*SearchExpert, error) {
	x, err := newSearchExpert(e, seed, noise, false)
	if err != nil {
		return nil, err
	}
	rank := make(map[string]int, len(order))
	for i, name := range order {
		if _, dup := rank[name]; !dup {
			rank[name] = i
		}
	}
	pos := func(rc *recep) int {
		if i, ok := rank[rc.name]; ok {
			return i
		}
		return len(order)
	}
	sort.SliceStable(x.order, func(i, j int) bool { return pos(x.order[i]) < pos(x.order[j]) })
	return x, nil
}

// NewRandomSearchExpert goes next to a place drawn uniformly among those
// it has not searched yet (from its own stream, seeded by seed): a search
// whose every step is a choice, as a prompt that lists all the places not
// searched yet leaves it (PlacesAll). Demonstrations from it teach
// a policy to spread its samples over the listed places rather than copy
// one.
func NewRandomSearchExpert(e envadapters.Env, seed uint64, noise float64) (*SearchExpert, error) {
	x, err := newSearchExpert(e, seed, noise, false)
	if err != nil {
		return nil, err
	}
	x.anyOrder = true
	return x, nil
}

// NewMixedSearchExpert searches in the given order of names (as
// NewOrderedSearchExpert) for the share follow of its search steps and
// goes to a place drawn uniformly among those not searched yet for the
// rest: demonstrations whose usual next place is the first the prompt
// lists (what greedy decoding then picks) while a policy sampling at
// temperature 1 still spreads over the others.
//
// among > 0 draws only from the first among places not searched yet in
// the order (the candidates a short places line names); 0 from all.
func NewMixedSearchExpert(e envadapters.Env, seed uint64, noise float64, order []string, follow float64, among int) (*SearchExpert, error) {
	if follow < 0 || follow > 1 || among < 0 {
		return nil, fmt.Errorf("household: search expert follows the order on a share %v of its steps and draws among %d places, want a share in [0, 1] and a count >= 0", follow, among)
	}
	x, err := NewOrderedSearchExpert(e, seed, noise, order)
	if err != nil {
		return nil, err
	}
	x.anyOrder, x.follow, x.among = true, follow, among
	return x, nil
}

func newSearchExpert(e envadapters.Env, seed uint64, noise float64, byPriority bool) (*SearchExpert, error) {
	h, ok := e.(*Env)
	if !ok || h.w == nil {
		return nil, errors.New("household: the search expert needs a household env that has been reset")
	}
	x := &SearchExpert{env: h, r: rand.New(rand.NewPCG(seed, 31)), Noise: noise, seen: map[*recep]bool{}}
	x.order = append(x.order, h.w.receps...)
	if !byPriority {
		return x, nil
	}
	sort.SliceStable(x.order, func(i, j int) bool {
		pi, pj := searchPriority[x.order[i].typ], searchPriority[x.order[j].typ]
		if pi != pj {
			return pi < pj
		}
		return recepLess(x.order[i], x.order[j])
	})
	return x, nil
}

// observe records what is visible where the agent stands.
func (x *SearchExpert) observe() {
	if rc := x.env.at; rc != nil && (!rc.openable || rc.open) {
		x.seen[rc] = true
	}
}

// Act returns the next action.
func (x *SearchExpert) Act() (string, error) {
	e := x.env
	if e.done {
		return "", errors.New("household search expert: the episode is over")
	}
	x.observe()
	x.Random = false
	if x.Noise > 0 && x.r.Float64() < x.Noise {
		adm := e.admissible()
		x.Random = true
		return adm[x.r.IntN(len(adm))], nil
	}
	return x.plan()
}

// visibleGoal finds a goal object in a receptacle already looked into,
// skipping delivered ones.
func (x *SearchExpert) visibleGoal() (*object, *recep) {
	g := x.env.w.goal
	for _, rc := range x.order {
		if !x.seen[rc] || (rc.typ == g.target && g.family != LookInLight) {
			continue
		}
		for _, o := range rc.contents {
			if o.typ == g.obj {
				return o, rc
			}
		}
	}
	return nil, nil
}

func (x *SearchExpert) seenLamp() *recep {
	l := x.env.w.lamp
	if l != nil && l.loc != nil && x.seen[l.loc] {
		return l.loc
	}
	return nil
}

// explore goes to (and opens) the next receptacle not yet looked into.
func (x *SearchExpert) explore() (string, error) {
	e := x.env
	if rc := e.at; rc != nil && rc.openable && !rc.open && !x.seen[rc] {
		return "open " + rc.name, nil
	}
	var left []*recep
	inOrder := !x.anyOrder || x.follow > 0 && x.r.Float64() < x.follow
	for _, rc := range x.order {
		if !x.seen[rc] && rc != e.at {
			if inOrder {
				return "go to " + rc.name, nil
			}
			left = append(left, rc)
		}
	}
	if x.among > 0 && len(left) > x.among {
		left = left[:x.among]
	}
	if len(left) > 0 {
		return "go to " + left[x.r.IntN(len(left))].name, nil
	}
	return "look", nil // everything searched: nothing left to learn
}

func (x *SearchExpert) plan() (string, error) {
	e := x.env
	g := e.w.goal
	if e.held != nil && e.held.typ != g.obj {
		// Holding the wrong thing (after a random action): put it down.
		if e.at != nil && (!e.at.openable || e.at.open) {
			return fmt.Sprintf("move %s to %s", e.held.name, e.at.name), nil
		}
		for _, rc := range x.order {
			if !rc.openable {
				return "go to " + rc.name, nil
			}
		}
	}
	if e.held == nil || e.held.typ != g.obj {
		if o, rc := x.visibleGoal(); o != nil {
			if e.at != rc {
				return "go to " + rc.name, nil
			}
			return fmt.Sprintf("take %s from %s", o.name, rc.name), nil
		}
		return x.explore()
	}
	// Holding the goal object.
	if g.family == LookInLight {
		rc := x.seenLamp()
		if rc == nil {
			return x.explore()
		}
		if e.at != rc {
			return "go to " + rc.name, nil
		}
		return "use " + e.w.lamp.name, nil
	}
	if !hasProperty(e.held, g.family) {
		app := map[string]string{PickClean: "sinkbasin", PickHeat: "microwave", PickCool: "fridge"}[g.family]
		rc := firstOfType(e.w, app)
		if e.at != rc {
			return "go to " + rc.name, nil
		}
		verb := map[string]string{PickClean: "clean", PickHeat: "heat", PickCool: "cool"}[g.family]
		return fmt.Sprintf("%s %s with %s", verb, e.held.name, rc.name), nil
	}
	rc := firstOfType(e.w, g.target)
	if e.at != rc {
		return "go to " + rc.name, nil
	}
	if rc.openable && !rc.open {
		return "open " + rc.name, nil
	}
	return fmt.Sprintf("move %s to %s", e.held.name, rc.name), nil
}

func firstOfType(w *world, typ string) *recep {
	for _, rc := range w.receps {
		if rc.typ == typ {
			return rc
		}
	}
	return nil
}

// WasRandom reports whether the last action was noise.
func (x *SearchExpert) WasRandom() bool { return x.Random }
