//go:build vllm

package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/seedctl/seedctl/inference"
	"github.com/seedctl/seedctl/skills"
)

// TestRealVLLMSmolLM2Analyzer is the user's hosted-analyzer path with a
// real instruct model ([checkpoints] 3): vLLM serves SmolLM2-135M-Instruct
// (the transformers-5 folder of scripts/smollm2.sh; SEEDCTL_SMOLLM2), and
// `seedctl analyze --analyzer external` sends it the stage-1 analysis of
// household trajectories the committed base played, greedy, without and
// with the repair prompt. It reports how many answers parse into skills
// and what they say, and checks that every failed first answer got its
// repair round, and none did under --no-repair.
func TestRealVLLMSmolLM2Analyzer(t *testing.T) {
	prog := vllmProgram(t)
	smol := os.Getenv("SEEDCTL_SMOLLM2")
	if smol == "" {
		t.Fatal("SEEDCTL_SMOLLM2 is not set: run with `just test-vllm` (scripts/smollm2.sh prepares the model)")
	}
	dir := t.TempDir()
	if _, err := runApp(t, "collect", "--model", "../../basemodel/committed/household-tiny", "--env", "household", "--tasks", "4", "--group", "2", "--mode", "window", "--max-steps", "10", "--out", dir); err != nil {
		t.Fatalf("collect: %v", err)
	}
	cfg := inference.DefaultConfig("vllm")
	cfg.Model, cfg.ServedDir, cfg.RetryFor = "smollm2", filepath.Join(t.TempDir(), "served"), 60*time.Second
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel)
	start := time.Now()
	b, err := inference.Launch(context.Background(), inference.LaunchSpec{Command: prog, ModelDir: filepath.Join(smol, "v5"),
		ExtraArgs: []string{"--max-model-len", "8192", "--dtype", "float32", "--max-num-seqs", "16"}}, cfg, log)
	if err != nil {
		t.Fatalf("launching vLLM on SmolLM2: %v", err)
	}
	defer b.Close()
	t.Logf("vLLM serving SmolLM2-135M-Instruct after %v", time.Since(start).Round(time.Second))
	url := launchedURL(t, b) + "/v1"
	read := func(path string) []skills.Record {
		t.Helper()
		recs, err := skills.ReadStore(path)
		if err != nil {
			t.Fatal(err)
		}
		return recs
	}
	analyze := func(name string, extra ...string) []skills.Record {
		t.Helper()
		out := filepath.Join(dir, name)
		t0 := time.Now()
		args := append([]string{"analyze", "--in", dir, "--analyzer", "external", "--analyzer-url", url, "--analyzer-model", "smollm2", "--out", out}, extra...)
		if _, err := runApp(t, args...); err != nil {
			t.Fatalf("analyze %v: %v", extra, err)
		}
		recs := read(out)
		t.Logf("%s: %d analyses in %v", name, len(recs), time.Since(t0).Round(time.Second))
		return recs
	}
	plain := analyze("no-repair.jsonl", "--no-repair")
	repaired := analyze("repair.jsonl")
	if len(plain) != 8 || len(repaired) != 8 {
		t.Fatalf("%d and %d records for 8 trajectories", len(plain), len(repaired))
	}
	parsed := func(recs []skills.Record) map[string]bool {
		m := map[string]bool{}
		for _, r := range recs {
			if r.Skill != nil {
				m[r.TrajectoryID] = true
			}
		}
		return m
	}
	p0, p1 := parsed(plain), parsed(repaired)
	t.Logf("skills parsed: %d of 8 without the repair prompt, %d of 8 with it", len(p0), len(p1))
	for _, r := range plain {
		if r.RepairRaw != "" || r.Repaired {
			t.Errorf("%s: a repair round under --no-repair", r.TrajectoryID)
		}
	}
	shown, empty := 0, 0
	for _, r := range repaired {
		if strings.TrimSpace(r.Raw) == "" {
			empty++
		}
		// Greedy, but batched differently in the two passes, the first
		// answers need not agree to the token; each one that did not
		// parse gets its repair round.
		if r.ParseError != "" && !r.Repaired {
			t.Errorf("%s: unparsed (%s) and no repair round", r.TrajectoryID, r.ParseError)
		}
		if r.Skill != nil && shown < 3 {
			shown++
			t.Logf("skill of %s (won %v): %q", r.TrajectoryID, r.Won, r.Skill.EpisodeSkill)
		}
		if r.Skill == nil && shown < 5 {
			shown++
			t.Logf("no skill from %s: %s; answer begins %q", r.TrajectoryID, r.ParseError, first(r.Raw, 160))
		}
	}
	if empty == len(repaired) {
		t.Errorf("all %d answers are empty: the chat endpoint did not answer", empty)
	}
}

func first(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
