package orchestrator

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/rs/zerolog"

	"github.com/seedctl/seedctl/envadapters"
	"github.com/seedctl/seedctl/envadapters/household"
	"github.com/seedctl/seedctl/rollout"
	"github.com/seedctl/seedctl/skills"
)

// opdTrajs plays three household tasks, two trajectories each, with the
// tiny test tokenizer's random policy.
func opdTrajs(t *testing.T) (*rollout.Policy, []*rollout.Trajectory) {
	t.Helper()
	p, err := rollout.LoadPolicy("testdata/tinytok", &pickBackend{r: rand.New(rand.NewPCG(5, 5))})
	if err != nil {
		t.Fatal(err)
	}
	p.Backend.(*pickBackend).p = p
	b, _ := envadapters.Lookup(household.Name)
	tasks, _ := b.Tasks(envadapters.Train, 3)
	rc := rollout.DefaultConfig()
	rc.Mode, rc.GroupSize, rc.EnvOptions = rollout.ModeWindow, 2, envadapters.Options{"max_steps": "4"}
	runner, _ := rollout.NewRunner(rc, household.Name, b, p, zerolog.Nop())
	trajs, err := runner.Run(context.Background(), tasks, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p, trajs
}

// With rl.distill_form "full" every distilled token carries the teacher's
// distribution read at its counterpart in the teacher sequence (the fake
// teacher's one-token distribution names the token it was read at, so a
// shifted position shows), and no other token does.
func TestFullDistillRowsCarryAlignedDistributions(t *testing.T) {
	p, trajs := opdTrajs(t)
	sks := map[string]*skills.Skill{}
	for _, tr := range trajs {
		sks[tr.ID] = &skills.Skill{EpisodeSkill: "Open every cabinet before the drawers.", StepSkills: map[int]string{}}
	}
	cfg := Default()
	cfg.RL.DistillForm = DistillFull
	r := &run{cfg: cfg, learner: &lengthLearner{}, env: Env{Name: household.Name}, policy: p}
	res := <-r.startPlain(context.Background(), trajs)
	if res.err != nil {
		t.Fatal(res.err)
	}
	rows, err := r.buildRows(context.Background(), trajs, res.set, sks, iterStats{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, row := range rows {
		if row.Distill == nil {
			continue
		}
		if len(row.TeacherDist) != len(row.IDs) {
			t.Fatalf("row %s: %d distributions for %d ids", row.ID, len(row.TeacherDist), len(row.IDs))
		}
		for k, d := range row.Distill {
			td := row.TeacherDist[k]
			if !d {
				if td != nil {
					t.Errorf("row %s position %d: a distribution on a token not distilled", row.ID, k)
				}
				continue
			}
			n++
			if td == nil || len(td.IDs) != 1 || int(td.IDs[0]) != row.IDs[k] || td.LogP[0] != row.TeacherLogP[k] {
				t.Fatalf("row %s position %d (token %d): distribution %+v, teacher log-prob %v", row.ID, k, row.IDs[k], td, row.TeacherLogP[k])
			}
		}
	}
	if n == 0 {
		t.Fatal("no distilled token")
	}
}

// With rl.teacher_context "plain" the teacher scores the plain sequence
// itself at every trained token: no skills are needed and every row with
// a trained token is distilled.
func TestPlainTeacherContextDistilsEveryTrainedToken(t *testing.T) {
	p, trajs := opdTrajs(t)
	cfg := Default()
	cfg.Algo, cfg.RL.TeacherContext, cfg.RL.TeacherModel = AlgoSEEDNoSFT, TeacherContextPlain, "teacher"
	cfg.RL.DistillForm = DistillFull
	l := &lengthLearner{}
	r := &run{cfg: cfg, learner: l, env: Env{Name: household.Name}, policy: p}
	res := <-r.startPlain(context.Background(), trajs)
	if res.err != nil {
		t.Fatal(res.err)
	}
	l.seqs = 0
	vals := iterStats{}
	rows, err := r.buildRows(context.Background(), trajs, res.set, nil, vals)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) == 0 || float64(l.seqs) != vals["teacher_sequences"] || l.seqs != len(rows) {
		t.Fatalf("%d rows, %d teacher sequences scored (metric %v)", len(rows), l.seqs, vals["teacher_sequences"])
	}
	for _, row := range rows {
		if !slices.Equal(row.Distill, row.Train) {
			t.Fatalf("row %s: distilled %v, trained %v", row.ID, row.Distill, row.Train)
		}
		for k, d := range row.Distill {
			if d && (row.TeacherLogP[k] != -float32(len(row.IDs))/1000 || row.TeacherDist[k] == nil || int(row.TeacherDist[k].IDs[0]) != row.IDs[k]) {
				t.Fatalf("row %s position %d: teacher log-prob %v, distribution %+v: not read from the plain sequence", row.ID, k, row.TeacherLogP[k], row.TeacherDist[k])
			}
		}
	}
}
