package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/seedctl/seedctl/rollout"
	"github.com/seedctl/seedctl/skills"
)

// echoAnalyzer answers each request with the trajectory's id, after a
// random pause, and fails on the trajectory named fail.
type echoAnalyzer struct{ fail string }

func (echoAnalyzer) Name() string { return "echo" }

func (a echoAnalyzer) Analyze(ctx context.Context, reqs []skills.Request) ([]skills.Record, error) {
	time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond)
	var out []skills.Record
	for _, q := range reqs {
		if q.Traj.ID == a.fail {
			return nil, errors.New("analyzer down")
		}
		out = append(out, skills.Record{TrajectoryID: q.Traj.ID, Raw: fmt.Sprint(q.Candidates)})
	}
	return out, ctx.Err()
}

// The pipelined analysis, fed groups in any order while "the rollout"
// runs, gives the records the sequential analysis gives, in its order; a
// group never handed over is analyzed at the end; an analyzer failure is
// the iteration's error, naming the group.
func TestAnalysisPipeMatchesSequential(t *testing.T) {
	r := &run{cfg: Default()}
	var trajs []*rollout.Trajectory
	for g := range 5 {
		for s := range 3 {
			tr := &rollout.Trajectory{ID: fmt.Sprintf("g%d-s%d", g, s), Group: g, Sample: s, Return: float64((g + s) % 2)}
			for k := range 2 + s {
				tr.Steps = append(tr.Steps, rollout.Step{Action: fmt.Sprint("go to ", k), Valid: true, Reward: float64(k % 2)})
			}
			trajs = append(trajs, tr)
		}
	}
	want, err := r.analyze(context.Background(), echoAnalyzer{}, trajs, "test", 4)
	if err != nil {
		t.Fatal(err)
	}
	p := r.pipeAnalysis(context.Background(), echoAnalyzer{}, 4)
	for _, g := range []int{3, 0, 4, 1} { // group 2 never handed over
		p.groupDone(g, trajs[3*g:3*g+3])
	}
	got, err := p.wait(trajs, "test")
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("pipelined records\n%v\nsequential\n%v", got, want)
	}
	p = r.pipeAnalysis(context.Background(), echoAnalyzer{fail: "g1-s2"}, 4)
	for g := range 5 {
		p.groupDone(g, trajs[3*g:3*g+3])
	}
	if _, err := p.wait(trajs, "test"); err == nil || !strings.Contains(err.Error(), "group 1") || !strings.Contains(err.Error(), "analyzer down") {
		t.Errorf("a failing group: %v", err)
	}
}
