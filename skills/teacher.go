package skills

import (
	"errors"
	"fmt"
	"math/rand/v2"

	"github.com/seedctl/seedctl/rollout"
)

// Prompter turns user turns into token ids with the policy's chat template
// (rollout.Policy implements it).
type Prompter interface {
	StartIDs(system, user string) ([]int, error)
	NextIDs(system, user string) ([]int, error)
}

// Span locates one step's sampled response tokens in a plain sequence and
// in its teacher sequence; the ids there are identical.
type Span struct {
	Step         int  `json:"step"`
	PlainStart   int  `json:"plain_start"`
	TeacherStart int  `json:"teacher_start"`
	Len          int  `json:"len"`
	Distill      bool `json:"distill"` // the step's context received a skill
}

// SeqPair is a plain sequence and the same with skills inserted.
type SeqPair struct {
	Plain   []int  `json:"plain"`
	Teacher []int  `json:"teacher"`
	Spans   []Span `json:"spans"`
}

// TeacherContext is what the trainer rescores for one trajectory: one pair
// per trajectory in chat mode, one per step in window mode.
type TeacherContext struct {
	TrajectoryID string    `json:"trajectory_id"`
	Pairs        []SeqPair `json:"pairs"`
	// Fallbacks counts the steps whose skill went somewhere other than
	// its intended place (rollout.Placement.Fallback): no task line in the
	// turn, or no action request.
	Fallbacks int `json:"fallbacks,omitempty"`
}

// ErrMisaligned means a teacher sequence's response tokens differ from the
// sampled ones (a bug, never expected).
var ErrMisaligned = errors.New("teacher context misaligned with sampled tokens")

// ErrSkillNotPlaced means a step marked for distillation got a teacher
// context identical to its plain one: its teacher would be the policy
// itself (Δ = 0, gate 0.5), a silent NLL on its own samples.
var ErrSkillNotPlaced = errors.New("skill could not be placed in the teacher context")

// BuildTeacher inserts sk (filtered by mode) into t's prompts: the episode
// skill after the task line, each step skill before its step's action
// request. The sampled response ids are copied unchanged; every span is
// verified.
func BuildTeacher(t *rollout.Trajectory, sk *Skill, mode Mode, tmpl rollout.Template, p Prompter) (*TeacherContext, error) {
	s := mode.Apply(sk)
	if s == nil {
		s = &Skill{StepSkills: map[int]string{}}
	}
	tc := &TeacherContext{TrajectoryID: t.ID}
	distill := func(i int) bool { return s.EpisodeSkill != "" || s.StepSkills[i] != "" }
	// place inserts step i's skills and checks that a distilled step's
	// turn changed.
	place := func(i int, user, epi string) (string, error) {
		out, pl := tmpl.Place(user, epi, s.StepSkills[i])
		if pl.Fallback() {
			tc.Fallbacks++
		}
		if (epi != "" || s.StepSkills[i] != "") && out == user {
			return "", fmt.Errorf("teacher context of %s step %d: %w", t.ID, i, ErrSkillNotPlaced)
		}
		return out, nil
	}
	switch t.Mode {
	case rollout.ModeChat:
		var pair SeqPair
		for i, st := range t.Steps {
			epi := ""
			if i == 0 {
				epi = s.EpisodeSkill // the task line is in the first turn
			}
			user, err := place(i, st.UserText, epi)
			if err != nil {
				return nil, err
			}
			var ids []int
			if i == 0 {
				ids, err = p.StartIDs(t.System, user)
			} else {
				ids, err = p.NextIDs(t.System, user)
			}
			if err != nil {
				return nil, fmt.Errorf("teacher context of %s step %d: %w", t.ID, i, err)
			}
			pair.Plain = append(pair.Plain, st.PromptIDs...)
			pair.Teacher = append(pair.Teacher, ids...)
			pair.Spans = append(pair.Spans, Span{Step: i, PlainStart: len(pair.Plain), TeacherStart: len(pair.Teacher), Len: len(st.ResponseIDs), Distill: distill(i)})
			pair.Plain = append(append(pair.Plain, st.ResponseIDs...), st.ClosingIDs...)
			pair.Teacher = append(append(pair.Teacher, st.ResponseIDs...), st.ClosingIDs...)
		}
		tc.Pairs = []SeqPair{pair}
	case rollout.ModeWindow:
		for i, st := range t.Steps {
			user, err := place(i, st.UserText, s.EpisodeSkill)
			if err != nil {
				return nil, err
			}
			ids, err := p.StartIDs(t.System, user)
			if err != nil {
				return nil, fmt.Errorf("teacher context of %s step %d: %w", t.ID, i, err)
			}
			pair := SeqPair{
				Plain:   append(append([]int(nil), st.PromptIDs...), st.ResponseIDs...),
				Teacher: append(append([]int(nil), ids...), st.ResponseIDs...),
				Spans:   []Span{{Step: i, PlainStart: len(st.PromptIDs), TeacherStart: len(ids), Len: len(st.ResponseIDs), Distill: distill(i)}},
			}
			tc.Pairs = append(tc.Pairs, pair)
		}
	default:
		return nil, fmt.Errorf("teacher context of %s: unknown prompt mode %q", t.ID, t.Mode)
	}
	if err := tc.Verify(); err != nil {
		return nil, err
	}
	return tc, nil
}

// Verify checks that every span holds identical ids in both sequences.
func (tc *TeacherContext) Verify() error {
	for pi, p := range tc.Pairs {
		for _, s := range p.Spans {
			if s.PlainStart+s.Len > len(p.Plain) || s.TeacherStart+s.Len > len(p.Teacher) {
				return fmt.Errorf("%s pair %d step %d: span out of range: %w", tc.TrajectoryID, pi, s.Step, ErrMisaligned)
			}
			for k := 0; k < s.Len; k++ {
				if p.Plain[s.PlainStart+k] != p.Teacher[s.TeacherStart+k] {
					return fmt.Errorf("%s pair %d step %d token %d: %w", tc.TrajectoryID, pi, s.Step, k, ErrMisaligned)
				}
			}
		}
	}
	return nil
}

// Shuffle is the random-skill baseline: each trajectory gets another
// trajectory's skill (a derangement when there are at least two).
func Shuffle(sks []*Skill, seed uint64) []*Skill {
	out := make([]*Skill, len(sks))
	if len(sks) < 2 {
		copy(out, sks)
		return out
	}
	r := rand.New(rand.NewPCG(seed, 99))
	perm := r.Perm(len(sks))
	// Rotate the permutation by one so no index maps to itself.
	for i := range perm {
		out[perm[i]] = sks[perm[(i+1)%len(perm)]]
	}
	return out
}

// Transplant is the contrastive gap's baseline skill: own's shape (an
// episode skill where own has one, step skills at own's steps) carrying
// donor's words, so BuildTeacher puts text in the same places, marks the
// same tokens distilled, and the two teachers differ only in what the
// text says. Step texts are donor's in step order, cycled (its episode
// skill when it has no step skills); the episode text is donor's episode
// skill (its first step skill when it has none). nil when either is
// empty.
func Transplant(own, donor *Skill) *Skill {
	if own.Empty() || donor.Empty() {
		return nil
	}
	var texts []string
	for _, k := range sortedSteps(donor.StepSkills) {
		texts = append(texts, donor.StepSkills[k])
	}
	if len(texts) == 0 {
		texts = []string{donor.EpisodeSkill}
	}
	out := &Skill{EpisodeSummary: donor.EpisodeSummary, StepSkills: map[int]string{}}
	if own.EpisodeSkill != "" {
		out.EpisodeSkill = donor.EpisodeSkill
		if out.EpisodeSkill == "" {
			out.EpisodeSkill = texts[0]
		}
	}
	for i, k := range sortedSteps(own.StepSkills) {
		out.StepSkills[k] = texts[i%len(texts)]
	}
	return out
}

// Donors picks, for each of n trajectories, a seeded uniform choice among
// the others whose task differs and whose has is true; -1 where there is
// none. task[i] names trajectory i's task.
func Donors(task []string, has []bool, seed uint64) []int {
	r := rand.New(rand.NewPCG(seed, 101))
	out := make([]int, len(task))
	var cand []int
	for i := range task {
		cand = cand[:0]
		for j := range task {
			if has[j] && task[j] != task[i] {
				cand = append(cand, j)
			}
		}
		out[i] = -1
		if len(cand) > 0 {
			out[i] = cand[r.IntN(len(cand))]
		}
	}
	return out
}
