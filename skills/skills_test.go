package skills

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/seedctl/seedctl/envadapters"
	"github.com/seedctl/seedctl/envadapters/household"
	_ "github.com/seedctl/seedctl/envadapters/searchqa"
	_ "github.com/seedctl/seedctl/envadapters/webshop"
	"github.com/seedctl/seedctl/inference"
	"github.com/seedctl/seedctl/rollout"
	"github.com/seedctl/seedctl/tokenizer"
)

var update = flag.Bool("update", false, "rewrite testdata golden files")

func TestParseUglyAnswers(t *testing.T) {
	opt := ParseOptions{Candidates: []int{4, 2, 7}, MaxStep: 2}
	tests := []struct {
		name, answer string
		wantErr      string
		check        func(*Skill) bool
	}{
		{"clean", `{"episode_summary": "found it", "episode_skill": "Open the drawers before the shelves every time.", "step_skills": {"2": "Open the drawer next to you now."}}`, "",
			func(s *Skill) bool { return s.EpisodeSkill != "" && s.StepSkills[2] != "" }},
		{"code fence and prose", "Sure! Here it is:\n```json\n{\"episode_summary\": \"x\", \"episode_skill\": \"Heat the egg before putting it away.\", \"step_skills\": {}}\n```\nHope this helps {really}.", "",
			func(s *Skill) bool { return s.EpisodeSkill == "Heat the egg before putting it away." }},
		{"braces inside strings", `{"episode_summary": "a } b {", "episode_skill": "Use the {lamp} while holding the book.", "step_skills": {}}`, "",
			func(s *Skill) bool { return strings.Contains(s.EpisodeSkill, "{lamp}") }},
		{"truncated", `{"episode_summary": "the agent went to`, "could not parse a JSON object", nil},
		{"empty", ``, "no JSON object", nil},
		{"prose only", `I think the agent should look in the drawers.`, "no JSON object", nil},
		// The public parser's leniency (seed/analysis.py, _extract_json_object):
		{"trailing commas", `{"episode_summary": "x", "episode_skill": "Open the drawers before the shelves every time.", "step_skills": {"2": "Open the drawer next to you now.",},}`, "",
			func(s *Skill) bool { return s.EpisodeSkill != "" && s.StepSkills[2] != "" }},
		{"python literal dict", `{'episode_summary': 'x', 'episode_skill': "Don't search the same cabinet twice in a row.", 'step_skills': {2: 'Open the drawer next to you now.'}, 'done': True, 'note': None}`, "",
			func(s *Skill) bool {
				return s.EpisodeSkill == "Don't search the same cabinet twice in a row." && s.StepSkills[2] == "Open the drawer next to you now."
			}},
		{"raw newline inside a string", "{\"episode_summary\": \"x\", \"episode_skill\": \"Open the drawers first,\nthen the shelves, every time.\", \"step_skills\": {}}", "",
			func(s *Skill) bool { return s.EpisodeSkill == "Open the drawers first,\nthen the shelves, every time." }},
		{"fenced object preferred over prose braces", "The {mug} is here.\n```JSON\n{\"episode_summary\": \"x\", \"episode_skill\": \"Take the mug before going to the fridge.\"}\n```", "",
			func(s *Skill) bool { return s.EpisodeSkill == "Take the mug before going to the fridge." }},
		{"the object with episode_skill wins", `{"note": "draft"} then {"episode_summary": "x", "episode_skill": "Heat the egg in the microwave first."}`, "",
			func(s *Skill) bool { return s.EpisodeSkill == "Heat the egg in the microwave first." }},
		{"non-string skill is text", `{"episode_summary": "x", "episode_skill": 42, "step_skills": {}}`, "",
			func(s *Skill) bool { return s.EpisodeSkill == "" && s.EpisodeSummary == "x" }},
		{"missing keys are empty", `{"step_skills": {"4": "Open the cabinet before the drawer."}}`, "",
			func(s *Skill) bool { return s.EpisodeSkill == "" && s.EpisodeSummary == "" && s.StepSkills[4] != "" }},
		{"step skills as list are none, the episode skill stays", `{"episode_summary": "x", "episode_skill": "Open every closed cabinet you pass.", "step_skills": ["a"]}`, "",
			func(s *Skill) bool { return s.EpisodeSkill != "" && len(s.StepSkills) == 0 }},
		{"bad step keys are skipped", `{"episode_summary": "x", "episode_skill": "Open every closed cabinet you pass.", "step_skills": {"first": "Open it now please friend.", " 4 ": "Open the cabinet before the drawer."}}`, "",
			func(s *Skill) bool { return s.EpisodeSkill != "" && len(s.StepSkills) == 1 && s.StepSkills[4] != "" }},
		{"only dots is no skill", `{"episode_summary": "x", "episode_skill": ". . . . . ."}`, "",
			func(s *Skill) bool { return s.EpisodeSkill == "" }},
		{"short texts count as none", `{"episode_summary": "x", "episode_skill": "Be careful.", "step_skills": {"4": "Go."}}`, "",
			func(s *Skill) bool { return s.EpisodeSkill == "" && len(s.StepSkills) == 0 && s.Empty() }},
		{"only candidates, at most K by rank", `{"episode_summary": "x", "episode_skill": "Search the cabinets in order first.", "step_skills": {"1": "Not a candidate step at all.", "2": "Second ranked candidate step advice.", "4": "Top ranked candidate step advice here.", "7": "Third ranked candidate step advice."}}`, "",
			func(s *Skill) bool {
				return len(s.StepSkills) == 2 && s.StepSkills[4] != "" && s.StepSkills[2] != "" && s.StepSkills[1] == ""
			}},
	}
	for _, tt := range tests {
		sk, err := Parse(tt.answer, opt)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%s: err = %v, want %q", tt.name, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if !tt.check(sk) {
			t.Errorf("%s: parsed %+v", tt.name, sk)
		}
	}
}

func trajFor(id string, won bool, steps int) *rollout.Trajectory {
	t := &rollout.Trajectory{ID: id, Won: won, Task: envadapters.Task{ID: "t/" + id, Goal: "put a mug in fridge."}, FirstObservation: "start\n\nYour task is to: put a mug in fridge."}
	for i := 0; i < steps; i++ {
		t.Steps = append(t.Steps, rollout.Step{Action: fmt.Sprint("a", i), Observation: fmt.Sprint("o", i), Valid: true})
	}
	return t
}

func TestRepairPromptSentOnce(t *testing.T) {
	reqs := []Request{{Traj: trajFor("good", true, 2)}, {Traj: trajFor("fixable", false, 2)}, {Traj: trajFor("hopeless", false, 2)}}
	calls := 0
	var repairs []string
	ask := func(_ context.Context, prompts []string) ([]string, error) {
		calls++
		out := make([]string, len(prompts))
		for i, p := range prompts {
			switch {
			case calls == 1 && strings.Contains(p, "Outcome: SUCCESS"):
				out[i] = `{"episode_summary": "ok", "episode_skill": "Go to the fridge and open it first.", "step_skills": {}}`
			case calls == 1:
				out[i] = "I cannot produce JSON, sorry"
			default:
				repairs = append(repairs, p)
				if strings.Contains(p, "I cannot produce JSON") && len(repairs) == 1 {
					out[i] = `{"episode_summary": "fixed", "episode_skill": "Check inside the cabinets before the shelves.", "step_skills": {}}`
				} else {
					out[i] = "still no"
				}
			}
		}
		return out, nil
	}
	recs, err := analyzeWith(context.Background(), "test", 5, 0, reqs, ask, false)
	if err != nil {
		t.Fatal(err)
	}
	if calls != 2 || len(repairs) != 2 {
		t.Fatalf("%d calls, %d repair prompts; want one repair round for the two bad answers", calls, len(repairs))
	}
	if recs[0].Skill == nil || recs[0].Repaired || recs[1].Skill == nil || !recs[1].Repaired || recs[2].Skill != nil || !strings.HasPrefix(recs[2].ParseError, "after repair") {
		t.Fatalf("records: %+v", recs)
	}
	if !strings.Contains(repairs[0], "could not be used") || !strings.Contains(repairs[0], "I cannot produce JSON") {
		t.Errorf("repair prompt %q", repairs[0])
	}
	// Without the repair round: one call, the bad answers are no skill with
	// their first parse error, and the good one is kept.
	calls, repairs = 0, nil
	recs, err = analyzeWith(context.Background(), "test", 5, 0, reqs, ask, true)
	if err != nil {
		t.Fatal(err)
	}
	if calls != 1 || len(repairs) != 0 {
		t.Fatalf("no repair: %d calls, %d repair prompts; want the analysis call alone", calls, len(repairs))
	}
	if recs[0].Skill == nil || recs[1].Skill != nil || recs[1].Repaired || recs[1].ParseError == "" || strings.HasPrefix(recs[1].ParseError, "after repair") {
		t.Fatalf("records without repair: %+v", recs)
	}
}

func TestCriticalSteps(t *testing.T) {
	// Four trajectories of one task share anchor states; returns differ.
	mk := func(id string, obs []string, rewards []float64) *rollout.Trajectory {
		tr := &rollout.Trajectory{ID: id, FirstObservation: "S0"}
		for i := range obs {
			tr.Steps = append(tr.Steps, rollout.Step{Observation: obs[i], Reward: rewards[i]})
		}
		return tr
	}
	group := []*rollout.Trajectory{
		mk("win", []string{"A", "B", "done"}, []float64{0, 0, 1}),
		mk("lose1", []string{"A", "X", "X"}, []float64{0, -0.1, -0.1}),
		mk("lose2", []string{"C", "X", "Y"}, []float64{-0.1, 0, 0}),
		mk("win2", []string{"A", "B", "done"}, []float64{0, 0, 1}),
	}
	got := CriticalSteps(group, CriticalConfig{Gamma: 1, K: 2})
	// Anchor S0 (step 0 of all four) has the largest spread: the losers'
	// first steps fall below its mean. Anchor A (step 1: win, lose1, win2)
	// puts lose1's step 1 below the mean too.
	if len(got["win"]) != 0 || len(got["win2"]) != 0 {
		t.Errorf("winners got critical steps: %v", got)
	}
	// lose1's step 1 falls 0.8 below anchor A's mean, its step 0 0.625 below S0's.
	if fmt.Sprint(got["lose1"]) != "[1 0]" {
		t.Errorf("lose1: %v", got["lose1"])
	}
	if fmt.Sprint(got["lose2"]) != "[0]" {
		t.Errorf("lose2: %v", got["lose2"])
	}
	for id, steps := range got {
		if len(steps) > 2 {
			t.Errorf("%s has %d steps, K=2", id, len(steps))
		}
	}
	if len(CriticalSteps([]*rollout.Trajectory{group[0]}, DefaultCriticalConfig())) != 0 {
		t.Error("a single trajectory has no groups of two")
	}
}

// scriptBackend replies with an admissible action taken from the prompt.
type scriptBackend struct {
	tok *tokenizer.Tokenizer
	eos int
	r   *rand.Rand
}

func (s *scriptBackend) Generate(_ context.Context, reqs []inference.GenRequest) ([]inference.GenResult, error) {
	out := make([]inference.GenResult, len(reqs))
	for i, q := range reqs {
		text, _ := s.tok.Decode(q.Prompt, tokenizer.DecodeOptions{})
		reply := "hmm"
		if k := strings.LastIndex(text, "Admissible actions: "); k >= 0 {
			acts := strings.Split(strings.SplitN(text[k+len("Admissible actions: "):], "\n", 2)[0], "; ")
			reply = "<action>" + acts[s.r.IntN(len(acts))] + "</action>"
		}
		ids, _ := s.tok.Encode(reply)
		if s.r.IntN(2) == 0 {
			ids = append(ids, s.eos)
		}
		out[i] = inference.GenResult{IDs: ids, LogProbs: make([]float64, len(ids))}
	}
	return out, nil
}
func (s *scriptBackend) Score(context.Context, [][]int) ([][]float64, error) { return nil, nil }
func (s *scriptBackend) Release(context.Context) error                       { return nil }
func (s *scriptBackend) Publish(context.Context, string, string) error       { return nil }
func (s *scriptBackend) Health(context.Context) error                        { return nil }
func (s *scriptBackend) Close() error                                        { return nil }

func tinyPolicy(t *testing.T) *rollout.Policy {
	t.Helper()
	tc := tokenizer.DefaultTrainConfig()
	tc.VocabSize = 500
	tok, err := tokenizer.TrainBPE([]string{"You arrive at cabinet 1. Your task is to: put a mug in fridge. <action>go to cabinet 2</action> Skill from experience: Advice for this step:"}, tc)
	if err != nil {
		t.Fatal(err)
	}
	eos, _ := tok.TokenID("<|im_end|>")
	p, err := rollout.NewPolicy(&scriptBackend{tok: tok, eos: eos, r: rand.New(rand.NewPCG(1, 1))}, tok,
		&tokenizer.Config{EOSToken: "<|im_end|>", ChatTemplate: tokenizer.Qwen25ChatTemplate})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestTeacherAlignment: for random skills on random trajectories, in both
// prompt modes, the sampled response ids sit at the mapped positions of
// both sequences, the skills are really in the teacher sequence, and only
// steps with a skill are distilled.
func TestTeacherAlignment(t *testing.T) {
	p := tinyPolicy(t)
	b, _ := envadapters.Lookup(household.Name)
	tasks, _ := b.Tasks(envadapters.Train, 3)
	r := rand.New(rand.NewPCG(9, 9))
	for _, mode := range []string{rollout.ModeChat, rollout.ModeWindow} {
		cfg := rollout.DefaultConfig()
		cfg.Mode, cfg.GroupSize, cfg.EnvOptions = mode, 3, envadapters.Options{"max_steps": "5"}
		run, _ := rollout.NewRunner(cfg, household.Name, b, p, zerolog.Nop())
		trajs, err := run.Run(context.Background(), tasks, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, tr := range trajs {
			sk := &Skill{EpisodeSkill: "Open every closed cabinet before moving on.", StepSkills: map[int]string{}}
			for i := range tr.Steps {
				if r.IntN(2) == 0 {
					sk.StepSkills[i] = fmt.Sprintf("Advice number %d for this particular step.", i)
				}
			}
			for _, m := range []Mode{EpisodeStep, StepOnly, EpisodeOnly} {
				tc, err := BuildTeacher(tr, sk, m, run.Template(), p)
				if err != nil {
					t.Fatalf("%s %s %s: %v", mode, tr.ID, m, err)
				}
				spans := 0
				for _, pair := range tc.Pairs {
					teacherText, _ := p.Tok.Decode(pair.Teacher, tokenizer.DecodeOptions{})
					if m != StepOnly && !strings.Contains(teacherText, sk.EpisodeSkill) {
						t.Fatalf("%s %s: the episode skill is not in the teacher sequence", mode, m)
					}
					for _, s := range pair.Spans {
						spans++
						want := m != StepOnly || sk.StepSkills[s.Step] != ""
						if s.Distill != want {
							t.Errorf("%s %s step %d: distill %v", mode, m, s.Step, s.Distill)
						}
						if !reflect.DeepEqual(pair.Plain[s.PlainStart:s.PlainStart+s.Len], tr.Steps[s.Step].ResponseIDs) {
							t.Fatalf("%s %s step %d: plain span is not the sampled response", mode, m, s.Step)
						}
					}
					if mode == rollout.ModeChat {
						seq, _ := tr.Sequence()
						if !reflect.DeepEqual(pair.Plain, seq) {
							t.Fatalf("%s: the plain sequence is not the trajectory's", tr.ID)
						}
					}
				}
				if spans != len(tr.Steps) {
					t.Fatalf("%d spans for %d steps", spans, len(tr.Steps))
				}
				if tc.Fallbacks != 0 {
					t.Errorf("%s %s: %d fallback placements on household turns, which have the task line", mode, m, tc.Fallbacks)
				}
			}
			// Without the task line (a real AgentGym WebShop page) the
			// episode skill still reaches every window-mode turn, counted
			// as a fallback.
			stripped := *tr
			stripped.Steps = append([]rollout.Step(nil), tr.Steps...)
			for i := range stripped.Steps {
				stripped.Steps[i].UserText = strings.ReplaceAll(stripped.Steps[i].UserText, rollout.TaskLinePrefix, "Goal:")
			}
			tc, err := BuildTeacher(&stripped, &Skill{EpisodeSkill: sk.EpisodeSkill}, EpisodeOnly, run.Template(), p)
			if err != nil {
				t.Fatalf("%s without task line: %v", mode, err)
			}
			wantFallbacks := len(tr.Steps)
			if mode == rollout.ModeChat {
				wantFallbacks = 1 // the episode skill goes into the first turn only
			}
			if tc.Fallbacks != wantFallbacks {
				t.Errorf("%s without task line: %d fallbacks, want %d", mode, tc.Fallbacks, wantFallbacks)
			}
			for _, pair := range tc.Pairs {
				teacherText, _ := p.Tok.Decode(pair.Teacher, tokenizer.DecodeOptions{})
				if !strings.Contains(teacherText, sk.EpisodeSkill) {
					t.Fatalf("%s without task line: the episode skill is missing", mode)
				}
			}
		}
	}
	// A corrupted context is caught.
	tc := &TeacherContext{TrajectoryID: "x", Pairs: []SeqPair{{Plain: []int{1, 2, 3}, Teacher: []int{9, 2, 4}, Spans: []Span{{PlainStart: 1, TeacherStart: 1, Len: 2}}}}}
	if err := tc.Verify(); !errors.Is(err, ErrMisaligned) {
		t.Errorf("misaligned context: %v", err)
	}
}

func TestShuffleIsDerangement(t *testing.T) {
	var sks []*Skill
	for i := 0; i < 10; i++ {
		sks = append(sks, &Skill{EpisodeSkill: fmt.Sprint(i)})
	}
	out := Shuffle(sks, 3)
	for i := range sks {
		if out[i] == sks[i] || out[i] == nil {
			t.Fatalf("position %d kept its own skill or got none", i)
		}
	}
}

// expertTrajectory plays the scripted expert (or a failing policy) and
// records it the way rollout does, without tokens (the oracle reads text).
func expertTrajectory(t *testing.T, task envadapters.Task, fail bool) *rollout.Trajectory {
	b, _ := envadapters.Lookup(household.Name)
	e, _ := b.New(envadapters.Options{"max_steps": "8"})
	ctx := context.Background()
	st, _ := e.Reset(ctx, task)
	tr := &rollout.Trajectory{ID: fmt.Sprintf("%s-%v", task.ID, fail), Task: task, FirstObservation: st.Observation, Mode: rollout.ModeChat}
	x, _ := b.Expert(e)
	for !st.Done {
		a, _ := x.Act()
		if fail {
			a = "look"
		}
		st, _ = e.Step(ctx, a)
		tr.Steps = append(tr.Steps, rollout.Step{Action: a, Observation: st.Observation, Valid: !st.Invalid, Reward: st.Reward, Done: st.Done})
		tr.Return += st.Reward
	}
	tr.Won = st.Won
	return tr
}

// TestOracleSkillsGolden: the oracle's skills describe what the trajectory
// showed — a successful one names where the object was found.
func TestOracleSkillsGolden(t *testing.T) {
	b, _ := envadapters.Lookup(household.Name)
	tasks, _ := b.Tasks(envadapters.Train, 6)
	var reqs []Request
	for _, task := range tasks {
		reqs = append(reqs, Request{Traj: expertTrajectory(t, task, false), Candidates: nil})
		reqs = append(reqs, Request{Traj: expertTrajectory(t, task, true), Candidates: []int{1, 3}})
	}
	recs, err := (&OracleAnalyzer{K: 5}).Analyze(context.Background(), reqs)
	if err != nil {
		t.Fatal(err)
	}
	var b2 strings.Builder
	for i, rec := range recs {
		tr := reqs[i].Traj
		if rec.Skill == nil || rec.ParseError != "" {
			t.Fatalf("%s: no skill (%s)", rec.TrajectoryID, rec.ParseError)
		}
		if tr.Won {
			// Where the object was found, as the trajectory shows it.
			for _, s := range tr.Steps {
				if strings.HasPrefix(s.Observation, "You pick up the ") {
					from := strings.Fields(s.Observation[strings.Index(s.Observation, " from the ")+len(" from the "):])[0]
					if !strings.Contains(rec.Skill.EpisodeSkill+rec.Skill.EpisodeSummary, from) {
						t.Errorf("%s: skill %q does not say the object was in a %s", rec.TrajectoryID, rec.Skill.EpisodeSkill, from)
					}
					break
				}
			}
		} else if len(rec.Skill.StepSkills) != 2 {
			t.Errorf("%s: step skills %v for candidates [1 3]", rec.TrajectoryID, rec.Skill.StepSkills)
		}
		fmt.Fprintf(&b2, "%s (%s, won=%v)\n  summary: %s\n  skill:   %s\n", tr.ID, tr.Task.Goal, tr.Won, rec.Skill.EpisodeSummary, rec.Skill.EpisodeSkill)
		for _, k := range sortedSteps(rec.Skill.StepSkills) {
			fmt.Fprintf(&b2, "  step %d:  %s\n", k, rec.Skill.StepSkills[k])
		}
	}
	path := filepath.Join("testdata", "oracle_household.golden")
	if *update {
		os.MkdirAll("testdata", 0o755)
		if err := os.WriteFile(path, []byte(b2.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update once)", err)
	}
	if b2.String() != string(want) {
		t.Errorf("oracle skills differ from %s; rerun with -update if intended:\n%s", path, b2.String())
	}
}

func TestStoreRoundTrip(t *testing.T) {
	recs := []Record{
		{TrajectoryID: "a", Analyzer: "oracle", Raw: "{}", Skill: &Skill{EpisodeSkill: "Do it like this every time.", StepSkills: map[int]string{3: "Now go to the fridge please."}}, CriticalSteps: []int{3}},
		{TrajectoryID: "b", Analyzer: "self", Raw: "garbage", ParseError: "no JSON object in the answer"},
	}
	path := filepath.Join(t.TempDir(), "skills.jsonl")
	if err := WriteStore(path, recs); err != nil {
		t.Fatal(err)
	}
	back, err := ReadStore(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(recs, back) {
		t.Errorf("round trip:\n%+v\n%+v", recs, back)
	}
}

// TestOracleOtherEnvs: webshop and searchqa expert episodes get skills that
// follow their family recipes.
func TestOracleOtherEnvs(t *testing.T) {
	for _, env := range []string{"webshop", "searchqa"} {
		b, err := envadapters.Lookup(env)
		if err != nil {
			t.Fatal(err)
		}
		tasks, _ := b.Tasks(envadapters.EvalSeen, 4)
		var reqs []Request
		for _, task := range tasks {
			e, _ := b.New(nil)
			ctx := context.Background()
			st, _ := e.Reset(ctx, task)
			x, _ := b.Expert(e)
			tr := &rollout.Trajectory{ID: task.ID, Task: task, FirstObservation: st.Observation}
			for !st.Done {
				a, _ := x.Act()
				st, _ = e.Step(ctx, a)
				tr.Steps = append(tr.Steps, rollout.Step{Action: a, Observation: st.Observation, Valid: !st.Invalid, Reward: st.Reward})
			}
			tr.Won, tr.Score = st.Won, st.Score
			reqs = append(reqs, Request{Traj: tr, Candidates: []int{0}})
		}
		recs, err := (&OracleAnalyzer{K: 5}).Analyze(context.Background(), reqs)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range recs {
			if r.Skill == nil || r.Skill.EpisodeSkill == "" || len(r.Skill.StepSkills) != 1 || !reqs[i].Traj.Won {
				t.Fatalf("%s: %+v", r.TrajectoryID, r)
			}
			want := map[string]string{"webshop": "option", "searchqa": "search"}[env]
			if !strings.Contains(strings.ToLower(r.Skill.EpisodeSkill), want) {
				t.Errorf("%s: skill %q does not mention %q", r.TrajectoryID, r.Skill.EpisodeSkill, want)
			}
		}
	}
}

// The LLM critical-step selector: the prompt asks the analyzer to choose
// (no candidate list), any step may be chosen, at most K are kept, and the
// record's critical steps are the chosen ones.
func TestLLMChoosesCriticalSteps(t *testing.T) {
	tr := trajFor("choose", false, 6)
	var prompt string
	ask := func(_ context.Context, prompts []string) ([]string, error) {
		prompt = prompts[0]
		return []string{`{"episode_summary": "lost", "episode_skill": "Open the fridge before taking anything else.",
			"step_skills": {"4": "Open the fridge here, before you take the mug.", "1": "Look inside the cabinet before you leave it.", "5": "Put the mug down in the fridge right now."}}`}, nil
	}
	all := []int{0, 1, 2, 3, 4, 5}
	recs, err := analyzeWith(context.Background(), "test", 2, 0, []Request{{Traj: tr, Candidates: all, ChooseSteps: true}}, ask, true)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(prompt, "Choose the critical steps yourself: at most 2") || strings.Contains(prompt, "Candidate critical steps") {
		t.Errorf("prompt does not ask the analyzer to choose:\n%s", prompt)
	}
	if recs[0].Skill == nil || len(recs[0].Skill.StepSkills) != 2 || fmt.Sprint(recs[0].CriticalSteps) != "[1 4]" {
		t.Fatalf("record %+v, want two step skills kept (the first two steps by rank: 1 and 4) as the critical steps", recs[0])
	}
}

// Skill mode episode_only asks what the public code asks: the summary and
// the episode skill (workflow or avoidance rules), no critical steps; an
// answer that does not parse, or whose skill is under five words, gets
// one retry with the prompt, the error, the answer and the exact shape.
func TestEpisodeOnlyAnalysis(t *testing.T) {
	won, lost := trajFor("won", true, 3), trajFor("lost", false, 3)
	pw, pl := EpisodeOnlyPrompt(won), EpisodeOnlyPrompt(lost)
	for _, p := range []string{pw, pl} {
		for _, want := range []string{"episode_summary", "episode_skill", `{"episode_summary": "string", "episode_skill": "string"}`, "0. action:", "2. action:"} {
			if !strings.Contains(p, want) {
				t.Errorf("prompt lacks %q:\n%s", want, p)
			}
		}
		if strings.Contains(p, "step_skills") || strings.Contains(p, "critical") {
			t.Errorf("an episode-only prompt asks for step skills:\n%s", p)
		}
	}
	if !strings.Contains(pw, "workflow") || strings.Contains(pw, "avoidance") || !strings.Contains(pl, "avoidance rules") || !strings.Contains(pw, "Outcome: success") || !strings.Contains(pl, "Outcome: failure") {
		t.Errorf("success and failure prompts:\n%s\n---\n%s", pw, pl)
	}
	reqs := []Request{{Traj: won, EpisodeOnly: true}, {Traj: lost, EpisodeOnly: true}, {Traj: trajFor("short", false, 2), EpisodeOnly: true}}
	var retries []string
	calls := 0
	ask := func(_ context.Context, prompts []string) ([]string, error) {
		calls++
		out := make([]string, len(prompts))
		for i, p := range prompts {
			switch {
			case calls == 1 && strings.Contains(p, "Outcome: success"):
				out[i] = `{"episode_summary": "won", "episode_skill": "Open the fridge before taking the mug.", "step_skills": {"1": "this is ignored here entirely"}}`
			case calls == 1 && strings.Contains(p, "2. action:"): // the lost episode (3 steps)
				out[i] = `{"episode_summary": "lost", "episode_skill": "Too short."}`
			case calls == 1:
				out[i] = "no JSON here"
			default:
				retries = append(retries, p)
				out[i] = `{"episode_summary": "retried", "episode_skill": "Check the countertop before the cabinets next time."}`
			}
		}
		return out, nil
	}
	recs, err := analyzeWith(context.Background(), "test", 5, 0, reqs, ask, false)
	if err != nil {
		t.Fatal(err)
	}
	if calls != 2 || len(retries) != 2 {
		t.Fatalf("%d calls, %d retries; want one retry round for the short skill and the bad answer", calls, len(retries))
	}
	if recs[0].Skill == nil || len(recs[0].Skill.StepSkills) != 0 || recs[0].Repaired || recs[1].Skill == nil || !recs[1].Repaired || recs[2].Skill == nil {
		t.Fatalf("records: %+v", recs)
	}
	for _, r := range retries {
		if !strings.HasPrefix(r, "Analyze the agent episode") || !strings.Contains(r, "Return ONLY one valid JSON object") || !strings.Contains(r, `{"episode_summary": "string", "episode_skill": "string"}`) {
			t.Errorf("retry prompt:\n%s", r)
		}
	}
	if !strings.Contains(retries[0]+retries[1], "shorter than 5 words") {
		t.Error("the retry of a short skill does not say why")
	}
}

// The random-skill baseline draws a skill from anywhere in the iteration:
// with trajectories in rollout order (8 groups of 8, groupmates adjacent)
// about 7 in 63 draws land in the own group by chance; a derangement that
// hands each trajectory its neighbour's skill would give 7 in 8 a
// groupmate's (about the same task), which is no control at all.
func TestShuffleCrossesGroups(t *testing.T) {
	const groups, size = 8, 8
	var sks []*Skill
	for i := 0; i < groups*size; i++ {
		sks = append(sks, &Skill{EpisodeSkill: fmt.Sprint(i)})
	}
	index := map[*Skill]int{}
	for i, s := range sks {
		index[s] = i
	}
	same := 0
	for seed := uint64(0); seed < 20; seed++ {
		out := Shuffle(sks, seed)
		seen := map[*Skill]bool{}
		for i, s := range out {
			if seen[s] {
				t.Fatalf("seed %d: skill %d handed out twice", seed, index[s])
			}
			seen[s] = true
			if index[s]/size == i/size {
				same++
			}
		}
	}
	if share := float64(same) / (20 * groups * size); share > 0.25 {
		t.Errorf("%.0f%% of shuffled skills come from a groupmate, want about %.0f%%", 100*share, 100*7.0/63)
	}
}

// The contrastive baseline's skill has the own skill's shape and the
// donor's words.
func TestTransplant(t *testing.T) {
	own := &Skill{EpisodeSkill: "own", StepSkills: map[int]string{1: "own 1", 4: "own 4", 6: "own 6"}}
	tests := []struct {
		name  string
		own   *Skill
		donor *Skill
		want  *Skill
	}{
		{"step texts cycled in step order", own,
			&Skill{EpisodeSummary: "s", EpisodeSkill: "d", StepSkills: map[int]string{9: "d9", 2: "d2"}},
			&Skill{EpisodeSummary: "s", EpisodeSkill: "d", StepSkills: map[int]string{1: "d2", 4: "d9", 6: "d2"}}},
		{"donor without step skills lends its episode skill", own,
			&Skill{EpisodeSkill: "d"},
			&Skill{EpisodeSkill: "d", StepSkills: map[int]string{1: "d", 4: "d", 6: "d"}}},
		{"donor without episode skill lends its first step skill", own,
			&Skill{StepSkills: map[int]string{3: "d3", 0: "d0"}},
			&Skill{EpisodeSkill: "d0", StepSkills: map[int]string{1: "d0", 4: "d3", 6: "d0"}}},
		{"no episode skill where own has none", &Skill{StepSkills: map[int]string{2: "own 2"}},
			&Skill{EpisodeSkill: "d", StepSkills: map[int]string{5: "d5"}},
			&Skill{StepSkills: map[int]string{2: "d5"}}},
		{"empty donor", own, &Skill{}, nil},
		{"nil donor", own, nil, nil},
		{"empty own", &Skill{StepSkills: map[int]string{}}, &Skill{EpisodeSkill: "d"}, nil},
	}
	for _, tc := range tests {
		got := Transplant(tc.own, tc.donor)
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// Donors never lends a trajectory a skill about its own task, draws from
// every other task with a skill, and is deterministic per seed.
func TestDonors(t *testing.T) {
	task := []string{"a", "a", "b", "b", "c", "c"}
	has := []bool{true, true, true, false, true, true}
	hits := map[int]int{}
	for seed := uint64(0); seed < 50; seed++ {
		d := Donors(task, has, seed)
		if !reflect.DeepEqual(d, Donors(task, has, seed)) {
			t.Fatal("not deterministic")
		}
		for i, j := range d {
			if j < 0 || task[j] == task[i] || !has[j] {
				t.Fatalf("seed %d: trajectory %d (task %s) got donor %d", seed, i, task[i], j)
			}
			hits[j]++
		}
	}
	if hits[3] != 0 || hits[0] == 0 || hits[2] == 0 || hits[5] == 0 {
		t.Errorf("donor counts %v: want every skilled trajectory drawn, never 3", hits)
	}
	if d := Donors([]string{"a", "a", "b"}, []bool{true, true, false}, 1); d[0] != -1 || d[1] != -1 || d[2] < 0 {
		t.Errorf("one task with skills: %v, want -1 -1 and a donor for the other task", d)
	}
}

// A transplanted skill goes to the same places: BuildTeacher distils the
// same tokens, and only the words differ.
func TestTransplantDistilsTheSameTokens(t *testing.T) {
	p := tinyPolicy(t)
	b, _ := envadapters.Lookup(household.Name)
	tasks, _ := b.Tasks(envadapters.Train, 2)
	for _, mode := range []string{rollout.ModeChat, rollout.ModeWindow} {
		cfg := rollout.DefaultConfig()
		cfg.Mode, cfg.GroupSize, cfg.EnvOptions = mode, 2, envadapters.Options{"max_steps": "5"}
		run, _ := rollout.NewRunner(cfg, household.Name, b, p, zerolog.Nop())
		trajs, err := run.Run(context.Background(), tasks, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		donor := &Skill{EpisodeSkill: "Check the shelves near the door first, every time.", StepSkills: map[int]string{7: "Never open the microwave when the task is about a mug."}}
		for _, tr := range trajs {
			own := &Skill{EpisodeSkill: "Open every closed cabinet before moving on.", StepSkills: map[int]string{0: "Go to the countertop first here.", len(tr.Steps) - 1: "Put the object down right away."}}
			tc, err := BuildTeacher(tr, own, EpisodeStep, run.Template(), p)
			if err != nil {
				t.Fatal(err)
			}
			base, err := BuildTeacher(tr, Transplant(own, donor), EpisodeStep, run.Template(), p)
			if err != nil {
				t.Fatal(err)
			}
			if len(tc.Pairs) != len(base.Pairs) {
				t.Fatalf("%s %s: %d pairs, baseline %d", mode, tr.ID, len(tc.Pairs), len(base.Pairs))
			}
			for i := range tc.Pairs {
				a, b := tc.Pairs[i], base.Pairs[i]
				if len(a.Spans) != len(b.Spans) {
					t.Fatalf("%s %s pair %d: spans differ", mode, tr.ID, i)
				}
				for j := range a.Spans {
					x, y := a.Spans[j], b.Spans[j]
					if x.Step != y.Step || x.PlainStart != y.PlainStart || x.Len != y.Len || x.Distill != y.Distill {
						t.Fatalf("%s %s pair %d: span %+v, baseline %+v", mode, tr.ID, i, x, y)
					}
				}
				text, _ := p.Tok.Decode(b.Teacher, tokenizer.DecodeOptions{})
				if strings.Contains(text, own.EpisodeSkill) || !strings.Contains(text, donor.EpisodeSkill) {
					t.Fatalf("%s %s pair %d: the baseline carries the own skill's words, or not the donor's", mode, tr.ID, i)
				}
			}
		}
	}
}

// MinWords 1 keeps any non-empty skill (the public policy_vllm
// self-analysis); an answer without an episode skill keeps its step
// skills when no repair round follows, with the reason recorded.
func TestParseMinWordsAndPartialAnswers(t *testing.T) {
	short := `{"episode_summary": "x", "episode_skill": "Open drawers first.", "step_skills": {"1": "Look left."}}`
	for _, tt := range []struct {
		min       int
		wantSkill string
		wantSteps int
	}{{0, "", 0}, {5, "", 0}, {1, "Open drawers first.", 1}, {3, "Open drawers first.", 0}} {
		sk, err := Parse(short, ParseOptions{Candidates: []int{1}, MaxStep: 5, MinWords: tt.min})
		if err != nil || sk.EpisodeSkill != tt.wantSkill || len(sk.StepSkills) != tt.wantSteps {
			t.Errorf("MinWords %d: %+v, %v; want skill %q and %d step skills", tt.min, sk, err, tt.wantSkill, tt.wantSteps)
		}
	}
	tr := trajFor("partial", false, 3)
	ask := func(_ context.Context, prompts []string) ([]string, error) {
		return []string{`{"episode_summary": "x", "episode_skill": "", "step_skills": {"2": "Open the cabinet before the drawer."}}`}, nil
	}
	recs, err := analyzeWith(context.Background(), "test", 5, 0, []Request{{Traj: tr, Candidates: []int{2}}}, ask, true)
	if err != nil {
		t.Fatal(err)
	}
	if recs[0].Skill == nil || recs[0].Skill.StepSkills[2] == "" || !strings.Contains(recs[0].ParseError, "episode_skill") {
		t.Fatalf("record %+v", recs[0])
	}
}

// Parse never panics and, when it finds a skill, keeps only candidates'
// step skills, at most K.
func FuzzParse(f *testing.F) {
	for _, s := range []string{`{"episode_summary": "x", "episode_skill": "Open the drawers before the shelves.", "step_skills": {"2": "Open it now, first of all."}}`,
		"```json\n{'episode_skill': 'Take the mug first, then go.', 'step_skills': {2: 'x y z w v',},}\n```", `{'a': [1, 2.5e3, -4, True, None, "x\u00e9"], 'b': (1,)}`, `{"a": "unterminated`, `{{{{`, `{'a': 'b' 'c'}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, answer string) {
		sk, err := Parse(answer, ParseOptions{Candidates: []int{2, 5}, MaxStep: 1})
		if err != nil {
			return
		}
		if len(sk.StepSkills) > 1 {
			t.Fatalf("%d step skills with K 1", len(sk.StepSkills))
		}
		for k := range sk.StepSkills {
			if k != 2 && k != 5 {
				t.Fatalf("step skill for non-candidate %d", k)
			}
		}
	})
}
