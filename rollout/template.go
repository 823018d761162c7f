package rollout

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/seedctl/seedctl/envadapters"
	"github.com/seedctl/seedctl/envadapters/agentgym"
)

// Template is how one environment's turns are put to the policy and how an
// action is read back, built from what the environment states
// (envadapters.Prompting). The task line ("Your task is to: …", from the
// environment's first observation) and the action-request line are where
// skills are inserted in teacher contexts.
type Template struct {
	// System is an optional system message.
	System string
	// ActionRequest ends every user turn.
	ActionRequest string
	// ListAdmissible adds the admissible actions to each turn.
	ListAdmissible bool
	// Intro opens verl-agent-style turns (PromptVerlAgent).
	Intro string
	// Turns is the environment's own rendering of window turns and of the
	// listed actions (envadapters.Prompting.Turns); nil: the generic ones.
	Turns envadapters.Turns
	// TurnsKey is passed to Turns as each window turn's
	// envadapters.WindowTurn.Key: the rollout sets it per episode
	// (Config.PlacesOrder = PlacesOrderEpisode). Empty: one rendering per
	// task.
	TurnsKey string
	// Extract reads the action from the model's text; ok is false when the
	// output has no usable action (an invalid step, never a crash).
	Extract func(text string, admissible []string) (action string, ok bool)
	// SkillSections: teacher contexts carry skills as the public SEED code
	// writes them (PlaceSkillSections) rather than as seedctl's one-line
	// "Skill from experience:" (PlaceSkills, what the tiny bases were
	// trained to read). Set from the run's rollout.skill_format.
	SkillSections bool
	// Actions is the environment's own reply syntax
	// (envadapters.Prompting.Actions); nil: <action>…</action>.
	Actions envadapters.Actions
	// GoesTo names the place an action goes to
	// (envadapters.Prompting.Place); nil: no places.
	GoesTo func(action string) (string, bool)
	// turnsFor makes Turns for a style (WithPlacesLine); nil when the
	// environment renders no turns of its own.
	turnsFor func(style string) (envadapters.Turns, error)
}

// TaskLinePrefix starts the line episode skills are inserted after.
const TaskLinePrefix = envadapters.TaskLinePrefix

var actionTag = regexp.MustCompile(`(?is)<action>(.*?)</action>`)

// ExtractTagged reads <action>…</action> (the first one). Without tags it
// falls back to the last non-empty line when that line is exactly one of
// the admissible actions (case and a final period aside).
func ExtractTagged(text string, admissible []string) (string, bool) {
	if m := actionTag.FindStringSubmatch(text); m != nil {
		a := strings.TrimSpace(m[1])
		return a, a != ""
	}
	lines := strings.Split(strings.TrimSpace(text), "\n")
	last := strings.TrimRight(strings.TrimSpace(lines[len(lines)-1]), ".")
	for _, a := range admissible {
		if strings.EqualFold(last, a) {
			return a, true
		}
	}
	return "", false
}

// HasActionBlock says whether text holds the block the template reads
// its action from: the environment's own (Actions), else
// <action>…</action>.
func (t Template) HasActionBlock(text string) bool {
	if t.Actions != nil {
		return t.Actions.HasBlock(text)
	}
	m := actionTag.FindStringSubmatch(text)
	return m != nil && strings.TrimSpace(m[1]) != ""
}

// WithPlacesLine returns t with the environment's turns in style (the
// run's rollout.places_line; "" leaves t as it is). An environment without
// turns of its own accepts only "", and one with them refuses a style it
// does not know.
func (t Template) WithPlacesLine(style string) (Template, error) {
	if style == "" {
		return t, nil
	}
	if t.turnsFor == nil {
		return t, fmt.Errorf("places line %q: this environment's prompts have no places line", style)
	}
	turns, err := t.turnsFor(style)
	if err != nil {
		return t, err
	}
	t.Turns = turns
	return t, nil
}

// TemplateOf is the template a Prompting asks for.
func TemplateOf(p envadapters.Prompting) (Template, error) {
	t := Template{System: p.System, ActionRequest: p.ActionRequest, ListAdmissible: p.ListAdmissible, Intro: p.Intro, Extract: ExtractTagged, GoesTo: p.Place}
	if p.Actions != nil {
		t.Extract, t.Actions = p.Actions.Extract, p.Actions
	}
	if p.Turns != nil {
		turns, err := p.Turns("")
		if err != nil {
			return Template{}, fmt.Errorf("the environment's default turns: %w", err)
		}
		t.Turns, t.turnsFor = turns, p.Turns
	}
	return t, nil
}

// TemplateFor returns the template a registered built-in's Prompting
// asks for (envadapters.Prompter), an AgentGym flavor's
// (agentgym.FlavorInfo.Prompting: its action grammar where its server
// sends no action list), or a generic tagged-action one.
func TemplateFor(env string) Template {
	p := envadapters.Prompting{ActionRequest: "Write your next action inside <action> and </action>.", ListAdmissible: true}
	if b, err := envadapters.Lookup(env); err == nil {
		if pr, ok := b.(envadapters.Prompter); ok {
			p = pr.Prompting()
		}
	} else if f, ok := agentgym.Flavors[env]; ok {
		p = f.Prompting()
	}
	t, err := TemplateOf(p)
	if err != nil {
		// A registered environment whose default turns fail is a bug in
		// that environment, found by its own tests.
		panic(fmt.Sprintf("rollout: environment %s: %v", env, err))
	}
	return t
}

// UserText is one user turn: the observation, the admissible actions and
// the action request. Skills are inserted into exactly this text.
func (t Template) UserText(observation string, admissible []string) string {
	return t.userText(observation, admissible, "")
}

// userText is UserText with an optional line (without newline) between
// the admissible actions and the action request.
func (t Template) userText(observation string, admissible []string, beforeRequest string) string {
	var b strings.Builder
	b.WriteString(strings.TrimSpace(observation))
	if t.ListAdmissible {
		var list []string
		for _, a := range admissible {
			if t.Turns == nil || t.Turns.Lists(a) {
				list = append(list, a)
			}
		}
		if len(list) > 0 {
			b.WriteString("\nAdmissible actions: ")
			b.WriteString(strings.Join(list, "; "))
		}
	}
	if beforeRequest != "" {
		b.WriteString("\n" + beforeRequest)
	}
	b.WriteString("\n")
	b.WriteString(t.ActionRequest)
	return b.String()
}

// Where a skill went into a user turn (Placement's values).
const (
	PlacedTaskLine      = "task_line"      // after the "Your task is to:" line
	PlacedBeforeRequest = "before_request" // just before the action request
	PlacedAppended      = "appended"       // at the end of the turn
)

// Placement says where InsertSkills put each skill ("" when it had none).
type Placement struct {
	Episode, Step string
}

// Fallback says whether a skill went somewhere other than its intended
// place (the episode skill after the task line, the step skill before the
// action request).
func (p Placement) Fallback() bool {
	return (p.Episode != "" && p.Episode != PlacedTaskLine) || (p.Step != "" && p.Step != PlacedBeforeRequest)
}

// Skill formats (rollout.skill_format).
const (
	SkillFormatLine     = "line"
	SkillFormatSections = "sections"
)

// Place inserts skills into a user turn in the template's skill format.
func (t Template) Place(userText, episodeSkill, stepSkill string) (string, Placement) {
	if t.SkillSections {
		return PlaceSkillSections(userText, episodeSkill, stepSkill)
	}
	return PlaceSkills(userText, t.ActionRequest, episodeSkill, stepSkill)
}

// The public SEED code's skill sections: a bold title, an instruction
// line, the skill in brackets (the instruction lines are ours).
const (
	episodeSectionTitle = "**Episode-Level Skill**"
	episodeSectionHow   = "Draw on this lesson from the whole episode when you choose what to do:"
	stepSectionTitle    = "**Critical-Step Skill**"
	stepSectionHow      = "Apply this to the present decision only:"
)

// publicTaskLines are the task lines the public code puts the episode
// section after, tried in this order.
var publicTaskLines = []*regexp.Regexp{
	regexp.MustCompile(`(?m)^.*\bYour task is to:\s*.*(?:\n|$)`),
	regexp.MustCompile(`(?m)^.*\bYour current task is:\s*.*(?:\n|$)`),
	regexp.MustCompile(`(?m)^.*\bYour task is:\s*.*(?:\n|$)`),
	regexp.MustCompile(`(?m)^.*\bYour question:\s*.*(?:\n|$)`),
	regexp.MustCompile(`(?m)^.*\bYour goal is(?: to)?\b[:\s].*(?:\n|$)`),
}

// publicAnchors are the phrases the public code puts a section before
// when there is no task line (its verl-agent prompts' closing request).
var publicAnchors = []string{"Now it's your turn to", "Now it's your turn"}

// PlaceSkillSections inserts skills as the public SEED code does
// (seed/prompting.py): the episode section after the first task line it
// recognises ("Your task is to:", "Your current task is:", "Your task is:",
// "Your question:", "Your goal is"), else before "Now it's your turn",
// else at the end; the step section before "Now it's your turn", else at
// the end. A blank line separates a section from the text around it, and
// the text is trimmed first. On an AgentGym WebShop or SciWorld turn (no
// such line, seedctl's own action request) both go after the request.
func PlaceSkillSections(userText, episodeSkill, stepSkill string) (string, Placement) {
	out := strings.TrimSpace(userText)
	var pl Placement
	section := func(title, how, body string) string {
		return title + "\n" + how + "\n[" + strings.TrimSpace(body) + "]"
	}
	join := func(prefix, block, suffix string) string {
		prefix, suffix = strings.TrimRight(prefix, " \t\n"), strings.TrimLeft(suffix, " \t\n")
		switch {
		case prefix != "" && suffix != "":
			return prefix + "\n\n" + block + "\n\n" + suffix
		case prefix != "":
			return prefix + "\n\n" + block
		case suffix != "":
			return block + "\n\n" + suffix
		}
		return block
	}
	beforeAnchor := func(block string) (string, string) {
		for _, a := range publicAnchors {
			if i := strings.Index(out, a); i >= 0 {
				return join(out[:i], block, out[i:]), PlacedBeforeRequest
			}
		}
		return join(out, block, ""), PlacedAppended
	}
	if strings.TrimSpace(episodeSkill) != "" {
		block := section(episodeSectionTitle, episodeSectionHow, episodeSkill)
		placed := false
		for _, re := range publicTaskLines {
			if loc := re.FindStringIndex(out); loc != nil {
				out, pl.Episode, placed = join(out[:loc[1]], block, out[loc[1]:]), PlacedTaskLine, true
				break
			}
		}
		if !placed {
			out, pl.Episode = beforeAnchor(block)
		}
	}
	if strings.TrimSpace(stepSkill) != "" {
		out, pl.Step = beforeAnchor(section(stepSectionTitle, stepSectionHow, stepSkill))
	}
	return out, pl
}

// InsertSkills is PlaceSkills without the placement.
func InsertSkills(userText, actionRequest, episodeSkill, stepSkill string) string {
	out, _ := PlaceSkills(userText, actionRequest, episodeSkill, stepSkill)
	return out
}

// PlaceSkills puts an episode skill after the task line and a step skill
// just before the action request. A turn without a task line (real
// AgentGym WebShop and SciWorld observations need not have one) gets the
// episode skill just before the action request instead, as the public SEED
// code does, and a turn without the action request gets either skill at
// its end: a skill is never silently left out. Empty skills insert nothing.
func PlaceSkills(userText, actionRequest, episodeSkill, stepSkill string) (string, Placement) {
	out := userText
	var pl Placement
	beforeRequest := func(line string) (string, bool) {
		if actionRequest == "" {
			return out, false
		}
		i := strings.LastIndex(out, actionRequest)
		if i < 0 {
			return out, false
		}
		return out[:i] + line + "\n" + out[i:], true
	}
	if episodeSkill != "" {
		line := "Skill from experience: " + episodeSkill
		if i := strings.Index(out, TaskLinePrefix); i >= 0 {
			end := strings.IndexByte(out[i:], '\n')
			if end < 0 {
				end = len(out) - i
			}
			at := i + end
			out = out[:at] + "\n" + line + out[at:]
			pl.Episode = PlacedTaskLine
		} else if o, ok := beforeRequest(line); ok {
			out, pl.Episode = o, PlacedBeforeRequest
		} else {
			out, pl.Episode = out+"\n"+line, PlacedAppended
		}
	}
	if stepSkill != "" {
		line := "Advice for this step: " + stepSkill
		if o, ok := beforeRequest(line); ok {
			out, pl.Step = o, PlacedBeforeRequest
		} else {
			out, pl.Step = out+"\n"+line, PlacedAppended
		}
	}
	return out, pl
}
