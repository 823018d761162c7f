package inference

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seedctl/seedctl/inference/server"
	"github.com/seedctl/seedctl/inference/server/servertest"
)

// fakeEndpoint is a Backend that answers with its own id in every token,
// records what it got, and fails as told.
type fakeEndpoint struct {
	id                             int
	mu                             sync.Mutex
	prompts                        [][]int
	scored, published, released    int
	failGenerate, failPublish      error
	failScore                      error
	generateCalls, healthFailsLeft int
}

func (f *fakeEndpoint) Generate(_ context.Context, reqs []GenRequest) ([]GenResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.generateCalls++
	if f.failGenerate != nil {
		return nil, f.failGenerate
	}
	out := make([]GenResult, len(reqs))
	for i, r := range reqs {
		f.prompts = append(f.prompts, r.Prompt)
		out[i] = GenResult{IDs: []int{f.id, r.Prompt[0]}, LogProbs: []float64{0, 0}, FinishReason: "stop"}
	}
	return out, nil
}

func (f *fakeEndpoint) Score(_ context.Context, seqs [][]int) ([][]float64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failScore != nil {
		return nil, f.failScore
	}
	out := make([][]float64, len(seqs))
	for i, s := range seqs {
		f.scored++
		out[i] = []float64{math.NaN(), float64(s[0])}
	}
	return out, nil
}

func (f *fakeEndpoint) Release(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.released++
	return nil
}

func (f *fakeEndpoint) Publish(context.Context, string, string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failPublish != nil {
		return f.failPublish
	}
	f.published++
	return nil
}

func (f *fakeEndpoint) Health(context.Context) error { return nil }
func (f *fakeEndpoint) Close() error                 { return nil }

func newFakePool(t *testing.T, n int) (*Pool, []*fakeEndpoint) {
	t.Helper()
	var fakes []*fakeEndpoint
	var names []string
	var bs []Backend
	for i := range n {
		f := &fakeEndpoint{id: i}
		fakes = append(fakes, f)
		names = append(names, fmt.Sprintf("http://gpu%d:8000", i))
		bs = append(bs, f)
	}
	p, err := NewPool(names, bs, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	return p, fakes
}

// TestPoolSpreadsByWorkAndKeepsGroupsTogether: 8 tasks × 4 samples over 4
// endpoints: each task's samples on one endpoint, the work balanced, the
// results in request order.
func TestPoolSpreadsByWorkAndKeepsGroupsTogether(t *testing.T) {
	p, fakes := newFakePool(t, 4)
	var reqs []GenRequest
	for task := range 8 {
		for range 4 {
			reqs = append(reqs, GenRequest{Prompt: []int{100 + task, 1, 2, 3}, MaxTokens: 10})
		}
	}
	res, err := p.Generate(context.Background(), reqs)
	if err != nil {
		t.Fatal(err)
	}
	endpointOf := map[int]int{}
	for i, r := range res {
		task := reqs[i].Prompt[0]
		if r.IDs[1] != task {
			t.Fatalf("result %d is for prompt %d, want %d (order lost)", i, r.IDs[1], task)
		}
		if e, ok := endpointOf[task]; ok && e != r.IDs[0] {
			t.Errorf("task %d's samples went to endpoints %d and %d", task, e, r.IDs[0])
		}
		endpointOf[task] = r.IDs[0]
	}
	for _, f := range fakes {
		if len(f.prompts) != 8 {
			t.Errorf("endpoint %d got %d requests, want 8 (2 tasks × 4)", f.id, len(f.prompts))
		}
	}
	// Outstanding work returns to zero.
	for _, m := range p.members {
		if m.work != 0 {
			t.Errorf("%s: %d tokens still outstanding", m.name, m.work)
		}
	}
}

// TestPoolDropsAFailedEndpointAndRedoesItsWork: a dead endpoint is
// dropped (named in the log), its requests answered by the others; with
// every endpoint dead the call fails with ErrNoEndpoints naming them.
func TestPoolDropsAFailedEndpointAndRedoesItsWork(t *testing.T) {
	p, fakes := newFakePool(t, 3)
	fakes[1].failGenerate = fmt.Errorf("connection refused: %w", ErrServer)
	var reqs []GenRequest
	for task := range 9 {
		reqs = append(reqs, GenRequest{Prompt: []int{task}, MaxTokens: 4})
	}
	res, err := p.Generate(context.Background(), reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.IDs[1] != i || r.IDs[0] == 1 {
			t.Fatalf("result %d: %v", i, r.IDs)
		}
	}
	if got := p.Live(); len(got) != 2 || got[0] != "http://gpu0:8000" || got[1] != "http://gpu2:8000" {
		t.Errorf("live endpoints %v", got)
	}
	// The dropped endpoint is not asked again.
	calls := fakes[1].generateCalls
	if _, err := p.Generate(context.Background(), reqs); err != nil || fakes[1].generateCalls != calls {
		t.Errorf("after the drop: err %v, dead endpoint called %d more times", err, fakes[1].generateCalls-calls)
	}
	// Publishing: the endpoint that fails is dropped; the rest published.
	fakes[2].failPublish = fmt.Errorf("reload_weights: %w", ErrServer)
	if err := p.Publish(context.Background(), "/ck", "iter-1"); err != nil {
		t.Fatal(err)
	}
	if fakes[0].published != 1 || len(p.Live()) != 1 {
		t.Errorf("publish: endpoint 0 published %d times, live %v", fakes[0].published, p.Live())
	}
	fakes[0].failScore = fmt.Errorf("HTTP 503: %w", ErrServer)
	_, err = p.Score(context.Background(), [][]int{{1, 2}})
	if !errors.Is(err, ErrNoEndpoints) || !strings.Contains(err.Error(), "gpu1") || !strings.Contains(err.Error(), "reload_weights") {
		t.Errorf("with every endpoint dead: %v", err)
	}
	if err := p.Release(context.Background()); !errors.Is(err, ErrNoEndpoints) {
		t.Errorf("release with none left: %v", err)
	}
}

// TestPoolRequestErrorsDropNothing: a request the server refuses (HTTP
// 400) fails the call and leaves every endpoint in the pool; a cancelled
// context drops nothing either.
func TestPoolRequestErrorsDropNothing(t *testing.T) {
	p, fakes := newFakePool(t, 2)
	for _, f := range fakes {
		f.failGenerate = &statusError{url: "http://x/v1/completions", status: 400, msg: "prompt too long"}
	}
	_, err := p.Generate(context.Background(), []GenRequest{{Prompt: []int{1}}, {Prompt: []int{2}}})
	if err == nil || !strings.Contains(err.Error(), "prompt too long") {
		t.Fatalf("refused request: %v", err)
	}
	if len(p.Live()) != 2 {
		t.Errorf("a refused request dropped endpoints: live %v", p.Live())
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, f := range fakes {
		f.failGenerate = context.Canceled
	}
	if _, err := p.Generate(ctx, []GenRequest{{Prompt: []int{1}}}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
	if len(p.Live()) != 2 {
		t.Errorf("cancellation dropped endpoints: live %v", p.Live())
	}
}

// TestPoolOfEmbeddedServers: three embedded servers on loopback behind a
// pool: generation spread over them, scoring equal to the trainer's,
// publishing reaching each (every endpoint then serves the new weights),
// and a server that stops being dropped while the others carry on.
func TestPoolOfEmbeddedServers(t *testing.T) {
	v1, v2 := twoCheckpoints(t)
	ctx := context.Background()
	var names []string
	var bs []Backend
	for range 3 {
		cfg := DefaultConfig("embedded")
		cfg.RetryFor = time.Second // a stopped server fails fast
		b, err := newEmbedded(t, ctx, server.DefaultConfig(v1), cfg, testLog(t))
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, b.(*sglangBackend).cfg.BaseURL)
		bs = append(bs, b)
	}
	p, err := NewPool(names, bs, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var reqs []GenRequest
	for task := range 6 {
		for range 2 {
			reqs = append(reqs, GenRequest{Prompt: []int{5 + task, 6, 7}, MaxTokens: 4, Temperature: 1})
		}
	}
	res, err := p.Generate(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if len(r.IDs) == 0 || len(r.IDs) != len(r.LogProbs) {
			t.Fatalf("result %d: %+v", i, r)
		}
	}
	if err := p.Publish(ctx, v2, "v2"); err != nil {
		t.Fatal(err)
	}
	probe := []int{5, 6, 7, 8, 9}
	want, err := servertest.LogProbs(v2, probe)
	if err != nil {
		t.Fatal(err)
	}
	err = p.Each(ctx, "verifying v2", func(ctx context.Context, name string, b Backend) error {
		return VerifyServed(ctx, b, probe, want, 1e-4)
	})
	if err != nil || len(p.Live()) != 3 {
		t.Fatalf("every endpoint should serve v2: %v, live %v", err, p.Live())
	}
	// One server goes away: the pool drops it and answers with the others.
	if err := bs[1].Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Generate(ctx, reqs); err != nil {
		t.Fatalf("after losing one server: %v", err)
	}
	if got := p.Live(); len(got) != 2 || got[0] != names[0] || got[1] != names[2] {
		t.Errorf("live after losing %s: %v", names[1], got)
	}
}
