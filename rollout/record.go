package rollout

import (
	"io"

	"github.com/seedctl/seedctl/internal/atomicfile"

	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/seedctl/seedctl/envadapters"
)

// Step is one turn, token-in/token-out: the exact ids the server received
// and returned, so the trainer never re-tokenizes text.
type Step struct {
	Index int `json:"index"`
	// UserText is the user turn (observation, admissible actions, action
	// request) that skills are inserted into for teacher contexts.
	UserText string `json:"user_text"`
	// PromptIDs: in chat mode the tokens added since the previous reply
	// (the whole first prompt at step 0); in window mode the whole prompt.
	PromptIDs   []int     `json:"prompt_ids"`
	ResponseIDs []int     `json:"response_ids"`
	LogProbs    []float64 `json:"logprobs"` // sampling log-probs of ResponseIDs (ℓold)
	// ClosingIDs: in chat mode, the EOS appended when generation stopped
	// without it (not sampled, never trained on).
	ClosingIDs []int  `json:"closing_ids,omitempty"`
	Text       string `json:"text"`
	Action     string `json:"action"`
	// Place is where the action goes (the environment's
	// envadapters.Prompting.Place; "" for other actions and environments).
	Place string `json:"place,omitempty"`
	// Valid: the step counts as valid under the rollout's definition
	// (Config.Invalid); invalid steps are penalised.
	Valid bool `json:"valid"`
	// Rejected: the environment did not carry the action out ("Nothing
	// happens."), whatever the definition; its own metric.
	Rejected    bool   `json:"rejected,omitempty"`
	Observation string `json:"observation"` // the environment's answer
	// State: the environment's state line after the action, where it
	// reports one (envadapters.Step.State).
	State        string  `json:"state,omitempty"`
	EnvReward    float64 `json:"env_reward"`
	Reward       float64 `json:"reward"` // env reward minus the invalid-action penalty
	Done         bool    `json:"done"`
	FinishReason string  `json:"finish_reason"`
	GenMillis    int64   `json:"gen_ms"`
	EnvMillis    int64   `json:"env_ms"`
}

// Trajectory is one episode of one task.
type Trajectory struct {
	ID        string           `json:"id"`
	Iteration int              `json:"iteration"`
	Task      envadapters.Task `json:"task"`
	// Group is the GRPO group (one per task in a batch); Sample indexes the
	// trajectory within it.
	Group            int    `json:"group"`
	Sample           int    `json:"sample"`
	Mode             string `json:"mode"`
	System           string `json:"system"`
	FirstObservation string `json:"first_observation"`
	// FirstState: the environment's state line at reset, where it reports one.
	FirstState string  `json:"first_state,omitempty"`
	Steps      []Step  `json:"steps"`
	Return     float64 `json:"return"`
	Won        bool    `json:"won"`
	Score      float64 `json:"score"`
	EnvError   string  `json:"env_error,omitempty"`
	// Truncated: the rollout's step limit ended the episode, not the env.
	Truncated bool      `json:"truncated,omitempty"`
	Started   time.Time `json:"started"`
	Millis    int64     `json:"ms"`
}

// Sequence returns a chat-mode trajectory as one token sequence and marks
// which positions are sampled response tokens (the ones trained on).
func (t *Trajectory) Sequence() (ids []int, sampled []bool) {
	for _, s := range t.Steps {
		ids = append(ids, s.PromptIDs...)
		sampled = append(sampled, make([]bool, len(s.PromptIDs))...)
		ids = append(ids, s.ResponseIDs...)
		for range s.ResponseIDs {
			sampled = append(sampled, true)
		}
		ids = append(ids, s.ClosingIDs...)
		sampled = append(sampled, make([]bool, len(s.ClosingIDs))...)
	}
	return ids, sampled
}

// PromptFor returns the full prompt the server saw at step i.
func (t *Trajectory) PromptFor(i int) []int {
	if t.Mode == ModeWindow {
		return t.Steps[i].PromptIDs
	}
	var ids []int
	for k := 0; k < i; k++ {
		ids = append(append(append(ids, t.Steps[k].PromptIDs...), t.Steps[k].ResponseIDs...), t.Steps[k].ClosingIDs...)
	}
	return append(ids, t.Steps[i].PromptIDs...)
}

// InvalidSteps counts invalid actions.
func (t *Trajectory) InvalidSteps() int {
	n := 0
	for _, s := range t.Steps {
		if !s.Valid {
			n++
		}
	}
	return n
}

// RejectedSteps counts steps whose action the environment did not carry out.
func (t *Trajectory) RejectedSteps() int {
	n := 0
	for _, s := range t.Steps {
		if s.Rejected {
			n++
		}
	}
	return n
}

// Returns are the discounted returns from each step to the end,
// G_i = Σ_k≥i γ^(k−i) r_k, of per-step rewards reward(i, step) (nil: the
// environment's rewards).
func (t *Trajectory) Returns(gamma float64, reward func(i int, s Step) float64) []float64 {
	out := make([]float64, len(t.Steps))
	g := 0.0
	for i := len(t.Steps) - 1; i >= 0; i-- {
		r := t.Steps[i].Reward
		if reward != nil {
			r = reward(i, t.Steps[i])
		}
		g = r + gamma*g
		out[i] = g
	}
	return out
}

// WriteJSONL writes trajectories one per line, atomically.
func WriteJSONL(path string, trajs []*Trajectory) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("writing trajectories: %w", err)
	}
	return atomicfile.Write(path, func(w io.Writer) error {
		enc := json.NewEncoder(w)
		for _, t := range trajs {
			if err := enc.Encode(t); err != nil {
				return fmt.Errorf("writing trajectory %s: %w", t.ID, err)
			}
		}
		return nil
	})
}

// ReadJSONL reads a trajectories file, naming the line of a bad record.
func ReadJSONL(path string) ([]*Trajectory, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading trajectories: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 256<<20)
	var out []*Trajectory
	for line := 1; sc.Scan(); line++ {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var t Trajectory
		if err := json.Unmarshal(sc.Bytes(), &t); err != nil {
			return nil, fmt.Errorf("%s line %d: %w", path, line, err)
		}
		out = append(out, &t)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	return out, nil
}
