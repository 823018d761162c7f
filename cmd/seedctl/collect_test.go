package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/seedctl/seedctl/inference/server/servertest"
	"github.com/seedctl/seedctl/rollout"
	"github.com/seedctl/seedctl/skills"
)

func TestCollectAndAnalyze(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(dir, "tiny")
	if err := servertest.WriteTinyCheckpoint(model, 4); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "data")
	text, err := runApp(t, "collect", "--model", model, "--env", "household", "--tasks", "2", "--group", "3", "--max-steps", "3", "--max-tokens", "6", "--out", out)
	if err != nil || !strings.Contains(text, "collected 6 trajectories") {
		t.Fatalf("collect: %v\n%s", err, text)
	}
	trajs, err := rollout.ReadJSONL(filepath.Join(out, "trajectories.jsonl"))
	if err != nil || len(trajs) != 6 || trajs[5].Group != 1 || len(trajs[0].Steps) != 3 {
		t.Fatalf("trajectories: %v, %d", err, len(trajs))
	}
	text, err = runApp(t, "analyze", "--in", out, "--analyzer", "oracle")
	if err != nil || !strings.Contains(text, "analyzed 6 trajectories with oracle") {
		t.Fatalf("analyze: %v\n%s", err, text)
	}
	recs, err := skills.ReadStore(filepath.Join(out, "skills.jsonl"))
	if err != nil || len(recs) != 6 || recs[0].Skill == nil || recs[0].Analyzer != "oracle" {
		t.Fatalf("skills: %v %+v", err, recs)
	}
	// The random tiny policy as its own analyzer writes no JSON: with the
	// repair round every answer is sent back once, with --no-repair none is.
	for _, noRepair := range []bool{false, true} {
		args := []string{"analyze", "--in", out, "--analyzer", "self", "--model", model}
		if noRepair {
			args = append(args, "--no-repair")
		}
		if text, err := runApp(t, args...); err != nil {
			t.Fatalf("analyze self (no repair %v): %v\n%s", noRepair, err, text)
		}
		recs, err := skills.ReadStore(filepath.Join(out, "skills.jsonl"))
		if err != nil || len(recs) != 6 {
			t.Fatalf("self skills: %v, %d records", err, len(recs))
		}
		for _, r := range recs {
			if r.Analyzer != "self" || r.ParseError == "" || r.Repaired == noRepair {
				t.Errorf("no repair %v: record analyzer %q, repaired %v, parse error %q", noRepair, r.Analyzer, r.Repaired, r.ParseError)
			}
		}
	}
	if _, err := runApp(t, "analyze", "--in", out, "--analyzer", "psychic"); err == nil {
		t.Error("unknown analyzer accepted")
	}
	if _, err := runApp(t, "collect", "--model", model, "--tasks", "999999", "--out", out); err == nil {
		t.Error("too many tasks accepted")
	}
}
