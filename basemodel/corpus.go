// Package basemodel builds the tiny base policies of the embedded default:
// a demonstration corpus from the built-in environments' experts (noisy,
// and partly with hints in context at the insertion points teacher contexts
// use), a BPE tokenizer trained on it, and a small Qwen2-architecture model
// pre-trained on it with the trainer, cached by recipe.
package basemodel

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"

	"github.com/seedctl/seedctl/envadapters"
	"github.com/seedctl/seedctl/envadapters/agentgym"
	"github.com/seedctl/seedctl/envadapters/household"
	"github.com/seedctl/seedctl/rollout"
	"github.com/seedctl/seedctl/skills"
)

// DemoStep is one demonstrated step: what was seen, what was done.
type DemoStep struct {
	Obs        string   // observation the action was chosen in
	Admissible []string // admissible actions then
	Action     string
	Response   string // the demonstrated reply text
	After      string // the environment's answer
	StepHint   string // advice shown before the action request, if any
	// Target, when set, is the action Response demonstrates where it is not
	// the one taken (a relabelled step: the policy acted, the expert says
	// what it should have done).
	Target string `json:",omitempty"`
	// Random marks a step that is context only, never a target: a noise
	// action (kept so the model sees recoveries), or a relabelled step the
	// policy already got right that was not sampled for training.
	Random bool `json:",omitempty"`
}

// Episode is one demonstration.
type Episode struct {
	Task        envadapters.Task
	System      string
	FirstObs    string
	Steps       []DemoStep
	EpisodeHint string // skill shown after the task line, if any
	Won         bool
	// AnalysisPrompt and AnalysisAnswer, when set, are a skill-writing
	// example about this episode: the stage-1 analysis prompt and the
	// oracle's skill JSON (a pretrained LLM can write such JSON; the tiny
	// model learns it here so stage 1 only has to adapt it).
	AnalysisPrompt string
	AnalysisAnswer string
}

// CorpusConfig controls the demonstrations.
type CorpusConfig struct {
	Episodes      int
	Noise         float64 // share of random admissible actions in plain episodes
	HintShare     float64 // share of episodes shown with skills in context
	StepHintShare float64 // in hinted episodes, share of steps with a step hint
	Seed          uint64
	MaxSteps      int
	// AnalysisShare of episodes also yield a skill-writing example.
	AnalysisShare float64 `json:",omitempty"`
	// MistakeShare of steps are preceded by a plausible mistake (an action
	// that does nothing, such as taking the goal object by a number not in
	// sight), shown as context and never trained on, so the policy sees the
	// expert go on after "Nothing happens." instead of repeating itself.
	MistakeShare float64 `json:",omitempty"`
	// Renumber is the share of household episodes whose object instance
	// numbers are permuted consistently across every text of the episode
	// ("plate 1" becomes "plate 3" everywhere, places untouched). Rooms
	// number goal objects from 1, so without it a small model learns to
	// answer "take plate 1" whatever is in sight; permuted numbers make
	// copying the number from the observation the only way to be right.
	Renumber float64 `json:",omitempty"`
	// Offset skips the first training tasks (held-out demonstrations for
	// measuring a built model come from after the corpus's tasks).
	Offset int `json:",omitempty"`
	// PlacesLine is the household prompt's places-line style the
	// demonstrations are rendered in and the model is trained for ("":
	// the template's own, household.PlacesNext; household.PlacesAll lists
	// every place not searched yet and the plain demonstrations search
	// them in random order). Rollouts with the model must use the same
	// (Recipe.Template).
	PlacesLine string `json:"places_line,omitempty"`
	// SearchFollow is, with the all-places or few-places line, the share
	// of the plain demonstrations' search steps that go to the first place
	// the line names; the others go to one drawn uniformly from the places
	// the line names (0: every step drawn, recipe v13's first build).
	SearchFollow float64 `json:"search_follow,omitempty"`
	// Orders > 1 records each TextCraft demonstration that many times: the
	// first as the server lists its crafting commands, the others with
	// them in fresh random orders (agentgym.ShuffleTextCraftCommands), the
	// same actions; skill-writing examples only on the first. A tiny model
	// shown one order per goal learns goal → actions by heart (base v1:
	// 49% on goals it was shown, 4% on held-out ones).
	Orders int `json:"orders,omitempty"`
}

// Validate names the first bad field.
func (c CorpusConfig) Validate() error {
	switch {
	case c.Episodes < 1:
		return fmt.Errorf("corpus: episodes %d must be positive", c.Episodes)
	case c.Noise < 0 || c.Noise >= 1 || c.HintShare < 0 || c.HintShare > 1 || c.StepHintShare < 0 || c.StepHintShare > 1:
		return fmt.Errorf("corpus: noise, hint_share and step_hint_share must be in [0, 1)")
	case c.Renumber < 0 || c.Renumber > 1:
		return fmt.Errorf("corpus: renumber %v must be in [0, 1]", c.Renumber)
	case c.MaxSteps < 1:
		return fmt.Errorf("corpus: max_steps %d must be positive", c.MaxSteps)
	case c.Orders < 0:
		return fmt.Errorf("corpus: orders %d must not be negative", c.Orders)
	case c.SearchFollow < 0 || c.SearchFollow > 1:
		return fmt.Errorf("corpus: search_follow %v must be in [0, 1]", c.SearchFollow)
	case c.PlacesLine != "" && c.PlacesLine != household.PlacesNext && c.PlacesLine != household.PlacesAll && c.PlacesLine != household.PlacesFew:
		return fmt.Errorf("corpus: places_line %q: want %q, %q or %q", c.PlacesLine, household.PlacesNext, household.PlacesFew, household.PlacesAll)
	}
	return nil
}

// expertFor returns the demonstration policy for an episode: the searching
// expert (observation-only, noisy) for plain episodes, the direct expert for
// hinted ones (the hint names where things are, so going there is what the
// hint means).
func expertFor(b envadapters.Builtin, env envadapters.Env, tmpl rollout.Template, firstObs string, hinted bool, seed uint64, noise, follow float64) (envadapters.Expert, error) {
	if b.Name() == household.Name && !hinted {
		return searchExpert(env, tmpl, firstObs, seed, noise, follow)
	}
	return b.Expert(env)
}

// searchExpert is the household searching expert that looks in the places
// in the order tmpl's places-not-searched line shows them, or, when the
// line lists them all (household.PlacesAll), in that order on a share
// follow of its search steps and in random order on the others.
func searchExpert(env envadapters.Env, tmpl rollout.Template, firstObs string, seed uint64, noise, follow float64) (*household.SearchExpert, error) {
	turns := householdTurns(tmpl)
	order := household.PlaceOrder(firstObs, "")
	switch {
	case turns.Few() > 0:
		return household.NewMixedSearchExpert(env, seed, noise, order, follow, turns.Few())
	case turns.Style == household.PlacesAll && follow == 0:
		return household.NewRandomSearchExpert(env, seed, noise)
	case turns.Style == household.PlacesAll:
		return household.NewMixedSearchExpert(env, seed, noise, order, follow, 0)
	}
	return household.NewOrderedSearchExpert(env, seed, noise, order)
}

// householdTurns is tmpl's household turns (the zero value, whose style
// is none of the places-line styles, for another environment's template).
func householdTurns(tmpl rollout.Template) household.Turns {
	t, _ := tmpl.Turns.(household.Turns)
	return t
}

// stepHint is advice consistent with the action about to be taken.
func stepHint(action string, r *rand.Rand) string {
	f := strings.Fields(action)
	if len(f) == 0 {
		return ""
	}
	rest := strings.Join(f[1:], " ")
	var opts []string
	switch f[0] {
	case "go":
		place := strings.TrimPrefix(action, "go to ")
		opts = []string{"Go to " + place + " next.", "The next place to visit is " + place + ".", "Head to " + place + " now."}
	case "open":
		opts = []string{"Open " + rest + " to look inside.", "Look inside " + rest + " by opening it."}
	case "take":
		obj := strings.SplitN(rest, " from ", 2)[0]
		opts = []string{"Pick up the " + obj + " now.", "Take the " + obj + " from here."}
	case "move":
		parts := strings.SplitN(rest, " to ", 2)
		if len(parts) == 2 {
			opts = []string{"Put the " + parts[0] + " on " + parts[1] + " now.", "Move the " + parts[0] + " to " + parts[1] + "."}
		}
	case "heat", "cool", "clean":
		parts := strings.SplitN(rest, " with ", 2)
		if len(parts) == 2 {
			opts = []string{fmt.Sprintf("%s the %s with %s now.", strings.ToUpper(f[0][:1])+f[0][1:], parts[0], parts[1])}
		}
	case "use":
		opts = []string{"Use " + rest + " now.", "Turn on " + rest + "."}
	case "get", "craft": // TextCraft
		opts = []string{strings.ToUpper(f[0][:1]) + f[0][1:] + " " + rest + " now.", "Next: " + action + "."}
	}
	if strings.HasPrefix(action, "search[") || strings.HasPrefix(action, "click[") || strings.HasPrefix(action, "<") {
		opts = []string{"Do this next: " + action, "The right move now is " + action}
	}
	if len(opts) == 0 {
		return ""
	}
	return opts[r.IntN(len(opts))]
}

// responseText is how a demonstrated action is written.
func responseText(env, action string) string {
	if env == "searchqa" {
		return action // already <search>…</search> or <answer>…</answer>
	}
	return "<action>" + action + "</action>"
}

// GenerateCorpus plays the expert on training tasks and writes the
// demonstrations. Only the train split is used.
func GenerateCorpus(ctx context.Context, b envadapters.Builtin, cfg CorpusConfig, progress func(done, total int)) ([]Episode, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	n := min(cfg.Episodes, b.SplitSize(envadapters.Train)-cfg.Offset)
	if n < 1 || cfg.Offset < 0 {
		return nil, fmt.Errorf("corpus: %d episodes from train task %d do not fit the %d training tasks", cfg.Episodes, cfg.Offset, b.SplitSize(envadapters.Train))
	}
	tasks, err := b.Tasks(envadapters.Train, cfg.Offset+n)
	if err != nil {
		return nil, err
	}
	tasks = tasks[cfg.Offset:]
	tmpl, err := rollout.TemplateFor(b.Name()).WithPlacesLine(cfg.PlacesLine)
	if err != nil {
		return nil, fmt.Errorf("corpus: %w", err)
	}
	oracle := &skills.OracleAnalyzer{K: 0}
	r := rand.New(rand.NewPCG(cfg.Seed, 77))
	out := make([]Episode, 0, n)
	for i, task := range tasks {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		hinted := r.Float64() < cfg.HintShare
		ep, traj, err := playDemo(ctx, b, task, tmpl, hinted, cfg.Seed+uint64(cfg.Offset+i), cfg.Noise, cfg.SearchFollow, cfg.MistakeShare, envadapters.Options{"max_steps": fmt.Sprint(cfg.MaxSteps)})
		if err != nil {
			return nil, fmt.Errorf("corpus episode %d (%s): %w", i, task.ID, err)
		}
		if hinted {
			recs, err := oracle.Analyze(ctx, []skills.Request{{Traj: traj}})
			if err != nil {
				return nil, err
			}
			if recs[0].Skill != nil {
				ep.EpisodeHint = recs[0].Skill.EpisodeSkill
			}
			for k := range ep.Steps {
				if r.Float64() < cfg.StepHintShare {
					ep.Steps[k].StepHint = stepHint(ep.Steps[k].Action, r)
				}
			}
		}
		if r.Float64() < cfg.AnalysisShare {
			crit := criticalGuess(traj)
			recs, err := (&skills.OracleAnalyzer{K: skills.DefaultMaxStepSkills}).Analyze(ctx, []skills.Request{{Traj: traj, Candidates: crit}})
			if err != nil {
				return nil, err
			}
			if sk := recs[0].Skill; sk != nil {
				js, err := json.Marshal(sk)
				if err != nil {
					return nil, err
				}
				ep.AnalysisPrompt = skills.AnalysisPrompt(traj, crit, skills.DefaultMaxStepSkills)
				ep.AnalysisAnswer = string(js)
			}
		}
		if cfg.Renumber > 0 && b.Name() == household.Name && r.Float64() < cfg.Renumber {
			renumberObjects(&ep, rand.New(rand.NewPCG(cfg.Seed+uint64(cfg.Offset+i), 53)))
		}
		out = append(out, ep)
		if b.Name() == agentgym.TextCraft {
			pr := rand.New(rand.NewPCG(cfg.Seed+uint64(cfg.Offset+i), 59))
			for range cfg.Orders - 1 {
				out = append(out, reordered(ep, pr))
			}
		}
		if progress != nil {
			progress(i+1, n)
		}
	}
	return out, nil
}

// reordered is a copy of a TextCraft demonstration whose first
// observation lists its crafting commands in a random order (the step
// that shows it too), without its skill-writing example.
func reordered(ep Episode, r *rand.Rand) Episode {
	c := ep
	c.Steps = append([]DemoStep(nil), ep.Steps...)
	c.FirstObs = agentgym.ShuffleTextCraftCommands(ep.FirstObs, r.Perm)
	for k := range c.Steps {
		if c.Steps[k].Obs == ep.FirstObs {
			c.Steps[k].Obs = c.FirstObs
		}
	}
	c.AnalysisPrompt, c.AnalysisAnswer = "", ""
	return c
}

// criticalGuess stands in for critical-step selection (which needs a GRPO
// group): the steps whose action was invalid or changed nothing, then the
// last step, at most K.
func criticalGuess(t *rollout.Trajectory) []int {
	var out []int
	for i, s := range t.Steps {
		if (!s.Valid || strings.HasPrefix(s.Observation, "Nothing happens")) && len(out) < skills.DefaultMaxStepSkills-1 {
			out = append(out, i)
		}
	}
	if n := len(t.Steps); n > 0 {
		out = append(out, n-1)
	}
	return out
}

// playDemo runs one expert episode, recording plain turns and a trajectory
// (for the oracle's hindsight skill).
func playDemo(ctx context.Context, b envadapters.Builtin, task envadapters.Task, tmpl rollout.Template, hinted bool, seed uint64, noise, follow, mistakes float64, opts envadapters.Options) (Episode, *rollout.Trajectory, error) {
	env, err := b.New(opts)
	if err != nil {
		return Episode{}, nil, err
	}
	defer env.Close()
	st, err := env.Reset(ctx, task)
	if err != nil {
		return Episode{}, nil, err
	}
	x, err := expertFor(b, env, tmpl, st.Observation, hinted, seed, noise, follow)
	if err != nil {
		return Episode{}, nil, err
	}
	ep := Episode{Task: task, System: tmpl.System, FirstObs: st.Observation}
	traj := &rollout.Trajectory{ID: task.ID, Task: task, FirstObservation: st.Observation, Mode: rollout.ModeChat}
	mr := rand.New(rand.NewPCG(seed, 91))
	mistaker, _ := env.(interface{ Mistake(*rand.Rand) string })
	for !st.Done {
		var a string
		random := false
		if mistaker != nil && mistakes > 0 && mr.Float64() < mistakes {
			a = mistaker.Mistake(mr)
			random = a != ""
		}
		if a == "" {
			var err error
			if a, err = x.Act(); err != nil {
				return Episode{}, nil, err
			}
			if r, ok := x.(interface{ WasRandom() bool }); ok {
				random = r.WasRandom()
			}
		}
		ds := DemoStep{Obs: st.Observation, Admissible: st.Admissible, Action: a, Response: responseText(b.Name(), a), Random: random}
		st, err = env.Step(ctx, a)
		if err != nil {
			return Episode{}, nil, err
		}
		ds.After = st.Observation
		ep.Steps = append(ep.Steps, ds)
		traj.Steps = append(traj.Steps, rollout.Step{Action: a, Observation: st.Observation, Valid: !st.Invalid, Reward: st.Reward, Done: st.Done})
		traj.Return += st.Reward
	}
	ep.Won, traj.Won, traj.Score = st.Won, st.Won, st.Score
	return ep, traj, nil
}

// Texts lists every string of the corpus, for tokenizer training.
func Texts(eps []Episode) []string {
	var out []string
	for _, e := range eps {
		out = append(out, e.System, e.FirstObs, e.EpisodeHint, e.AnalysisPrompt, e.AnalysisAnswer)
		for _, s := range e.Steps {
			out = append(out, s.Response, s.After, s.StepHint, strings.Join(s.Admissible, "; "))
		}
	}
	return out
}

// Places lists every place the episodes' first observations name, sorted.
func Places(eps []Episode) []string {
	seen := map[string]bool{}
	var out []string
	for _, e := range eps {
		for _, p := range household.PlacesIn(e.FirstObs) {
			if !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	sort.Strings(out)
	return out
}

// userTexts builds each step's user turn as rollouts would, in mode, with
// the episode's hints inserted where teacher contexts put skills.
func (e Episode) userTexts(tmpl rollout.Template, mode string, window int) []string {
	out := make([]string, len(e.Steps))
	past := make([]rollout.Step, 0, len(e.Steps))
	for k, s := range e.Steps {
		out[k] = e.userText(tmpl, mode, window, k, past)
		past = append(past, rollout.Step{Action: s.Action, Observation: s.After})
	}
	return out
}

// userText is step k's user turn, given the steps before it as past (the
// taken actions and the environment's answers).
func (e Episode) userText(tmpl rollout.Template, mode string, window, k int, past []rollout.Step) string {
	s := e.Steps[k]
	epi := e.EpisodeHint
	var u string
	if mode == rollout.ModeWindow {
		u = rollout.WindowText(tmpl, e.FirstObs, past, window, s.Obs, s.Admissible)
	} else {
		u = tmpl.UserText(s.Obs, s.Admissible)
		if k > 0 {
			epi = "" // the task line is only in the first turn
		}
	}
	return rollout.InsertSkills(u, tmpl.ActionRequest, epi, s.StepHint)
}
