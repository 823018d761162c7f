package webshop

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/seedctl/seedctl/envadapters"
)

func TestCatalog(t *testing.T) {
	s, err := getShop()
	if err != nil {
		t.Fatal(err)
	}
	if len(s.catalog) < 1000 || len(s.byASIN) != len(s.catalog) {
		t.Fatalf("%d products, %d distinct ASINs", len(s.catalog), len(s.byASIN))
	}
	for _, p := range s.catalog[:50] {
		if len(p.attrs) < 2 || len(p.options) == 0 || p.price <= 0 || p.title == "" {
			t.Fatalf("product %+v", p)
		}
	}
}

func TestExpertScores100EverySplit(t *testing.T) {
	e, err := builtin{}.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, split := range envadapters.Splits {
		tasks, _ := builtin{}.Tasks(split, 300)
		maxSteps := 0
		for _, task := range tasks {
			st, err := e.Reset(ctx, task)
			if err != nil {
				t.Fatal(err)
			}
			x, _ := builtin{}.Expert(e)
			steps := 0
			var log []string
			for !st.Done {
				a, _ := x.Act()
				st, _ = e.Step(ctx, a)
				steps++
				log = append(log, a)
			}
			if !st.Won || st.Score != 100 || st.Reward != 1 {
				t.Fatalf("%s (%s): %+v after %v", task.ID, task.Goal, st, log)
			}
			maxSteps = max(maxSteps, steps)
		}
		t.Logf("%s: expert scored 100 on 300/300, longest %d steps", split, maxSteps)
	}
}

func TestUnseenSplitHoldsOutCategories(t *testing.T) {
	for _, split := range envadapters.Splits {
		tasks, _ := builtin{}.Tasks(split, 200)
		for _, task := range tasks {
			unseen := task.Family == "lamps" || task.Family == "pillow covers"
			if unseen != (split == envadapters.EvalUnseen) {
				t.Fatalf("%s is about %s", task.ID, task.Family)
			}
		}
	}
	s, _ := getShop()
	train := map[string]bool{}
	for i := 0; i < 2000; i++ {
		train[goalFor(s, envadapters.Train, i).target.asin] = true
	}
	for i := 0; i < 500; i++ {
		if train[goalFor(s, envadapters.EvalSeen, i).target.asin] {
			t.Fatalf("eval_seen task %d targets a training product", i)
		}
	}
}

func TestRewardFormula(t *testing.T) {
	s, _ := getShop()
	g := goalFor(s, envadapters.Train, 3)
	full, _ := reward(g, g.target, g.options)
	if full != 1 {
		t.Fatalf("target with goal options scores %v", full)
	}
	none, _ := reward(g, g.target, map[string]string{})
	want := float64(len(g.attrs)+1) / float64(len(g.attrs)+len(g.options)+1)
	if none != want {
		t.Errorf("no options chosen: %v, want %v", none, want)
	}
	var other *product
	for _, p := range s.catalog {
		if p.cat != g.target.cat {
			other = p
			break
		}
	}
	if r, _ := reward(g, other, nil); r > 0.1 {
		t.Errorf("a product of another category scores %v", r)
	}
}

func TestRandomPolicyScoresLow(t *testing.T) {
	e, _ := builtin{}.New(nil)
	ctx := context.Background()
	tasks, _ := builtin{}.Tasks(envadapters.EvalSeen, 200)
	r := rand.New(rand.NewPCG(5, 6))
	wins, total := 0, 0.0
	for _, task := range tasks {
		st, _ := e.Reset(ctx, task)
		for !st.Done {
			a := st.Admissible[r.IntN(len(st.Admissible))]
			if strings.HasPrefix(a, "search[") {
				a = "search[" + task.Goal + "]"
			}
			st, _ = e.Step(ctx, a)
		}
		total += st.Score
		if st.Won {
			wins++
		}
	}
	t.Logf("random clicks: %d/200 full scores, mean score %.1f", wins, total/200)
	if wins > 20 {
		t.Errorf("random clicking wins %d/200", wins)
	}
}

func TestPagesAndInvalidActions(t *testing.T) {
	e, _ := builtin{}.New(nil)
	ctx := context.Background()
	tasks, _ := builtin{}.Tasks(envadapters.Train, 1)
	st, _ := e.Reset(ctx, tasks[0])
	if !strings.HasPrefix(st.Observation, "WebShop [SEP] Your task is to: ") || !strings.HasSuffix(st.Observation, "[SEP] Search") {
		t.Fatalf("search page %q", st.Observation)
	}
	for _, bad := range []string{"click[buy now]", "buy it", "search[]", "click[b0nonexist]"} {
		st, _ = e.Step(ctx, bad)
		if !st.Invalid || !strings.HasPrefix(st.Observation, "Invalid action") {
			t.Errorf("%q → %+v", bad, st)
		}
	}
	st, _ = e.Step(ctx, "SEARCH[ running shoes ]")
	if st.Invalid || !strings.Contains(st.Observation, "Page 1 (Total results: ") || !strings.Contains(st.Observation, "Next >") {
		t.Fatalf("results %q", st.Observation)
	}
}

func FuzzStep(f *testing.F) {
	for _, s := range []string{"search[shoes]", "click[next >]", "click[", "search[" + strings.Repeat("a", 600) + "]", "\x00", "click[buy now]"} {
		f.Add(s)
	}
	e, _ := builtin{}.New(nil)
	tasks, _ := builtin{}.Tasks(envadapters.Train, 1)
	f.Fuzz(func(t *testing.T, action string) {
		e.Reset(context.Background(), tasks[0])
		e.Step(context.Background(), "search[shoes]")
		st, err := e.Step(context.Background(), action)
		if err != nil || st.Observation == "" {
			t.Fatalf("%q → %+v %v", action, st, err)
		}
	})
}

func BenchmarkStep(b *testing.B) {
	e, _ := builtin{}.New(nil)
	tasks, _ := builtin{}.Tasks(envadapters.Train, 100)
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		st, _ := e.Reset(ctx, tasks[i%100])
		x, _ := builtin{}.Expert(e)
		for !st.Done {
			a, _ := x.Act()
			st, _ = e.Step(ctx, a)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "episodes/s")
}
