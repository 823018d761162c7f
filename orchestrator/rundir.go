package orchestrator

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/seedctl/seedctl/internal/atomicfile"
	"github.com/seedctl/seedctl/internal/jsonl"
	"github.com/seedctl/seedctl/internal/tfevents"
)

// State is state.json: what a resumed run needs to continue. It is written
// (atomically) only after everything the next step needs is on disk.
type State struct {
	Version    int    `json:"version"`
	Algo       string `json:"algo"`
	Seed       int64  `json:"seed"`
	Stage1Done bool   `json:"stage1_done"`
	// Iteration is the number of finished stage-2 iterations.
	Iteration int `json:"iteration"`
	// Checkpoint is the current policy (relative to the run directory, or
	// the base model's absolute path before any training).
	Checkpoint string `json:"checkpoint"`
	Reference  string `json:"reference"`
	// BaseWeights is the sha256 of the base model's model.safetensors
	// when the run started: the base's identity (a recipe builds other
	// weights on other CPUs); empty for sharded or unreadable weights.
	BaseWeights string `json:"base_weights_sha256,omitempty"`
	// Files are the size and sha256 of every file of the checkpoint and
	// the reference, recorded when they were written and checked on
	// resume (relative to the run folder; empty before stage 1).
	Files map[string]FileSum `json:"files,omitempty"`
	// DataCursor is the number of training tasks consumed so far.
	DataCursor int `json:"data_cursor"`
	Refusals   int `json:"refusals_in_a_row"`
	// MiniBatchesDone counts stage 2's mini-batches of finished iterations
	// (refused and skipped ones included): the learning-rate schedule's
	// position.
	MiniBatchesDone int        `json:"mini_batches_done,omitempty"`
	BaseEval        *EvalPoint `json:"base_eval,omitempty"`
	// BaseEvalFrom names the run the base evaluation was measured in when
	// this run reused it (Deps.BaseEval); empty when measured here.
	BaseEvalFrom string     `json:"base_eval_from,omitempty"`
	FinalEval    *EvalPoint `json:"final_eval,omitempty"`
	// ConfigSHA256 and ConfigAtStart are config.json as the run wrote it
	// (or as a resume last accepted it): a resume refuses a changed file
	// unless told which keys changed (ConfigChanges records those).
	ConfigSHA256  string          `json:"config_sha256,omitempty"`
	ConfigAtStart json.RawMessage `json:"config_at_start,omitempty"`
	ConfigChanges []ConfigChange  `json:"config_changes,omitempty"`
	// Stopped says why training ended before the configured iterations
	// (eval.plateau_patience); empty when it ran them all.
	Stopped string    `json:"stopped,omitempty"`
	Done    bool      `json:"done"`
	Updated time.Time `json:"updated"`
	// Seconds is the wall time spent on the saved progress, summed over
	// the processes that ran it (time between a kill and its resume does
	// not count; unsaved work lost to a kill is counted when it is redone).
	Seconds float64 `json:"seconds,omitempty"`
}

const stateVersion = 1

// Paths of a run directory (docs/algorithm.md, where training's run directory is described).
type runDir string

func (d runDir) path(parts ...string) string {
	return filepath.Join(append([]string{string(d)}, parts...)...)
}
func (d runDir) config() string     { return d.path("config.json") }
func (d runDir) state() string      { return d.path("state.json") }
func (d runDir) metrics() string    { return d.path("metrics.jsonl") }
func (d runDir) report() string     { return d.path("report") }
func (d runDir) trajs(k int) string { return d.path("trajectories", fmt.Sprintf("iter-%d.jsonl", k)) }
func (d runDir) skills(k int) string {
	return d.path("skills", fmt.Sprintf("iter-%d.jsonl", k))
}
func (d runDir) checkpoint(name string) string { return d.path("checkpoints", name) }

// abs resolves a checkpoint recorded in the state.
func (d runDir) abs(p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return d.path(p)
}

// writeAtomic writes b to path through a synced temporary file and rename.
func writeAtomic(path string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return atomicfile.WriteBytes(path, b)
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if err := writeAtomic(path, append(b, '\n')); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

func readState(d runDir) (*State, error) {
	b, err := os.ReadFile(d.state())
	if err != nil {
		return nil, fmt.Errorf("reading run state: %w", err)
	}
	s, err := ParseState(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", d.state(), err)
	}
	return s, nil
}

// MetricsLine is one line of metrics.jsonl.
type MetricsLine struct {
	Kind      string             `json:"kind"` // "iteration", "eval", "eval_sampled", "stage1"
	Iteration int                `json:"iteration"`
	Time      time.Time          `json:"time"`
	Values    map[string]float64 `json:"values"`
	// Split and PerFamily for evals.
	Split     string             `json:"split,omitempty"`
	PerFamily map[string]float64 `json:"per_family,omitempty"`
	// Base names the base policy's weights (sha256, 12 hex digits) on the
	// base evaluation's lines (iteration 0).
	Base string `json:"base,omitempty"`
}

// ReadMetrics reads metrics.jsonl, naming a bad line; a last line torn by
// a kill is dropped (internal/jsonl).
func ReadMetrics(path string) ([]MetricsLine, error) {
	return jsonl.Read[MetricsLine](path, nil)
}

// appendMetrics appends lines to metrics.jsonl and syncs.
func appendMetrics(path string, lines ...MetricsLine) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("appending metrics: %w", err)
	}
	defer f.Close()
	for _, l := range lines {
		b, err := json.Marshal(l)
		if err != nil {
			return err
		}
		if _, err := f.Write(append(b, '\n')); err != nil {
			return fmt.Errorf("appending metrics: %w", err)
		}
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("appending metrics: %w", err)
	}
	return writeScalars(filepath.Dir(path), lines)
}

// writeScalars puts metrics lines into the run folder's TensorBoard event
// file (`tensorboard --logdir runs/` shows every run live): iteration
// values as train/<name>, evaluations as eval_<split>/<name> (and
// eval_<split>_family/<family>), stage 1 as stage1/<name>, each at its
// iteration. A resumed run appends to the same file.
func writeScalars(dir string, lines []MetricsLine) error {
	w, err := tfevents.Open(dir)
	if err != nil {
		return err
	}
	for _, l := range lines {
		prefix := "train"
		switch l.Kind {
		case "eval":
			prefix = "eval_" + l.Split
		case "iteration":
		default:
			prefix = l.Kind
		}
		vals := map[string]float64{}
		for k, v := range l.Values {
			vals[tfevents.Tag(prefix, k)] = v
		}
		for fam, v := range l.PerFamily {
			vals[tfevents.Tag(prefix+"_family", fam)] = v
		}
		if err := w.Scalars(int64(l.Iteration), l.Time, vals); err != nil {
			w.Close()
			return err
		}
	}
	return w.Close()
}

// trimMetrics keeps only lines of finished work (iterations ≤ done, and
// stage-1 and base-eval lines when kept) so a resumed run appends nothing
// twice; the TensorBoard event file is rebuilt from the lines kept, so it
// holds no point of the interrupted iteration either.
func trimMetrics(path string, keep func(MetricsLine) bool) error {
	lines, err := ReadMetrics(path)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	var kept []MetricsLine
	for _, l := range lines {
		if keep(l) {
			b, _ := json.Marshal(l)
			buf.Write(append(b, '\n'))
			kept = append(kept, l)
		}
	}
	if err := writeAtomic(path, buf.Bytes()); err != nil {
		return err
	}
	// metrics.jsonl is the record; the event files are its copy for
	// TensorBoard, written again from it (a kill in between leaves them
	// to the next resume).
	dir := filepath.Dir(path)
	for _, f := range tfevents.Files(dir) {
		if err := os.Remove(f); err != nil {
			return fmt.Errorf("rebuilding the tensorboard events: %w", err)
		}
	}
	return writeScalars(dir, kept)
}

// ParseState reads a state.json's bytes (benchmarks read finished runs).
func ParseState(b []byte) (*State, error) {
	var s State
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("run state: %w", err)
	}
	if s.Version != stateVersion {
		return nil, fmt.Errorf("run state: version %d, this seedctl writes %d", s.Version, stateVersion)
	}
	switch {
	case s.Iteration < 0 || s.DataCursor < 0 || s.Refusals < 0 || s.MiniBatchesDone < 0 || s.Seconds < 0:
		return nil, fmt.Errorf("run state: iteration %d, data_cursor %d, refusals_in_a_row %d, mini_batches_done %d and seconds %v must not be negative: the file is damaged",
			s.Iteration, s.DataCursor, s.Refusals, s.MiniBatchesDone, s.Seconds)
	}
	return &s, nil
}
