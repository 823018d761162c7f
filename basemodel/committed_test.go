package basemodel

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seedctl/seedctl/inference"
	"github.com/seedctl/seedctl/internal/ckpthash"
	"github.com/seedctl/seedctl/trainer"
)

func TestEnsureCommittedUnpacksVerifiesAndReuses(t *testing.T) {
	cb, err := Committed()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(cb.Name, cb.WeightsSHA256[:12]) {
		t.Errorf("name %q does not end with its weights' hash %s", cb.Name, cb.WeightsSHA256[:12])
	}
	dir := filepath.Join(t.TempDir(), "cache", cb.Name)
	got, _, err := EnsureCommitted(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got != dir {
		t.Fatalf("unpacked into %s, want %s", got, dir)
	}
	if h, err := ckpthash.Weights(dir); err != nil || h != cb.WeightsSHA256 {
		t.Fatalf("unpacked weights sha256 %s (%v), want %s", h, err, cb.WeightsSHA256)
	}
	if _, ok := ReadRecipe(dir); !ok {
		t.Error("the committed base has no readable recipe.json (its prompt format)")
	}
	// A second call keeps the copy (a run may be reading it).
	old := time.Now().Add(-time.Hour)
	weights := filepath.Join(dir, "model.safetensors")
	if err := os.Chtimes(weights, old, old); err != nil {
		t.Fatal(err)
	}
	if _, _, err := EnsureCommitted(dir); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(weights); !fi.ModTime().Equal(old) {
		t.Error("a good copy was unpacked again")
	}
	// Damaged weights or a missing file: unpacked again.
	if err := os.WriteFile(weights, []byte("damaged"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "tokenizer.json")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := EnsureCommitted(dir); err != nil {
		t.Fatal(err)
	}
	if h, _ := ckpthash.Weights(dir); h != cb.WeightsSHA256 {
		t.Error("damaged weights were kept")
	}
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err != nil {
		t.Error("a missing file was not restored")
	}
	leftovers, _ := filepath.Glob(dir + ".unpack-*")
	if len(leftovers) > 0 {
		t.Errorf("temporary folders left: %v", leftovers)
	}
}

// TestCommittedBaseMeetsItsBar: the committed base is one a newcomer can
// learn from ([default-base]): its recorded figures clear the bar it was
// chosen by, and vLLM's CPU build can serve its shape.
func TestCommittedBaseMeetsItsBar(t *testing.T) {
	cb, err := Committed()
	if err != nil {
		t.Fatal(err)
	}
	f := cb.Figures
	if f.Episodes < 200 {
		t.Errorf("figures over %d tasks per split, want 200", f.Episodes)
	}
	if f.Seen < 0.20 {
		t.Errorf("plain eval_seen success %.3f, want >= 0.20", f.Seen)
	}
	if f.OracleGain() < 0.25 {
		t.Errorf("oracle-skill gain %.3f, want >= 0.25", f.OracleGain())
	}
	if f.SkillParse < 0.40 {
		t.Errorf("parseable skills after stage 1 %.3f, want >= 0.40", f.SkillParse)
	}
	if len(cb.Commands) == 0 {
		t.Error("base.json gives no commands that reproduce its figures")
	}
	dir, _, err := EnsureCommitted(filepath.Join(t.TempDir(), cb.Name))
	if err != nil {
		t.Fatal(err)
	}
	mc, err := trainer.LoadModelConfig(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if hd := mc.HeadDimension(); hd < 32 {
		t.Errorf("head_dim %d: vLLM's CPU attention needs 32 or more", hd)
	}
	if err := inference.CheckServable(dir, inference.DefaultConfig("vllm"), "cpu"); err != nil {
		t.Errorf("vLLM on CPU: %v", err)
	}
}

// `seedctl model bootstrap` rebuilds the committed base's recipe: the
// default recipe is the one in its recipe.json.
func TestDefaultRecipeIsTheCommittedBases(t *testing.T) {
	dir, _, err := EnsureCommitted(filepath.Join(t.TempDir(), "base"))
	if err != nil {
		t.Fatal(err)
	}
	have, ok := ReadRecipe(dir)
	if !ok {
		t.Fatal("no recipe.json")
	}
	want, err := DefaultRecipe("household", "tiny")
	if err != nil {
		t.Fatal(err)
	}
	if have.Key() != want.Key() {
		t.Errorf("the committed base was built by recipe %s, the default recipe is %s", have.Key(), want.Key())
	}
}

// Every committed base folder (household's, TextCraft's) holds the weights
// its base.json names, and its recipe.json names its environment.
func TestCommittedFoldersMatchTheirHashes(t *testing.T) {
	dirs, err := filepath.Glob(filepath.Join("committed", "*", "base.json"))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no committed bases: %v", err)
	}
	for _, f := range dirs {
		dir := filepath.Dir(f)
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var cb CommittedBase
		if err := json.Unmarshal(b, &cb); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		hash, err := WeightsHash(dir)
		if err != nil {
			t.Fatal(err)
		}
		if hash != cb.WeightsSHA256 || !strings.HasSuffix(cb.Name, hash[:12]) {
			t.Errorf("%s: weights %s, base.json names %s (%s)", dir, hash, cb.WeightsSHA256, cb.Name)
		}
		r, ok := ReadRecipe(dir)
		if !ok || !strings.HasPrefix(filepath.Base(dir), r.Env+"-") {
			t.Errorf("%s: recipe for env %q", dir, r.Env)
		}
	}
}
