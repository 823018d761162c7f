package household

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/seedctl/seedctl/envadapters"
)

var update = flag.Bool("update", false, "rewrite testdata golden transcripts")

func newEnv(t testing.TB) *Env {
	t.Helper()
	b, err := envadapters.Lookup(Name)
	if err != nil {
		t.Fatal(err)
	}
	e, err := b.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return e.(*Env)
}

// runExpert plays one task with the expert and returns the transcript.
func runExpert(t testing.TB, e *Env, task envadapters.Task) (string, bool, int) {
	t.Helper()
	ctx := context.Background()
	st, err := e.Reset(ctx, task)
	if err != nil {
		t.Fatal(err)
	}
	x, err := builtin{}.Expert(e)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n", st.Observation)
	for !st.Done {
		a, err := x.Act()
		if err != nil {
			t.Fatalf("%s: %v\n%s", task.ID, err, b.String())
		}
		admissible := false
		for _, ad := range st.Admissible {
			admissible = admissible || ad == a
		}
		if !admissible {
			t.Fatalf("%s: expert action %q is not admissible (%v)\n%s", task.ID, a, st.Admissible, b.String())
		}
		if st, err = e.Step(ctx, a); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "> %s\n%s\n", a, st.Observation)
	}
	return b.String(), st.Won, e.steps
}

// TestExpertSolvesEverySplit: the scripted expert wins every task it is
// given, in every split, within the 30-step limit.
func TestExpertSolvesEverySplit(t *testing.T) {
	e := newEnv(t)
	n := 600
	if testing.Short() {
		n = 60
	}
	for _, split := range envadapters.Splits {
		tasks, err := builtin{}.Tasks(split, n)
		if err != nil {
			t.Fatal(err)
		}
		maxSteps, byFam := 0, map[string]int{}
		for _, task := range tasks {
			tr, won, steps := runExpert(t, e, task)
			if !won {
				t.Fatalf("%s (%s) not solved:\n%s", task.ID, task.Family, tr)
			}
			maxSteps = max(maxSteps, steps)
			byFam[task.Family]++
		}
		t.Logf("%s: expert solved %d/%d tasks, longest %d steps, families %v", split, n, n, maxSteps, byFam)
		if len(byFam) != 6 {
			t.Errorf("%s covers %d families, want 6", split, len(byFam))
		}
	}
}

// TestRandomPolicyIsWeak reports a uniformly random admissible-action
// policy's success per family; it must stay low for the tasks to mean
// anything.
func TestRandomPolicyIsWeak(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	tasks, _ := builtin{}.Tasks(envadapters.EvalSeen, 300)
	r := rand.New(rand.NewPCG(1, 2))
	wins, totals := map[string]int{}, map[string]int{}
	all := 0
	for _, task := range tasks {
		st, _ := e.Reset(ctx, task)
		for !st.Done {
			st, _ = e.Step(ctx, st.Admissible[r.IntN(len(st.Admissible))])
		}
		totals[task.Family]++
		if st.Won {
			wins[task.Family]++
			all++
		}
	}
	for _, f := range Families {
		t.Logf("random policy, %s: %d/%d", f, wins[f], totals[f])
	}
	if rate := float64(all) / float64(len(tasks)); rate > 0.15 {
		t.Errorf("random policy wins %.0f%% of tasks: too easy", 100*rate)
	}
}

func TestGoldenTranscripts(t *testing.T) {
	e := newEnv(t)
	for _, split := range envadapters.Splits {
		tasks, _ := builtin{}.Tasks(split, 6)
		var b strings.Builder
		for _, task := range tasks {
			tr, _, _ := runExpert(t, e, task)
			fmt.Fprintf(&b, "=== %s (%s, difficulty %d)\n%s\n", task.ID, task.Family, task.Difficulty, tr)
		}
		path := filepath.Join("testdata", string(split)+".golden")
		if *update {
			if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run go test -update once)", err)
		}
		if b.String() != string(want) {
			t.Errorf("%s transcripts differ from %s (same seed must give the same tasks); rerun with -update if the change is intended", split, path)
		}
	}
}

func TestSplitsAreDisjointAndHoldOut(t *testing.T) {
	train := map[string]bool{}
	for i := 0; i < 4000; i++ {
		train[Signature(envadapters.Train, i)] = true
	}
	for i := 0; i < splitSizes[envadapters.EvalSeen]; i++ {
		if train[Signature(envadapters.EvalSeen, i)] {
			t.Fatalf("eval_seen task %d is also a training task", i)
		}
	}
	seenLayouts := map[string]bool{}
	for i := 0; i < 500; i++ {
		w := generate(envadapters.Train, i, 0)
		seenLayouts[w.layout] = true
		for _, o := range w.objects {
			if unseenObjects[o.typ] {
				t.Fatalf("train task %d contains held-out object %s", i, o.typ)
			}
		}
	}
	heldOutGoal := 0
	for i := 0; i < 500; i++ {
		w := generate(envadapters.EvalUnseen, i, 0)
		if seenLayouts[w.layout] {
			t.Fatalf("eval_unseen task %d uses the training layout %s", i, w.layout)
		}
		if unseenObjects[w.goal.obj] {
			heldOutGoal++
		}
	}
	if heldOutGoal == 0 {
		t.Error("no eval_unseen task is about a held-out object type")
	}
	t.Logf("eval_unseen: %d/500 tasks about held-out object types; train layouts %v", heldOutGoal, seenLayouts)
	// Variety: many distinct rooms.
	if len(train) < 3990 {
		t.Errorf("only %d distinct rooms among 4000 training tasks", len(train))
	}
}

func TestFeedbackText(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	task := taskFor(envadapters.Train, 2) // a heat task
	st, _ := e.Reset(ctx, task)
	if !strings.HasPrefix(st.Observation, "You are in the middle of a room. Looking quickly around you, you see a ") ||
		!strings.Contains(st.Observation, "\n\nYour task is to: ") {
		t.Fatalf("intro %q", st.Observation)
	}
	for _, tc := range []struct{ action, want string }{
		{"dance", NothingHappens},
		{"", NothingHappens},
		{"take mug 99 from cabinet 1", NothingHappens},
		{"inventory", "You are not carrying anything."},
	} {
		st, _ = e.Step(ctx, tc.action)
		if st.Observation != tc.want {
			t.Errorf("%q → %q, want %q", tc.action, st.Observation, tc.want)
		}
		if (tc.want == NothingHappens) != st.Invalid {
			t.Errorf("%q: invalid=%v", tc.action, st.Invalid)
		}
	}
	// Going somewhere gives ALFWorld's arrival text.
	var fridge string
	for _, rc := range e.w.receps {
		if rc.typ == "fridge" {
			fridge = rc.name
		}
	}
	if fridge != "" {
		st, _ = e.Step(ctx, "Go to "+strings.ToUpper(fridge)+".")
		if st.Observation != fmt.Sprintf("You arrive at %s. The %s is closed.", fridge, fridge) {
			t.Errorf("arrival %q", st.Observation)
		}
		st, _ = e.Step(ctx, "open "+fridge)
		if !strings.HasPrefix(st.Observation, "You open the "+fridge+". The "+fridge+" is open. In it, you see ") {
			t.Errorf("open %q", st.Observation)
		}
	}
}

func TestStepLimitAndOptions(t *testing.T) {
	b := builtin{}
	e, err := b.New(envadapters.Options{"max_steps": "3"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	st, _ := e.Reset(ctx, taskFor(envadapters.Train, 0))
	for i := 0; i < 3; i++ {
		st, _ = e.Step(ctx, "look")
	}
	if !st.Done || st.Won || st.Reward != 0 {
		t.Errorf("after 3 steps of 3: %+v", st)
	}
	for _, bad := range []envadapters.Options{{"max_steps": "0"}, {"max_steps": "x"}, {"color": "red"}} {
		if _, err := b.New(bad); err == nil {
			t.Errorf("options %v accepted", bad)
		}
	}
	if _, err := e.Reset(ctx, envadapters.Task{Split: "test", Index: 0}); err == nil {
		t.Error("reset to an unknown split accepted")
	}
	if _, err := (&Env{maxSteps: 5}).Step(ctx, "look"); err != ErrNotReset {
		t.Errorf("step before reset: %v", err)
	}
}

// FuzzStep: no action string, however strange, panics or counts as valid
// unless it names something real.
func FuzzStep(f *testing.F) {
	for _, s := range []string{"go to cabinet 1", "take mug 1 from countertop 1", "move  apple 1 to", "heat with", "use", "examine", "\x00\xff", "ｇｏ ｔｏ", strings.Repeat("open ", 1000), "put apple 1 in/on fridge 1", "😀"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, action string) {
		e := newEnv(t)
		ctx := context.Background()
		st, _ := e.Reset(ctx, taskFor(envadapters.Train, len(action)%50))
		st, err := e.Step(ctx, action)
		if err != nil {
			t.Fatalf("Step(%q): %v", action, err)
		}
		if st.Invalid && st.Observation != NothingHappens {
			t.Fatalf("invalid %q gave %q", action, st.Observation)
		}
		if st.Observation == "" {
			t.Fatalf("empty observation for %q", action)
		}
	})
}

func BenchmarkStep(b *testing.B) {
	e := newEnv(b)
	ctx := context.Background()
	r := rand.New(rand.NewPCG(3, 4))
	st, _ := e.Reset(ctx, taskFor(envadapters.Train, 0))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if st.Done {
			st, _ = e.Reset(ctx, taskFor(envadapters.Train, i%1000))
		}
		st, _ = e.Step(ctx, st.Admissible[r.IntN(len(st.Admissible))])
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "steps/s")
}

// TestSearchExpert: the observation-only expert solves most tasks within
// the step limit, and noise lowers that, as demonstrations should.
func TestSearchExpert(t *testing.T) {
	ctx := context.Background()
	rate := func(split envadapters.Split, noise float64, mk func(envadapters.Env, uint64, float64) (*SearchExpert, error)) (float64, float64) {
		tasks, _ := builtin{}.Tasks(split, 300)
		e := newEnv(t)
		wins, steps := 0, 0
		for i, task := range tasks {
			st, _ := e.Reset(ctx, task)
			x, err := mk(e, uint64(i), noise)
			if err != nil {
				t.Fatal(err)
			}
			for !st.Done {
				a, err := x.Act()
				if err != nil {
					t.Fatal(err)
				}
				st, _ = e.Step(ctx, a)
			}
			if st.Won {
				wins++
				steps += e.steps
			}
		}
		return float64(wins) / float64(len(tasks)), float64(steps) / float64(max(wins, 1))
	}
	for _, split := range envadapters.Splits {
		clean, cleanSteps := rate(split, 0, NewSearchExpert)
		noisy, _ := rate(split, 0.2, NewSearchExpert)
		listing, listingSteps := rate(split, 0, NewListingSearchExpert)
		t.Logf("%s: search expert wins %.0f%% (mean %.1f steps when it wins); with 20%% random actions %.0f%%; in listing order %.0f%% (%.1f steps)",
			split, 100*clean, cleanSteps, 100*noisy, 100*listing, listingSteps)
		if clean < 0.75 || noisy >= clean {
			t.Errorf("%s: search expert %.2f, noisy %.2f", split, clean, noisy)
		}
	}
}

// TestMistakeDoesNothing: the demonstrations' mistakes are actions the env
// answers with "Nothing happens." and that change nothing.
func TestMistakeDoesNothing(t *testing.T) {
	b := builtin{}
	tasks, err := b.Tasks(envadapters.Train, 40)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	ctx := context.Background()
	seen := 0
	for _, task := range tasks {
		env, _ := b.New(nil)
		st, _ := env.Reset(ctx, task)
		x, _ := b.Expert(env)
		for !st.Done {
			h := env.(*Env)
			if m := h.Mistake(r); m != "" {
				seen++
				before := h.admissible()
				got, err := env.Step(ctx, m)
				if err != nil || !got.Invalid || got.Observation != NothingHappens {
					t.Fatalf("%s: mistake %q was not a no-op: %+v %v", task.ID, m, got, err)
				}
				if !slices.Equal(before, got.Admissible) {
					t.Fatalf("%s: mistake %q changed the admissible actions", task.ID, m)
				}
			}
			a, err := x.Act()
			if err != nil {
				t.Fatal(err)
			}
			st, _ = env.Step(ctx, a)
		}
	}
	if seen == 0 {
		t.Fatal("no mistakes generated")
	}
}

// reversedListing is the room's receptacles in reverse listing order.
func reversedListing(e *Env) []string {
	var order []string
	for k := len(e.w.receps) - 1; k >= 0; k-- {
		order = append(order, e.w.receps[k].name)
	}
	return order
}

// TestOrderedSearchExpert: the expert searches in the order it is given
// (here the listing reversed), still solving most tasks.
func TestOrderedSearchExpert(t *testing.T) {
	ctx := context.Background()
	tasks, _ := builtin{}.Tasks(envadapters.Train, 100)
	e := newEnv(t)
	wins := 0
	for i, task := range tasks {
		st, err := e.Reset(ctx, task)
		if err != nil {
			t.Fatal(err)
		}
		order := reversedListing(e)
		x, err := NewOrderedSearchExpert(e, uint64(i), 0, order)
		if err != nil {
			t.Fatal(err)
		}
		var visits []string
		for !st.Done {
			a, err := x.Act()
			if err != nil {
				t.Fatal(err)
			}
			if p, ok := strings.CutPrefix(a, "go to "); ok && e.held == nil {
				visits = append(visits, p)
			}
			st, _ = e.Step(ctx, a)
		}
		if st.Won {
			wins++
		}
		// Empty-handed, the places it goes to for the first time follow the order.
		at, been := -1, map[string]bool{}
		for _, v := range visits {
			if been[v] {
				continue
			}
			been[v] = true
			k := slices.Index(order, v)
			if k < at {
				t.Fatalf("task %s: first went to %s (rank %d) after rank %d; visits %v", task.ID, v, k, at, visits)
			}
			at = k
		}
		if i == 0 && (len(visits) == 0 || visits[0] != order[0]) {
			t.Fatalf("task %s: first visit %v, want %s", task.ID, visits, order[0])
		}
	}
	if wins < 60 {
		t.Errorf("ordered search expert won %d of 100 training tasks, want most", wins)
	}
}

// TestPlacementPrior: the placement_prior option moves objects to where
// their type is usually kept, in the share asked, and changes nothing
// else — the same room, task line and family, and the expert still wins.
func TestPlacementPrior(t *testing.T) {
	b := builtin{}
	for _, bad := range []envadapters.Options{{OptPlacementPrior: "-0.1"}, {OptPlacementPrior: "1.5"}, {OptPlacementPrior: "often"}, {OptPlacementPrior: "NaN"}} {
		if _, err := b.New(bad); err == nil || !strings.Contains(err.Error(), OptPlacementPrior) {
			t.Errorf("options %v: error %v, want one naming %s", bad, err, OptPlacementPrior)
		}
	}
	// usual: the share of goal-type objects (which never start on the
	// target) placed where their type is usually kept.
	usual := func(w *world) (at, all int) {
		var where []*recep
		for _, rc := range w.receps {
			if !noObjects[rc.typ] && rc.typ != w.goal.target {
				where = append(where, rc)
			}
		}
		pref := preferredPlace(w.goal.obj, where)
		for _, o := range w.objects {
			if o.typ == w.goal.obj {
				all++
				if o.loc == pref {
					at++
				}
			}
		}
		return at, all
	}
	const n = 600
	for _, tc := range []struct {
		prior    float64
		min, max float64
	}{{0, 0, 0.15}, {0.5, 0.5, 0.65}, {0.8, 0.8, 0.9}, {1, 1, 1}} {
		at, all := 0, 0
		for i := 0; i < n; i++ {
			u, w := generate(envadapters.Train, i, 0), generate(envadapters.Train, i, tc.prior)
			if u.goal != w.goal || u.layout != w.layout || len(u.receps) != len(w.receps) || len(u.objects) != len(w.objects) {
				t.Fatalf("prior %g changed task %d beyond placement: %+v vs %+v", tc.prior, i, u.goal, w.goal)
			}
			for j := range u.receps {
				if u.receps[j].name != w.receps[j].name {
					t.Fatalf("prior %g changed the receptacles of task %d", tc.prior, i)
				}
			}
			for _, o := range w.objects {
				if o.typ == w.goal.obj && o.loc.typ == w.goal.target {
					t.Fatalf("prior %g put task %d's %s on its target", tc.prior, i, o.name)
				}
			}
			a, b := usual(w)
			at, all = at+a, all+b
		}
		share := float64(at) / float64(all)
		t.Logf("prior %g: %.1f%% of %d goal-type objects start where their type is usually kept", tc.prior, 100*share, all)
		if share < tc.min || share > tc.max {
			t.Errorf("prior %g: %.3f of goal-type objects at their usual place, want %.2f–%.2f", tc.prior, share, tc.min, tc.max)
		}
	}
	// The habit belongs to the object type, not the room: if an object
	// type is kept on X in one room and on Y in another, one of the two
	// rooms lacks the other's receptacle type.
	type seen struct {
		at    string
		types map[string]bool
	}
	byType := map[string][]seen{}
	for i := 0; i < n; i++ {
		w := generate(envadapters.Train, i, 1)
		types := map[string]bool{}
		for _, rc := range w.receps {
			types[rc.typ] = true
		}
		for _, o := range w.objects {
			if o.lamp || o.typ == w.goal.obj {
				continue // goal objects avoid the target, so theirs may differ
			}
			for _, s := range byType[o.typ] {
				if s.at != o.loc.typ && s.types[o.loc.typ] && types[s.at] {
					t.Fatalf("task %d: %s kept in %s, in another room with both types in %s", i, o.typ, o.loc.typ, s.at)
				}
			}
			byType[o.typ] = append(byType[o.typ], seen{o.loc.typ, types})
		}
	}
	// The expert wins with the prior too, and Reset reports the task.
	e, err := b.New(envadapters.Options{OptPlacementPrior: "0.8"})
	if err != nil {
		t.Fatal(err)
	}
	tasks, err := b.Tasks(envadapters.EvalSeen, 60)
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		if tr, won, _ := runExpert(t, e.(*Env), task); !won {
			t.Fatalf("%s not solved with the prior:\n%s", task.ID, tr)
		}
		if got := e.(*Env).Task(); got.Goal != task.Goal || got.ID != task.ID {
			t.Fatalf("Reset reports %+v for %+v", got, task)
		}
	}
}

// TestRandomSearchExpert: the expert that picks its next place at random
// among those not searched yet solves about as many tasks as the ordered
// one (the order of a search does not know where things are), never goes
// back to a place it searched while empty-handed, and opens one task in
// many places over seeds.
func TestRandomSearchExpert(t *testing.T) {
	ctx := context.Background()
	tasks, _ := builtin{}.Tasks(envadapters.Train, 100)
	e := newEnv(t)
	wins, firstPlaces := 0, 0
	for i, task := range tasks {
		firsts := map[string]bool{}
		for seed := range 8 {
			st, err := e.Reset(ctx, task)
			if err != nil {
				t.Fatal(err)
			}
			x, err := NewRandomSearchExpert(e, uint64(100*i+seed), 0)
			if err != nil {
				t.Fatal(err)
			}
			searched, first := map[string]bool{}, ""
			for !st.Done {
				a, err := x.Act()
				if err != nil {
					t.Fatal(err)
				}
				if p, ok := strings.CutPrefix(a, "go to "); ok && e.held == nil {
					if first == "" {
						first = p
					}
					if searched[p] && x.visibleGoalPlace() != p {
						t.Fatalf("task %s seed %d: went back to %s, searched already", task.ID, seed, p)
					}
				}
				st, _ = e.Step(ctx, a)
				if rc := e.at; rc != nil && (!rc.openable || rc.open) {
					searched[rc.name] = true
				}
			}
			if st.Won {
				wins++
			}
			firsts[first] = true
		}
		firstPlaces += len(firsts)
	}
	rate, meanFirsts := float64(wins)/float64(8*len(tasks)), float64(firstPlaces)/float64(len(tasks))
	t.Logf("random search expert wins %.0f%% of %d episodes; %.1f distinct first places per task over 8 seeds", 100*rate, 8*len(tasks), meanFirsts)
	if rate < 0.6 || meanFirsts < 4 {
		t.Errorf("random search expert: wins %.2f, %.1f distinct first places per task", rate, meanFirsts)
	}
}

// visibleGoalPlace names where the expert has seen a goal object ("" if
// nowhere): going back there is no repeat of a search.
func (x *SearchExpert) visibleGoalPlace() string {
	if _, rc := x.visibleGoal(); rc != nil {
		return rc.name
	}
	return ""
}

// TestMixedSearchExpert: following the order on a share of its search
// steps, the expert's first destination is the order's first place about
// that often (plus its share of the random draws), and it still solves
// most tasks; a share outside [0, 1] is refused.
func TestMixedSearchExpert(t *testing.T) {
	ctx := context.Background()
	tasks, _ := builtin{}.Tasks(envadapters.Train, 100)
	e := newEnv(t)
	first, wins, n := 0, 0, 0
	for i, task := range tasks {
		for seed := range 4 {
			st, err := e.Reset(ctx, task)
			if err != nil {
				t.Fatal(err)
			}
			order := reversedListing(e)
			x, err := NewMixedSearchExpert(e, uint64(10*i+seed), 0, order, 0.6, 0)
			if err != nil {
				t.Fatal(err)
			}
			a, _ := x.Act()
			if a == "go to "+order[0] {
				first++
			}
			for !st.Done {
				st, _ = e.Step(ctx, a)
				if !st.Done {
					a, _ = x.Act()
				}
			}
			if st.Won {
				wins++
			}
			n++
		}
	}
	share, rate := float64(first)/float64(n), float64(wins)/float64(n)
	t.Logf("mixed search expert (follows the order 60%%): first destination the order's first %.0f%%, wins %.0f%%", 100*share, 100*rate)
	if share < 0.5 || share > 0.75 || rate < 0.6 {
		t.Errorf("first destination in order %.2f (want about 0.6), wins %.2f", share, rate)
	}
	if _, err := NewMixedSearchExpert(e, 1, 0, nil, 1.5, 0); err == nil {
		t.Error("a follow share of 1.5 was accepted")
	}
	// Drawing among the first three candidates only: every first
	// destination is one of them.
	for i, task := range tasks[:40] {
		if _, err := e.Reset(ctx, task); err != nil {
			t.Fatal(err)
		}
		var order []string
		for _, rc := range e.w.receps {
			order = append(order, rc.name)
		}
		x, err := NewMixedSearchExpert(e, uint64(i), 0, order, 0, 3)
		if err != nil {
			t.Fatal(err)
		}
		a, _ := x.Act()
		if p, _ := strings.CutPrefix(a, "go to "); !slices.Contains(order[:3], p) {
			t.Fatalf("task %s: first destination %q is not among the first three of %v", task.ID, a, order[:3])
		}
	}
}

// TestStateLine checks the Step's State line along the expert's clean
// task (train/1 in train.golden) and that a rejected action leaves it as
// it was: arriving at the countertop with the plate reads differently
// from arriving empty-handed, which the observation alone does not show.
func TestStateLine(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	st, err := e.Reset(ctx, taskFor(envadapters.Train, 1))
	if err != nil {
		t.Fatal(err)
	}
	if want := "at: middle of the room; carrying: nothing; lamp: off"; st.State != want {
		t.Errorf("reset state %q, want %q", st.State, want)
	}
	for _, tc := range []struct{ action, want string }{
		{"go to cabinet 4", "at: cabinet 4; carrying: nothing; lamp: off"},
		{"open cabinet 4", "at: cabinet 4; carrying: nothing; lamp: off"},
		{"take plate 3 from cabinet 4", "at: cabinet 4; carrying: plate 3; lamp: off"},
		{"dance", "at: cabinet 4; carrying: plate 3; lamp: off"},
		{"go to sinkbasin 1", "at: sinkbasin 1; carrying: plate 3; lamp: off"},
		{"clean plate 3 with sinkbasin 1", "at: sinkbasin 1; carrying: plate 3 (clean); lamp: off"},
		{"go to countertop 1", "at: countertop 1; carrying: plate 3 (clean); lamp: off"},
		{"move plate 3 to countertop 1", "at: countertop 1; carrying: nothing; lamp: off"},
	} {
		if st, err = e.Step(ctx, tc.action); err != nil {
			t.Fatal(err)
		}
		if st.State != tc.want {
			t.Errorf("after %q: state %q, want %q", tc.action, st.State, tc.want)
		}
	}
	if !st.Won {
		t.Errorf("the expert's actions did not win train/1")
	}
	// The lamp task (train/4): using the lamp turns the line's lamp on.
	if _, err := e.Reset(ctx, taskFor(envadapters.Train, 4)); err != nil {
		t.Fatal(err)
	}
	for _, a := range []string{"go to sidetable 1", "use desklamp 1"} {
		if st, err = e.Step(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	if !strings.HasSuffix(st.State, "lamp: on") {
		t.Errorf("after using the lamp: state %q", st.State)
	}
}
