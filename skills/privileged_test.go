package skills

import (
	"context"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/seedctl/seedctl/envadapters"
	"github.com/seedctl/seedctl/envadapters/example"
	"github.com/seedctl/seedctl/envadapters/household"
	"github.com/seedctl/seedctl/rollout"
)

// The privileged teacher gives every trajectory of a task the same
// skill, about the expert's solution of that task: it names the goal's
// object and the place the expert found it, which differs between tasks,
// whatever the trajectory itself did.
func TestPrivilegedAnalyzerGivesTheExpertsSkillForTheTask(t *testing.T) {
	ctx := context.Background()
	b, err := envadapters.Lookup(household.Name)
	if err != nil {
		t.Fatal(err)
	}
	tasks, err := b.Tasks(envadapters.Train, 40)
	if err != nil {
		t.Fatal(err)
	}
	a := &PrivilegedAnalyzer{Env: b, Options: envadapters.Options{"max_steps": "20"}}
	var reqs []Request
	for i, task := range tasks {
		// Two trajectories per task: one won, one failed after one step.
		reqs = append(reqs,
			Request{Traj: &rollout.Trajectory{ID: task.ID + "/0", Task: task, Won: true, Iteration: 3}},
			Request{Traj: &rollout.Trajectory{ID: task.ID + "/1", Task: task, Steps: []rollout.Step{{Action: "look", Observation: "Nothing happens."}}}})
		_ = i
	}
	recs, err := a.Analyze(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != len(reqs) {
		t.Fatalf("%d records for %d requests", len(recs), len(reqs))
	}
	distinct := map[string]bool{}
	for i := 0; i < len(recs); i += 2 {
		task := tasks[i/2]
		r0, r1 := recs[i], recs[i+1]
		if r0.Skill == nil || r1.Skill == nil {
			t.Fatalf("task %s (%s): no skill (%q)", task.ID, task.Goal, r0.Raw)
		}
		if r0.Skill.EpisodeSkill != r1.Skill.EpisodeSkill {
			t.Errorf("task %s: two trajectories got different skills:\n%q\n%q", task.ID, r0.Skill.EpisodeSkill, r1.Skill.EpisodeSkill)
		}
		if r0.TrajectoryID != reqs[i].Traj.ID || r0.TaskID != task.ID || r0.Analyzer != "privileged" || !r0.Won || r1.Won || r0.Iteration != 3 || len(r0.Skill.StepSkills) != 0 {
			t.Errorf("record %+v", r0)
		}
		// The goal's object ("put a clean plate on countertop": plate)
		// is named in the skill.
		named := false
		for _, w := range strings.Fields(task.Goal) {
			w = strings.Trim(w, ".")
			if len(w) > 3 && !strings.Contains("clean heat cool some find put examine look under with them their"+household.Name, w) && strings.Contains(r0.Skill.EpisodeSkill, w) {
				named = true
			}
		}
		if !named {
			t.Errorf("task %s %q: skill %q names none of the goal's words", task.ID, task.Goal, r0.Skill.EpisodeSkill)
		}
		distinct[r0.Skill.EpisodeSkill] = true
	}
	if len(distinct) < len(tasks)/2 {
		t.Errorf("%d distinct skills for %d tasks: the skill does not depend on the task", len(distinct), len(tasks))
	}
	// The expert wins every one of these tasks (a lost demonstration gives
	// no skill).
	for _, task := range tasks[:10] {
		tr, err := ExpertDemo(ctx, b, task, envadapters.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if !tr.Won || len(tr.Steps) == 0 || len(tr.Steps) > ExpertDemoSteps {
			t.Errorf("expert on %s: won %v in %d steps", task.ID, tr.Won, len(tr.Steps))
		}
	}
}

// TestANewEnvironmentIsOnePackage: the guide's example environment
// (envadapters/example, docs/adding-an-environment.md) works through every
// part of seedctl that reads an environment — the rollout's prompts and
// episodes, the oracle analyzer, the privileged teacher, teacher contexts
// — with nothing but its own package, registered by importing it.
func TestANewEnvironmentIsOnePackage(t *testing.T) {
	ctx := context.Background()
	b, err := envadapters.Lookup(example.Name)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := rollout.TemplateFor(example.Name)
	if tmpl.System != "You turn lights on in a house." || !tmpl.ListAdmissible {
		t.Fatalf("template %+v: not the environment's prompts", tmpl)
	}
	// Its reply syntax (a last "CALL:" line) is its own, and the rollout
	// reads actions, validity and places through it.
	if a, ok := tmpl.Extract("Kitchen first.\nCALL: walk(kitchen)", nil); !ok || a != "walk(kitchen)" ||
		!rollout.FormatValid(tmpl, "CALL: flip()", false) || rollout.FormatValid(tmpl, "<action>flip()</action>", false) {
		t.Fatalf("the rollout does not read the environment's CALL: syntax (%q, %v)", a, ok)
	}
	if place, ok := tmpl.GoesTo("walk(kitchen)"); !ok || place != "kitchen" {
		t.Fatalf("walk(kitchen) goes to %q", place)
	}
	p := tinyPolicy(t)
	cfg := rollout.DefaultConfig()
	cfg.GroupSize, cfg.EnvOptions = 2, envadapters.Options{"max_steps": "3"}
	run, err := rollout.NewRunner(cfg, example.Name, b, p, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	tasks, _ := b.Tasks(envadapters.Train, 2)
	trajs, err := run.Run(ctx, tasks, 0, nil)
	if err != nil || len(trajs) != 4 {
		t.Fatalf("rollout: %d trajectories, %v", len(trajs), err)
	}
	var reqs []Request
	for _, tr := range trajs {
		if len(tr.Steps) == 0 || !strings.Contains(tr.Steps[0].UserText, "Your task is to: turn on the light in the") {
			t.Fatalf("trajectory %s: first turn %q", tr.ID, tr.Steps[0].UserText)
		}
		reqs = append(reqs, Request{Traj: tr, Candidates: []int{0}})
	}
	recs, err := (&OracleAnalyzer{K: 1}).Analyze(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.Skill == nil || r.Skill.EpisodeSkill == "" || strings.Contains(r.Raw, "No recipe") {
			t.Fatalf("oracle on %s: %q", r.TrajectoryID, r.Raw)
		}
	}
	priv, err := (&PrivilegedAnalyzer{Env: b}).Analyze(ctx, reqs)
	if err != nil || priv[0].Skill == nil || !strings.Contains(priv[0].Skill.EpisodeSkill, "room") {
		t.Fatalf("privileged teacher: %v %+v", err, priv)
	}
	tc, err := BuildTeacher(trajs[0], priv[0].Skill, EpisodeStep, run.Template(), p)
	if err != nil || len(tc.Pairs) == 0 {
		t.Fatalf("teacher context: %v", err)
	}
}
