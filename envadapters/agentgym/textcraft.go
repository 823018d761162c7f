package agentgym

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// TextCraftRecipe is one crafting command of a TextCraft observation:
// "craft 4 oak planks using 1 oak logs" crafts Count of Output from
// Inputs, one application per craft action (the server checks the input
// counts exactly and makes the recipe's own output count).
type TextCraftRecipe struct {
	Count  int
	Output string
	Inputs []TextCraftItem
}

// TextCraftItem is an item name and a count.
type TextCraftItem struct {
	Count int
	Name  string
}

// TextCraftTask is what a TextCraft first observation states: the crafting
// commands (the goal's recipe tree and distractors, in the server's order)
// and the goal item.
type TextCraftTask struct {
	Recipes []TextCraftRecipe
	Goal    string
}

var (
	textcraftCommand = regexp.MustCompile(`^craft (\d+) (.+?) using (.+)$`)
	textcraftInput   = regexp.MustCompile(`^(\d+) (.+)$`)
	textcraftGoal    = regexp.MustCompile(`(?m)^Goal: craft (.+?)\.?\s*$`)
)

// ParseTextCraft reads a TextCraft reset observation ("Crafting
// commands:\ncraft …\n…\n\nGoal: craft X."). A line it cannot read is an
// error naming it.
func ParseTextCraft(obs string) (TextCraftTask, error) {
	var t TextCraftTask
	m := textcraftGoal.FindStringSubmatch(obs)
	if m == nil {
		return t, errors.New(`textcraft observation: no "Goal: craft …" line`)
	}
	t.Goal = strings.TrimSpace(m[1])
	head, _, _ := strings.Cut(obs, "\n\nGoal:")
	body, ok := strings.CutPrefix(strings.TrimSpace(head), "Crafting commands:")
	if !ok {
		return t, errors.New(`textcraft observation: does not open with "Crafting commands:"`)
	}
	for _, line := range strings.Split(body, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		c := textcraftCommand.FindStringSubmatch(line)
		if c == nil {
			return t, fmt.Errorf("textcraft observation: crafting command %q: want \"craft N ITEM using N ITEM, …\"", line)
		}
		r := TextCraftRecipe{Output: c[2]}
		r.Count, _ = strconv.Atoi(c[1])
		for _, in := range strings.Split(strings.TrimSuffix(strings.TrimSpace(c[3]), ","), ",") {
			im := textcraftInput.FindStringSubmatch(strings.TrimSpace(in))
			if im == nil {
				return t, fmt.Errorf("textcraft observation: crafting command %q: input %q has no count", line, strings.TrimSpace(in))
			}
			n, _ := strconv.Atoi(im[1])
			r.Inputs = append(r.Inputs, TextCraftItem{Count: n, Name: im[2]})
		}
		t.Recipes = append(t.Recipes, r)
	}
	return t, nil
}

// TextCraftTags maps an item-type tag as crafting commands name it
// ("planks") to the items of that type ("oak planks", …): what an input
// naming a type may be crafted from. The planner works without it, reading
// types off item names; ReadTextCraftTags reads the server's own table.
type TextCraftTags map[string][]string

// ReadTextCraftTags reads the item-type table of a TextCraft server's
// recipes folder (agentenv_textcraft/recipes in an AgentGym checkout): a
// recipe's "group", when it is not the result itself, is the result's type,
// as the server reads it.
func ReadTextCraftTags(recipesDir string) (TextCraftTags, error) {
	files, err := filepath.Glob(filepath.Join(recipesDir, "*.json"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("reading TextCraft's item types: no recipes (*.json) in %s", recipesDir)
	}
	tags := TextCraftTags{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("reading TextCraft's item types: %w", err)
		}
		var r struct {
			Type   string          `json:"type"`
			Group  string          `json:"group"`
			Result json.RawMessage `json:"result"`
		}
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, fmt.Errorf("reading TextCraft's item types: %s: %w", f, err)
		}
		if r.Group == "" || (r.Type != "minecraft:crafting_shaped" && r.Type != "minecraft:crafting_shapeless") {
			continue
		}
		var item string
		var res struct {
			Item string `json:"item"`
		}
		if json.Unmarshal(r.Result, &item) != nil {
			if err := json.Unmarshal(r.Result, &res); err != nil {
				return nil, fmt.Errorf("reading TextCraft's item types: %s: result: %w", f, err)
			}
			item = res.Item
		}
		tag, name := textcraftName("minecraft:"+r.Group), textcraftName(item)
		if item == "" || tag == name {
			continue
		}
		if !slices.Contains(tags[tag], name) {
			tags[tag] = append(tags[tag], name)
		}
	}
	for _, v := range tags {
		sort.Strings(v)
	}
	return tags, nil
}

// textcraftName is an item id as the server writes it in text.
func textcraftName(id string) string {
	return strings.ReplaceAll(strings.TrimPrefix(id, "minecraft:"), "_", " ")
}

// PlanTextCraft is a scripted expert's whole episode for a TextCraft task,
// read from its first observation only: every item is crafted by a listed
// command for it (the first whose inputs can all be had, no item needed to
// make itself), an input that names an item type is made as one of its
// items (tags: the server's table, when given; else a listed output whose
// name ends with the type's), and anything no command makes is fetched
// with "get". Crafted leftovers are used before crafting again. It
// returns the actions in order; an error names what could not be planned.
func PlanTextCraft(t TextCraftTask, tags TextCraftTags) ([]string, error) {
	return planTextCraft(t, tags, false)
}

// PlanTextCraftStepwise is PlanTextCraft one craft at a time: a command
// needed k times is planned as k rounds of "get" or make its inputs for
// one craft, then craft, so every count in a "get" is a count written on
// a command's line (never one multiplied out), at the price of longer
// plans. Crafted leftovers are still used first.
func PlanTextCraftStepwise(t TextCraftTask, tags TextCraftTags) ([]string, error) {
	return planTextCraft(t, tags, true)
}

func planTextCraft(t TextCraftTask, tags TextCraftTags, stepwise bool) ([]string, error) {
	p := &textcraftPlanner{task: t, tags: tags, inv: map[string]int{}, making: map[string]bool{}, stepwise: stepwise}
	if err := p.obtain(t.Goal, 1); err != nil {
		return nil, fmt.Errorf("planning %q: %w", t.Goal, err)
	}
	return p.actions, nil
}

type textcraftPlanner struct {
	task     TextCraftTask
	tags     TextCraftTags
	inv      map[string]int
	making   map[string]bool
	actions  []string
	stepwise bool
}

// recipesFor are the listed commands that make name, in listed order.
func (p *textcraftPlanner) recipesFor(name string) []TextCraftRecipe {
	var out []TextCraftRecipe
	for _, r := range p.task.Recipes {
		if r.Output == name {
			out = append(out, r)
		}
	}
	return out
}

// concrete is the item an input name stands for: itself when a command
// makes it; else, for an item type, one of its items a command makes.
func (p *textcraftPlanner) concrete(name string) string {
	if len(p.recipesFor(name)) > 0 {
		return name
	}
	if members, ok := p.tags[name]; ok {
		for _, r := range p.task.Recipes {
			if slices.Contains(members, r.Output) && !p.making[r.Output] {
				return r.Output
			}
		}
	}
	if p.tags == nil {
		for _, r := range p.task.Recipes {
			if strings.HasSuffix(r.Output, " "+name) && !p.making[r.Output] {
				return r.Output
			}
		}
	}
	return name
}

// obtain plans actions that leave n of name in the inventory.
func (p *textcraftPlanner) obtain(name string, n int) error {
	if p.inv[name] >= n {
		return nil
	}
	need := n - p.inv[name]
	recipes := p.recipesFor(name)
	if len(recipes) == 0 {
		p.actions = append(p.actions, fmt.Sprintf("get %d %s", need, name))
		p.inv[name] += need
		return nil
	}
	if p.making[name] {
		return fmt.Errorf("%q is needed to make itself", name)
	}
	p.making[name] = true
	defer delete(p.making, name)
	var errs []error
	for _, r := range recipes {
		mark, inv := len(p.actions), maps.Clone(p.inv)
		if err := p.craft(r, need); err != nil {
			p.actions, p.inv = p.actions[:mark], inv
			errs = append(errs, err)
			continue
		}
		return nil
	}
	return errors.Join(errs...)
}

// craft applies r until need more of its output are made: all inputs
// at once, then the crafts; stepwise, one craft's inputs and the craft,
// as often as needed.
func (p *textcraftPlanner) craft(r TextCraftRecipe, need int) error {
	times := (need + r.Count - 1) / r.Count
	used := make([]TextCraftItem, len(r.Inputs))
	for i, in := range r.Inputs {
		used[i] = TextCraftItem{Count: in.Count, Name: p.concrete(in.Name)}
	}
	if !p.stepwise {
		return p.craftTimes(r, used, times)
	}
	for range times {
		if err := p.craftTimes(r, used, 1); err != nil {
			return err
		}
	}
	return nil
}

// craftTimes gathers the inputs of times crafts of r, then crafts.
func (p *textcraftPlanner) craftTimes(r TextCraftRecipe, used []TextCraftItem, times int) error {
	// Making one input may use up another made before it: obtain them
	// again until all are there at once.
	for pass := 0; ; pass++ {
		short := false
		for _, u := range used {
			if p.inv[u.Name] < times*u.Count {
				short = true
				if err := p.obtain(u.Name, times*u.Count); err != nil {
					return err
				}
			}
		}
		if !short {
			break
		}
		if pass == 3 {
			return fmt.Errorf("the inputs of %q use each other up", r.Output)
		}
	}
	parts := make([]string, len(used))
	for i, u := range used {
		parts[i] = fmt.Sprintf("%d %s", u.Count, u.Name)
	}
	action := fmt.Sprintf("craft %d %s using %s", r.Count, r.Output, strings.Join(parts, ", "))
	for range times {
		for _, u := range used {
			p.inv[u.Name] -= u.Count
		}
		p.inv[r.Output] += r.Count
		p.actions = append(p.actions, action)
	}
	return nil
}

// goalLines find a task's goal in a first observation: TextCraft's
// "Goal: craft X.", the task lines of ALFWorld and ScienceWorld, BabyAI's
// "Your goal: …", WebShop's "Instruction: [SEP] … [SEP]".
var goalLines = []*regexp.Regexp{
	textcraftGoal,
	regexp.MustCompile(`(?m)Your task is to:?\s*(.+?)\s*$`),
	regexp.MustCompile(`(?m)Your goal:\s*(.+?)\s*$`),
	regexp.MustCompile(`Instruction:\s*\[SEP\]\s*(.+?)\s*\[SEP\]`),
}

// GoalOf is the goal a first observation states ("" when none is found):
// what a run records per task index, so that a server that maps an index
// to another goal (another AgentGym commit, or TextCraft's recipe files
// listed in another order) is caught.
func GoalOf(obs string) string {
	for _, re := range goalLines {
		if m := re.FindStringSubmatch(obs); m != nil {
			return strings.Join(strings.Fields(strings.TrimSuffix(strings.TrimSpace(m[1]), ".")), " ")
		}
	}
	return ""
}

// ShuffleTextCraftCommands returns a TextCraft reset observation with its
// crafting commands listed in the order perm gives (perm(n) is a
// permutation of 0..n-1, such as math/rand's Perm), the rest unchanged:
// the same task, listed differently. Demonstrations of one goal in several
// orders leave copying from the list as the only rule that fits them all.
// An observation that is not a TextCraft reset is returned unchanged.
func ShuffleTextCraftCommands(obs string, perm func(n int) []int) string {
	const head = "Crafting commands:\n"
	i := strings.Index(obs, head)
	j := strings.Index(obs, "\n\nGoal:")
	if i < 0 || j < i+len(head) {
		return obs
	}
	lines := strings.Split(obs[i+len(head):j], "\n")
	p := perm(len(lines))
	out := make([]string, len(lines))
	for k, from := range p {
		out[k] = lines[from]
	}
	return obs[:i+len(head)] + strings.Join(out, "\n") + obs[j:]
}
