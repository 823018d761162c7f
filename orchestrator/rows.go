package orchestrator

import (
	"fmt"
	"math"
	"slices"

	"github.com/seedctl/seedctl/rollout"
	"github.com/seedctl/seedctl/skills"
)

// Advantage normalisations (RLConfig.AdvNorm).
const (
	// AdvNormStd is GRPO's: A_i = (R_i − mean_G R) / (std_G R + ε).
	AdvNormStd = "std"
	// AdvNormNone is Dr. GRPO's: A_i = R_i − mean_G R. Without the division
	// a group whose returns differ only by small shaping terms (the
	// invalid-action penalty when nobody won) gets small advantages instead
	// of full-size ones.
	AdvNormNone = "none"
)

// Advantages computes GRPO advantages per trajectory ID:
// A_i = (R_i − mean_G R) / (std_G R + ε) within each group (unbiased std,
// as verl's GRPO); with norm AdvNormNone the division is left out. A flat
// group — one member, or all returns equal — gets exactly 0 (not the
// rounding residue of R − mean), so dropFlat recognises it.
func Advantages(trajs []*rollout.Trajectory, eps float64, norm string) map[string]float64 {
	out := map[string]float64{}
	for _, g := range skills.Groups(trajs) {
		flat := true
		mean := 0.0
		for _, t := range g {
			mean += t.Return
			flat = flat && t.Return == g[0].Return
		}
		if flat {
			for _, t := range g {
				out[t.ID] = 0
			}
			continue
		}
		mean /= float64(len(g))
		std := 0.0
		for _, t := range g {
			std += (t.Return - mean) * (t.Return - mean)
		}
		std = math.Sqrt(std / float64(len(g)-1))
		for _, t := range g {
			if norm == AdvNormNone {
				out[t.ID] = t.Return - mean
			} else {
				out[t.ID] = (t.Return - mean) / (std + eps)
			}
		}
	}
	return out
}

// plainRows turns a trajectory into training rows: one per step in window
// mode (the step's prompt and response), one per trajectory in chat mode.
// Train marks sampled response tokens; OldLogP holds the sampling
// log-probs the server returned.
func plainRows(t *rollout.Trajectory, adv float64) ([]Row, error) {
	if t.Mode == rollout.ModeChat {
		ids, sampled := t.Sequence()
		old := make([]float32, len(ids))
		k := 0
		for _, s := range t.Steps {
			k += len(s.PromptIDs)
			for j := range s.ResponseIDs {
				if j < len(s.LogProbs) {
					old[k+j] = float32(s.LogProbs[j])
				}
			}
			k += len(s.ResponseIDs) + len(s.ClosingIDs)
		}
		if len(ids) < 2 {
			return nil, nil
		}
		return []Row{{ID: t.ID, IDs: ids, Train: sampled, Advantage: adv, OldLogP: old}}, nil
	}
	var rows []Row
	for i, s := range t.Steps {
		if len(s.ResponseIDs) == 0 {
			continue
		}
		ids := append(append([]int{}, s.PromptIDs...), s.ResponseIDs...)
		train := make([]bool, len(ids))
		old := make([]float32, len(ids))
		for j := range s.ResponseIDs {
			train[len(s.PromptIDs)+j] = true
			if j < len(s.LogProbs) {
				old[len(s.PromptIDs)+j] = float32(s.LogProbs[j])
			}
		}
		if len(s.PromptIDs) == 0 {
			return nil, fmt.Errorf("trajectory %s step %d: empty prompt", t.ID, i)
		}
		rows = append(rows, Row{ID: fmt.Sprintf("%s/%d", t.ID, i), IDs: ids, Train: train, Advantage: adv, OldLogP: old})
	}
	return rows, nil
}

// attachTeacher marks the distilled tokens of rows (the plain rows of one
// trajectory) from its teacher context and returns, per row, the teacher
// sequence to rescore (nil where nothing is distilled).
func attachTeacher(rows []Row, tc *skills.TeacherContext) ([][]int, error) {
	if len(tc.Pairs) != len(rows) {
		return nil, fmt.Errorf("teacher context of %s: %d pairs for %d rows: %w", tc.TrajectoryID, len(tc.Pairs), len(rows), skills.ErrMisaligned)
	}
	out := make([][]int, len(rows))
	for i, p := range tc.Pairs {
		r := &rows[i]
		if !slices.Equal(p.Plain, r.IDs) {
			return nil, fmt.Errorf("teacher context of %s pair %d: plain sequence differs from the trajectory's: %w", tc.TrajectoryID, i, skills.ErrMisaligned)
		}
		any := false
		for _, sp := range p.Spans {
			if !sp.Distill {
				continue
			}
			if r.Distill == nil {
				r.Distill = make([]bool, len(r.IDs))
			}
			for j := 0; j < sp.Len; j++ {
				if r.Train[sp.PlainStart+j] {
					r.Distill[sp.PlainStart+j] = true
					any = true
				}
			}
		}
		if any {
			out[i] = p.Teacher
		} else {
			r.Distill = nil
		}
	}
	return out, nil
}

// fillTeacher copies teacher log-probs (scored on the teacher sequence of
// pair i) onto the plain positions of the distilled spans.
func fillTeacher(r *Row, p skills.SeqPair, lp []float32) {
	r.TeacherLogP = make([]float32, len(r.IDs))
	for _, sp := range p.Spans {
		if !sp.Distill {
			continue
		}
		for j := 0; j < sp.Len; j++ {
			r.TeacherLogP[sp.PlainStart+j] = lp[sp.TeacherStart+j]
		}
	}
}
