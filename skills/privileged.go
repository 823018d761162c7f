package skills

import (
	"context"
	"fmt"
	"sync"

	"github.com/seedctl/seedctl/envadapters"
	"github.com/seedctl/seedctl/rollout"
)

// ExpertDemoSteps bounds the scripted expert's demonstration of a task
// (the built-ins' experts solve every task well within it).
const ExpertDemoSteps = 50

// PrivilegedAnalyzer is the privileged teacher of the mechanism ladder
// (ours): every trajectory of a task gets the oracle's episode skill about
// the built-in's scripted expert solving that same task — where the
// object is, which appliance, in what order — knowledge the episode
// itself may never have revealed. It is the advice the base policies were
// pre-trained to read (basemodel's hint evaluation), so distilling from it
// shows whether on-policy distillation can teach this policy at all,
// independent of how good its own hindsight is. Built-ins only; skills
// are cached per task.
type PrivilegedAnalyzer struct {
	Env envadapters.Builtin
	// Options are the environment's options (its max_steps is replaced by
	// ExpertDemoSteps).
	Options envadapters.Options

	mu    sync.Mutex
	cache map[string]string // task id → episode skill
}

func (a *PrivilegedAnalyzer) Name() string { return "privileged" }

func (a *PrivilegedAnalyzer) Analyze(ctx context.Context, reqs []Request) ([]Record, error) {
	recs := make([]Record, len(reqs))
	for i, r := range reqs {
		skill, err := a.skillFor(ctx, r.Traj.Task)
		if err != nil {
			return nil, fmt.Errorf("privileged analyzer: %w", err)
		}
		sk := &Skill{EpisodeSkill: skill, StepSkills: map[int]string{}}
		recs[i] = Record{TrajectoryID: r.Traj.ID, TaskID: r.Traj.Task.ID, Iteration: r.Traj.Iteration, Analyzer: a.Name(),
			Won: r.Traj.Won, Raw: skillJSON(sk), Snapshot: "expert"}
		if !sk.Empty() {
			recs[i].Skill = sk
		}
	}
	return recs, nil
}

func (a *PrivilegedAnalyzer) skillFor(ctx context.Context, task envadapters.Task) (string, error) {
	a.mu.Lock()
	s, ok := a.cache[task.ID]
	a.mu.Unlock()
	if ok {
		return s, nil
	}
	s, err := ExpertSkill(ctx, a.Env, task, a.Options)
	if err != nil {
		return "", err
	}
	a.mu.Lock()
	if a.cache == nil {
		a.cache = map[string]string{}
	}
	a.cache[task.ID] = s
	a.mu.Unlock()
	return s, nil
}

// ExpertSkill plays b's scripted expert on task (environment options opts,
// at most ExpertDemoSteps steps) and returns the oracle's episode skill
// about that demonstration ("" when the expert did not win: the oracle's
// advice about a failure is not what an expert knows).
func ExpertSkill(ctx context.Context, b envadapters.Builtin, task envadapters.Task, opts envadapters.Options) (string, error) {
	traj, err := ExpertDemo(ctx, b, task, opts)
	if err != nil {
		return "", err
	}
	if !traj.Won {
		return "", nil
	}
	recs, err := (&OracleAnalyzer{K: 0}).Analyze(ctx, []Request{{Traj: traj}})
	if err != nil {
		return "", err
	}
	if recs[0].Skill == nil {
		return "", nil
	}
	return recs[0].Skill.EpisodeSkill, nil
}

// ExpertDemo plays b's scripted expert on task as a trajectory (actions,
// observations, rewards; no tokens).
func ExpertDemo(ctx context.Context, b envadapters.Builtin, task envadapters.Task, opts envadapters.Options) (*rollout.Trajectory, error) {
	env, err := b.New(opts.With("max_steps", fmt.Sprint(ExpertDemoSteps)))
	if err != nil {
		return nil, fmt.Errorf("expert demo of %s: %w", task.ID, err)
	}
	defer env.Close()
	st, err := env.Reset(ctx, task)
	if err != nil {
		return nil, fmt.Errorf("expert demo of %s: reset: %w", task.ID, err)
	}
	x, err := b.Expert(env)
	if err != nil {
		return nil, fmt.Errorf("expert demo of %s: %w", task.ID, err)
	}
	traj := &rollout.Trajectory{ID: task.ID, Task: task, FirstObservation: st.Observation, Mode: rollout.ModeChat}
	for !st.Done {
		a, err := x.Act()
		if err != nil {
			return nil, fmt.Errorf("expert demo of %s step %d: %w", task.ID, len(traj.Steps), err)
		}
		if st, err = env.Step(ctx, a); err != nil {
			return nil, fmt.Errorf("expert demo of %s step %d: %w", task.ID, len(traj.Steps), err)
		}
		traj.Steps = append(traj.Steps, rollout.Step{Action: a, Observation: st.Observation, Valid: !st.Invalid, Reward: st.Reward, Done: st.Done})
		traj.Return += st.Reward
	}
	traj.Won, traj.Score = st.Won, st.Score
	return traj, nil
}
