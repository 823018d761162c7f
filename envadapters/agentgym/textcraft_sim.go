package agentgym

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/seedctl/seedctl/envadapters"
)

// TextCraftSimName is the built-in's name.
const TextCraftSimName = "textcraft-sim"

// TextCraftSim is TextCraft played in-process on procedurally generated
// crafting tasks: made-up recipe graphs (goal items up to MaxDepth crafts
// deep, with distractor commands) in the real server's observation format,
// answered as agentenv-textcraft answers (the same strings: "Got 2 x",
// "Crafted 1 minecraft:x", "Could not find enough items to craft …", "Could
// not find a valid recipe for ItemTagWithCount(…)", "Inventory: [x] (1) ",
// "Could not execute …"). A task is a pure function of the split and the
// index, so a policy cannot learn goals by heart: what it can learn is to
// read the crafting commands. Item types (the server's "planks" standing
// for any planks) are not generated. It is for building TextCraft bases;
// evaluation stays on the real server.
type TextCraftSim struct {
	// MaxDepth bounds the goal's crafts (default 3).
	MaxDepth int
}

// Name is TextCraftSimName.
func (s TextCraftSim) Name() string { return TextCraftSimName }

// Description says what it is.
func (s TextCraftSim) Description() string {
	return "TextCraft on generated crafting tasks, in-process (the real server's formats and answers; for base building)"
}

// Families: one for all.
func (s TextCraftSim) Families() []string { return []string{"craft"} }

// SplitSize: every split is a million generated tasks (disjoint seeds).
func (s TextCraftSim) SplitSize(envadapters.Split) int { return 1 << 20 }

// Tasks are indices 0…n-1 of the split.
func (s TextCraftSim) Tasks(split envadapters.Split, n int) ([]envadapters.Task, error) {
	if n < 0 || n > s.SplitSize(split) {
		return nil, fmt.Errorf("%s: %d tasks asked of split %s", TextCraftSimName, n, split)
	}
	out := make([]envadapters.Task, n)
	for i := range out {
		out[i] = envadapters.Task{Env: TextCraftSimName, Split: split, Index: i, ID: envadapters.TaskID(TextCraftSimName, split, i), Family: "craft"}
	}
	return out, nil
}

// New is an environment; options: max_steps (default 30), max_depth.
func (s TextCraftSim) New(opts envadapters.Options) (envadapters.Env, error) {
	if err := opts.CheckKeys("max_steps", "max_depth"); err != nil {
		return nil, err
	}
	limit, err := opts.Int("max_steps", 30)
	if err != nil {
		return nil, err
	}
	def := s.MaxDepth
	if def == 0 {
		def = 3
	}
	depth, err := opts.Int("max_depth", def)
	if err != nil {
		return nil, err
	}
	if limit < 1 || depth < 1 || depth > 6 {
		return nil, fmt.Errorf("%s: max_steps %d must be positive and max_depth %d in 1..6", TextCraftSimName, limit, depth)
	}
	return &simEnv{limit: limit, depth: depth}, nil
}

// Expert is the planner over the task's first observation, one craft at
// a time (PlanTextCraftStepwise): every count it writes is one on a
// command's line, which a policy can copy — the first sim base, taught by
// a planner that fetched all of an input at once ("get 36 …" for twelve
// crafts of 3), did not learn.
func (s TextCraftSim) Expert(env envadapters.Env) (envadapters.Expert, error) {
	e, ok := env.(*simEnv)
	if !ok || e.first == "" {
		return nil, errors.New("textcraft-sim expert: the env is not this built-in's, or was not reset")
	}
	return newTextCraftExpert(e.first, nil, PlanTextCraftStepwise)
}

// Prompting is the TextCraft flavor's.
func (s TextCraftSim) Prompting() envadapters.Prompting { return Flavors[TextCraft].Prompting() }

// Hindsight is the TextCraft oracle's.
func (s TextCraftSim) Hindsight(ep envadapters.Episode, candidates []int, k int) envadapters.Hindsight {
	return TextCraftOracle{}.Hindsight(ep, candidates, k)
}

// simEnv is one episode of a generated task.
type simEnv struct {
	limit, depth int
	task         TextCraftTask
	first        string
	inv          TextCraftStock
	steps        int
	done         bool
}

func (e *simEnv) Close() error { return nil }

func (e *simEnv) Reset(_ context.Context, task envadapters.Task) (envadapters.Step, error) {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s/%d", task.Split, task.Index)
	e.task = GenerateTextCraftTask(rand.New(rand.NewPCG(h.Sum64(), uint64(e.depth))), e.depth)
	e.first = e.task.Observation()
	e.inv, e.steps, e.done = nil, 0, false
	return envadapters.Step{Observation: e.first}, nil
}

func (e *simEnv) Step(_ context.Context, action string) (envadapters.Step, error) {
	if e.first == "" {
		return envadapters.Step{}, errors.New("textcraft-sim: step before reset")
	}
	if e.done {
		return envadapters.Step{}, errors.New("textcraft-sim: step after the episode ended")
	}
	obs, won := e.answer(strings.TrimSpace(action))
	e.steps++
	st := envadapters.Step{Observation: obs, Won: won, Done: won || e.steps >= e.limit, Invalid: IsInvalid(TextCraft, obs)}
	if won {
		st.Reward = 1
	}
	e.done = st.Done
	return st, nil
}

var (
	simCraft = regexp.MustCompile(`^craft (.*) using (.*)`)
	simGet   = regexp.MustCompile(`^get ([0-9]+) (.*)`)
	simCount = regexp.MustCompile(`^([0-9]+) (.*)`)
)

// answer is agentenv-textcraft's answer to action (environment.py's step,
// without item types), and whether it crafted the goal.
func (e *simEnv) answer(action string) (string, bool) {
	if m := simCraft.FindStringSubmatch(action); m != nil {
		out, n := m[1], 1
		if c := simCount.FindStringSubmatch(out); c != nil {
			out = c[2]
			n, _ = strconv.Atoi(c[1])
		}
		var ins []TextCraftItem
		for _, piece := range strings.Split(m[2], ",") {
			c := simCount.FindStringSubmatch(strings.TrimSpace(piece))
			if c == nil {
				return "Wrong item format: " + strings.TrimSpace(piece), false
			}
			k, _ := strconv.Atoi(c[1])
			ins = append(ins, TextCraftItem{Count: k, Name: c[2]})
		}
		for _, in := range ins {
			if e.held(in.Name) < in.Count {
				return "Could not find enough items to craft " + itemID(out), false
			}
		}
		r, ok := e.recipe(out, ins)
		if !ok {
			return fmt.Sprintf("Could not find a valid recipe for ItemTagWithCount(item_tag=ItemTag(tag=None, item_id='%s'), count=%d)", itemID(out), n), false
		}
		for _, in := range ins {
			e.inv = e.inv.add(in.Name, -in.Count)
		}
		e.inv = e.inv.add(r.Output, r.Count)
		return fmt.Sprintf("Crafted %d %s", r.Count, itemID(r.Output)), r.Output == e.task.Goal
	}
	if m := simGet.FindStringSubmatch(action); m != nil {
		n, _ := strconv.Atoi(m[1])
		item := m[2]
		if e.craftable(item) || !e.known(item) {
			return "Could not find " + item, false
		}
		e.inv = e.inv.add(item, n)
		return fmt.Sprintf("Got %d %s", n, item), false
	}
	if strings.HasPrefix(action, "inventory") {
		if len(e.inv) == 0 {
			return "Inventory: You are not carrying anything.", false
		}
		var b strings.Builder
		b.WriteString("Inventory: ")
		for _, it := range e.inv {
			fmt.Fprintf(&b, "[%s] (%d) ", it.Name, it.Count)
		}
		return b.String(), false
	}
	return "Could not execute " + action, false
}

func (e *simEnv) held(name string) int {
	for _, it := range e.inv {
		if it.Name == name {
			return it.Count
		}
	}
	return 0
}

// recipe is the listed command making out from exactly ins (any order).
func (e *simEnv) recipe(out string, ins []TextCraftItem) (TextCraftRecipe, bool) {
	key := func(xs []TextCraftItem) []string {
		s := make([]string, len(xs))
		for i, x := range xs {
			s[i] = fmt.Sprintf("%d %s", x.Count, x.Name)
		}
		slices.Sort(s)
		return s
	}
	want := key(ins)
	for _, r := range e.task.Recipes {
		if r.Output == out && slices.Equal(key(r.Inputs), want) {
			return r, true
		}
	}
	return TextCraftRecipe{}, false
}

func (e *simEnv) craftable(name string) bool {
	return slices.ContainsFunc(e.task.Recipes, func(r TextCraftRecipe) bool { return r.Output == name })
}

// known: an item of this task's world (the server knows every Minecraft
// item; here, the items its commands name).
func (e *simEnv) known(name string) bool {
	for _, r := range e.task.Recipes {
		for _, in := range r.Inputs {
			if in.Name == name {
				return true
			}
		}
	}
	return false
}

// itemID is the server's id of an item name ("oak planks" →
// "minecraft:oak_planks").
func itemID(name string) string { return "minecraft:" + strings.ReplaceAll(name, " ", "_") }

// Observation is the task's first observation, as the server words it.
func (t TextCraftTask) Observation() string {
	lines := make([]string, len(t.Recipes))
	for i, r := range t.Recipes {
		parts := make([]string, len(r.Inputs))
		for j, in := range r.Inputs {
			parts[j] = fmt.Sprintf("%d %s", in.Count, in.Name)
		}
		lines[i] = fmt.Sprintf("craft %d %s using %s", r.Count, r.Output, strings.Join(parts, ", "))
	}
	return "Crafting commands:\n" + strings.Join(lines, "\n") + "\n\nGoal: craft " + t.Goal + "."
}

// Words of generated item names: a modifier and a thing, Minecraft-like
// ("mossy lantern", "cyan plate"), so that a base built on generated tasks
// shares its words with the real server's items.
var (
	// One word each: no name may end with another's (the planner reads
	// "oak planks" as a type of "dark oak planks").
	simModifiers = []string{"oak", "birch", "spruce", "jungle", "acacia", "crimson", "warped", "stone", "cobblestone",
		"mossy", "polished", "smooth", "cut", "chiseled", "cracked", "iron", "gold", "copper", "diamond", "emerald", "quartz", "sandstone",
		"red", "orange", "yellow", "lime", "green", "cyan", "blue", "purple", "magenta", "pink", "white",
		"gray", "black", "brown", "prismarine", "nether", "blackstone", "deepslate", "granite", "diorite", "andesite",
		"glowing", "waxed", "weathered", "bamboo", "cherry", "mangrove", "amethyst", "lapis", "redstone", "honey", "snow", "clay"}
	simThings = []string{"planks", "slab", "stairs", "wall", "fence", "gate", "door", "trapdoor", "button", "pressure plate", "sign",
		"boat", "bricks", "tiles", "pillar", "block", "ingot", "nugget", "dye", "wool", "carpet", "banner", "bed", "glass", "pane",
		"concrete powder", "terracotta", "candle", "lantern", "torch", "chain", "bars", "plate", "rod", "dust", "shard", "crystal",
		"pickaxe", "axe", "shovel", "hoe", "sword", "helmet", "boots", "leggings", "chestplate", "bucket", "bowl", "stick", "string",
		"ore", "logs", "sapling", "leaves", "flower", "seeds", "powder", "paste", "gear", "lens"}
)

// MaxSimPlan bounds a generated task's plan (the real server's goals
// take 5 actions at the median, 48 at most).
const MaxSimPlan = 20

// GenerateTextCraftTask draws a crafting task: a goal item made by one
// command from 1–3 inputs, each an item fetched with "get" or made by its
// own command, down to a depth of 1..maxDepth crafts; then up to 8
// distractor commands for other items, some from the same inputs; the
// commands shuffled. Every item name is distinct, and the planner solves
// it one craft at a time in at most MaxSimPlan actions (drawn again until
// it does).
func GenerateTextCraftTask(r *rand.Rand, maxDepth int) TextCraftTask {
	for {
		t := drawTextCraftTask(r, maxDepth)
		if plan, err := PlanTextCraftStepwise(t, nil); err == nil && len(plan) <= MaxSimPlan {
			return t
		}
	}
}

func drawTextCraftTask(r *rand.Rand, maxDepth int) TextCraftTask {
	used := map[string]bool{}
	name := func() string {
		for {
			n := simModifiers[r.IntN(len(simModifiers))] + " " + simThings[r.IntN(len(simThings))]
			if !used[n] {
				used[n] = true
				return n
			}
		}
	}
	var recipes []TextCraftRecipe
	var bases []string
	counts := []int{1, 1, 1, 2, 2, 3, 4, 6, 8, 9}
	var make func(depth int) string
	make = func(depth int) string {
		n := name()
		if depth == 0 {
			bases = append(bases, n)
			return n
		}
		k := 1 + r.IntN(3)
		rec := TextCraftRecipe{Output: n, Count: []int{1, 1, 1, 2, 3, 4, 8}[r.IntN(7)]}
		for j := range k {
			d := depth - 1
			if j > 0 {
				d = r.IntN(depth)
			}
			rec.Inputs = append(rec.Inputs, TextCraftItem{Count: counts[r.IntN(len(counts))], Name: make(d)})
		}
		recipes = append(recipes, rec)
		return n
	}
	goal := make(1 + r.IntN(maxDepth))
	for range r.IntN(9) {
		rec := TextCraftRecipe{Output: name(), Count: []int{1, 2, 4, 8}[r.IntN(4)]}
		for range 1 + r.IntN(3) {
			in := name()
			if len(bases) > 0 && r.IntN(2) == 0 {
				in = bases[r.IntN(len(bases))]
			}
			if slices.ContainsFunc(rec.Inputs, func(x TextCraftItem) bool { return x.Name == in }) {
				continue
			}
			rec.Inputs = append(rec.Inputs, TextCraftItem{Count: counts[r.IntN(len(counts))], Name: in})
		}
		recipes = append(recipes, rec)
	}
	r.Shuffle(len(recipes), func(i, j int) { recipes[i], recipes[j] = recipes[j], recipes[i] })
	return TextCraftTask{Recipes: recipes, Goal: goal}
}

func init() { envadapters.Register(TextCraftSim{}) }
