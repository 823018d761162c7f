package orchestrator

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/seedctl/seedctl/envadapters"
	"github.com/seedctl/seedctl/envadapters/household"
	"github.com/seedctl/seedctl/inference"
	"github.com/seedctl/seedctl/rollout"
	"github.com/seedctl/seedctl/skills"
)

// pickBackend replies with a random household move.
type pickBackend struct {
	inference.Backend
	p *rollout.Policy
	r *rand.Rand
}

func (b *pickBackend) Generate(_ context.Context, reqs []inference.GenRequest) ([]inference.GenResult, error) {
	out := make([]inference.GenResult, len(reqs))
	for i := range reqs {
		moves := []string{"go to cabinet 1", "go to countertop 1", "open fridge 1", "take mug 1 from cabinet 1"}
		ids, err := b.p.Tok.Encode("<action>" + moves[b.r.IntN(len(moves))] + "</action>")
		if err != nil {
			return nil, err
		}
		out[i] = inference.GenResult{IDs: ids, LogProbs: make([]float64, len(ids))}
	}
	return out, nil
}

// lengthLearner scores every position of a sequence with −len/1000, so a
// log-prob tells which sequence it was read from.
type lengthLearner struct {
	Learner
	seqs int
}

func (l *lengthLearner) Rescore(_ context.Context, seqs [][]int) ([][]float32, error) {
	l.seqs += len(seqs)
	return lengthScores(seqs), nil
}

// RescoreTeacher scores as Rescore and, where asked, gives a one-token
// distribution holding that score.
func (l *lengthLearner) RescoreTeacher(ctx context.Context, seqs [][]int, want [][]bool, _ int) ([][]float32, [][]*TokenDist, error) {
	lps, _ := l.Rescore(ctx, seqs)
	if want == nil {
		return lps, nil, nil
	}
	ds := make([][]*TokenDist, len(seqs))
	for i, s := range seqs {
		ds[i] = make([]*TokenDist, len(s))
		for k, w := range want[i] {
			if w {
				ds[i][k] = &TokenDist{IDs: []int32{int32(s[k])}, LogP: []float32{lps[i][k]}}
			}
		}
	}
	return lps, ds, nil
}

func (l *lengthLearner) RescoreRef(_ context.Context, seqs [][]int) ([][]float32, error) {
	return lengthScores(seqs), nil
}

func lengthScores(seqs [][]int) [][]float32 {
	out := make([][]float32, len(seqs))
	for i, s := range seqs {
		out[i] = make([]float32, len(s))
		for k := 1; k < len(s); k++ {
			out[i][k] = -float32(len(s)) / 1000
		}
	}
	return out
}

// With rl.distill_baseline "shuffled" every distilled token carries a
// baseline log-prob read from a second teacher sequence — the same places
// holding another task's skill — and nothing else changes: the distilled
// tokens are the teacher's. A trajectory whose task has no other task's
// skill to borrow is left undistilled and counted.
func TestContrastiveBaselineRows(t *testing.T) {
	// A 500-token BPE trained on household text (tokenizer.TrainBPE).
	p, err := rollout.LoadPolicy("testdata/tinytok", &pickBackend{r: rand.New(rand.NewPCG(3, 3))})
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
	sks := map[string]*skills.Skill{}
	for i, tr := range trajs {
		if tr.Task.ID == tasks[2].ID {
			continue // the third task wrote no skills
		}
		sks[tr.ID] = &skills.Skill{EpisodeSkill: "Skill number " + strings.Repeat("x", i+1), StepSkills: map[int]string{0: "Advice for the first step " + tr.ID}}
	}
	for _, contrast := range []bool{false, true} {
		cfg := Default()
		if contrast {
			cfg.RL.DistillBaseline = DistillBaselineShuffled
		}
		l := &lengthLearner{}
		r := &run{cfg: cfg, learner: l, env: Env{Name: household.Name}, policy: p}
		res := <-r.startPlain(context.Background(), trajs)
		if res.err != nil {
			t.Fatal(res.err)
		}
		l.seqs = 0
		vals := iterStats{}
		rows, err := r.buildRows(context.Background(), trajs, res.set, sks, vals)
		if err != nil {
			t.Fatal(err)
		}
		distilled, withBase := 0, 0
		for _, row := range rows {
			if row.Distill == nil {
				if row.BaselineLogP != nil {
					t.Errorf("contrast %v: row %s has baseline log-probs but no distilled token", contrast, row.ID)
				}
				continue
			}
			distilled++
			if contrast && row.BaselineLogP == nil {
				t.Fatalf("row %s: distilled without a baseline", row.ID)
			}
			if !contrast && row.BaselineLogP != nil {
				t.Fatalf("row %s: a baseline without rl.distill_baseline", row.ID)
			}
			for k, d := range row.Distill {
				if !d {
					if row.BaselineLogP != nil && row.BaselineLogP[k] != 0 {
						t.Errorf("row %s position %d: baseline %v off the distilled tokens", row.ID, k, row.BaselineLogP[k])
					}
					continue
				}
				if row.BaselineLogP != nil {
					withBase++
					if row.BaselineLogP[k] >= 0 || row.BaselineLogP[k] == row.TeacherLogP[k] {
						t.Errorf("row %s position %d: baseline %v, teacher %v: not read from its own sequence", row.ID, k, row.BaselineLogP[k], row.TeacherLogP[k])
					}
				}
			}
		}
		if distilled == 0 {
			t.Fatalf("contrast %v: no distilled row", contrast)
		}
		want := vals["teacher_sequences"]
		if contrast {
			want *= 2
			if withBase == 0 {
				t.Error("no distilled token carries a baseline")
			}
			if vals["contrast_unpaired"] != 0 {
				t.Errorf("contrast_unpaired %v, want 0: two tasks wrote skills", vals["contrast_unpaired"])
			}
		}
		if float64(l.seqs) != want {
			t.Errorf("contrast %v: %d sequences rescored, want %v", contrast, l.seqs, want)
		}
	}
	// Only one task with skills: nothing to borrow, nothing distilled.
	one := map[string]*skills.Skill{}
	for _, tr := range trajs {
		if tr.Task.ID == tasks[0].ID {
			one[tr.ID] = sks[tr.ID]
		}
	}
	cfg := Default()
	cfg.RL.DistillBaseline = DistillBaselineShuffled
	r := &run{cfg: cfg, learner: &lengthLearner{}, env: Env{Name: household.Name}, policy: p}
	res := <-r.startPlain(context.Background(), trajs)
	vals := iterStats{}
	rows, err := r.buildRows(context.Background(), trajs, res.set, one, vals)
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range rows {
		if row.Distill != nil {
			t.Errorf("row %s distilled with no other task's skill to contrast", row.ID)
		}
	}
	if vals["contrast_unpaired"] != 2 {
		t.Errorf("contrast_unpaired %v, want 2 (the first task's two trajectories)", vals["contrast_unpaired"])
	}
}
