package searchqa

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seedctl/seedctl/envadapters"
)

func play(t *testing.T, e envadapters.Env, task envadapters.Task) (envadapters.Step, []string) {
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
	var obs []string
	for !st.Done {
		a, _ := x.Act()
		if st, err = e.Step(ctx, a); err != nil {
			t.Fatal(err)
		}
		obs = append(obs, st.Observation)
	}
	return st, obs
}

// TestExpertSolvesEverySplit: the expert answers every task correctly, and
// its searches really retrieve the passages that hold the answer.
func TestExpertSolvesEverySplit(t *testing.T) {
	e, err := builtin{}.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, split := range envadapters.Splits {
		tasks, err := builtin{}.Tasks(split, 200)
		if err != nil {
			t.Fatal(err)
		}
		fam := map[string]int{}
		for _, task := range tasks {
			st, obs := play(t, e, task)
			if !st.Won || st.Reward != 1 || st.Score != 1 {
				t.Fatalf("%s (%s): %+v", task.ID, task.Goal, st)
			}
			q := e.(*Env).q
			info := strings.Join(obs, "\n")
			if !strings.Contains(info, q.answer) {
				t.Fatalf("%s: the retrieved passages never mention the answer %q:\n%s", task.ID, q.answer, info)
			}
			fam[task.Family]++
		}
		t.Logf("%s: 200/200 solved, families %v", split, fam)
	}
}

func TestSplitsUseDifferentSubjectsAndCompositions(t *testing.T) {
	w, _ := getWorld()
	train := map[string]bool{}
	for i := 0; i < 2000; i++ {
		q := makeQuestion(w, envadapters.Train, i)
		train[q.text] = true
		if evalEntity(q.subject) {
			t.Fatalf("train question %d is about an eval entity", i)
		}
	}
	for i := 0; i < 500; i++ {
		q := makeQuestion(w, envadapters.EvalSeen, i)
		if train[q.text] {
			t.Fatalf("eval_seen question %q is also a training question", q.text)
		}
		u := makeQuestion(w, envadapters.EvalUnseen, i)
		if u.family != TwoHop {
			t.Fatalf("eval_unseen question %q is not 2-hop", u.text)
		}
		for _, c := range compositions {
			if c.first == u.path[0] && c.second == u.path[1] && !c.unseen {
				t.Fatalf("eval_unseen question %q uses a training composition", u.text)
			}
		}
	}
}

func TestScoringAndParsing(t *testing.T) {
	if !ExactMatch("The Silent Kalo.", "silent kalo") || ExactMatch("kalo", "silent kalo") {
		t.Error("exact match normalization")
	}
	if f := F1("silent kalo river", "the silent kalo"); f < 0.79 || f > 0.81 {
		t.Errorf("F1 = %v, want 0.8", f)
	}
	e, _ := builtin{}.New(envadapters.Options{"max_steps": "3"})
	ctx := context.Background()
	tasks, _ := builtin{}.Tasks(envadapters.EvalSeen, 1)
	e.Reset(ctx, tasks[0])
	for _, bad := range []string{"", "I think it is Paris", "<search></search>", "<answer>unclosed"} {
		st, _ := e.Step(ctx, bad)
		if !st.Invalid || st.Observation != InvalidFeedback {
			t.Errorf("%q → %+v", bad, st)
		}
		if st.Done {
			break
		}
	}
	e.Reset(ctx, tasks[0])
	st, _ := e.Step(ctx, "<think>no idea</think> <answer> Nowhere </answer>")
	if !st.Done || st.Won || st.Reward != 0 {
		t.Errorf("wrong answer: %+v", st)
	}
	e.Reset(ctx, tasks[0])
	st, _ = e.Step(ctx, "<SEARCH> "+strings.Repeat("x", 5000)+" </SEARCH>")
	if !strings.HasPrefix(st.Observation, "<information>") {
		t.Errorf("long query: %q", st.Observation)
	}
}

// TestRetrieverClientAgainstOwnServer: the built-in corpus served over
// Search-R1's protocol, searched through the client, gives the same passages;
// a flaky retriever is retried and a dead one fails the episode.
func TestRetrieverClientAgainstOwnServer(t *testing.T) {
	w, _ := getWorld()
	hs := httptest.NewServer(RetrieverHandler(w))
	defer hs.Close()
	c, err := NewRetrieverClient(DefaultRetrieverConfig(hs.URL))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	q := makeQuestion(w, envadapters.Train, 0)
	got, err := c.Search(ctx, q.subject.name, 3)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := w.Search(ctx, q.subject.name, 3)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("via the retriever %v\ndirect %v", got, want)
	}

	e, err := builtin{}.New(envadapters.Options{"retriever_url": hs.URL})
	if err != nil {
		t.Fatal(err)
	}
	tasks, _ := builtin{}.Tasks(envadapters.EvalSeen, 20)
	for _, task := range tasks {
		if st, _ := play(t, e, task); !st.Won {
			t.Fatalf("%s via the retriever: %+v", task.ID, st)
		}
	}

	var calls atomic.Int32
	flaky := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if calls.Add(1) <= 2 {
			rw.WriteHeader(503)
			return
		}
		RetrieverHandler(w).ServeHTTP(rw, r)
	}))
	defer flaky.Close()
	fc, _ := NewRetrieverClient(DefaultRetrieverConfig(flaky.URL + "/retrieve"))
	if _, err := fc.Search(ctx, "anything", 2); err != nil || calls.Load() != 3 {
		t.Fatalf("two 503s then success: %v after %d calls", err, calls.Load())
	}

	cfg := DefaultRetrieverConfig("http://127.0.0.1:1")
	cfg.RetryFor = 300 * time.Millisecond
	dead, _ := NewRetrieverClient(cfg)
	env := e.(*Env)
	env.searcher = dead
	env.Reset(ctx, tasks[0])
	st, err := env.Step(ctx, "<search> x </search>")
	if err != nil || !st.Done || st.Err == "" || !strings.Contains(st.Err, "127.0.0.1:1") {
		t.Fatalf("dead retriever: %+v %v", st, err)
	}
	if _, err := NewRetrieverClient(DefaultRetrieverConfig("localhost:8000")); err == nil {
		t.Error("a URL without scheme accepted")
	}
}

func FuzzStep(f *testing.F) {
	for _, s := range []string{"<search>a</search>", "<answer></answer>", "<search><answer>x</answer></search>", "\x00", "<search>" + strings.Repeat("é", 300) + "</search>"} {
		f.Add(s)
	}
	e, _ := builtin{}.New(nil)
	tasks, _ := builtin{}.Tasks(envadapters.Train, 1)
	f.Fuzz(func(t *testing.T, action string) {
		e.Reset(context.Background(), tasks[0])
		st, err := e.Step(context.Background(), action)
		if err != nil || st.Observation == "" {
			t.Fatalf("%q → %+v %v", action, st, err)
		}
	})
}

func BenchmarkSearchStep(b *testing.B) {
	e, _ := builtin{}.New(nil)
	tasks, _ := builtin{}.Tasks(envadapters.Train, 100)
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		e.Reset(ctx, tasks[i%100])
		e.Step(ctx, "<search> "+tasks[i%100].Goal+" </search>")
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "steps/s")
}
