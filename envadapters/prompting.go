package envadapters

// Prompting is how an environment's turns are put to the policy; the
// rollout builds its template from it (rollout.TemplateFor). Everything
// that depends on an environment's text — its action grammar, what its
// window-mode turns show, the sentence that introduces it — is stated
// here by the environment, so the rollout holds no environment's strings.
type Prompting struct {
	System        string // the system message ("" : none)
	ActionRequest string // the line that ends every user turn
	// ListAdmissible adds the admissible actions to each turn.
	ListAdmissible bool
	// Actions reads the action from a reply where the environment's
	// replies do not carry it in <action>…</action> (nil: they do).
	Actions Actions
	// Place names the place an action moves the agent to, for the
	// first_places diagnostic (how many places a group's samples go to
	// first); nil: the environment has no places to go to.
	Place func(action string) (place string, ok bool)
	// Intro is the opening sentence of verl-agent-style prompts
	// (rollout.prompt_style verl-agent), naming the environment; ""
	// takes a generic one.
	Intro string
	// Turns, when set, makes the environment render its own window-mode
	// turns and choose which admissible actions a turn lists: style is
	// the run's rollout.places_line ("" the environment's default), and a
	// style it does not know is an error naming it. nil: the rollout's
	// generic window (the first observation, the last steps, the current
	// observation) and every admissible action listed.
	Turns func(style string) (Turns, error)
}

// Actions is an environment's own action syntax in replies.
// Implementations are values safe for concurrent use.
type Actions interface {
	// Extract reads the action from a reply; ok is false when it has no
	// usable action (an invalid step, never a crash).
	Extract(text string, admissible []string) (action string, ok bool)
	// HasBlock says whether a reply holds the syntax's action block (the
	// public SEED code's format check).
	HasBlock(text string) bool
}

// Prompter is an environment that states its Prompting; others get the
// rollout's generic tagged-action template.
type Prompter interface {
	Prompting() Prompting
}

// Turns is an environment's own rendering of turns (Prompting.Turns).
// Implementations are values safe for concurrent use.
type Turns interface {
	// Window is one window-mode turn's text up to the admissible actions,
	// and a line ("" none) that goes between them and the action request.
	Window(in WindowTurn) (body, beforeRequest string)
	// Lists says whether a turn's admissible-action list names action
	// (the household leaves "go to …" out: its places line names them).
	Lists(action string) bool
}

// WindowTurn is what a window-mode turn is rendered from.
type WindowTurn struct {
	// FirstObservation is the episode's first observation (with the task).
	FirstObservation string
	// Past are the steps taken so far, oldest first.
	Past []EpisodeStep
	// Window is how many of the last past steps the turn shows.
	Window int
	// Observation is the current observation.
	Observation string
	// Key, when set, is a per-episode string the environment may vary its
	// rendering by (the household's order of places differs per episode
	// under rollout.places_order episode); "" renders one way per task.
	Key string
}

// TaskLinePrefix starts the task line of a first observation ("Your task is
// to: put a hot egg in fridge."), the line episode skills are inserted after.
const TaskLinePrefix = "Your task is to:"
