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
	// AdvNormStd is GRPO's: A = (r − mean_G r) / (std_G r + ε).
	AdvNormStd = "std"
	// AdvNormNone is mean-only normalisation, A = r − mean_G r: verl's
	// norm_adv_by_std_in_grpo=False (the reference WebShop script's
	// mean_norm), also Dr. GRPO's.
	AdvNormNone = "none"
)

// Advantage granularities (RLConfig.Advantage).
const (
	// AdvStepRows is the public SEED code's (verl-agent's multi-turn
	// GRPO): every step of every trajectory is a row with reward
	// scale·outcome − penalty·[this step's action invalid], normalised over
	// all step rows of the task's group. A long losing episode contributes
	// many rows to the group's statistics, a short winning one few.
	AdvStepRows = "step_rows"
	// AdvTrajectory is the paper's notation: one return per trajectory,
	// scale·outcome − penalty·(invalid steps), normalised over the G
	// trajectories and copied to every step.
	AdvTrajectory = "trajectory"
)

// Outcome rewards (RLConfig.Outcome).
const (
	// OutcomeSuccess rewards a won episode with 1 (before the scale), any
	// other with 0: the reference trains WebShop on 10 only at score 1.
	OutcomeSuccess = "success"
	// OutcomeEnv is the environment's own reward summed over the episode
	// (WebShop's graded score in [0, 1]; 0/1 elsewhere).
	OutcomeEnv = "env"
)

// AdvantageParams are what GRPO advantages depend on.
type AdvantageParams struct {
	Mode    string  // AdvStepRows or AdvTrajectory
	Norm    string  // AdvNormStd or AdvNormNone
	Outcome string  // OutcomeSuccess or OutcomeEnv
	Scale   float64 // reward for a full outcome (reference 10)
	Penalty float64 // per invalid step (reference 0.1)
	Eps     float64 // ε of the std normalisation
	// RejectedCost is taken off the normalised advantage of every step
	// whose action the environment rejected (ours; 0 in the public code).
	RejectedCost float64
	// StepWeight > 0 adds GiGPO's step-level advantage, this many times,
	// to every step's: see stepGroupAdvantages. 0: off (the public SEED
	// code's GRPO).
	StepWeight float64
	// StepKey says what makes two steps' states the same: StepKeyObservation
	// ("" too) or StepKeyState.
	StepKey string
	// StepRejectedCost is a step reward of −this on every rejected action,
	// in the step-level returns only.
	StepRejectedCost float64
	// Gamma discounts the step-level returns (GiGPO's γ).
	Gamma float64
}

// GroupStats describe the iteration's GRPO groups: Flat is the share of
// groups whose rows all carry one reward (GRPO has no gradient there),
// FlatFailing the share of groups in which no trajectory won and
// FlatWinning in which all did.
type GroupStats struct {
	Groups                         int
	Flat, FlatFailing, FlatWinning float64
	// StepGrouped is, with the step-level advantage on, the share of step
	// rows whose state at least one other step of the group shared (the
	// rows GiGPO's term can move); StepGroupSize their mean group size.
	StepGrouped, StepGroupSize float64
}

// outcome is a trajectory's outcome before the scale.
func (p AdvantageParams) outcome(t *rollout.Trajectory) float64 {
	if p.Outcome == OutcomeEnv {
		r := 0.0
		for _, s := range t.Steps {
			r += s.EnvReward
		}
		return r
	}
	if t.Won {
		return 1
	}
	return 0
}

// hasRow says whether step s becomes a training row (it has sampled tokens).
func hasRow(s rollout.Step) bool { return len(s.ResponseIDs) > 0 }

// StepAdvantages computes GRPO advantages for every step of every
// trajectory (indexed by trajectory ID, then step; a step without sampled
// tokens gets 0). Episodes whose environment broke are left out of the
// statistics and get no advantages: they are not evidence. Statistics use
// the unbiased std as verl's GRPO does; a group whose rewards are all equal
// gets exactly 0 (not the rounding residue of r − mean). A step the
// environment rejected then loses p.RejectedCost: after the normalisation,
// so the charge keeps its size in groups where nobody won instead of
// being blown up to a full-size advantage by their tiny std. With
// p.StepWeight > 0, GiGPO's step-level advantage is added last.
func StepAdvantages(trajs []*rollout.Trajectory, p AdvantageParams) (map[string][]float64, GroupStats) {
	out := map[string][]float64{}
	var gs GroupStats
	var flat, flatFail, flatWin int
	var stepGrouped, stepSizeSum, stepRows int
	for _, g := range skills.Groups(trajs) {
		var members []*rollout.Trajectory
		for _, t := range g {
			if t.EnvError == "" {
				members = append(members, t)
			}
		}
		if len(members) == 0 {
			continue
		}
		gs.Groups++
		// One reward per statistics unit: a step row or a trajectory.
		var rewards []float64
		unit := make([][]int, len(members)) // member → indexes into rewards, per step
		for m, t := range members {
			unit[m] = make([]int, len(t.Steps))
			base := p.Scale * p.outcome(t)
			if p.Mode == AdvTrajectory {
				r := base
				for _, s := range t.Steps {
					if !s.Valid {
						r -= p.Penalty
					}
				}
				for i := range t.Steps {
					unit[m][i] = len(rewards)
				}
				rewards = append(rewards, r)
				continue
			}
			for i, s := range t.Steps {
				unit[m][i] = -1
				if !hasRow(s) {
					continue
				}
				r := base
				if !s.Valid {
					r -= p.Penalty
				}
				unit[m][i] = len(rewards)
				rewards = append(rewards, r)
			}
		}
		wins := 0
		for _, t := range members {
			if t.Won {
				wins++
			}
		}
		adv := normalise(rewards, p.Norm, p.Eps)
		if isFlat(rewards) {
			flat++
		}
		switch wins {
		case 0:
			flatFail++
		case len(members):
			flatWin++
		}
		for m, t := range members {
			a := make([]float64, len(t.Steps))
			for i, u := range unit[m] {
				if u >= 0 {
					a[i] = adv[u]
				}
				if p.RejectedCost != 0 && t.Steps[i].Rejected && hasRow(t.Steps[i]) {
					a[i] -= p.RejectedCost
				}
			}
			out[t.ID] = a
		}
		if p.StepWeight > 0 {
			grouped, size, rows := stepGroupAdvantages(members, p, out)
			stepGrouped += grouped
			stepSizeSum += size
			stepRows += rows
		}
	}
	if gs.Groups > 0 {
		n := float64(gs.Groups)
		gs.Flat, gs.FlatFailing, gs.FlatWinning = float64(flat)/n, float64(flatFail)/n, float64(flatWin)/n
	}
	if stepRows > 0 {
		gs.StepGrouped = float64(stepGrouped) / float64(stepRows)
	}
	if stepGrouped > 0 {
		gs.StepGroupSize = float64(stepSizeSum) / float64(stepGrouped)
	}
	return out, gs
}

// stepGroupAdvantages adds GiGPO's step-level advantage (Feng et al.,
// "Group-in-Group Policy Optimization for LLM Agent Training", 2025; the
// step groups of verl-agent's gigpo) to adv, the episode-level advantages
// of one task's group: steps of the group's trajectories that act from
// the same environment state form a step group; each step's discounted
// return from there, G_t = Σ_k≥t γ^(k−t) r_k (r_k: the invalid-step
// penalty on invalid steps, p.StepRejectedCost on rejected ones,
// scale·outcome added on the last), is
// normalised within its step group as the episode rewards are (p.Norm),
// and p.StepWeight times it is added to the step's advantage. A state is
// the last observation the environment answered with an action it carried
// out (the task's first observation before any): a rejected action
// ("Nothing happens.") leaves the state as it was. Like GiGPO's anchor
// states, the key is the observation text, so states the text does not
// tell apart (what the agent holds) share a group, unless p.StepKey is
// StepKeyState: then the environment's state line is part of it. It
// returns how many step rows shared their state with another step, the
// sum of those steps' group sizes, and how many step rows there were.
func stepGroupAdvantages(members []*rollout.Trajectory, p AdvantageParams, adv map[string][]float64) (grouped, sizeSum, rows int) {
	type ref struct{ m, i int }
	groups := map[string][]ref{}
	returns := make([][]float64, len(members))
	for m, t := range members {
		n := len(t.Steps)
		returns[m] = t.Returns(p.Gamma, func(i int, s rollout.Step) float64 {
			r := 0.0
			if !s.Valid {
				r -= p.Penalty
			}
			if s.Rejected {
				r -= p.StepRejectedCost
			}
			if i == n-1 {
				r += p.Scale * p.outcome(t)
			}
			return r
		})
		state := p.stateKey(t.FirstObservation, t.FirstState)
		for i, s := range t.Steps {
			if hasRow(s) {
				rows++
				groups[state] = append(groups[state], ref{m, i})
			}
			if !s.Rejected && s.Valid {
				state = p.stateKey(s.Observation, s.State)
			}
		}
	}
	// Every step is in one step group, so the groups' order does not
	// matter: each advantage gets one addition.
	for _, g := range groups {
		if len(g) < 2 {
			continue
		}
		grouped += len(g)
		sizeSum += len(g) * len(g)
		r := make([]float64, len(g))
		for j, x := range g {
			r[j] = returns[x.m][x.i]
		}
		a := normalise(r, p.Norm, p.Eps)
		for j, x := range g {
			adv[members[x.m].ID][x.i] += p.StepWeight * a[j]
		}
	}
	return grouped, sizeSum, rows
}

// Step-group keys (AdvantageParams.StepKey, rl.step_group_key).
const (
	StepKeyObservation = "observation" // the observation text (GiGPO's anchors)
	StepKeyState       = "state"       // the observation and the env's state line
)

// stateKey is the step-group key of an observation and the environment's
// state line.
func (p AdvantageParams) stateKey(obs, state string) string {
	if p.StepKey != StepKeyState || state == "" {
		return obs
	}
	return obs + "\x00" + state
}

func isFlat(r []float64) bool {
	for _, v := range r {
		if v != r[0] {
			return false
		}
	}
	return true
}

// normalise is GRPO's group normalisation of rewards r. Fewer than two
// values or all equal: zeros.
func normalise(r []float64, norm string, eps float64) []float64 {
	out := make([]float64, len(r))
	if len(r) < 2 || isFlat(r) {
		return out
	}
	mean := 0.0
	for _, v := range r {
		mean += v
	}
	mean /= float64(len(r))
	std := 0.0
	for _, v := range r {
		std += (v - mean) * (v - mean)
	}
	std = math.Sqrt(std / float64(len(r)-1))
	for i, v := range r {
		if norm == AdvNormNone {
			out[i] = v - mean
		} else {
			out[i] = (v - mean) / (std + eps)
		}
	}
	return out
}

// plainRows turns a trajectory into training rows: one per step in window
// mode (the step's prompt and response), one per trajectory in chat mode,
// where each step's tokens carry that step's advantage. adv holds one
// advantage per step (nil: all 0). Train marks sampled response tokens;
// OldLogP holds the sampling log-probs the server returned.
func plainRows(t *rollout.Trajectory, adv []float64) ([]Row, error) {
	stepAdv := func(i int) float64 {
		if i < len(adv) {
			return adv[i]
		}
		return 0
	}
	if t.Mode == rollout.ModeChat {
		ids, sampled := t.Sequence()
		old := make([]float32, len(ids))
		perPos := make([]float32, len(ids))
		k := 0
		for i, s := range t.Steps {
			k += len(s.PromptIDs)
			for j := range s.ResponseIDs {
				if j < len(s.LogProbs) {
					old[k+j] = float32(s.LogProbs[j])
				}
				perPos[k+j] = float32(stepAdv(i))
			}
			k += len(s.ResponseIDs) + len(s.ClosingIDs)
		}
		if len(ids) < 2 {
			return nil, nil
		}
		return []Row{{ID: t.ID, IDs: ids, Train: sampled, Advantages: perPos, OldLogP: old}}, nil
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
		rows = append(rows, Row{ID: fmt.Sprintf("%s/%d", t.ID, i), IDs: ids, Train: train, Advantage: stepAdv(i), OldLogP: old})
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
	r.TeacherLogP = scatterSpans(len(r.IDs), p, lp)
}

// scatterSpans places log-probs scored on p's teacher sequence at the plain
// positions of its distilled spans (n positions, 0 elsewhere).
func scatterSpans(n int, p skills.SeqPair, lp []float32) []float32 {
	out := make([]float32, n)
	for _, sp := range p.Spans {
		if !sp.Distill {
			continue
		}
		for j := 0; j < sp.Len; j++ {
			out[sp.PlainStart+j] = lp[sp.TeacherStart+j]
		}
	}
	return out
}

// teacherPositions marks the positions of p's teacher sequence whose
// plain counterparts r distils: where the teacher's distribution is read.
func teacherPositions(r *Row, p skills.SeqPair) []bool {
	out := make([]bool, len(p.Teacher))
	for _, sp := range p.Spans {
		if !sp.Distill {
			continue
		}
		for j := 0; j < sp.Len; j++ {
			if r.Distill != nil && r.Distill[sp.PlainStart+j] {
				out[sp.TeacherStart+j] = true
			}
		}
	}
	return out
}

// scatterDists places the distributions read on p's teacher sequence at
// the plain positions of its distilled spans (n positions, nil elsewhere).
func scatterDists(n int, p skills.SeqPair, ds []*TokenDist) []*TokenDist {
	out := make([]*TokenDist, n)
	for _, sp := range p.Spans {
		if !sp.Distill {
			continue
		}
		for j := 0; j < sp.Len; j++ {
			out[sp.PlainStart+j] = ds[sp.TeacherStart+j]
		}
	}
	return out
}

// sameSpans checks that a contrastive baseline context distils exactly
// the teacher context's tokens: its skill text sits in the same places.
func sameSpans(tc, base *skills.TeacherContext) error {
	if len(tc.Pairs) != len(base.Pairs) {
		return fmt.Errorf("contrastive baseline of %s: %d pairs, teacher %d: %w", tc.TrajectoryID, len(base.Pairs), len(tc.Pairs), skills.ErrMisaligned)
	}
	for i := range tc.Pairs {
		a, b := tc.Pairs[i].Spans, base.Pairs[i].Spans
		ok := len(a) == len(b)
		for j := 0; ok && j < len(a); j++ {
			ok = a[j].Step == b[j].Step && a[j].PlainStart == b[j].PlainStart && a[j].Len == b[j].Len && a[j].Distill == b[j].Distill
		}
		if !ok {
			return fmt.Errorf("contrastive baseline of %s pair %d: distilled spans differ from the teacher's: %w", tc.TrajectoryID, i, skills.ErrMisaligned)
		}
	}
	return nil
}
