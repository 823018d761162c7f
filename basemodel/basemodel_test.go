package basemodel

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/seedctl/seedctl/envadapters"
	"github.com/seedctl/seedctl/envadapters/household"
	"github.com/seedctl/seedctl/rollout"
	"github.com/seedctl/seedctl/skills"
	"github.com/seedctl/seedctl/tokenizer"
	"github.com/seedctl/seedctl/trainer"
)

func smallCorpus(t *testing.T, n int) ([]Episode, Recipe) {
	t.Helper()
	r, err := DefaultRecipe(household.Name, "tiny")
	if err != nil {
		t.Fatal(err)
	}
	r.Corpus.Episodes = n
	b, _ := envadapters.Lookup(household.Name)
	eps, err := GenerateCorpus(context.Background(), b, r.Corpus, nil)
	if err != nil {
		t.Fatal(err)
	}
	return eps, r
}

// TestCorpus: only training tasks, deterministic, hints where asked and
// consistent with the demonstrated actions.
func TestCorpus(t *testing.T) {
	eps, r := smallCorpus(t, 120)
	again, _ := smallCorpus(t, 120)
	if !reflect.DeepEqual(eps, again) {
		t.Fatal("the same seed gave a different corpus")
	}
	hinted, won := 0, 0
	for _, e := range eps {
		if e.Task.Split != envadapters.Train {
			t.Fatalf("corpus episode from split %s", e.Task.Split)
		}
		if e.Won {
			won++
		}
		if e.EpisodeHint == "" {
			continue
		}
		hinted++
		// The hint names where the demonstration took the object.
		for _, s := range e.Steps {
			if strings.HasPrefix(s.After, "You pick up the ") {
				from := strings.TrimSuffix(s.After[strings.Index(s.After, " from the ")+len(" from the "):], ".")
				if !strings.Contains(e.EpisodeHint, from) {
					t.Errorf("%s: hint %q does not name %s, where the object was taken", e.Task.ID, e.EpisodeHint, from)
				}
				break
			}
		}
		for _, s := range e.Steps {
			if s.StepHint != "" && strings.HasPrefix(s.Action, "go to ") && !strings.Contains(s.StepHint, strings.TrimPrefix(s.Action, "go to ")) {
				t.Errorf("step hint %q does not match action %q", s.StepHint, s.Action)
			}
		}
	}
	share := float64(hinted) / float64(len(eps))
	t.Logf("%d episodes, %d won, %d hinted", len(eps), won, hinted)
	if share < r.Corpus.HintShare-0.15 || share > r.Corpus.HintShare+0.15 {
		t.Errorf("hinted share %.2f, recipe %.2f", share, r.Corpus.HintShare)
	}
}

// TestEncodeMatchesRolloutPrompts: each window-mode example is the prompt a
// rollout would send (with the hints inserted) plus the reply and EOS, and
// only the reply and EOS are trained on.
func TestEncodeMatchesRolloutPrompts(t *testing.T) {
	eps, r := smallCorpus(t, 12)
	tc := tokenizer.DefaultTrainConfig()
	tc.VocabSize = 600
	tok, err := tokenizer.TrainBPE(append(Texts(eps), tokenizer.Qwen25ChatTemplate), tc)
	if err != nil {
		t.Fatal(err)
	}
	p, err := rollout.NewPolicy(nil, tok, &tokenizer.Config{EOSToken: "<|im_end|>", ChatTemplate: tokenizer.Qwen25ChatTemplate})
	if err != nil {
		t.Fatal(err)
	}
	tmpl := rollout.TemplateFor(household.Name)
	ex, _, err := Encode(eps, p, tmpl, rollout.ModeWindow, r.Window)
	if err != nil {
		t.Fatal(err)
	}
	k := 0
	for _, e := range eps {
		var past []rollout.Step
		for _, s := range e.Steps {
			if s.Random {
				// Noise actions are context for later steps, never targets.
				past = append(past, rollout.Step{Action: s.Action, Observation: s.After})
				continue
			}
			user := rollout.InsertSkills(rollout.WindowText(tmpl, e.FirstObs, past, r.Window, s.Obs, s.Admissible), tmpl.ActionRequest, e.EpisodeHint, s.StepHint)
			prompt, _ := p.StartIDs(e.System, user)
			resp, _ := tok.Encode(s.Response)
			want := append(append(append([]int(nil), prompt...), resp...), p.EOS)
			if !reflect.DeepEqual(ex[k].IDs, want) {
				t.Fatalf("example %d is not the rollout prompt + reply", k)
			}
			for i, l := range ex[k].Loss {
				if l != (i >= len(prompt)) {
					t.Fatalf("example %d: loss mark %v at %d (prompt %d tokens)", k, l, i, len(prompt))
				}
			}
			past = append(past, rollout.Step{Action: s.Action, Observation: s.After})
			k++
		}
		if e.AnalysisPrompt != "" {
			prompt, _ := p.StartIDs("", e.AnalysisPrompt)
			ans, _ := tok.Encode(e.AnalysisAnswer)
			want := append(append(append([]int(nil), prompt...), ans...), p.EOS)
			if !reflect.DeepEqual(ex[k].IDs, want) || ex[k].Loss[len(prompt)-1] || !ex[k].Loss[len(prompt)] {
				t.Fatalf("example %d is not the analysis prompt + skill JSON", k)
			}
			k++
		}
	}
	if k != len(ex) {
		t.Fatalf("%d examples for %d steps", len(ex), k)
	}

	// Repeated examples (rare decisions ×2, hinted first steps ×4) and the
	// same examples once, weighing as many copies.
	repeated, _, err := EncodeRepeated(eps, p, tmpl, rollout.ModeWindow, r.Window, 2, false)
	if err != nil {
		t.Fatal(err)
	}
	weighted, _, err := EncodeRepeated(eps, p, tmpl, rollout.ModeWindow, r.Window, 2, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(weighted) != len(ex) || len(repeated) <= len(ex) {
		t.Fatalf("%d plain, %d repeated, %d weighted examples", len(ex), len(repeated), len(weighted))
	}
	at := 0
	for i, w := range weighted {
		if !reflect.DeepEqual(w.IDs, ex[i].IDs) {
			t.Fatalf("weighted example %d differs from the plain one", i)
		}
		n := int(max(w.Weight, 1))
		for c := 0; c < n; c++ {
			if at >= len(repeated) || !reflect.DeepEqual(repeated[at].IDs, w.IDs) {
				t.Fatalf("weighted example %d (weight %v) is not %d copies in the repeated corpus", i, w.Weight, n)
			}
			at++
		}
	}
	if at != len(repeated) {
		t.Errorf("weights add up to %d examples, the repeated corpus has %d", at, len(repeated))
	}
}

// TestEnsureBuildsOnceAndReuses builds a very small model, then reuses it.
func TestEnsureBuildsOnceAndReuses(t *testing.T) {
	r, _ := DefaultRecipe(household.Name, "tiny")
	r.Corpus.Episodes, r.SFT.Epochs, r.VocabSize, r.Hidden, r.Layers, r.Inter = 20, 0.2, 500, 32, 1, 64
	r.DAgger = DAggerConfig{} // TestRefineMatchesBuildWithDAgger covers refined recipes
	dir := filepath.Join(t.TempDir(), "base")
	got, built, err := Ensure(context.Background(), r, dir, zerolog.Nop(), nil)
	if err != nil || !built || got != dir {
		t.Fatalf("first Ensure: %v %v %v", got, built, err)
	}
	for _, f := range []string{"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "recipe.json"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("missing %s", f)
		}
	}
	if _, built, err := Ensure(context.Background(), r, dir, zerolog.Nop(), nil); err != nil || built {
		t.Fatalf("second Ensure rebuilt (%v)", err)
	}
	if rec, ok := ReadRecipe(dir); !ok || rec.Key() != r.Key() || rec.Mode != rollout.ModeWindow {
		t.Errorf("recipe.json: %+v", rec)
	}
	r2 := r
	r2.Seed = 2
	if r2.Key() == r.Key() {
		t.Error("a changed recipe keeps its key")
	}
	var report BuildReport
	if b, err := os.ReadFile(filepath.Join(dir, "build.json")); err != nil || json.Unmarshal(b, &report) != nil {
		t.Fatalf("build.json: %v", err)
	}
	if report.Examples == 0 || report.HeldOut.PlainSteps == 0 || report.FinalLoss <= 0 {
		t.Errorf("build.json lacks the build's measurements: %+v", report)
	}
}

// TestBuildIsReproducible: the same recipe builds bit-identical weights
// (same checkpoint hash) in one process, run after run.
func TestBuildIsReproducible(t *testing.T) {
	r, _ := DefaultRecipe(household.Name, "tiny")
	r.Corpus.Episodes, r.SFT.Epochs, r.VocabSize, r.Hidden, r.Layers, r.Inter, r.HeldOutEpisodes = 12, 1, 500, 32, 2, 64, -1
	r.SFT.BatchTokens, r.SFT.MaxLen = 2048, 2048
	r.DAgger = DefaultDAgger()
	r.DAgger.Rounds, r.DAgger.Episodes, r.DAgger.MaxSteps = 1, 2, 6
	var hashes []string
	for i := 0; i < 2; i++ {
		dir := filepath.Join(t.TempDir(), "base")
		if err := Build(context.Background(), r, dir, zerolog.Nop(), nil); err != nil {
			t.Fatal(err)
		}
		h, err := WeightsHash(dir)
		if err != nil {
			t.Fatal(err)
		}
		hashes = append(hashes, h)
	}
	if hashes[0] != hashes[1] {
		t.Fatalf("the same recipe built different weights: %v", hashes)
	}
}

// Skill-writing examples: the analysis prompt of the demonstrated episode
// and an answer that parses as skill JSON with the episode's outcome.
func TestCorpusAnalysisExamples(t *testing.T) {
	r, _ := DefaultRecipe(household.Name, "tiny")
	r.Corpus.Episodes, r.Corpus.AnalysisShare = 12, 1
	b, _ := envadapters.Lookup(household.Name)
	eps, err := GenerateCorpus(context.Background(), b, r.Corpus, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range eps {
		if e.AnalysisPrompt == "" || !strings.Contains(e.AnalysisPrompt, e.Task.Goal) {
			t.Fatalf("%s: analysis prompt %q", e.Task.ID, e.AnalysisPrompt)
		}
		sk, err := skills.Parse(e.AnalysisAnswer, skills.ParseOptions{MaxStep: skills.DefaultMaxStepSkills, Candidates: nil})
		if err != nil || sk.EpisodeSkill == "" {
			t.Errorf("%s: answer %q: %v", e.Task.ID, e.AnalysisAnswer, err)
		}
	}
}

// Refinement on the model's own states: Refine on a built base gives the
// same weights as building the recipe with the refinement in it, and
// build.json reports each round.
func TestRefineMatchesBuildWithDAgger(t *testing.T) {
	if testing.Short() {
		t.Skip("builds three tiny models")
	}
	r, _ := DefaultRecipe(household.Name, "tiny")
	r.Corpus.Episodes, r.SFT.Epochs, r.VocabSize, r.Hidden, r.Layers, r.Inter, r.HeldOutEpisodes = 12, 1, 500, 32, 2, 64, -1
	r.SFT.BatchTokens, r.SFT.MaxLen = 2048, 2048
	r.DAgger = DAggerConfig{}
	dc := DefaultDAgger()
	dc.Rounds, dc.Episodes, dc.MaxSteps = 2, 3, 8
	tmp := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", tmp)
	base, _, err := Ensure(context.Background(), r, "", zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	// Ensure of the refined recipe refines the cached base: no pre-training.
	rr := r
	rr.DAgger = dc
	var stages []string
	refined, built, err := Ensure(context.Background(), rr, "", zerolog.Nop(), func(stage string, _, _ int, _ string) { stages = append(stages, stage) })
	if err != nil || !built {
		t.Fatalf("Ensure of the refined recipe: built %v, %v", built, err)
	}
	if strings.Contains(strings.Join(stages, " "), "pretrain") || !strings.Contains(strings.Join(stages, " "), "dagger 2/2: train") {
		t.Errorf("Ensure of the refined recipe ran the stages %v, want refinement without pre-training", stages)
	}
	if err := Refine(context.Background(), refined, filepath.Join(tmp, "twice"), dc, zerolog.Nop(), nil); err == nil {
		t.Error("refining a refined model was accepted")
	}
	direct := filepath.Join(tmp, "direct")
	r.DAgger = dc
	if err := Build(context.Background(), r, direct, zerolog.Nop(), nil); err != nil {
		t.Fatal(err)
	}
	h0, _ := WeightsHash(base)
	h1, _ := WeightsHash(refined)
	h2, _ := WeightsHash(direct)
	if h1 != h2 || h0 == h1 {
		t.Errorf("weights: base %.12s, refined %.12s, built with refinement %.12s (want the last two equal, the first different)", h0, h1, h2)
	}
	rec, ok := ReadRecipe(refined)
	if !ok || rec.Key() != r.Key() {
		t.Errorf("the refined model's recipe key %s, want %s", rec.Key(), r.Key())
	}
	var report BuildReport
	if b, err := os.ReadFile(filepath.Join(refined, "build.json")); err != nil || json.Unmarshal(b, &report) != nil {
		t.Fatalf("build.json: %v", err)
	}
	if len(report.DAgger) != 2 {
		t.Fatalf("build.json has %d refinement rounds, want 2", len(report.DAgger))
	}
	for i, d := range report.DAgger {
		if d.Episodes != 3 || d.Steps < 3 || d.Examples == 0 || d.Agree < 0 || d.Agree > 1 || d.Replayed != d.Examples {
			t.Errorf("round %d: %+v", i+1, d)
		}
	}
}

// A played episode's labels are what the searching expert says in the
// states the policy's own actions led to: replaying the taken actions with
// a fresh expert gives the same labels, and every target is the label.
func TestPlayedEpisodesAreLabelledByTheExpert(t *testing.T) {
	r, _ := DefaultRecipe(household.Name, "tiny")
	r.Corpus.Episodes, r.VocabSize = 8, 400
	r.DAgger = DefaultDAgger()
	r.DAgger.Episodes, r.DAgger.MaxSteps = 4, 12
	pc, err := prepare(context.Background(), r, nil, nil, zerolog.Nop(), func(string, int, int, string) {})
	if err != nil {
		t.Fatal(err)
	}
	cfg := &trainer.ModelConfig{Architectures: []string{"Qwen2ForCausalLM"}, ModelType: "qwen2", VocabSize: pc.tok.VocabSize(),
		HiddenSize: 32, IntermediateSize: 64, NumHiddenLayers: 1, NumAttentionHeads: 2, NumKeyValueHeads: 1,
		MaxPositionEmbeddings: 4096, RMSNormEps: 1e-6, RopeTheta: 1e6, HiddenAct: "silu", InitializerRange: 0.02, TieWordEmbeddings: true}
	m, err := trainer.InitRandom(cfg, trainer.ModelOptions{}, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	eps, st, err := playRelabelled(context.Background(), r, m, pc, 0, rand.New(rand.NewPCG(1, 2)), func(int, int) {})
	if err != nil {
		t.Fatal(err)
	}
	if len(eps) != 4 || st.Episodes != 4 || st.Steps == 0 {
		t.Fatalf("played %d episodes, stats %+v", len(eps), st)
	}
	for _, ep := range eps {
		if ep.Task.Split != envadapters.Train || ep.Task.Index < r.Corpus.Episodes+heldOutEpisodes {
			t.Errorf("played %s: not a training task past the corpus and the held-out demonstrations", ep.Task.ID)
		}
		env, _ := pc.b.New(envadapters.Options{"max_steps": "12"})
		first, _ := env.Reset(context.Background(), ep.Task)
		// The labels follow the order the prompts' places line shows.
		x, _ := household.NewOrderedSearchExpert(env, 1, 0, household.PlaceOrder(first.Observation, ""))
		for k, s := range ep.Steps {
			want, err := x.Act()
			if err != nil {
				t.Fatal(err)
			}
			if s.Target != want || s.Response != "<action>"+want+"</action>" {
				t.Fatalf("%s step %d: target %q, response %q; the expert says %q", ep.Task.ID, k, s.Target, s.Response, want)
			}
			if s.Random && s.Action != s.Target {
				t.Errorf("%s step %d: a step the policy got wrong is not trained on", ep.Task.ID, k)
			}
			obs, err := env.Step(context.Background(), s.Action)
			if err != nil {
				t.Fatal(err)
			}
			if obs.Observation != s.After {
				t.Fatalf("%s step %d: replay diverged", ep.Task.ID, k)
			}
		}
		env.Close()
	}
}

func TestGoesToListedPlace(t *testing.T) {
	tmpl, err := rollout.TemplateFor(household.Name).WithPlacesLine(household.PlacesAll)
	if err != nil {
		t.Fatal(err)
	}
	turn := "Your task is to: put a mug in shelf.\nNow: You are in the middle of a room.\nAdmissible actions: look\nPlaces not searched yet: cabinet 2, fridge 1, shelf 10.\n" + tmpl.ActionRequest
	for reply, want := range map[string]bool{
		"<action>go to fridge 1</action>":  true,
		"<action>go to shelf 10</action>":  true,
		"<action>go to shelf 1</action>":   false, // a prefix of a listed place
		"<action>go to cabinet 3</action>": false,
		"<action>look</action>":            false,
		"go to":                            false,
	} {
		if got := goesToListedPlace(tmpl, reply, turn); got != want {
			t.Errorf("%q: %v, want %v", reply, got, want)
		}
	}
	few := "Now: x\nPlaces not searched yet: cabinet 2, fridge 1, shelf 10 and 7 more.\n" + tmpl.ActionRequest
	if !goesToListedPlace(tmpl, "<action>go to shelf 10</action>", few) || goesToListedPlace(tmpl, "<action>go to shelf 7</action>", few) {
		t.Error("a short line: its last candidate or a place it does not name")
	}
	if goesToListedPlace(tmpl, "<action>go to fridge 1</action>", "no places line") {
		t.Error("a turn without a places line accepted a go to")
	}
}

// TestReorderedTextCraftDemo: a reordered copy lists the same commands in
// another order in its first observation and in the step that shows it,
// keeps the actions, and drops the skill-writing example; the original is
// untouched.
func TestReorderedTextCraftDemo(t *testing.T) {
	first := "Crafting commands:\ncraft 4 oak planks using 1 oak logs\ncraft 1 loom using 2 planks, 2 string\ncraft 4 stick using 2 planks\ncraft 1 torch using 1 stick, 1 coal\n\nGoal: craft loom."
	ep := Episode{FirstObs: first, AnalysisPrompt: "p", AnalysisAnswer: "a", Steps: []DemoStep{
		{Obs: first, Action: "get 1 oak logs", After: "Got 1 oak logs"},
		{Obs: "Got 1 oak logs", Action: "craft 4 oak planks using 1 oak logs", After: "Crafted 4 minecraft:oak_planks"},
	}}
	r := rand.New(rand.NewPCG(1, 2))
	seen := map[string]bool{}
	for range 6 {
		c := reordered(ep, r)
		seen[c.FirstObs] = true
		if c.Steps[0].Obs != c.FirstObs || c.Steps[1].Obs != "Got 1 oak logs" || c.Steps[0].Action != ep.Steps[0].Action || c.AnalysisPrompt != "" {
			t.Fatalf("copy %+v", c)
		}
		got, want := strings.Split(c.FirstObs, "\n"), strings.Split(first, "\n")
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("copy lists other lines:\n%s", c.FirstObs)
		}
	}
	if len(seen) < 3 || ep.Steps[0].Obs != first || ep.AnalysisPrompt != "p" {
		t.Errorf("%d distinct orders in 6 copies; original %+v", len(seen), ep)
	}
	if err := (CorpusConfig{Episodes: 1, MaxSteps: 1, Orders: -1}).Validate(); err == nil || !strings.Contains(err.Error(), "orders") {
		t.Errorf("negative orders: %v", err)
	}
}
