package basemodel

import (
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"

	"github.com/seedctl/seedctl/internal/ckpthash"
)

// The embedded default's base policy, committed with the code (weights,
// tokenizer, config, recipe.json and base.json with its measured figures):
// every machine starts from the same weights, where a build on each CPU
// rounds differently and ~1,600 training steps turn that into another
// model.
//
//go:embed committed
var committedFS embed.FS

// committedRoot is the folder of the committed base inside committedFS.
const committedRoot = "committed/household-tiny"

// Figures are what a base policy measured on the embedded default's eval
// protocol (greedy, window prompts, 20 steps, placement_prior 0.8, the
// places line in each episode's own order).
type Figures struct {
	// Episodes is the number of tasks of each split played.
	Episodes int `json:"episodes"`
	// Seen and Unseen are plain-prompt success on eval_seen and
	// eval_unseen; SeenOracle with the oracle's skill about an expert run
	// of the same task in context (how much a right skill helps).
	Seen       float64 `json:"eval_seen"`
	Unseen     float64 `json:"eval_unseen"`
	SeenOracle float64 `json:"eval_seen_oracle"`
	// SkillParse is the share of the first stage-2 iteration's
	// trajectories whose self-written skill parsed after stage 1
	// (metrics.jsonl skill_parse_ok of iteration 1); 0 when not measured.
	SkillParse float64 `json:"stage1_skill_parse,omitempty"`
}

// OracleGain is SeenOracle − Seen.
func (f Figures) OracleGain() float64 { return f.SeenOracle - f.Seen }

// CommittedBase describes the committed base policy (its base.json).
type CommittedBase struct {
	// Name is the folder name it is unpacked under: env-size-<first 12
	// hex digits of WeightsSHA256>.
	Name          string  `json:"name"`
	WeightsSHA256 string  `json:"weights_sha256"`
	Figures       Figures `json:"figures"`
	// Commands reproduce Figures on any machine.
	Commands []string `json:"commands"`
	// Chosen says how it was chosen among builds.
	Chosen string `json:"chosen"`
}

// BaseName is a base policy's name: its environment and size and the first
// 12 hex digits of its weights' sha256, so two bases of one recipe built
// on different machines have different names.
func BaseName(env, size, weightsSHA256 string) string {
	return fmt.Sprintf("%s-%s-%s", env, size, weightsSHA256[:min(12, len(weightsSHA256))])
}

// Committed reads the committed base's description.
func Committed() (CommittedBase, error) {
	var cb CommittedBase
	b, err := committedFS.ReadFile(path.Join(committedRoot, "base.json"))
	if err != nil {
		return cb, fmt.Errorf("reading the committed base's base.json: %w", err)
	}
	if err := json.Unmarshal(b, &cb); err != nil {
		return cb, fmt.Errorf("reading the committed base's base.json: %w", err)
	}
	if len(cb.WeightsSHA256) != 64 || cb.Name == "" {
		return cb, errors.New("the committed base's base.json names no weights_sha256 or name")
	}
	return cb, nil
}

// EnsureCommitted unpacks the committed base into dir (default: the user
// cache's base-models/<name>) unless a copy with the same weights is
// there, and returns the folder. What is written is checked against the
// recorded hash before it is moved into place.
func EnsureCommitted(dir string) (string, CommittedBase, error) {
	cb, err := Committed()
	if err != nil {
		return "", cb, err
	}
	if dir == "" {
		root, err := CacheDir()
		if err != nil {
			return "", cb, err
		}
		dir = filepath.Join(root, cb.Name)
	}
	if valid(dir, cb) {
		return dir, cb, nil
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return "", cb, fmt.Errorf("unpacking the committed base: %w", err)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), filepath.Base(dir)+".unpack-")
	if err != nil {
		return "", cb, fmt.Errorf("unpacking the committed base: %w", err)
	}
	defer os.RemoveAll(tmp)
	entries, err := committedFS.ReadDir(committedRoot)
	if err != nil {
		return "", cb, fmt.Errorf("unpacking the committed base: %w", err)
	}
	for _, e := range entries {
		b, err := committedFS.ReadFile(path.Join(committedRoot, e.Name()))
		if err != nil {
			return "", cb, fmt.Errorf("unpacking the committed base: %w", err)
		}
		if err := os.WriteFile(filepath.Join(tmp, e.Name()), b, 0o644); err != nil {
			return "", cb, fmt.Errorf("unpacking the committed base into %s: %w", tmp, err)
		}
	}
	if h, err := ckpthash.Weights(tmp); err != nil || h != cb.WeightsSHA256 {
		return "", cb, fmt.Errorf("the committed base's weights do not match base.json (sha256 %s, recorded %s): %v", h, cb.WeightsSHA256, err)
	}
	// Another process may have unpacked it meanwhile: a good copy is
	// kept (a run may be reading it); a stale or damaged one is replaced.
	if valid(dir, cb) {
		return dir, cb, nil
	}
	if err := os.RemoveAll(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", cb, fmt.Errorf("replacing %s: %w", dir, err)
	}
	if err := os.Rename(tmp, dir); err != nil && !valid(dir, cb) {
		return "", cb, fmt.Errorf("unpacking the committed base into %s: %w", dir, err)
	}
	return dir, cb, nil
}

// valid says whether dir holds the committed base with its weights.
func valid(dir string, cb CommittedBase) bool {
	h, err := ckpthash.Weights(dir)
	return err == nil && h == cb.WeightsSHA256 && hasFiles(dir)
}

// hasFiles says whether dir holds every file of the committed base.
func hasFiles(dir string) bool {
	entries, err := committedFS.ReadDir(committedRoot)
	if err != nil {
		return false
	}
	for _, e := range entries {
		if _, err := os.Stat(filepath.Join(dir, e.Name())); err != nil {
			return false
		}
	}
	return true
}
