package orchestrator

// The evaluation phase: eval_seen and eval_unseen of a policy, greedy and
// sampled.

import (
	"context"
	"fmt"
	"time"

	"github.com/seedctl/seedctl/envadapters"
	"github.com/seedctl/seedctl/rollout"
)

// EvalPoint is one evaluation of a policy on eval-seen and eval-unseen.
type EvalPoint struct {
	Iteration      int                `json:"iteration"`
	Seen           float64            `json:"seen_success"`
	Unseen         float64            `json:"unseen_success"`
	SeenScore      float64            `json:"seen_score"`
	UnseenScore    float64            `json:"unseen_score"`
	Episodes       int                `json:"episodes"`
	SeenByFamily   map[string]float64 `json:"seen_by_family"`
	UnseenByFamily map[string]float64 `json:"unseen_by_family"`
	// SeenWins and UnseenWins are the per-task outcomes, one character per
	// eval task in split order ('1' won, '0' not): what paired comparisons
	// between runs on the same tasks (benchmarks' bootstrap intervals)
	// resample.
	SeenWins   string `json:"seen_wins,omitempty"`
	UnseenWins string `json:"unseen_wins,omitempty"`
	// SampledTemperature and SeenSampled: eval_seen played again sampled
	// at that temperature (Eval.SampledTemperature; 0: not played).
	SampledTemperature float64 `json:"sampled_temperature,omitempty"`
	SeenSampled        float64 `json:"seen_sampled_success,omitempty"`
}

// sampledString is ", T=1 eval-seen 12.5%" when the point has a sampled
// evaluation, else "".
func (p *EvalPoint) sampledString() string {
	if p == nil || p.SampledTemperature == 0 {
		return ""
	}
	return fmt.Sprintf(", eval-seen sampled at T=%g %.1f%%", p.SampledTemperature, 100*p.SeenSampled)
}

// evaluate plays Eval.Episodes tasks of eval-seen and eval-unseen greedily
// with plain prompts and records them.
func (r *run) evaluate(ctx context.Context, k int) (*EvalPoint, error) {
	n := r.cfg.Eval.Episodes
	ep := &EvalPoint{Iteration: k, Episodes: n}
	if n == 0 {
		return ep, nil
	}
	var lines []MetricsLine
	for _, split := range []envadapters.Split{envadapters.EvalSeen, envadapters.EvalUnseen} {
		m := min(n, r.env.Tasks.SplitSize(split))
		if m == 0 {
			// A remote server with no such split (AgentGym's ALFWorld has
			// no unseen games): nothing to evaluate.
			continue
		}
		tasks, err := r.env.Tasks.Tasks(split, m)
		if err != nil {
			return nil, fmt.Errorf("eval: listing %s tasks: %w", split, err)
		}
		runner, err := rollout.NewRunner(r.cfg.evalRolloutConfig(), r.env.Name, r.env.Factory, r.policy, r.log)
		if err != nil {
			return nil, err
		}
		start := time.Now()
		trajs, err := runner.Run(ctx, tasks, k, r.progress(fmt.Sprintf("eval %s (iteration %d)", split, k)))
		if err != nil {
			return nil, fmt.Errorf("eval on %s: %w", split, err)
		}
		met := rollout.Summarize(trajs, time.Since(start))
		wins := winString(tasks, trajs)
		if split == envadapters.EvalSeen {
			ep.Seen, ep.SeenScore, ep.SeenByFamily, ep.SeenWins = met.Success, met.MeanScore, met.SuccessByFamily, wins
		} else {
			ep.Unseen, ep.UnseenScore, ep.UnseenByFamily, ep.UnseenWins = met.Success, met.MeanScore, met.SuccessByFamily, wins
		}
		lines = append(lines, MetricsLine{Kind: "eval", Iteration: k, Time: time.Now(), Split: string(split), PerFamily: met.SuccessByFamily,
			Values: map[string]float64{"success": met.Success, "score": met.MeanScore, "mean_steps": met.MeanSteps, "invalid_rate": met.InvalidRate, "rejected_rate": met.RejectedRate, "episodes": float64(met.Episodes)}})
	}
	if t := r.cfg.Eval.SampledTemperature; t > 0 {
		line, err := r.evaluateSampled(ctx, k, n)
		if err != nil {
			return nil, err
		}
		if line != nil {
			ep.SampledTemperature, ep.SeenSampled = t, line.Values["success"]
			lines = append(lines, *line)
		}
	}
	if k == 0 && len(r.st.BaseWeights) >= 12 {
		for i := range lines {
			lines[i].Base = r.st.BaseWeights[:12]
		}
	}
	if err := appendMetrics(r.dir.metrics(), lines...); err != nil {
		return nil, err
	}
	r.log.Info().Int("iteration", k).Float64("seen", ep.Seen).Float64("unseen", ep.Unseen).Msg("eval")
	return ep, nil
}

// evaluateSampled plays n tasks of eval_seen once each at
// Eval.SampledTemperature: its metrics line (kind "eval_sampled"), or nil
// when the environment has no eval_seen tasks.
func (r *run) evaluateSampled(ctx context.Context, k, n int) (*MetricsLine, error) {
	m := min(n, r.env.Tasks.SplitSize(envadapters.EvalSeen))
	if m == 0 {
		return nil, nil
	}
	tasks, err := r.env.Tasks.Tasks(envadapters.EvalSeen, m)
	if err != nil {
		return nil, fmt.Errorf("sampled eval: listing eval_seen tasks: %w", err)
	}
	rc := r.cfg.sampledEvalRolloutConfig()
	runner, err := rollout.NewRunner(rc, r.env.Name, r.env.Factory, r.policy, r.log)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	trajs, err := runner.Run(ctx, tasks, k, r.progress(fmt.Sprintf("eval eval_seen at T=%g (iteration %d)", rc.Temperature, k)))
	if err != nil {
		return nil, fmt.Errorf("sampled eval on eval_seen at T=%g: %w", rc.Temperature, err)
	}
	met := rollout.Summarize(trajs, time.Since(start))
	return &MetricsLine{Kind: "eval_sampled", Iteration: k, Time: time.Now(), Split: string(envadapters.EvalSeen), PerFamily: met.SuccessByFamily,
		Values: map[string]float64{"success": met.Success, "score": met.MeanScore, "mean_steps": met.MeanSteps, "invalid_rate": met.InvalidRate, "rejected_rate": met.RejectedRate,
			"episodes": float64(met.Episodes), "temperature": rc.Temperature}}, nil
}

// winString is EvalPoint.SeenWins for tasks: '1' where a trajectory of
// the task won.
func winString(tasks []envadapters.Task, trajs []*rollout.Trajectory) string {
	won := map[string]bool{}
	for _, t := range trajs {
		won[t.Task.ID] = won[t.Task.ID] || t.Won
	}
	b := make([]byte, len(tasks))
	for i, t := range tasks {
		b[i] = '0'
		if won[t.ID] {
			b[i] = '1'
		}
	}
	return string(b)
}
