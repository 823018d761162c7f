package skills

import (
	"context"
	"testing"

	"github.com/seedctl/seedctl/envadapters"
	"github.com/seedctl/seedctl/envadapters/household"
	"github.com/seedctl/seedctl/rollout"
)

// The transfer teacher's skill for a task is the expert's skill about its
// donor — another training task of the same family and goal object —
// never about the task itself; tasks without a donor get none.
func TestTransferAnalyzerGivesTheDonorsSkill(t *testing.T) {
	ctx := context.Background()
	b, err := envadapters.Lookup(household.Name)
	if err != nil {
		t.Fatal(err)
	}
	opts := envadapters.Options{"max_steps": "20"}
	seen, _ := b.Tasks(envadapters.EvalSeen, 12)
	unseen, _ := b.Tasks(envadapters.EvalUnseen, 12)
	tasks := append(seen, unseen...)
	var reqs []Request
	for _, task := range tasks {
		reqs = append(reqs, Request{Traj: &rollout.Trajectory{ID: task.ID + "/0", Task: task}})
	}
	a := &TransferAnalyzer{Env: b, Options: opts}
	recs, err := a.Analyze(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	x, err := NewTransferIndex(b)
	if err != nil {
		t.Fatal(err)
	}
	with, without := 0, 0
	for i, task := range tasks {
		rec := recs[i]
		d, ok := x.Donor(task)
		if !ok {
			without++
			if rec.Skill != nil || rec.ParseError == "" {
				t.Errorf("%s has no donor but got skill %+v (error %q)", task.ID, rec.Skill, rec.ParseError)
			}
			continue
		}
		if d.ID == task.ID || d.Split != envadapters.Train || d.Family != task.Family || household.GoalObject(d.Goal) != household.GoalObject(task.Goal) {
			t.Fatalf("%s (%q): donor %s (%q)", task.ID, task.Goal, d.ID, d.Goal)
		}
		want, err := ExpertSkill(ctx, b, d, opts)
		if err != nil {
			t.Fatal(err)
		}
		own, err := ExpertSkill(ctx, b, task, opts)
		if err != nil {
			t.Fatal(err)
		}
		if want == "" {
			continue
		}
		with++
		if rec.Skill == nil || rec.Skill.EpisodeSkill != want || rec.Analyzer != "oracle-other" {
			t.Fatalf("%s: skill %+v, want the donor's %q", task.ID, rec.Skill, want)
		}
		if rec.Skill.EpisodeSkill == own && own != "" {
			t.Logf("%s: the donor's skill reads as the task's own (%q)", task.ID, own)
		}
	}
	if with < 6 || without == 0 {
		t.Errorf("%d tasks got a donor's skill, %d had no donor: want most of eval_seen with one and some of eval_unseen without", with, without)
	}
}
