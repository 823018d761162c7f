package rollout

import (
	"context"

	"math"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/seedctl/seedctl/envadapters"
	"github.com/seedctl/seedctl/envadapters/household"
	_ "github.com/seedctl/seedctl/envadapters/searchqa"
	_ "github.com/seedctl/seedctl/envadapters/webshop"
	"github.com/seedctl/seedctl/inference"
	"github.com/seedctl/seedctl/inference/server"
	"github.com/seedctl/seedctl/inference/server/servertest"
	"github.com/seedctl/seedctl/tokenizer"
)

// tinyTokenizer is a BPE tokenizer trained on household text, with the
// Qwen2.5 chat template.
func tinyTokenizer(t testing.TB) (*tokenizer.Tokenizer, *tokenizer.Config) {
	t.Helper()
	tc := tokenizer.DefaultTrainConfig()
	tc.VocabSize = 600
	tok, err := tokenizer.TrainBPE(append(servertest.Corpus(), "<action>go to cabinet 1</action>", "Admissible actions: look; inventory"), tc)
	if err != nil {
		t.Fatal(err)
	}
	return tok, &tokenizer.Config{EOSToken: "<|im_end|>", PadToken: "<|endoftext|>", ChatTemplate: tokenizer.Qwen25ChatTemplate}
}

// scriptBackend answers every prompt by reading it: it picks an admissible
// action from the last user turn (or replies garbage every third call) and
// returns its token ids, recording batch sizes.
type scriptBackend struct {
	tok      *tokenizer.Tokenizer
	eos      int
	mu       sync.Mutex
	calls    int
	maxBatch int
	lp       float64
}

func (s *scriptBackend) Generate(_ context.Context, reqs []inference.GenRequest) ([]inference.GenResult, error) {
	s.mu.Lock()
	s.maxBatch = max(s.maxBatch, len(reqs))
	s.mu.Unlock()
	out := make([]inference.GenResult, len(reqs))
	for i, r := range reqs {
		text, _ := s.tok.Decode(r.Prompt, tokenizer.DecodeOptions{})
		s.mu.Lock()
		s.calls++
		n := s.calls
		s.mu.Unlock()
		reply := "I am not sure."
		if k := strings.LastIndex(text, "Admissible actions: "); k >= 0 && n%3 != 0 {
			acts := strings.Split(strings.SplitN(text[k+len("Admissible actions: "):], "\n", 2)[0], "; ")
			reply = "<action>" + acts[n%len(acts)] + "</action>"
		}
		ids, err := s.tok.Encode(reply)
		if err != nil {
			return nil, err
		}
		finish := "length"
		if n%2 == 0 {
			ids = append(ids, s.eos)
			finish = "stop"
		}
		lps := make([]float64, len(ids))
		for k := range lps {
			lps[k] = -s.lp
		}
		out[i] = inference.GenResult{IDs: ids, LogProbs: lps, Text: reply, FinishReason: finish}
	}
	return out, nil
}
func (s *scriptBackend) Score(context.Context, [][]int) ([][]float64, error) { return nil, nil }
func (s *scriptBackend) Release(context.Context) error                       { return nil }
func (s *scriptBackend) Publish(context.Context, string, string) error       { return nil }
func (s *scriptBackend) Health(context.Context) error                        { return nil }
func (s *scriptBackend) Close() error                                        { return nil }

func householdTasks(t testing.TB, n int) []envadapters.Task {
	b, _ := envadapters.Lookup(household.Name)
	tasks, err := b.Tasks(envadapters.Train, n)
	if err != nil {
		t.Fatal(err)
	}
	return tasks
}

func TestRunGroupsRecordsAndJSONL(t *testing.T) {
	tok, tcfg := tinyTokenizer(t)
	eos, _ := tok.TokenID("<|im_end|>")
	be := &scriptBackend{tok: tok, eos: eos, lp: 0.5}
	p, err := NewPolicy(be, tok, tcfg)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := envadapters.Lookup(household.Name)
	for _, mode := range []string{ModeChat, ModeWindow} {
		cfg := DefaultConfig()
		cfg.Mode, cfg.GroupSize, cfg.MaxInFlight, cfg.EnvOptions = mode, 4, 5, envadapters.Options{"max_steps": "6"}
		r, err := NewRunner(cfg, household.Name, b, p, zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		tasks := householdTasks(t, 3)
		var progressCalls int
		// Each group is handed over once, complete, with every episode ended.
		notified := map[int]int{}
		trajs, err := r.RunNotify(context.Background(), tasks, 7, func(Status) { progressCalls++ }, func(g int, ts []*Trajectory) {
			notified[g]++
			for s, tr := range ts {
				last := len(tr.Steps) - 1
				if tr.Group != g || tr.Sample != s || last < 0 || (!tr.Steps[last].Done && len(tr.Steps) != 6) {
					t.Errorf("%s: group %d handed over with %s (group %d, sample %d, %d steps) not ended", mode, g, tr.ID, tr.Group, tr.Sample, len(tr.Steps))
				}
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(notified) != 3 || notified[0] != 1 || notified[1] != 1 || notified[2] != 1 {
			t.Errorf("%s: groups handed over %v, want each of 0, 1, 2 once", mode, notified)
		}
		if len(trajs) != 12 || be.maxBatch > 5 || progressCalls == 0 {
			t.Fatalf("%s: %d trajectories, max batch %d (limit 5), %d progress calls", mode, len(trajs), be.maxBatch, progressCalls)
		}
		invalid := 0
		for i, tr := range trajs {
			if tr.Group != i/4 || tr.Sample != i%4 || tr.Task.ID != tasks[i/4].ID || tr.Iteration != 7 {
				t.Fatalf("trajectory %d: group %d sample %d task %s", i, tr.Group, tr.Sample, tr.Task.ID)
			}
			if len(tr.Steps) != 6 && !tr.Steps[len(tr.Steps)-1].Done {
				t.Fatalf("%s did not run to the end: %d steps", tr.ID, len(tr.Steps))
			}
			for k, s := range tr.Steps {
				if len(s.PromptIDs) == 0 || len(s.ResponseIDs) == 0 || len(s.LogProbs) != len(s.ResponseIDs) || s.UserText == "" || s.Observation == "" {
					t.Fatalf("%s step %d incomplete: %+v", tr.ID, k, s)
				}
				if want, _ := household.GoesTo(s.Action); s.Place != want {
					t.Errorf("%s step %d: place %q for action %q (household's Place says %q)", tr.ID, k, s.Place, s.Action, want)
				}
				if !s.Valid {
					invalid++
					if s.Reward != s.EnvReward-cfg.InvalidPenalty {
						t.Errorf("invalid step reward %v (env %v)", s.Reward, s.EnvReward)
					}
				}
				if mode == ModeChat && (len(s.ClosingIDs) == 1) == (s.ResponseIDs[len(s.ResponseIDs)-1] == eos) {
					t.Errorf("%s step %d: closing ids %v after a reply ending in %d", tr.ID, k, s.ClosingIDs, s.ResponseIDs[len(s.ResponseIDs)-1])
				}
			}
			if mode == ModeChat {
				checkChatPrompts(t, p, tr)
			}
		}
		if invalid == 0 {
			t.Errorf("%s: the garbage replies produced no invalid steps", mode)
		}
		path := filepath.Join(t.TempDir(), "traj.jsonl")
		if err := WriteJSONL(path, trajs); err != nil {
			t.Fatal(err)
		}
		back, err := ReadJSONL(path)
		if err != nil {
			t.Fatal(err)
		}
		for i := range trajs {
			trajs[i].Started, back[i].Started = time.Time{}, time.Time{}
		}
		if !reflect.DeepEqual(trajs, back) {
			t.Errorf("%s: JSONL round trip changed the trajectories", mode)
		}
		m := Summarize(trajs, time.Second)
		if m.Episodes != 12 || m.InvalidRate <= 0 || m.TokensGenerated == 0 || len(m.SuccessByFamily) == 0 {
			t.Errorf("metrics %+v", m)
		}
	}
}

// checkChatPrompts: the prompt ids the server saw at each step decode to
// the chat template's rendering of the conversation so far.
func checkChatPrompts(t *testing.T, p *Policy, tr *Trajectory) {
	t.Helper()
	var msgs []tokenizer.Message
	if tr.System != "" {
		msgs = append(msgs, tokenizer.Message{Role: "system", Content: tr.System})
	}
	for i, s := range tr.Steps {
		msgs = append(msgs, tokenizer.Message{Role: "user", Content: s.UserText})
		want, _ := p.render(msgs, true)
		got, _ := p.Tok.Decode(tr.PromptFor(i), tokenizer.DecodeOptions{})
		if got != want {
			t.Fatalf("%s step %d: prompt ids decode to\n%q\nthe template renders\n%q", tr.ID, i, got, want)
		}
		reply, _ := p.Tok.Decode(s.ResponseIDs, tokenizer.DecodeOptions{SkipSpecial: true})
		msgs = append(msgs, tokenizer.Message{Role: "assistant", Content: reply})
	}
}

func TestFirstActionAgreement(t *testing.T) {
	traj := func(task string, group int, first string) *Trajectory {
		tr := &Trajectory{Task: envadapters.Task{ID: task, Family: "f"}, Group: group}
		if first != "" {
			tr.Steps = []Step{{Action: first}, {Action: "look"}}
		}
		return tr
	}
	tests := []struct {
		name  string
		trajs []*Trajectory
		want  float64
	}{
		{"one opening per group", []*Trajectory{traj("a", 0, "go to x"), traj("a", 0, "go to x"), traj("b", 1, "look"), traj("b", 1, "look")}, 1},
		{"3 of 4, then 2 of 4", []*Trajectory{traj("a", 0, "go to x"), traj("a", 0, "go to x"), traj("a", 0, "go to x"), traj("a", 0, "go to y"),
			traj("b", 1, "go to x"), traj("b", 1, "go to y"), traj("b", 1, "go to y"), traj("b", 1, "go to z")}, (0.75 + 0.5) / 2},
		{"all different", []*Trajectory{traj("a", 0, "go to x"), traj("a", 0, "go to y")}, 0.5},
		{"the same task in two groups is two groups", []*Trajectory{traj("a", 0, "go to x"), traj("a", 0, "go to x"), traj("a", 1, "go to y"), traj("a", 1, "go to z")}, 0.75},
		{"no steps count as one opening", []*Trajectory{traj("a", 0, ""), traj("a", 0, ""), traj("a", 0, "look")}, 2.0 / 3},
		{"groups of one are left out", []*Trajectory{traj("a", 0, "go to x"), traj("b", 1, "go to y")}, 0},
	}
	for _, tc := range tests {
		if got := Summarize(tc.trajs, 0).FirstActionAgreement; math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("%s: agreement %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestGroupDiagnostics(t *testing.T) {
	traj := func(task string, group int, won bool, actions ...string) *Trajectory {
		tr := &Trajectory{Task: envadapters.Task{ID: task, Family: "f"}, Group: group, Won: won}
		for _, a := range actions {
			place, _ := household.GoesTo(a) // what the rollout records from the template
			tr.Steps = append(tr.Steps, Step{Action: a, Place: place})
		}
		return tr
	}
	tests := []struct {
		name                 string
		trajs                []*Trajectory
		places, fail, winAll float64
	}{
		{"first go to after other actions counts", []*Trajectory{
			traj("a", 0, false, "look", "go to x 1", "go to y 1"), traj("a", 0, true, "go to y 1"), traj("a", 0, false, "go to x 1")},
			2, 0, 0},
		{"median of three groups; one flat failing, one flat winning", []*Trajectory{
			traj("a", 0, false, "go to x 1"), traj("a", 0, false, "go to x 1"),
			traj("b", 1, true, "go to x 1"), traj("b", 1, true, "go to y 1"),
			traj("c", 2, true, "go to x 1"), traj("c", 2, false, "go to y 1"), traj("c", 2, false, "go to z 1")},
			2, 1.0 / 3, 1.0 / 3},
		{"even count: mean of the middle two", []*Trajectory{
			traj("a", 0, false, "go to x 1"), traj("a", 0, true, "go to x 1"),
			traj("b", 1, false, "go to x 1"), traj("b", 1, true, "go to y 1"), traj("b", 1, true, "go to z 1")},
			2, 0, 0},
		{"no go to at all", []*Trajectory{traj("a", 0, false, "look"), traj("a", 0, false)}, 0, 1, 0},
		{"groups of one are left out", []*Trajectory{traj("a", 0, true, "go to x 1"), traj("b", 1, false, "go to y 1")}, 0, 0, 0},
	}
	for _, tc := range tests {
		m := Summarize(tc.trajs, 0)
		if m.FirstPlaces != tc.places || math.Abs(m.FlatFailing-tc.fail) > 1e-12 || math.Abs(m.FlatWinning-tc.winAll) > 1e-12 {
			t.Errorf("%s: first places %v, flat failing %v, flat winning %v; want %v, %v, %v", tc.name, m.FirstPlaces, m.FlatFailing, m.FlatWinning, tc.places, tc.fail, tc.winAll)
		}
	}
}

func TestExtractAction(t *testing.T) {
	adm := []string{"go to cabinet 1", "look"}
	tests := []struct {
		text, want string
		ok         bool
	}{
		{"<action>go to cabinet 1</action>", "go to cabinet 1", true},
		{"I think... <ACTION> look </ACTION> then more", "look", true},
		{"reasoning\nGo to cabinet 1.", "go to cabinet 1", true},
		{"go to fridge 9", "", false},
		{"<action></action>", "", false},
		{"", "", false},
	}
	for _, tt := range tests {
		got, ok := ExtractTagged(tt.text, adm)
		if got != tt.want || ok != tt.ok {
			t.Errorf("ExtractTagged(%q) = %q, %v", tt.text, got, ok)
		}
	}
	sq := TemplateFor("searchqa")
	if a, ok := sq.Extract("<think>x</think><search> who </search>", nil); !ok || a != "<search> who </search>" || !sq.HasActionBlock("<answer>x</answer>") || sq.HasActionBlock("<action>x</action>") {
		t.Errorf("search extraction %q %v", a, ok)
	}
}

func TestInsertSkills(t *testing.T) {
	tmpl := TemplateFor("household")
	u := tmpl.UserText("You are in the middle of a room.\n\nYour task is to: put a mug in fridge.", []string{"look"})
	got := InsertSkills(u, tmpl.ActionRequest, "Open closed containers first.", "Go to the fridge now.")
	want := "You are in the middle of a room.\n\nYour task is to: put a mug in fridge.\nSkill from experience: Open closed containers first.\nAdmissible actions: look\nAdvice for this step: Go to the fridge now.\n" + tmpl.ActionRequest
	if got != want {
		t.Errorf("InsertSkills:\n%q\nwant\n%q", got, want)
	}
	if InsertSkills(u, tmpl.ActionRequest, "", "") != u {
		t.Error("empty skills changed the text")
	}
}

// TestPlaceSkillsFallbacks: observations of real AgentGym servers need not
// carry the "Your task is to:" line; the episode skill then goes before
// the action request, and a turn without the request gets skills at its
// end. Never silently dropped.
func TestPlaceSkillsFallbacks(t *testing.T) {
	const req = "Reply with one action."
	cases := []struct {
		name, user, epi, step, want string
		pl                          Placement
	}{
		{name: "task line", user: "Room.\nYour task is to: heat an egg.\n" + req, epi: "Heat first.", step: "Open it.",
			want: "Room.\nYour task is to: heat an egg.\nSkill from experience: Heat first.\nAdvice for this step: Open it.\n" + req, pl: Placement{PlacedTaskLine, PlacedBeforeRequest}},
		{name: "AgentGym WebShop page", user: "WebShop [SEP] Instruction: [SEP] i need a red shirt [SEP] Search\n" + req, epi: "Search with the colour.",
			want: "WebShop [SEP] Instruction: [SEP] i need a red shirt [SEP] Search\nSkill from experience: Search with the colour.\n" + req, pl: Placement{Episode: PlacedBeforeRequest}},
		{name: "SciWorld task without the colon", user: "Your task is to boil water. This room is called the hallway.\n" + req, epi: "Find the stove first.", step: "Go to the kitchen.",
			want: "Your task is to boil water. This room is called the hallway.\nSkill from experience: Find the stove first.\nAdvice for this step: Go to the kitchen.\n" + req, pl: Placement{PlacedBeforeRequest, PlacedBeforeRequest}},
		{name: "no request, no task line", user: "You see a door.", epi: "Open doors.", step: "Open it now.",
			want: "You see a door.\nSkill from experience: Open doors.\nAdvice for this step: Open it now.", pl: Placement{PlacedAppended, PlacedAppended}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, pl := PlaceSkills(c.user, req, c.epi, c.step)
			if got != c.want || pl != c.pl {
				t.Errorf("PlaceSkills:\n%q %+v\nwant\n%q %+v", got, pl, c.want, c.pl)
			}
			if pl.Fallback() != (c.pl.Episode != "" && c.pl.Episode != PlacedTaskLine || c.pl.Step == PlacedAppended) {
				t.Errorf("Fallback() = %v for %+v", pl.Fallback(), pl)
			}
		})
	}
}

// TestTokenInTokenOutWithEmbeddedServer: the sampling log-probs rollout
// records are the model's own log-probs of the same tokens in the same
// context, end to end through the embedded server.
func TestTokenInTokenOutWithEmbeddedServer(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tiny")
	if err := servertest.WriteTinyCheckpoint(dir, 3); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	scfg := server.DefaultConfig(dir)
	scfg.MaxModelLen = 4096 // household prompts outgrow the tiny config's 512 positions; RoPE does not mind
	srv, err := server.New(scfg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	be, err := inference.NewEmbedded(ctx, srv, inference.DefaultConfig("embedded"), zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	p, err := LoadPolicy(dir, be)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := envadapters.Lookup(household.Name)
	for _, mode := range []string{ModeChat, ModeWindow} {
		cfg := DefaultConfig()
		cfg.Mode, cfg.GroupSize, cfg.MaxTokensPerTurn, cfg.EnvOptions = mode, 2, 6, envadapters.Options{"max_steps": "3"}
		r, _ := NewRunner(cfg, household.Name, b, p, zerolog.Nop())
		trajs, err := r.Run(ctx, householdTasks(t, 2), 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		checked := 0
		for _, tr := range trajs {
			for i, s := range tr.Steps {
				seq := append(append([]int(nil), tr.PromptFor(i)...), s.ResponseIDs...)
				want, err := servertest.LogProbs(dir, seq)
				if err != nil {
					t.Fatal(err)
				}
				off := len(seq) - len(s.ResponseIDs)
				for k, lp := range s.LogProbs {
					if d := math.Abs(lp - want[off+k]); d > 1e-4 {
						t.Fatalf("%s %s step %d token %d: recorded %v, model %v", mode, tr.ID, i, k, lp, want[off+k])
					}
					checked++
				}
			}
		}
		t.Logf("%s: %d sampled tokens match the model's log-probs", mode, checked)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, mut := range []func(*Config){
		func(c *Config) { c.Mode = "stream" },
		func(c *Config) { c.GroupSize = 0 },
		func(c *Config) { c.MaxTokensPerTurn = 0 },
		func(c *Config) { c.TopP = 2 },
		func(c *Config) { c.InvalidPenalty = -1 },
		func(c *Config) { c.MaxInFlight = 0 },
	} {
		c := DefaultConfig()
		mut(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}

}

// TestPlacesOrderEpisode: with PlacesOrderEpisode the samples of one task
// are pointed at different first places, each episode keeps its own order
// at every step (the line is what WindowText renders with the episode's
// key), and the default order points a whole group at one place.
func TestPlacesOrderEpisode(t *testing.T) {
	tok, tcfg := tinyTokenizer(t)
	eos, _ := tok.TokenID("<|im_end|>")
	p, err := NewPolicy(&scriptBackend{tok: tok, eos: eos, lp: 0.5}, tok, tcfg)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := envadapters.Lookup(household.Name)
	placesLine := func(user string) string {
		for _, l := range strings.Split(user, "\n") {
			if strings.HasPrefix(l, "Places not searched yet:") {
				return l
			}
		}
		t.Fatalf("no places line in\n%s", user)
		return ""
	}
	tasks := householdTasks(t, 4)
	for _, order := range []string{PlacesOrderRoom, PlacesOrderEpisode} {
		cfg := DefaultConfig()
		cfg.Mode, cfg.GroupSize, cfg.PlacesOrder, cfg.EnvOptions = ModeWindow, 8, order, envadapters.Options{"max_steps": "4"}
		r, err := NewRunner(cfg, household.Name, b, p, zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		trajs, err := r.Run(context.Background(), tasks, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		first := make([]map[string]bool, len(tasks))
		for _, tr := range trajs {
			if first[tr.Group] == nil {
				first[tr.Group] = map[string]bool{}
			}
			first[tr.Group][placesLine(tr.Steps[0].UserText)] = true
			tmpl := r.Template()
			if order == PlacesOrderEpisode {
				tmpl.TurnsKey = placesKey(cfg.Seed, tr)
			}
			// The household's state lines are recorded: the reset's,
			// then each step's; a rejected action leaves it as it was.
			if want := "at: middle of the room; carrying: nothing; lamp: off"; tr.FirstState != want {
				t.Fatalf("%s: first state %q, want %q", tr.ID, tr.FirstState, want)
			}
			for k, s := range tr.Steps {
				obs, state := tr.FirstObservation, tr.FirstState
				if k > 0 {
					obs, state = tr.Steps[k-1].Observation, tr.Steps[k-1].State
				}
				if s.State == "" || s.Rejected && s.State != state {
					t.Fatalf("%s step %d (rejected %v): state %q after %q", tr.ID, k, s.Rejected, s.State, state)
				}
				// The places line depends on the steps taken, not on the
				// admissible actions.
				want := placesLine(WindowText(tmpl, tr.FirstObservation, tr.Steps[:k], cfg.Window, obs, nil))
				if got := placesLine(s.UserText); got != want {
					t.Fatalf("%s %s step %d: places line %q, want the episode's order %q", order, tr.ID, k, got, want)
				}
			}
		}
		for g, lines := range first {
			switch {
			case order == PlacesOrderRoom && len(lines) != 1:
				t.Errorf("room order: group %d opens with %d different places lines, want 1: %v", g, len(lines), lines)
			case order == PlacesOrderEpisode && len(lines) < 4:
				t.Errorf("episode order: group %d of 8 samples opens with only %d different places lines: %v", g, len(lines), lines)
			}
		}
	}
	c := DefaultConfig()
	c.PlacesOrder = "task"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "places_order") {
		t.Errorf("places_order %q: error %v, want one naming places_order", c.PlacesOrder, err)
	}
}

// endless is an environment that never ends an episode, as no AgentGym
// server does at a step limit.
type endless struct{ steps *int }

func (e endless) New(envadapters.Options) (envadapters.Env, error) { return e, nil }
func (e endless) Reset(context.Context, envadapters.Task) (envadapters.Step, error) {
	return envadapters.Step{Observation: "Your task is to: wait.", Admissible: []string{"look", "inventory"}}, nil
}
func (e endless) Step(context.Context, string) (envadapters.Step, error) {
	*e.steps++
	return envadapters.Step{Observation: "No known action matches that input.", Admissible: []string{"look", "inventory"}}, nil
}
func (e endless) Close() error { return nil }

// The rollout ends every episode at MaxSteps itself, whatever the
// environment says: the last step is marked done, the episode truncated
// and not won.
func TestRolloutStopsAtMaxSteps(t *testing.T) {
	tok, tcfg := tinyTokenizer(t)
	eos, _ := tok.TokenID("<|im_end|>")
	p, err := NewPolicy(&scriptBackend{tok: tok, eos: eos, lp: 0.5}, tok, tcfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{ModeChat, ModeWindow} {
		steps := 0
		cfg := DefaultConfig()
		cfg.Mode, cfg.GroupSize, cfg.MaxSteps = mode, 3, 7
		r, err := NewRunner(cfg, "endless", endless{&steps}, p, zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		tasks := []envadapters.Task{{Env: "endless", Split: envadapters.Train, Index: 0, ID: "endless/train/0"}, {Env: "endless", Split: envadapters.Train, Index: 1, ID: "endless/train/1"}}
		trajs, err := r.Run(context.Background(), tasks, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, tr := range trajs {
			if len(tr.Steps) != 7 || !tr.Truncated || tr.Won || !tr.Steps[6].Done || tr.Steps[5].Done {
				t.Errorf("%s %s: %d steps, truncated %v, won %v", mode, tr.ID, len(tr.Steps), tr.Truncated, tr.Won)
			}
		}
		if steps != 6*7 {
			t.Errorf("%s: the env was stepped %d times, want %d", mode, steps, 6*7)
		}
	}
	cfg := DefaultConfig()
	cfg.MaxSteps = -1
	if err := cfg.Validate(); err == nil {
		t.Error("a negative max_steps was accepted")
	}
}

// An AgentGym flavor whose server sends no action list (SciWorld) gets
// its action grammar in the action request; a built-in keeps its own.
func TestTemplateForAgentGymFlavors(t *testing.T) {
	sw := TemplateFor("sciworld")
	for _, want := range []string{"focus on OBJ", "go to LOC", "<action>"} {
		if !strings.Contains(sw.UserText("This room is called the kitchen.", nil), want) {
			t.Errorf("sciworld prompt lacks %q: %q", want, sw.UserText("This room is called the kitchen.", nil))
		}
	}
	if sw.System == "" {
		t.Error("sciworld has no system prompt")
	}
	if tc := TemplateFor("textcraft"); !strings.Contains(tc.ActionRequest, "craft N ITEM using") {
		t.Errorf("textcraft request %q", tc.ActionRequest)
	}
	// A built-in states its own prompts (envadapters.Prompter); household
	// is a place-searching environment, searchqa answers in blocks.
	hh := TemplateFor("household")
	if ht, ok := hh.Turns.(household.Turns); hh.System != "You are a household agent." || !ok || ht.Style != household.PlacesNext || hh.Actions != nil || hh.GoesTo == nil {
		t.Errorf("household template %+v", hh)
	}
	if sq := TemplateFor("searchqa"); sq.Actions == nil || sq.GoesTo != nil || sq.ListAdmissible || sq.Turns != nil {
		t.Errorf("searchqa template %+v", sq)
	}
	if ws := TemplateFor("webshop"); !ws.ListAdmissible || ws.Turns != nil || ws.Actions != nil || ws.GoesTo != nil || !strings.Contains(ws.ActionRequest, "click[button]") {
		t.Errorf("webshop template %+v", ws)
	}
}

// The public SEED code's invalid step (its ALFWorld/WebShop projections):
// a format check of the reply alone.
func TestFormatValidIsThePublicDefinition(t *testing.T) {
	tagged, search := TemplateFor("household"), TemplateFor("searchqa")
	cases := []struct {
		reply        string
		think, valid bool
	}{
		{"<think>the mug is in the fridge</think><action>go to fridge 1</action>", true, true},
		{"<think>x</think>\n<action> open fridge 1 </action>", true, true},
		{"<action>go to fridge 1</action>", false, true},
		{"<action>go to fridge 1</action>", true, false},                         // no <think>
		{"<think>reasoning</think> go to fridge 1", true, false},                 // no <action>
		{"<think>reasoning</think> go to fridge 1", false, false},                // no <action>
		{"<think>看冰箱</think><action>go to fridge 1</action>", true, false},       // CJK in the reasoning
		{"<action>打开 fridge 1</action>", false, false},                           // CJK in the action
		{"<think>x</think><action>   </action>", true, false},                    // empty action
		{"<think>x<action>go to fridge 1</action>", true, false},                 // unclosed think
		{"<think>café, naïve</think><action>go to shelf 1</action>", true, true}, // non-CJK Unicode
	}
	for _, c := range cases {
		if got := FormatValid(tagged, c.reply, c.think); got != c.valid {
			t.Errorf("%q (require_think %v): valid %v, want %v", c.reply, c.think, got, c.valid)
		}
	}
	if !FormatValid(search, "<search> who wrote it </search>", false) || FormatValid(search, "<action>x</action>", false) {
		t.Error("search templates' action block is <search>/<answer>")
	}
}

// rejecting is an environment that refuses every action it is sent, as
// ALFWorld answers "Nothing happens.".
type rejecting struct{}

func (rejecting) New(envadapters.Options) (envadapters.Env, error) { return rejecting{}, nil }
func (rejecting) Reset(context.Context, envadapters.Task) (envadapters.Step, error) {
	return envadapters.Step{Observation: "Your task is to: wait.", Admissible: []string{"look", "inventory"}}, nil
}
func (rejecting) Step(context.Context, string) (envadapters.Step, error) {
	return envadapters.Step{Observation: "Nothing happens.", Invalid: true, Admissible: []string{"look", "inventory"}}, nil
}
func (rejecting) Close() error { return nil }

// Under the public definition a rejected action in a well-formed reply is
// a valid step, unpenalised, and counted as rejected; under "env" it is
// invalid and penalised.
func TestRejectedActionsPerDefinition(t *testing.T) {
	tok, tcfg := tinyTokenizer(t)
	eos, _ := tok.TokenID("<|im_end|>")
	p, err := NewPolicy(&scriptBackend{tok: tok, eos: eos, lp: 0.5}, tok, tcfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, def := range []string{InvalidFormat, InvalidEnv} {
		cfg := DefaultConfig()
		cfg.GroupSize, cfg.MaxSteps, cfg.Invalid, cfg.InvalidPenalty = 2, 6, def, 0.1
		r, err := NewRunner(cfg, "rejecting", rejecting{}, p, zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		trajs, err := r.Run(context.Background(), []envadapters.Task{{Env: "rejecting", Split: envadapters.Train, ID: "rejecting/train/0"}}, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		tagged, valid := 0, 0
		for _, tr := range trajs {
			for _, s := range tr.Steps {
				if !s.Rejected {
					t.Fatalf("%s: a refused action not counted as rejected", def)
				}
				hasTag := strings.Contains(s.Text, "<action>")
				if hasTag {
					tagged++
				}
				if s.Valid {
					valid++
				}
				want := hasTag && def == InvalidFormat
				if s.Valid != want || (s.Reward == 0) != want {
					t.Errorf("%s: reply %q: valid %v reward %v, want valid %v", def, s.Text, s.Valid, s.Reward, want)
				}
			}
		}
		m := Summarize(trajs, 0)
		if m.RejectedRate != 1 || tagged == 0 {
			t.Errorf("%s: rejected rate %v with %d tagged replies", def, m.RejectedRate, tagged)
		}
	}
	bad := DefaultConfig()
	bad.Invalid, bad.RequireThink = InvalidEnv, true
	if bad.Validate() == nil {
		t.Error("require_think without the format definition was accepted")
	}
}

// The public code's skill sections, placed as its seed/prompting.py
// places them, on the turns the GPU presets send.
func TestPlaceSkillSections(t *testing.T) {
	ep := "**Episode-Level Skill**\n" + episodeSectionHow + "\n[Heat the mug in the microwave first.]"
	st := "**Critical-Step Skill**\n" + stepSectionHow + "\n[Open the microwave.]"
	cases := []struct {
		name, turn, want string
		pl               Placement
	}{
		{"alfworld (agentgym): after the task line, step at the end",
			"-= Welcome to TextWorld, ALFRED! =-\nYou are in the middle of a room.\n\nYour task is to: heat some mug and put it in cabinet.\nAdmissible actions: look\nWrite your next action inside <action> and </action>.",
			"-= Welcome to TextWorld, ALFRED! =-\nYou are in the middle of a room.\n\nYour task is to: heat some mug and put it in cabinet.\n\n" + ep + "\n\nAdmissible actions: look\nWrite your next action inside <action> and </action>.\n\n" + st,
			Placement{Episode: PlacedTaskLine, Step: PlacedAppended}},
		{"webshop (agentgym): no task line, both after the action request",
			"WebShop [SEP] Instruction: [SEP] i need a red dress [SEP] Search\nGive your next action, search[query] or click[button], inside <action> and </action>.",
			"WebShop [SEP] Instruction: [SEP] i need a red dress [SEP] Search\nGive your next action, search[query] or click[button], inside <action> and </action>.\n\n" + ep + "\n\n" + st,
			Placement{Episode: PlacedAppended, Step: PlacedAppended}},
		{"sciworld (agentgym): \"Your task is to\" without a colon is no task line",
			"Your task is to boil water.\nThis room is called the kitchen.\nWrite your next action inside <action> and </action>.",
			"Your task is to boil water.\nThis room is called the kitchen.\nWrite your next action inside <action> and </action>.\n\n" + ep + "\n\n" + st,
			Placement{Episode: PlacedAppended, Step: PlacedAppended}},
		{"verl-agent prompt: the anchor",
			"You are an expert agent. Your current task is: find the key.\nYour current observation is: a room.\nNow it's your turn to take an action.",
			"You are an expert agent. Your current task is: find the key.\n\n" + ep + "\n\nYour current observation is: a room.\n\n" + st + "\n\nNow it's your turn to take an action.",
			Placement{Episode: PlacedTaskLine, Step: PlacedBeforeRequest}},
		{"search: the question line", "Your question: who wrote it?\nReply with <search> query </search>.",
			"Your question: who wrote it?\n\n" + ep + "\n\nReply with <search> query </search>.\n\n" + st,
			Placement{Episode: PlacedTaskLine, Step: PlacedAppended}},
	}
	for _, c := range cases {
		got, pl := PlaceSkillSections(c.turn, "Heat the mug in the microwave first.", " Open the microwave. ")
		if got != c.want || pl != c.pl {
			t.Errorf("%s:\ngot  %q %+v\nwant %q %+v", c.name, got, pl, c.want, c.pl)
		}
	}
	if got, _ := PlaceSkillSections("Your task is to: x.", "", ""); got != "Your task is to: x." {
		t.Errorf("no skills changed the turn: %q", got)
	}
	tm := TemplateFor("alfworld")
	tm.SkillSections = true
	if got, _ := tm.Place("Your task is to: x.", "s s s s s", ""); !strings.Contains(got, "**Episode-Level Skill**") {
		t.Errorf("a sections template placed %q", got)
	}
}

// verl-agent prompts: the task line, the past observations with the action
// taken after each, the current step, the admissible actions, then "Now
// it's your turn" with <think> and <action>; the public skill sections
// land after the task line and before that request.
func TestVerlAgentPrompt(t *testing.T) {
	first := "-= Welcome to TextWorld, ALFRED! =-\n\nYou are in the middle of a room. Looking quickly around you, you see a cabinet 1 and a fridge 1.\n\nYour task is to: put a cool mug in cabinet."
	past := []Step{{Action: "go to fridge 1", Observation: "You arrive at fridge 1. The fridge 1 is closed."}, {Action: "open fridge 1", Observation: "You open the fridge 1. In it, you see a mug 1."}}
	got := VerlAgentText(TemplateFor("alfworld"), first, past, 1, past[1].Observation, []string{"take mug 1 from fridge 1", "close fridge 1"})
	want := "You are an expert agent acting in the ALFRED embodied household environment. Your task is to: put a cool mug in cabinet.\n" +
		"Before this step you have taken 2 step(s). The last 1 observation(s) and the action you took after each:\n" +
		"[Observation 2: 'You arrive at fridge 1. The fridge 1 is closed.', Action 2: 'open fridge 1']\n" +
		"You are now at step 3, and your current observation is: You open the fridge 1. In it, you see a mug 1.\n" +
		"Your admissible actions now are: ['take mug 1 from fridge 1', 'close fridge 1'].\n\n" +
		"Now it's your turn to take an action.\n" +
		"First reason step by step about the current situation, inside <think> </think>. Then choose one admissible action for this step and give it inside <action> </action>."
	if got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	if step0 := VerlAgentText(TemplateFor("alfworld"), first, nil, 2, first, nil); strings.Contains(step0, "Before this step") || !strings.Contains(step0, "You are now at step 1") {
		t.Errorf("first step:\n%s", step0)
	}
	out, pl := PlaceSkillSections(got, "Cool the mug in the fridge before the cabinet.", "Take the mug now.")
	if pl.Episode != PlacedTaskLine || pl.Step != PlacedBeforeRequest {
		t.Fatalf("placement %+v:\n%s", pl, out)
	}
	if i, j, k := strings.Index(out, "**Episode-Level Skill**"), strings.Index(out, "Before this step"), strings.Index(out, "**Critical-Step Skill**"); !(i > 0 && i < j && j < k && k < strings.Index(out, "Now it's your turn")) {
		t.Errorf("sections misplaced:\n%s", out)
	}
	for _, c := range []struct{ obs, task string }{
		{"WebShop [SEP] Instruction: [SEP] i need a long clip-in hair extension, and price lower than 40.00 dollars [SEP] Search", "i need a long clip-in hair extension, and price lower than 40.00 dollars"},
		{"Your task is to: answer the question: who wrote it?\nSearch the knowledge base.", "answer the question: who wrote it?"},
		{"This room is called the kitchen.", ""},
	} {
		if got := TaskOf(c.obs); got != c.task {
			t.Errorf("TaskOf(%q) = %q, want %q", c.obs, got, c.task)
		}
	}
	cfg := DefaultConfig()
	cfg.Mode, cfg.PromptStyle = ModeChat, PromptVerlAgent
	if cfg.Validate() == nil {
		t.Error("verl-agent prompts in chat mode were accepted")
	}
}
