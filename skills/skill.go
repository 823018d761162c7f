// Package skills turns finished trajectories into hindsight skills and the
// teacher contexts SEED re-scores sampled tokens in: the analysis prompt,
// analyzers (the policy itself, a hosted model, or a built-in oracle),
// tolerant JSON parsing with one repair, critical-step selection, skill
// insertion with token-exact alignment, and a skill store.
package skills

import (
	"io"

	"github.com/seedctl/seedctl/internal/atomicfile"

	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Skill is what an analyzer writes about one trajectory.
type Skill struct {
	EpisodeSummary string         `json:"episode_summary"`
	EpisodeSkill   string         `json:"episode_skill"`
	StepSkills     map[int]string `json:"step_skills"` // 0-based step → advice
}

// Empty reports whether the skill carries no advice.
func (s *Skill) Empty() bool { return s == nil || s.EpisodeSkill == "" && len(s.StepSkills) == 0 }

// MarshalJSON writes step_skills with string keys, the shape analyzers use.
func (s Skill) MarshalJSON() ([]byte, error) {
	steps := map[string]string{}
	for k, v := range s.StepSkills {
		steps[strconv.Itoa(k)] = v
	}
	return json.Marshal(struct {
		EpisodeSummary string            `json:"episode_summary"`
		EpisodeSkill   string            `json:"episode_skill"`
		StepSkills     map[string]string `json:"step_skills"`
	}{s.EpisodeSummary, s.EpisodeSkill, steps})
}

// UnmarshalJSON reads the analyzer shape back.
func (s *Skill) UnmarshalJSON(b []byte) error {
	var raw struct {
		EpisodeSummary string            `json:"episode_summary"`
		EpisodeSkill   string            `json:"episode_skill"`
		StepSkills     map[string]string `json:"step_skills"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	s.EpisodeSummary, s.EpisodeSkill, s.StepSkills = raw.EpisodeSummary, raw.EpisodeSkill, map[int]string{}
	for k, v := range raw.StepSkills {
		n, err := strconv.Atoi(k)
		if err != nil {
			return fmt.Errorf("step_skills key %q is not a step number", k)
		}
		s.StepSkills[n] = v
	}
	return nil
}

// Mode selects which skills go into teacher contexts.
type Mode string

const (
	EpisodeOnly Mode = "episode_only"
	StepOnly    Mode = "step_only"
	EpisodeStep Mode = "episode_step"
)

// ParseMode validates a mode name.
func ParseMode(s string) (Mode, error) {
	switch Mode(s) {
	case EpisodeOnly, StepOnly, EpisodeStep:
		return Mode(s), nil
	}
	return "", fmt.Errorf("skill mode %q: want episode_only, step_only or episode_step", s)
}

// Apply drops what the mode excludes.
func (m Mode) Apply(s *Skill) *Skill {
	if s == nil {
		return nil
	}
	out := &Skill{EpisodeSummary: s.EpisodeSummary, StepSkills: map[int]string{}}
	if m != StepOnly {
		out.EpisodeSkill = s.EpisodeSkill
	}
	if m != EpisodeOnly {
		for k, v := range s.StepSkills {
			out.StepSkills[k] = v
		}
	}
	return out
}

// Record is one line of the skill store: a skill with its provenance.
type Record struct {
	TrajectoryID  string `json:"trajectory_id"`
	TaskID        string `json:"task_id"`
	Iteration     int    `json:"iteration"`
	Snapshot      string `json:"snapshot"` // weight version / checkpoint that wrote it
	Analyzer      string `json:"analyzer"`
	Won           bool   `json:"won"`
	CriticalSteps []int  `json:"critical_steps"`
	Prompt        string `json:"prompt,omitempty"`
	Raw           string `json:"raw"`
	Repaired      bool   `json:"repaired,omitempty"`
	RepairRaw     string `json:"repair_raw,omitempty"`
	Skill         *Skill `json:"skill,omitempty"`
	ParseError    string `json:"parse_error,omitempty"`
}

// WriteStore writes records as JSONL, atomically.
func WriteStore(path string, recs []Record) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("writing skills: %w", err)
	}
	return atomicfile.Write(path, func(w io.Writer) error {
		enc := json.NewEncoder(w)
		for i := range recs {
			if err := enc.Encode(&recs[i]); err != nil {
				return fmt.Errorf("writing skill of %s: %w", recs[i].TrajectoryID, err)
			}
		}
		return nil
	})
}

// ReadStore reads a skills JSONL file.
func ReadStore(path string) ([]Record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading skills: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	var out []Record
	for line := 1; sc.Scan(); line++ {
		if len(strings.TrimSpace(sc.Text())) == 0 {
			continue
		}
		var r Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("%s line %d: %w", path, line, err)
		}
		out = append(out, r)
	}
	return out, sc.Err()
}

func sortedSteps(m map[int]string) []int {
	ks := make([]int, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Ints(ks)
	return ks
}
