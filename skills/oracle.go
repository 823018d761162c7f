package skills

import (
	"context"

	"github.com/seedctl/seedctl/envadapters"
	"github.com/seedctl/seedctl/rollout"
)

// OracleAnalyzer writes skills for the built-in environments from what the
// trajectory shows (its actions and observations) and the task family's
// recipe, never from hidden environment state. Wording varies by trajectory
// so a model cannot learn a single template.
type OracleAnalyzer struct {
	K int
}

func (a *OracleAnalyzer) Name() string { return "oracle" }

func (a *OracleAnalyzer) Analyze(ctx context.Context, reqs []Request) ([]Record, error) {
	ask := func(_ context.Context, _ []string) ([]string, error) {
		out := make([]string, len(reqs))
		for i, r := range reqs {
			out[i] = skillJSON(oracleSkill(r.Traj, r.Candidates, a.K))
		}
		return out, nil
	}
	// The oracle writes the same answer twice: no repair round.
	return analyzeWith(ctx, a.Name(), a.K, 0, reqs, ask, true)
}

func oracleSkill(t *rollout.Trajectory, candidates []int, k int) *Skill {
	o, ok := envadapters.OracleFor(t.Task.Env)
	if !ok {
		return &Skill{EpisodeSummary: "No recipe for this environment.", StepSkills: map[int]string{}}
	}
	ep := envadapters.Episode{ID: t.ID, Task: t.Task, FirstObservation: t.FirstObservation, Won: t.Won, Score: t.Score}
	for _, st := range t.Steps {
		ep.Steps = append(ep.Steps, envadapters.EpisodeStep{Action: st.Action, Observation: st.Observation, Valid: st.Valid})
	}
	h := o.Hindsight(ep, candidates, k)
	return &Skill{EpisodeSummary: h.Summary, EpisodeSkill: h.EpisodeSkill, StepSkills: h.StepSkills}
}
