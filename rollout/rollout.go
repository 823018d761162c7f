// Package rollout runs multi-turn episodes between environments and the
// served policy: B tasks × G trajectories (GRPO groups), each turn's
// generations batched across episodes, token-in/token-out records with
// sampling log-probs, JSONL persistence and metrics.
package rollout

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/seedctl/seedctl/envadapters"
	"github.com/seedctl/seedctl/inference"
	"github.com/seedctl/seedctl/tokenizer"
)

// Prompt modes.
const (
	ModeChat   = "chat"   // one growing conversation per episode
	ModeWindow = "window" // task + last N steps, verl-agent style
)

// Config configures rollouts.
type Config struct {
	Mode             string
	Window           int // steps of history in window mode
	GroupSize        int // G trajectories per task
	MaxTokensPerTurn int
	Temperature      float64
	TopP             float64
	InvalidPenalty   float64 // subtracted from a step's reward when its action is invalid
	// Invalid is what makes a step invalid: InvalidFormat (the public SEED
	// code's projection: the reply lacks its action tag, or <think>…</think>
	// with RequireThink, or holds CJK characters; an action the
	// environment rejects is a valid step) or InvalidEnv (also the actions
	// the environment rejects). Empty: InvalidEnv.
	Invalid string
	// RequireThink: with InvalidFormat, a reply without <think>…</think>
	// is invalid (the public code's require_think, on for Qwen2.5).
	RequireThink bool
	// PromptStyle is PromptSeedctl ("" too) or PromptVerlAgent (window
	// mode only).
	PromptStyle string
	// SkillFormat is how teacher contexts carry skills: SkillFormatLine
	// ("" too: seedctl's one line) or SkillFormatSections (the public
	// code's sections); the runner's Template says it.
	SkillFormat string
	// MaxInFlight bounds the generation requests sent at once.
	MaxInFlight int
	Seed        int64
	// MaxSteps ends every episode after this many steps, whatever the
	// environment says (0: only the environment ends episodes). Remote
	// servers never end an episode at a step limit (AgentGym's own client
	// counts rounds); built-ins also get it as their max_steps option.
	MaxSteps   int
	EnvOptions envadapters.Options
	// Hint, when set, gives text inserted after the task line of each
	// episode's prompts (evaluation with skills in context).
	Hint func(task envadapters.Task) string
	// PlacesLine is the style of the environment's own window turns (the
	// household's places-not-searched line: household.PlacesNext, …; "":
	// the environment's default), checked by the environment when the
	// runner is made (Template.WithPlacesLine). It must be the one the
	// policy was trained with (basemodel.Recipe.PlacesLine).
	PlacesLine string
	// PlacesOrder is the order in which the places line names the places
	// not searched yet: PlacesOrderRoom ("" too: a fixed permutation per
	// room, the same for every episode of a task — what the base model's
	// demonstrations show) or PlacesOrderEpisode (a permutation drawn per
	// episode from Seed and the trajectory id, so the samples of one task
	// are pointed at different first places: exploration put in the
	// prompt, for a policy that copies the line).
	PlacesOrder string
}

// Invalid-step definitions (Config.Invalid).
const (
	InvalidFormat = "format"
	InvalidEnv    = "env"
)

// Places-line orders (Config.PlacesOrder).
const (
	PlacesOrderRoom    = "room"
	PlacesOrderEpisode = "episode"
)

// DefaultConfig follows the SEED reference setting.
func DefaultConfig() Config {
	return Config{Mode: ModeChat, Window: 5, GroupSize: 8, MaxTokensPerTurn: 96, Temperature: 1, TopP: 1, InvalidPenalty: 0.1, MaxInFlight: 64, Seed: 1}
}

// Validate names the first bad field.
func (c Config) Validate() error {
	switch {
	case c.Mode != ModeChat && c.Mode != ModeWindow:
		return fmt.Errorf("rollout config: mode %q: want chat or window", c.Mode)
	case c.Mode == ModeWindow && c.Window < 0:
		return fmt.Errorf("rollout config: window %d must not be negative", c.Window)
	case c.GroupSize < 1:
		return fmt.Errorf("rollout config: group_size %d must be at least 1", c.GroupSize)
	case c.MaxSteps < 0:
		return fmt.Errorf("rollout config: max_steps %d must not be negative (0: the environment's own limit)", c.MaxSteps)
	case c.Invalid != "" && c.Invalid != InvalidFormat && c.Invalid != InvalidEnv:
		return fmt.Errorf("rollout config: invalid %q: want %q (the reply's format, the public code's) or %q (also actions the environment rejects)", c.Invalid, InvalidFormat, InvalidEnv)
	case c.SkillFormat != "" && c.SkillFormat != SkillFormatLine && c.SkillFormat != SkillFormatSections:
		return fmt.Errorf("rollout config: skill_format %q: want %q (seedctl's one line) or %q (the public code's sections)", c.SkillFormat, SkillFormatLine, SkillFormatSections)
	case c.PromptStyle != "" && c.PromptStyle != PromptSeedctl && c.PromptStyle != PromptVerlAgent:
		return fmt.Errorf("rollout config: prompt %q: want %q or %q", c.PromptStyle, PromptSeedctl, PromptVerlAgent)
	case c.PromptStyle == PromptVerlAgent && c.Mode != ModeWindow:
		return fmt.Errorf("rollout config: prompt %q is a window-mode prompt (mode %q)", PromptVerlAgent, c.Mode)
	case c.RequireThink && c.Invalid != InvalidFormat:
		return fmt.Errorf("rollout config: require_think goes with invalid %q", InvalidFormat)
	case c.MaxTokensPerTurn < 1:
		return fmt.Errorf("rollout config: max_tokens_per_turn %d must be at least 1", c.MaxTokensPerTurn)
	case c.Temperature < 0 || c.TopP < 0 || c.TopP > 1:
		return fmt.Errorf("rollout config: temperature %v must be >= 0 and top_p %v in [0, 1]", c.Temperature, c.TopP)
	case c.InvalidPenalty < 0:
		return fmt.Errorf("rollout config: invalid_penalty %v must not be negative", c.InvalidPenalty)
	case c.MaxInFlight < 1:
		return fmt.Errorf("rollout config: max_in_flight %d must be at least 1", c.MaxInFlight)
	case c.PlacesOrder != "" && c.PlacesOrder != PlacesOrderRoom && c.PlacesOrder != PlacesOrderEpisode:
		return fmt.Errorf("rollout config: places_order %q: want %q or %q", c.PlacesOrder, PlacesOrderRoom, PlacesOrderEpisode)
	}
	return nil
}

// EnvFactory makes environment instances (a built-in, or an adapter).
type EnvFactory interface {
	New(opts envadapters.Options) (envadapters.Env, error)
}

// Runner runs rollouts for one environment and policy.
type Runner struct {
	cfg      Config
	envName  string
	factory  EnvFactory
	template Template
	policy   *Policy
	log      zerolog.Logger
}

// NewRunner checks cfg and returns a runner.
func NewRunner(cfg Config, envName string, f EnvFactory, p *Policy, log zerolog.Logger) (*Runner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if p == nil || p.Backend == nil {
		return nil, errors.New("rollout: no policy backend")
	}
	tmpl, err := TemplateFor(envName).WithPlacesLine(cfg.PlacesLine)
	if err != nil {
		return nil, fmt.Errorf("rollout config: %w", err)
	}
	tmpl.SkillSections = cfg.SkillFormat == SkillFormatSections
	return &Runner{cfg: cfg, envName: envName, factory: f, template: tmpl, policy: p, log: log}, nil
}

// Template is the runner's prompt template.
func (r *Runner) Template() Template { return r.template }

// episode is one running trajectory.
type episode struct {
	traj    *Trajectory
	env     envadapters.Env
	last    envadapters.Step
	history []Step
	done    bool
	start   time.Time
}

// Run plays every task GroupSize times. Turns are synchronous across
// episodes: each turn's generations go to the backend as one batch (at most
// MaxInFlight at once), then every environment steps.
func (r *Runner) Run(ctx context.Context, tasks []envadapters.Task, iteration int, progress Progress) ([]*Trajectory, error) {
	return r.RunNotify(ctx, tasks, iteration, progress, nil)
}

// RunNotify is Run that also calls groupDone, from Run's goroutine after
// the turn in which it happened, with each task's G trajectories (in
// sample order) once all of them have ended, so that work on a finished
// group (SEED's hindsight analysis) can start while others still play.
func (r *Runner) RunNotify(ctx context.Context, tasks []envadapters.Task, iteration int, progress Progress, groupDone func(group int, trajs []*Trajectory)) ([]*Trajectory, error) {
	var eps []*episode
	defer func() {
		for _, e := range eps {
			e.env.Close()
		}
	}()
	for gi, task := range tasks {
		for s := 0; s < r.cfg.GroupSize; s++ {
			env, err := r.factory.New(r.cfg.EnvOptions)
			if err != nil {
				return nil, fmt.Errorf("rollout: creating %s: %w", r.envName, err)
			}
			e := &episode{env: env, start: time.Now(), traj: &Trajectory{
				ID: fmt.Sprintf("it%d-g%d-s%d", iteration, gi, s), Iteration: iteration, Task: task, Group: gi, Sample: s,
				Mode: r.cfg.Mode, System: r.template.System, Started: time.Now(),
			}}
			eps = append(eps, e)
			st, err := env.Reset(ctx, task)
			if err != nil {
				return nil, fmt.Errorf("rollout: resetting %s: %w", task.ID, err)
			}
			e.last, e.traj.FirstObservation, e.traj.FirstState = st, st.Observation, st.State
		}
	}
	finished := 0
	left := make([]int, len(tasks)) // unfinished episodes per group
	for g := range left {
		left[g] = r.cfg.GroupSize
	}
	for turn := 0; ; turn++ {
		var active []*episode
		for _, e := range eps {
			if !e.done {
				active = append(active, e)
			}
		}
		if len(active) == 0 {
			break
		}
		for lo := 0; lo < len(active); lo += r.cfg.MaxInFlight {
			chunk := active[lo:min(lo+r.cfg.MaxInFlight, len(active))]
			if err := r.turn(ctx, chunk, turn); err != nil {
				return nil, err
			}
		}
		for _, e := range active {
			if e.done {
				finished++
				if left[e.traj.Group]--; left[e.traj.Group] == 0 && groupDone != nil {
					g := e.traj.Group
					groupDone(g, trajsOf(eps[g*r.cfg.GroupSize:(g+1)*r.cfg.GroupSize]))
				}
			}
		}
		if progress != nil {
			progress(Status{Done: finished, Total: len(eps), Turn: turn + 1})
		}
	}
	return trajsOf(eps), nil
}

func trajsOf(eps []*episode) []*Trajectory {
	out := make([]*Trajectory, len(eps))
	for i, e := range eps {
		out[i] = e.traj
	}
	return out
}

func (r *Runner) seed(trajID string, turn int) *int64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%s/%d", r.cfg.Seed, trajID, turn)
	v := int64(h.Sum64() >> 1)
	return &v
}

// prompt builds step's user text and prompt ids for e.
func (r *Runner) prompt(e *episode) (string, []int, error) {
	t := e.traj
	hint := ""
	if r.cfg.Hint != nil {
		hint = r.cfg.Hint(t.Task)
	}
	if r.cfg.Mode == ModeWindow {
		user := InsertSkills(r.windowText(e), r.template.ActionRequest, hint, "")
		ids, err := r.policy.StartIDs(t.System, user)
		return user, ids, err
	}
	user := r.template.UserText(e.last.Observation, e.last.Admissible)
	if len(t.Steps) == 0 {
		user = InsertSkills(user, r.template.ActionRequest, hint, "")
		ids, err := r.policy.StartIDs(t.System, user)
		return user, ids, err
	}
	ids, err := r.policy.NextIDs(t.System, user)
	return user, ids, err
}

// windowText is the task, the last N steps and the current observation.
func (r *Runner) windowText(e *episode) string {
	tmpl := r.template
	if r.cfg.PlacesOrder == PlacesOrderEpisode {
		// Not the trajectory id: it names the iteration, and evaluation
		// points of one run should see one order per task.
		tmpl.TurnsKey = placesKey(r.cfg.Seed, e.traj)
	}
	if r.cfg.PromptStyle == PromptVerlAgent {
		return VerlAgentText(tmpl, e.traj.FirstObservation, e.traj.Steps, r.cfg.Window, e.last.Observation, e.last.Admissible)
	}
	return WindowText(tmpl, e.traj.FirstObservation, e.traj.Steps, r.cfg.Window, e.last.Observation, e.last.Admissible)
}

// placesKey is the PlacesOrderEpisode key of t's episode: the rollout's
// seed, the task and the sample (training rollouts draw a seed per
// iteration; evaluation keeps one, so its orders stay put).
func placesKey(seed int64, t *Trajectory) string {
	return fmt.Sprintf("%d/%s/%d", seed, t.Task.ID, t.Sample)
}

// EpisodeSteps is past as the environment's turns read it.
func EpisodeSteps(past []Step) []envadapters.EpisodeStep {
	out := make([]envadapters.EpisodeStep, len(past))
	for i, s := range past {
		out[i] = envadapters.EpisodeStep{Action: s.Action, Observation: s.Observation, Valid: s.Valid}
	}
	return out
}

// WindowText is a window-mode user turn: the environment's own
// (Template.Turns), or the first observation (with the task line), the
// last `window` steps (action and observation), the current observation,
// then the admissible actions and the action request. Pre-training
// corpora use it too, so they prompt exactly as rollouts do.
func WindowText(tmpl Template, firstObs string, past []Step, window int, obs string, admissible []string) string {
	if tmpl.Turns != nil {
		body, before := tmpl.Turns.Window(envadapters.WindowTurn{FirstObservation: firstObs, Past: EpisodeSteps(past), Window: window, Observation: obs, Key: tmpl.TurnsKey})
		return tmpl.userText(body, admissible, before)
	}
	var b strings.Builder
	b.WriteString(strings.TrimSpace(firstObs))
	if n := len(past); n > 0 {
		from := max(0, n-window)
		fmt.Fprintf(&b, "\nYou have taken %d steps. The last %d:", n, n-from)
		for k := from; k < n; k++ {
			s := past[k]
			// The last step's observation is the current one: shown once.
			if k == n-1 && strings.TrimSpace(s.Observation) == strings.TrimSpace(obs) {
				fmt.Fprintf(&b, "\n[Step %d] Action: %s", k+1, s.Action)
				continue
			}
			fmt.Fprintf(&b, "\n[Step %d] Action: %s\nObservation: %s", k+1, s.Action, strings.TrimSpace(s.Observation))
		}
		b.WriteString("\nCurrent observation: " + strings.TrimSpace(obs))
	}
	return tmpl.UserText(b.String(), admissible)
}

func (r *Runner) turn(ctx context.Context, eps []*episode, turn int) error {
	reqs := make([]inference.GenRequest, len(eps))
	users := make([]string, len(eps))
	prompts := make([][]int, len(eps))
	for i, e := range eps {
		user, delta, err := r.prompt(e)
		if err != nil {
			return fmt.Errorf("rollout: building the prompt of %s step %d: %w", e.traj.ID, len(e.traj.Steps), err)
		}
		users[i], prompts[i] = user, delta
		full := delta
		if r.cfg.Mode == ModeChat && len(e.traj.Steps) > 0 {
			seq, _ := e.traj.Sequence()
			full = append(seq, delta...)
		}
		reqs[i] = inference.GenRequest{Prompt: full, MaxTokens: r.cfg.MaxTokensPerTurn, Temperature: r.cfg.Temperature, TopP: r.cfg.TopP,
			Seed: r.seed(e.traj.ID, turn), StopTokenIDs: []int{r.policy.EOS}}
	}
	start := time.Now()
	res, err := r.policy.Backend.Generate(ctx, reqs)
	if err != nil {
		return fmt.Errorf("rollout: generating turn %d for %d episodes: %w", turn, len(eps), err)
	}
	genMs := time.Since(start).Milliseconds()
	for i, e := range eps {
		g := res[i]
		step := Step{Index: len(e.traj.Steps), UserText: users[i], PromptIDs: prompts[i], ResponseIDs: g.IDs, LogProbs: g.LogProbs,
			FinishReason: g.FinishReason, GenMillis: genMs}
		if r.cfg.Mode == ModeChat && (len(g.IDs) == 0 || g.IDs[len(g.IDs)-1] != r.policy.EOS) {
			step.ClosingIDs = []int{r.policy.EOS}
		}
		text, err := r.policy.Tok.Decode(g.IDs, tokenizerSkip)
		if err != nil {
			return fmt.Errorf("rollout: decoding %s step %d: %w", e.traj.ID, step.Index, err)
		}
		step.Text = text
		action, ok := r.template.Extract(text, e.last.Admissible)
		step.Action = action
		if r.template.GoesTo != nil {
			step.Place, _ = r.template.GoesTo(action)
		}
		envStart := time.Now()
		st, err := e.env.Step(ctx, action)
		step.EnvMillis = time.Since(envStart).Milliseconds()
		if err != nil {
			// The environment itself broke: the episode ends as failed and is kept.
			e.traj.EnvError = err.Error()
			step.Observation, step.Done = "The environment failed: "+err.Error(), true
		} else {
			step.Observation, step.EnvReward, step.Done, step.State = st.Observation, st.Reward, st.Done, st.State
			step.Rejected = st.Invalid
			step.Valid = r.validStep(text, ok, st.Invalid)
			if st.Err != "" {
				e.traj.EnvError = st.Err
			}
			e.traj.Won, e.traj.Score = st.Won, st.Score
		}
		step.Reward = step.EnvReward
		if !step.Valid {
			step.Reward -= r.cfg.InvalidPenalty
		}
		e.traj.Steps = append(e.traj.Steps, step)
		e.traj.Return += step.Reward
		e.last = st
		if !step.Done && r.cfg.MaxSteps > 0 && len(e.traj.Steps) >= r.cfg.MaxSteps {
			// The step limit: the episode ends unfinished (not won).
			e.traj.Truncated = true
			e.traj.Steps[len(e.traj.Steps)-1].Done = true
			step.Done = true
		}
		if step.Done {
			e.done = true
			e.traj.Millis = time.Since(e.start).Milliseconds()
		}
	}
	return nil
}

// validStep applies Config.Invalid to a reply: extracted says whether the
// template read an action from it, rejected whether the environment
// refused that action.
func (r *Runner) validStep(text string, extracted, rejected bool) bool {
	if r.cfg.Invalid == InvalidFormat {
		return FormatValid(r.template, text, r.cfg.RequireThink)
	}
	return extracted && !rejected
}

var thinkBlock = regexp.MustCompile(`(?s)<think>.*?</think>`)

// FormatValid is the public SEED code's validity of a reply (its
// environment projections): the template's action block is there
// (<action>…</action>, or <search>/<answer> for search templates), a
// <think>…</think> block too when requireThink, and no CJK ideograph
// (U+4E00–U+9FFF) anywhere in it.
func FormatValid(t Template, text string, requireThink bool) bool {
	for _, c := range text {
		if c >= 0x4E00 && c <= 0x9FFF {
			return false
		}
	}
	if requireThink && !thinkBlock.MatchString(text) {
		return false
	}
	return t.HasActionBlock(text)
}

// tokenizerSkip decodes replies for action extraction without special tokens.
var tokenizerSkip = tokenizer.DecodeOptions{SkipSpecial: true}

// Metrics summarize a batch of trajectories.
type Metrics struct {
	Episodes        int                `json:"episodes"`
	Success         float64            `json:"success"`
	SuccessByFamily map[string]float64 `json:"success_by_family"`
	MeanReturn      float64            `json:"mean_return"`
	MeanScore       float64            `json:"mean_score"`
	MeanSteps       float64            `json:"mean_steps"`
	InvalidRate     float64            `json:"invalid_rate"`
	// RejectedRate is the share of steps whose action the environment did
	// not carry out ("Nothing happens."), valid or not.
	RejectedRate    float64 `json:"rejected_rate"`
	TokensGenerated int     `json:"tokens_generated"`
	EnvErrors       int     `json:"env_errors"`
	EpisodesPerSec  float64 `json:"episodes_per_s"`
	// FirstActionAgreement is how alike a group's samples begin: the share
	// of a group's trajectories whose first action is the group's most
	// common one, averaged over groups of two or more (0 without any).
	// 1 means the policy samples one opening per task; then RL, and a
	// distillation loss on sampled tokens, can only reinforce that opening,
	// never find a better one.
	FirstActionAgreement float64 `json:"first_action_agreement"`
	// FirstPlaces is the median, over groups of two or more, of how many
	// different places a group's trajectories go to first (the first
	// step with a Place: environments with places to go to, which name
	// them through envadapters.Prompting.Place): at least three on the
	// median task means the group explores where to look.
	FirstPlaces float64 `json:"first_places"`
	// FlatFailing and FlatWinning are the shares of groups of two or more
	// in which no trajectory won and in which all did: GRPO has no signal
	// on either, SEED's distillation is their only gradient.
	FlatFailing float64 `json:"flat_failing"`
	FlatWinning float64 `json:"flat_winning"`
}

// groupDiagnostics computes Metrics.FirstPlaces, FlatFailing and
// FlatWinning.
func groupDiagnostics(trajs []*Trajectory) (firstPlaces, flatFail, flatWin float64) {
	type key struct {
		task  string
		group int
	}
	type group struct {
		places     map[string]bool
		size, wins int
	}
	groups := map[key]*group{}
	var order []key
	for _, t := range trajs {
		k := key{t.Task.ID, t.Group}
		g := groups[k]
		if g == nil {
			g = &group{places: map[string]bool{}}
			groups[k] = g
			order = append(order, k)
		}
		g.size++
		if t.Won {
			g.wins++
		}
		for _, s := range t.Steps {
			if s.Place != "" {
				g.places[s.Place] = true
				break
			}
		}
	}
	var counts []float64
	for _, k := range order {
		g := groups[k]
		if g.size < 2 {
			continue
		}
		counts = append(counts, float64(len(g.places)))
		switch g.wins {
		case 0:
			flatFail++
		case g.size:
			flatWin++
		}
	}
	if len(counts) == 0 {
		return 0, 0, 0
	}
	sort.Float64s(counts)
	n := len(counts)
	med := counts[n/2]
	if n%2 == 0 {
		med = (counts[n/2-1] + counts[n/2]) / 2
	}
	return med, flatFail / float64(n), flatWin / float64(n)
}

// firstActionAgreement: see Metrics.FirstActionAgreement. A trajectory
// without steps opens with "".
func firstActionAgreement(trajs []*Trajectory) float64 {
	type key struct {
		task  string
		group int
	}
	firsts := map[key]map[string]int{}
	for _, t := range trajs {
		k := key{t.Task.ID, t.Group}
		if firsts[k] == nil {
			firsts[k] = map[string]int{}
		}
		a := ""
		if len(t.Steps) > 0 {
			a = t.Steps[0].Action
		}
		firsts[k][a]++
	}
	sum, groups := 0.0, 0
	for _, counts := range firsts {
		top, size := 0, 0
		for _, c := range counts {
			top, size = max(top, c), size+c
		}
		if size < 2 {
			continue
		}
		sum += float64(top) / float64(size)
		groups++
	}
	if groups == 0 {
		return 0
	}
	return sum / float64(groups)
}

// Summarize computes metrics; elapsed is the wall time of the rollout.
func Summarize(trajs []*Trajectory, elapsed time.Duration) Metrics {
	m := Metrics{Episodes: len(trajs), SuccessByFamily: map[string]float64{}}
	if len(trajs) == 0 {
		return m
	}
	famN := map[string]int{}
	steps, invalid, rejected := 0, 0, 0
	for _, t := range trajs {
		famN[t.Task.Family]++
		if t.Won {
			m.Success++
			m.SuccessByFamily[t.Task.Family]++
		}
		m.MeanReturn += t.Return
		m.MeanScore += t.Score
		steps += len(t.Steps)
		invalid += t.InvalidSteps()
		rejected += t.RejectedSteps()
		for _, s := range t.Steps {
			m.TokensGenerated += len(s.ResponseIDs)
		}
		if t.EnvError != "" {
			m.EnvErrors++
		}
	}
	n := float64(len(trajs))
	m.Success /= n
	m.MeanReturn /= n
	m.MeanScore /= n
	m.MeanSteps = float64(steps) / n
	if steps > 0 {
		m.InvalidRate = float64(invalid) / float64(steps)
		m.RejectedRate = float64(rejected) / float64(steps)
	}
	fams := make([]string, 0, len(famN))
	for f := range famN {
		fams = append(fams, f)
	}
	sort.Strings(fams)
	for _, f := range fams {
		m.SuccessByFamily[f] /= float64(famN[f])
	}
	m.FirstActionAgreement = firstActionAgreement(trajs)
	m.FirstPlaces, m.FlatFailing, m.FlatWinning = groupDiagnostics(trajs)
	if elapsed > 0 {
		m.EpisodesPerSec = n / elapsed.Seconds()
	}
	return m
}

// oneLine joins an observation's lines with spaces.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
