package skills

import (
	"math"
	"sort"

	"github.com/seedctl/seedctl/rollout"
)

// CriticalConfig tunes critical-step selection.
type CriticalConfig struct {
	Gamma float64 // discount for step returns (reference 0.95)
	K     int     // at most K steps per trajectory (reference 5)
}

// DefaultCriticalConfig is the reference setting.
func DefaultCriticalConfig() CriticalConfig {
	return CriticalConfig{Gamma: 0.95, K: DefaultMaxStepSkills}
}

// anchor is the state a step's action was taken in: the observation that
// preceded it.
func anchor(t *rollout.Trajectory, i int) string {
	if i == 0 {
		return t.FirstObservation
	}
	return t.Steps[i-1].Observation
}

// CriticalSteps picks candidate critical steps for each trajectory of one
// GRPO group (the G trajectories of one task), as docs/algorithm.md describes:
// steps taken in the same anchor state (identical observation) are grouped
// across trajectories; groups with at least two members whose return
// variance is in the top quartile are candidates; a step ranks by how far
// its return falls below its group's mean; the top K per trajectory are
// kept, ranked. The result maps trajectory ID to step indices.
func CriticalSteps(group []*rollout.Trajectory, cfg CriticalConfig) map[string][]int {
	type member struct {
		traj string
		step int
		ret  float64
	}
	groups := map[string][]member{}
	var keys []string
	for _, t := range group {
		rets := t.Returns(cfg.Gamma, nil)
		for i := range t.Steps {
			a := anchor(t, i)
			if _, ok := groups[a]; !ok {
				keys = append(keys, a)
			}
			groups[a] = append(groups[a], member{t.ID, i, rets[i]})
		}
	}
	type stat struct {
		key        string
		mean, var_ float64
	}
	var stats []stat
	for _, k := range keys {
		ms := groups[k]
		if len(ms) < 2 {
			continue
		}
		mean := 0.0
		for _, m := range ms {
			mean += m.ret
		}
		mean /= float64(len(ms))
		v := 0.0
		for _, m := range ms {
			v += (m.ret - mean) * (m.ret - mean)
		}
		stats = append(stats, stat{k, mean, v / float64(len(ms))})
	}
	out := map[string][]int{}
	if len(stats) == 0 {
		return out
	}
	vars := make([]float64, len(stats))
	for i, s := range stats {
		vars[i] = s.var_
	}
	sort.Float64s(vars)
	q3 := vars[int(math.Floor(0.75*float64(len(vars)-1)))]
	type cand struct {
		step      int
		shortfall float64
	}
	per := map[string][]cand{}
	for _, s := range stats {
		if s.var_ < q3 || s.var_ <= 1e-12 {
			continue
		}
		for _, m := range groups[s.key] {
			if d := s.mean - m.ret; d > 1e-12 {
				per[m.traj] = append(per[m.traj], cand{m.step, d})
			}
		}
	}
	for id, cs := range per {
		sort.Slice(cs, func(a, b int) bool {
			if cs[a].shortfall != cs[b].shortfall {
				return cs[a].shortfall > cs[b].shortfall
			}
			return cs[a].step < cs[b].step
		})
		seen := map[int]bool{}
		for _, c := range cs {
			if !seen[c.step] && len(out[id]) < cfg.K {
				seen[c.step] = true
				out[id] = append(out[id], c.step)
			}
		}
	}
	return out
}

// Groups splits trajectories by GRPO group, keeping order.
func Groups(trajs []*rollout.Trajectory) [][]*rollout.Trajectory {
	idx := map[int]int{}
	var out [][]*rollout.Trajectory
	for _, t := range trajs {
		i, ok := idx[t.Group]
		if !ok {
			i = len(out)
			idx[t.Group] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], t)
	}
	return out
}
