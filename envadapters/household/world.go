// Package household is an ALFWorld-like text environment: procedurally
// generated rooms of numbered receptacles, closed containers, objects inside
// them, ALFWorld's six task families, its verbs, feedback text and
// admissible-action list, a step limit and a 0/1 reward. The eval_unseen
// split holds out room layouts and object types.
package household

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"sort"
	"strings"

	"github.com/seedctl/seedctl/envadapters"
)

// Task families, as ALFWorld names them.
const (
	PickAndPlace = "pick_and_place"
	PickClean    = "pick_clean_then_place"
	PickHeat     = "pick_heat_then_place"
	PickCool     = "pick_cool_then_place"
	LookInLight  = "look_at_obj_in_light"
	PickTwo      = "pick_two_obj_and_place"
)

// Families lists the six families in ALFWorld's order.
var Families = []string{PickAndPlace, PickClean, PickHeat, PickCool, LookInLight, PickTwo}

// openable receptacle types start closed and must be opened.
var openable = map[string]bool{"cabinet": true, "drawer": true, "fridge": true, "microwave": true, "safe": true}

// "in" receptacles take "put a X in Y"; the rest are surfaces ("on").
var inside = map[string]bool{"cabinet": true, "drawer": true, "fridge": true, "microwave": true, "safe": true, "garbagecan": true, "sinkbasin": true, "bathtubbasin": true, "laundryhamper": true}

type span struct{ lo, hi int }

// layout is a room template: receptacle types with count ranges, the
// objects that occur there, and where a lamp may stand.
type layout struct {
	name    string
	room    string
	receps  map[string]span
	objects []string
	lamp    string   // "desklamp" or "floorlamp"; "" for none
	lampOn  []string // receptacle types the lamp can stand on
	unseen  bool
}

var kitchenObjects = []string{"apple", "bread", "butterknife", "bowl", "cup", "dishsponge", "egg", "fork", "kettle", "knife", "ladle", "lettuce", "mug", "pan", "peppershaker", "plate", "pot", "potato", "saltshaker", "soapbottle", "spatula", "spoon", "tomato", "winebottle"}
var bedroomObjects = []string{"alarmclock", "book", "cd", "cellphone", "creditcard", "keychain", "laptop", "pen", "pencil", "pillow", "remotecontrol", "statue", "vase", "watch", "box", "mug", "bowl"}
var livingObjects = []string{"book", "box", "creditcard", "keychain", "laptop", "newspaper", "pillow", "remotecontrol", "statue", "tissuebox", "vase", "watch", "wateringcan", "cellphone", "plate"}
var bathroomObjects = []string{"candle", "cloth", "handtowel", "soapbar", "soapbottle", "spraybottle", "toiletpaper", "towel", "dishsponge", "plunger", "scrubbrush"}

var layouts = []layout{
	{name: "kitchen-a", room: "kitchen", objects: kitchenObjects, receps: map[string]span{
		"cabinet": {6, 12}, "drawer": {3, 7}, "countertop": {1, 3}, "fridge": {1, 1}, "microwave": {1, 1}, "sinkbasin": {1, 1},
		"stoveburner": {2, 4}, "toaster": {1, 1}, "coffeemachine": {1, 1}, "garbagecan": {1, 1}, "shelf": {0, 3}, "diningtable": {0, 1}}},
	{name: "kitchen-b", room: "kitchen", objects: kitchenObjects, receps: map[string]span{
		"cabinet": {3, 8}, "drawer": {2, 5}, "countertop": {2, 3}, "fridge": {1, 1}, "microwave": {1, 1}, "sinkbasin": {1, 2},
		"stoveburner": {4, 4}, "toaster": {0, 1}, "coffeemachine": {1, 1}, "garbagecan": {1, 1}, "diningtable": {1, 1}}},
	{name: "kitchen-c", room: "kitchen", objects: kitchenObjects, unseen: true, receps: map[string]span{
		"cabinet": {8, 14}, "drawer": {4, 9}, "countertop": {1, 2}, "fridge": {1, 1}, "microwave": {1, 1}, "sinkbasin": {1, 1},
		"stoveburner": {2, 4}, "coffeemachine": {1, 1}, "garbagecan": {1, 1}, "shelf": {1, 3}, "sidetable": {0, 1}}},
	{name: "bedroom-a", room: "bedroom", objects: bedroomObjects, lamp: "desklamp", lampOn: []string{"desk", "sidetable"}, receps: map[string]span{
		"bed": {1, 1}, "desk": {1, 2}, "drawer": {2, 6}, "dresser": {1, 1}, "shelf": {1, 4}, "sidetable": {1, 2}, "garbagecan": {1, 1}, "laundryhamper": {0, 1}, "safe": {0, 1}}},
	{name: "bedroom-b", room: "bedroom", objects: bedroomObjects, lamp: "desklamp", lampOn: []string{"desk", "dresser"}, unseen: true, receps: map[string]span{
		"bed": {1, 1}, "desk": {1, 1}, "drawer": {4, 10}, "dresser": {1, 1}, "shelf": {2, 6}, "sidetable": {0, 1}, "garbagecan": {1, 1}, "cabinet": {0, 2}}},
	{name: "livingroom-a", room: "livingroom", objects: livingObjects, lamp: "floorlamp", lampOn: []string{"sidetable", "coffeetable"}, receps: map[string]span{
		"sofa": {1, 1}, "armchair": {0, 2}, "coffeetable": {1, 1}, "sidetable": {1, 2}, "drawer": {1, 4}, "cabinet": {1, 4}, "shelf": {1, 3}, "tvstand": {1, 1}, "garbagecan": {1, 1}}},
	{name: "livingroom-b", room: "livingroom", objects: livingObjects, lamp: "desklamp", lampOn: []string{"sidetable", "dresser"}, unseen: true, receps: map[string]span{
		"sofa": {1, 2}, "coffeetable": {1, 2}, "sidetable": {1, 3}, "drawer": {2, 5}, "dresser": {1, 1}, "shelf": {2, 5}, "garbagecan": {1, 1}, "ottoman": {0, 1}}},
	{name: "bathroom-a", room: "bathroom", objects: bathroomObjects, receps: map[string]span{
		"countertop": {1, 1}, "sinkbasin": {1, 2}, "cabinet": {2, 4}, "drawer": {0, 3}, "toilet": {1, 1}, "bathtubbasin": {0, 1}, "towelholder": {1, 1}, "garbagecan": {1, 1}, "shelf": {0, 2}}},
	{name: "bathroom-b", room: "bathroom", objects: bathroomObjects, unseen: true, receps: map[string]span{
		"countertop": {1, 2}, "sinkbasin": {2, 2}, "cabinet": {3, 6}, "drawer": {2, 4}, "toilet": {1, 1}, "handtowelholder": {1, 1}, "garbagecan": {1, 1}, "shelf": {1, 3}}},
}

// Held-out goal object types for eval_unseen; they never appear in train or
// eval_seen rooms.
var unseenObjects = map[string]bool{"potato": true, "ladle": true, "watch": true, "vase": true, "candle": true, "newspaper": true}

// Which objects each family can be about.
var (
	cleanable = set("apple", "bowl", "butterknife", "cloth", "cup", "dishsponge", "egg", "fork", "knife", "ladle", "lettuce", "mug", "pan", "plate", "pot", "potato", "spatula", "spoon", "tomato", "handtowel")
	heatable  = set("apple", "bread", "cup", "egg", "mug", "plate", "potato", "tomato")
	coolable  = set("apple", "bread", "cup", "egg", "lettuce", "mug", "pan", "plate", "pot", "potato", "tomato", "winebottle")
	lookable  = set("alarmclock", "book", "bowl", "box", "cd", "cellphone", "creditcard", "keychain", "laptop", "mug", "newspaper", "pen", "pencil", "pillow", "remotecontrol", "statue", "vase", "watch", "wateringcan", "plate", "tissuebox")
	// appliances never hold loose objects at the start
	noObjects = set("toaster", "coffeemachine", "stoveburner", "microwave")
)

func set(xs ...string) map[string]bool {
	m := map[string]bool{}
	for _, x := range xs {
		m[x] = true
	}
	return m
}

// Where each family's goal may be delivered.
var targetTypes = map[string][]string{
	PickAndPlace: {"countertop", "diningtable", "shelf", "cabinet", "drawer", "sidetable", "desk", "dresser", "bed", "sofa", "armchair", "coffeetable", "garbagecan", "toilet", "safe", "tvstand", "fridge", "bathtubbasin", "laundryhamper", "ottoman"},
	PickClean:    {"countertop", "diningtable", "shelf", "cabinet", "drawer", "fridge", "microwave", "sidetable", "toilet", "bathtubbasin", "coffeemachine"},
	PickHeat:     {"countertop", "diningtable", "shelf", "cabinet", "fridge", "garbagecan", "sidetable", "coffeemachine"},
	PickCool:     {"countertop", "diningtable", "shelf", "cabinet", "microwave", "garbagecan", "sidetable", "coffeemachine", "stoveburner"},
	PickTwo:      {"countertop", "diningtable", "shelf", "cabinet", "drawer", "sidetable", "desk", "dresser", "bed", "sofa", "armchair", "coffeetable", "garbagecan", "toilet", "safe", "fridge", "laundryhamper"},
}

type recep struct {
	name     string
	typ      string
	openable bool
	open     bool
	contents []*object
}

type object struct {
	name  string
	typ   string
	hot   bool
	cool  bool
	clean bool
	lamp  bool // a lamp: stands on a receptacle, can be used, cannot be taken
	loc   *recep
}

type goal struct {
	family string
	obj    string // object type
	target string // receptacle type ("" for look)
	lamp   string // lamp type (look)
	text   string // the task line after "Your task is to: "
}

// world is one generated room with its task.
type world struct {
	layout  string
	receps  []*recep
	byName  map[string]*recep
	objects map[string]*object
	lamp    *object
	goal    goal
}

func taskSeed(split envadapters.Split, index int) uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "household/%s/%d", split, index)
	return h.Sum64()
}

// layoutsFor returns the room templates a split may use.
func layoutsFor(split envadapters.Split) []layout {
	var out []layout
	for _, l := range layouts {
		if l.unseen == (split == envadapters.EvalUnseen) {
			out = append(out, l)
		}
	}
	return out
}

// familyFits says whether a layout can host a family's tasks.
func familyFits(fam string, l layout) bool {
	has := func(t string) bool { return l.receps[t].hi > 0 }
	switch fam {
	case PickClean:
		return has("sinkbasin")
	case PickHeat:
		return has("microwave")
	case PickCool:
		return has("fridge")
	case LookInLight:
		return l.lamp != ""
	}
	return true
}

func eligible(fam string) map[string]bool {
	switch fam {
	case PickClean:
		return cleanable
	case PickHeat:
		return heatable
	case PickCool:
		return coolable
	case LookInLight:
		return lookable
	}
	return nil
}

// generate builds the world of task (split, index). It retries internally
// until the room can host a solvable task, so every index yields one.
//
// prior is the share of objects placed where their type is usually kept
// (preferredPlace) instead of anywhere: 0 is uniform placement, the
// environment's default. The decision draws from a stream of its own, so
// every prior gives the same room, goal and task line — only where the
// objects start differs.
func generate(split envadapters.Split, index int, prior float64) *world {
	r := rand.New(rand.NewPCG(taskSeed(split, index), 0x4e5))
	pr := rand.New(rand.NewPCG(taskSeed(split, index), 0x9a1))
	fam := Families[index%len(Families)] // families evenly spread
	for attempt := 0; ; attempt++ {
		if w := tryGenerate(r, pr, prior, split, fam); w != nil {
			return w
		}
		if attempt > 200 {
			panic(fmt.Sprintf("household: cannot generate task %s/%d", split, index))
		}
	}
}

func tryGenerate(r, pr *rand.Rand, prior float64, split envadapters.Split, fam string) *world {
	var cands []layout
	for _, l := range layoutsFor(split) {
		if familyFits(fam, l) {
			cands = append(cands, l)
		}
	}
	l := cands[r.IntN(len(cands))]
	w := &world{layout: l.name, byName: map[string]*recep{}, objects: map[string]*object{}}

	// Receptacles, numbered per type, listed in a shuffled type order.
	types := make([]string, 0, len(l.receps))
	for t := range l.receps {
		types = append(types, t)
	}
	sort.Strings(types)
	r.Shuffle(len(types), func(i, j int) { types[i], types[j] = types[j], types[i] })
	for _, t := range types {
		s := l.receps[t]
		n := s.lo + r.IntN(s.hi-s.lo+1)
		for k := 1; k <= n; k++ {
			rc := &recep{name: fmt.Sprintf("%s %d", t, k), typ: t, openable: openable[t]}
			w.receps = append(w.receps, rc)
			w.byName[rc.name] = rc
		}
	}
	sort.SliceStable(w.receps, func(i, j int) bool { return recepLess(w.receps[i], w.receps[j]) })

	// Which object types may appear in this room.
	var pool []string
	for _, o := range l.objects {
		if split == envadapters.EvalUnseen || !unseenObjects[o] {
			pool = append(pool, o)
		}
	}
	// The goal object: unseen tasks use a held-out type when one fits.
	okObj := eligible(fam)
	var goalCands, unseenCands []string
	for _, o := range pool {
		if okObj != nil && !okObj[o] {
			continue
		}
		goalCands = append(goalCands, o)
		if unseenObjects[o] {
			unseenCands = append(unseenCands, o)
		}
	}
	if split == envadapters.EvalUnseen && len(unseenCands) > 0 && r.IntN(2) == 0 {
		goalCands = unseenCands
	}
	if len(goalCands) == 0 {
		return nil
	}
	g := goal{family: fam, obj: goalCands[r.IntN(len(goalCands))]}
	if fam == LookInLight {
		g.lamp = l.lamp
	} else {
		var tcands []string
		for _, t := range targetTypes[fam] {
			if l.receps[t].hi > 0 && hasRecep(w, t) {
				tcands = append(tcands, t)
			}
		}
		if len(tcands) == 0 {
			return nil
		}
		g.target = tcands[r.IntN(len(tcands))]
	}

	// Place objects: the goal object(s) first, away from the target.
	holders := func(excludeTarget bool) []*recep {
		var out []*recep
		for _, rc := range w.receps {
			if noObjects[rc.typ] || excludeTarget && rc.typ == g.target {
				continue
			}
			out = append(out, rc)
		}
		return out
	}
	counts := map[string]int{}
	place := func(typ string, where []*recep) {
		if len(where) == 0 {
			return
		}
		counts[typ]++
		o := &object{name: fmt.Sprintf("%s %d", typ, counts[typ]), typ: typ}
		rc := where[r.IntN(len(where))]
		if prior > 0 && pr.Float64() < prior {
			rc = preferredPlace(typ, where)
		}
		o.loc = rc
		rc.contents = append(rc.contents, o)
		w.objects[o.name] = o
	}
	need := 1
	if fam == PickTwo {
		need = 2
	}
	for i := 0; i < need+r.IntN(2); i++ {
		place(g.obj, holders(true))
	}
	if counts[g.obj] < need {
		return nil
	}
	for i, n := 0, 6+r.IntN(10); i < n; i++ {
		t := pool[r.IntN(len(pool))]
		ex := t == g.obj // more goal objects stay off the target
		place(t, holders(ex))
	}
	if l.lamp != "" {
		var on []*recep
		for _, rc := range w.receps {
			for _, t := range l.lampOn {
				if rc.typ == t {
					on = append(on, rc)
				}
			}
		}
		if len(on) == 0 {
			if fam == LookInLight {
				return nil
			}
		} else {
			rc := on[r.IntN(len(on))]
			w.lamp = &object{name: l.lamp + " 1", typ: l.lamp, lamp: true, loc: rc}
			rc.contents = append(rc.contents, w.lamp)
			w.objects[w.lamp.name] = w.lamp
		}
	}
	if fam == LookInLight && w.lamp == nil {
		return nil
	}
	g.text = goalText(g, r)
	w.goal = g
	return w
}

// preferredPlace is where objects of type obj are usually kept among
// where (listed in receptacle order): the first receptacle of the
// receptacle type ranked highest for obj. The ranking is a fixed hash of
// the two type names — arbitrary, but the same in every room, so "apples
// are kept in the fridge" holds wherever there is a fridge, as ALFWorld's
// object placements follow where such things are found in real homes.
func preferredPlace(obj string, where []*recep) *recep {
	best, bestRank := where[0], uint32(0)
	for i, rc := range where {
		h := fnv.New32a()
		fmt.Fprintf(h, "%s|%s", obj, rc.typ)
		if rank := h.Sum32(); i == 0 || rank < bestRank {
			best, bestRank = rc, rank
		}
	}
	return best
}

func hasRecep(w *world, typ string) bool {
	for _, rc := range w.receps {
		if rc.typ == typ {
			return true
		}
	}
	return false
}

// recepLess orders receptacles by type, then number, as ALFWorld lists them.
func recepLess(a, b *recep) bool {
	if a.typ != b.typ {
		return a.typ < b.typ
	}
	var na, nb int
	fmt.Sscanf(strings.TrimPrefix(a.name, a.typ+" "), "%d", &na)
	fmt.Sscanf(strings.TrimPrefix(b.name, b.typ+" "), "%d", &nb)
	return na < nb
}

func prep(target string) string {
	if inside[target] {
		return "in"
	}
	return "on"
}

// goalText writes the task line; two templates per family, as ALFWorld
// varies its wording.
func goalText(g goal, r *rand.Rand) string {
	alt := r.IntN(2) == 1
	p := prep(g.target)
	switch g.family {
	case PickAndPlace:
		if alt {
			return fmt.Sprintf("put some %s %s %s.", g.obj, p, g.target)
		}
		return fmt.Sprintf("put a %s %s %s.", g.obj, p, g.target)
	case PickClean:
		if alt {
			return fmt.Sprintf("clean some %s and put it %s %s.", g.obj, p, g.target)
		}
		return fmt.Sprintf("put a clean %s %s %s.", g.obj, p, g.target)
	case PickHeat:
		if alt {
			return fmt.Sprintf("heat some %s and put it %s %s.", g.obj, p, g.target)
		}
		return fmt.Sprintf("put a hot %s %s %s.", g.obj, p, g.target)
	case PickCool:
		if alt {
			return fmt.Sprintf("cool some %s and put it %s %s.", g.obj, p, g.target)
		}
		return fmt.Sprintf("put a cool %s %s %s.", g.obj, p, g.target)
	case LookInLight:
		if alt {
			return fmt.Sprintf("examine the %s with the %s.", g.obj, g.lamp)
		}
		return fmt.Sprintf("look at %s under the %s.", g.obj, g.lamp)
	default: // PickTwo
		if alt {
			return fmt.Sprintf("find two %s and put them %s %s.", g.obj, p, g.target)
		}
		return fmt.Sprintf("put two %s %s %s.", g.obj, p, g.target)
	}
}

// signature fingerprints a world (layout, contents, goal) for tests that
// splits never share a task.
func (w *world) signature() string {
	var b strings.Builder
	b.WriteString(w.goal.text)
	for _, rc := range w.receps {
		b.WriteString("|" + rc.name + ":")
		for _, o := range rc.contents {
			b.WriteString(o.name + ",")
		}
	}
	return b.String()
}

func difficulty(w *world) int {
	d := map[string]int{PickAndPlace: 1, LookInLight: 2, PickClean: 2, PickHeat: 2, PickCool: 2, PickTwo: 3}[w.goal.family]
	for _, o := range w.objects {
		if o.typ == w.goal.obj && o.loc != nil && o.loc.openable {
			return d + 1 // the goal object starts in a closed container
		}
	}
	return d
}

// ObjectTypes lists every takeable object type of every layout (lamps
// excluded), sorted: the words that name objects, as opposed to places,
// in observations ("a plate 2").
func ObjectTypes() []string {
	seen := map[string]bool{}
	var out []string
	for _, l := range layouts {
		for _, o := range l.objects {
			if !seen[o] {
				seen[o] = true
				out = append(out, o)
			}
		}
	}
	sort.Strings(out)
	return out
}
