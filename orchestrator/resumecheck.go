package orchestrator

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/seedctl/seedctl/internal/ckpthash"
)

// ConfigChange records a resume that accepted a changed config.json
// (Deps.AcceptConfigChange): after which iteration, and which keys.
type ConfigChange struct {
	AfterIteration int       `json:"after_iteration"`
	Keys           []string  `json:"keys"`
	Time           time.Time `json:"time"`
}

// configSum is the sha256 of config.json's bytes.
func configSum(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// recordConfig notes config.json as written at the run's start in the
// state, so a resume can tell whether it changed.
func recordConfig(d runDir, st *State) error {
	b, err := os.ReadFile(d.config())
	if err != nil {
		return fmt.Errorf("recording config.json: %w", err)
	}
	st.ConfigSHA256, st.ConfigAtStart = configSum(b), json.RawMessage(bytes.TrimSpace(b))
	return nil
}

// checkConfigUnchanged refuses a config.json that differs from the one the
// run recorded, naming the keys that changed, unless accept names exactly
// those keys: then the change is recorded in the state and becomes the
// run's config from here on. Runs from before configs were recorded pass.
func checkConfigUnchanged(d runDir, st *State, accept []string) (changed []string, err error) {
	if st.ConfigSHA256 == "" {
		return nil, nil
	}
	b, err := os.ReadFile(d.config())
	if err != nil {
		return nil, err
	}
	if configSum(b) == st.ConfigSHA256 {
		return nil, nil
	}
	changed = []string{"(the start's copy is missing: every key)"}
	if len(st.ConfigAtStart) > 0 {
		changed = diffJSONKeys(st.ConfigAtStart, b)
	}
	if len(changed) == 0 {
		// Only the layout changed (spacing, key order): the same config.
		st.ConfigSHA256 = configSum(b)
		return nil, nil
	}
	want := slices.Clone(accept)
	slices.Sort(want)
	if !slices.Equal(want, changed) {
		return changed, fmt.Errorf("config.json changed since the run started (keys %s): a resumed run would train the rest of the way under other settings than its first iterations and still report one config; restore it, or resume with --accept-config-change %s to record the change in state.json",
			strings.Join(changed, ", "), strings.Join(changed, ","))
	}
	st.ConfigChanges = append(st.ConfigChanges, ConfigChange{AfterIteration: st.Iteration, Keys: changed, Time: time.Now()})
	st.ConfigSHA256, st.ConfigAtStart = configSum(b), json.RawMessage(bytes.TrimSpace(b))
	return changed, nil
}

// diffJSONKeys lists the dotted keys whose values differ between two JSON
// objects (a key present in only one counts).
func diffJSONKeys(a, b []byte) []string {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return []string{"(unreadable JSON)"}
	}
	fa, fb := map[string]string{}, map[string]string{}
	flatten("", x, fa)
	flatten("", y, fb)
	var out []string
	for _, k := range slices.Sorted(maps.Keys(fa)) {
		if fb[k] != fa[k] {
			out = append(out, k)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(fb)) {
		if _, ok := fa[k]; !ok {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func flatten(prefix string, v any, out map[string]string) {
	if m, ok := v.(map[string]any); ok && len(m) > 0 {
		for k, c := range m {
			key := k
			if prefix != "" {
				key = prefix + "." + k
			}
			flatten(key, c, out)
		}
		return
	}
	b, _ := json.Marshal(v)
	out[prefix] = string(b)
}

// checkResumable checks that state.json describes this run folder as its
// own code would have left it, before anything is loaded, trained or
// deleted: the checkpoint is the folder's own iter-N (or stage1, or the
// base before any training) for the recorded iteration; the stage-1 flag
// agrees with the algorithm and with the checkpoints; the hash record is
// not empty once the folder holds a checkpoint.
func checkResumable(d runDir, cfg Config, st *State) error {
	ck, ref := filepath.ToSlash(filepath.Clean(st.Checkpoint)), filepath.ToSlash(filepath.Clean(st.Reference))
	inRun := func(p string) bool { return !filepath.IsAbs(p) }
	var want string
	switch {
	case st.Iteration > 0:
		want = fmt.Sprintf("checkpoints/iter-%d", st.Iteration)
	case st.Stage1Done:
		want = "checkpoints/stage1"
	}
	if want != "" && ck != want {
		return fmt.Errorf("state.json says %d iterations are done (stage 1 done: %v) but names the checkpoint %q, not this run's %q: the file is damaged or from another run", st.Iteration, st.Stage1Done, st.Checkpoint, want)
	}
	if want == "" && inRun(ck) {
		return fmt.Errorf("state.json names the checkpoint %q inside the run folder before any training: the file is damaged", st.Checkpoint)
	}
	if want == "" && ck != filepath.ToSlash(filepath.Clean(cfg.Model)) {
		return fmt.Errorf("state.json names the checkpoint %q before any training, the run's config.json the base model %q: the file is damaged or from another run", st.Checkpoint, cfg.Model)
	}
	switch {
	case cfg.UsesSFT() && !st.Stage1Done && st.Iteration > 0:
		return fmt.Errorf("state.json says stage 1 is not done but %d iterations are: algo %s would fine-tune stage 1 again on the trained weights; the file is damaged", st.Iteration, cfg.Algo)
	case !cfg.UsesSFT() && st.Stage1Done:
		return fmt.Errorf("state.json says stage 1 is done, but algo %s has none: the file is damaged or from another run", cfg.Algo)
	case st.Stage1Done && ref != "checkpoints/stage1":
		return fmt.Errorf("state.json names the reference %q after stage 1, not this run's checkpoints/stage1: the file is damaged", st.Reference)
	case !st.Stage1Done && ref != filepath.ToSlash(filepath.Clean(cfg.Model)):
		return fmt.Errorf("state.json names the reference %q, the run's base model is %q: the file is damaged or from another run", st.Reference, cfg.Model)
	}
	// The base still in use (the checkpoint before any training, or the
	// KL reference of an algorithm without stage 1) must be the weights
	// the run started from.
	if st.BaseWeights != "" && (!inRun(ck) || !inRun(ref)) {
		if got, err := ckpthash.Weights(cfg.Model); err == nil && got != st.BaseWeights {
			return fmt.Errorf("the base model %s changed since the run started (weights sha256 %.12s, %.12s then): the run would go on from, or measure its KL against, another model; restore those weights or start a new run", cfg.Model, got, st.BaseWeights)
		}
	}
	if (inRun(ck) || inRun(ref)) && len(st.Files) == 0 {
		return fmt.Errorf("state.json records no file sums although the run folder holds its checkpoint %s: the weights could not be checked; the file is damaged", st.Checkpoint)
	}
	return nil
}

// checkHistory checks that metrics.jsonl holds exactly one line for each
// finished iteration (a missing or empty file is refused before it).
func checkHistory(d runDir, st *State) error {
	if st.Iteration > 0 {
		lines, err := ReadMetrics(d.metrics())
		if err != nil {
			return fmt.Errorf("metrics.jsonl: %w; the run's history is damaged: restore it from a copy of the folder, or start a new run", err)
		}
		seen := map[int]int{}
		for _, l := range lines {
			if l.Kind == "iteration" {
				seen[l.Iteration]++
			}
		}
		var missing []string
		for k := 1; k <= st.Iteration; k++ {
			if seen[k] != 1 {
				missing = append(missing, fmt.Sprintf("%d (%d lines)", k, seen[k]))
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("metrics.jsonl does not hold one line for each of the %d finished iterations: iterations %s; the curves and report would skip or repeat them: restore it from a copy of the folder, or start a new run", st.Iteration, strings.Join(missing, ", "))
		}
	}
	return nil
}
