package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/rs/zerolog"

	"github.com/seedctl/seedctl/envadapters/agentgym"
	"github.com/seedctl/seedctl/inference/server/servertest"
	"github.com/seedctl/seedctl/learner"
	"github.com/seedctl/seedctl/orchestrator"
	"github.com/seedctl/seedctl/rollout"
	"github.com/seedctl/seedctl/trainer"
)

// neverEnding plays AgentGym's SciWorld server as the real one behaves
// for a policy that does not know the game: no action matches, no episode
// ever ends, and the server keeps no step limit of its own.
type neverEnding struct {
	mu      sync.Mutex
	creates int
	closes  int
	resets  []int
	steps   int
}

func (s *neverEnding) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body map[string]any
	b, _ := io.ReadAll(r.Body)
	json.Unmarshal(b, &body)
	s.mu.Lock()
	defer s.mu.Unlock()
	switch r.URL.Path {
	case "/create":
		fmt.Fprintf(w, `{"id": %d}`, s.creates)
		s.creates++
	case "/reset":
		s.resets = append(s.resets, int(body["data_idx"].(float64)))
		fmt.Fprint(w, `{"task_description": "Your task is to boil water. First, focus on the substance.", "observation": "This room is called the kitchen. In it, you see: \n\tthe agent\n\ta stove", "reward": 0, "score": 0, "done": false}`)
	case "/step":
		s.steps++
		fmt.Fprint(w, `{"observation": "No known action matches that input.", "reward": 0, "score": 0, "done": false}`)
	case "/close":
		s.closes++
		fmt.Fprint(w, "true")
	}
}

// A run against an AgentGym server that never ends episodes stops each at
// env.max_steps, evaluates on its own index ranges (never a training
// task), and makes no more server envs than episodes played at once.
func TestAgentGymRunStopsAtMaxStepsOnItsOwnSplits(t *testing.T) {
	t.Parallel() // an end-to-end run: mostly waiting on its processes and servers
	srv := &neverEnding{}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	cfg := tinyRunConfig(t, orchestrator.AlgoGRPO)
	cfg.Iterations = 2
	cfg.Env = orchestrator.EnvConfig{Kind: "agentgym", Name: agentgym.SciWorld, URL: hs.URL, MaxSteps: 3,
		Splits: map[string]agentgym.Range{"train": {Start: 0, Count: 50}, "eval_seen": {Start: 1000, Count: 10}, "eval_unseen": {Start: 2000, Count: 10}}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	deps := orchestrator.Deps{NewLearner: learner.Local("cpu"), Log: zerolog.Nop(), OpenBackend: openBackendFor(cfg.Backend, cfg.RL.DType, 0, zerolog.Nop())}
	res, err := orchestrator.Start(context.Background(), cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(res.Dir, "trajectories", "*.jsonl"))
	if len(files) == 0 {
		t.Fatal("no trajectories written")
	}
	episodes := 0
	for _, f := range files {
		raw, _ := os.ReadFile(f)
		for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
			var tr rollout.Trajectory
			if err := json.Unmarshal([]byte(line), &tr); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			episodes++
			if len(tr.Steps) != 3 || !tr.Truncated || tr.Won {
				t.Errorf("%s: %d steps (truncated %v, won %v), want 3, truncated, lost", tr.ID, len(tr.Steps), tr.Truncated, tr.Won)
			}
		}
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	evalResets := 0
	for _, idx := range srv.resets {
		switch {
		case idx < 50:
		case idx >= 1000 && idx < 1002, idx >= 2000 && idx < 2002:
			evalResets++
		default:
			t.Errorf("reset to index %d, outside every configured range", idx)
		}
	}
	// Base and final evaluation: 2 tasks of each eval split, and of
	// eval_seen again sampled at T=1, each time.
	if evalResets != 2*3*2 {
		t.Errorf("%d eval resets, want 12 (2 tasks × 3 passes (eval_seen, eval_unseen, eval_seen at T=1) × 2 evaluations)", evalResets)
	}
	// At most tasks × group episodes play at once; the pool reuses them.
	if most := cfg.TasksPerIteration * cfg.Rollout.GroupSize; srv.creates > most || srv.closes != srv.creates {
		t.Errorf("%d server envs created (at most %d play at once), %d closed", srv.creates, most, srv.closes)
	}
	t.Logf("%d training episodes, %d resets over %d server envs", episodes, len(srv.resets), srv.creates)
}

// eval, collect and env play take an AgentGym env as run does: the
// flavor's index ranges, the step limit, the pooled server envs.
func TestCommandsPlayAgentGymEnvs(t *testing.T) {
	srv := &neverEnding{}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	dir := t.TempDir()
	model := filepath.Join(dir, "tiny")
	if err := servertest.WriteTinyCheckpoint(model, 4); err != nil {
		t.Fatal(err)
	}
	remote := []string{"--env", "sciworld", "--agentgym-url", hs.URL, "--splits", "train=0:10,eval_seen=100:5,eval_unseen=200:5"}
	resets := func() []int {
		srv.mu.Lock()
		defer srv.mu.Unlock()
		r := srv.resets
		srv.resets = nil
		return r
	}

	out := filepath.Join(dir, "data")
	text, err := runApp(t, append([]string{"collect", "--model", model, "--tasks", "2", "--offset", "3", "--group", "2", "--max-steps", "2", "--max-tokens", "6", "--out", out}, remote...)...)
	if err != nil || !strings.Contains(text, "collected 4 trajectories") {
		t.Fatalf("collect: %v\n%s", err, text)
	}
	trajs, err := rollout.ReadJSONL(filepath.Join(out, "trajectories.jsonl"))
	if err != nil || len(trajs) != 4 || len(trajs[0].Steps) != 2 || !trajs[0].Truncated {
		t.Fatalf("collected: %v, %d trajectories", err, len(trajs))
	}
	if r := resets(); fmt.Sprint(r) != "[3 3 4 4]" {
		t.Errorf("collect reset the server to %v, want tasks 3 and 4 of train twice each", r)
	}

	text, err = runApp(t, append([]string{"eval", "--model", model, "--split", "eval_seen", "--episodes", "2", "--max-steps", "2", "--max-tokens", "6"}, remote...)...)
	if err != nil || !strings.Contains(text, "sciworld eval_seen") {
		t.Fatalf("eval: %v\n%s", err, text)
	}
	if r := resets(); fmt.Sprint(r) != "[100 101]" {
		t.Errorf("eval reset the server to %v, want eval_seen's 100 and 101", r)
	}

	app := newApp()
	var buf strings.Builder
	app.Writer, app.Reader = &buf, strings.NewReader("look around\nfocus on stove\nwait\n")
	if err := app.Run(append([]string{"seedctl", "env", "play", "--split", "eval_unseen", "--task", "1", "--max-steps", "2"}, remote...)); err != nil {
		t.Fatalf("env play: %v\n%s", err, buf.String())
	}
	if !strings.Contains(buf.String(), "step limit 2 reached") || !strings.Contains(buf.String(), "Your task is to boil water") {
		t.Errorf("env play printed:\n%s", buf.String())
	}
	if r := resets(); fmt.Sprint(r) != "[201]" {
		t.Errorf("env play reset the server to %v, want eval_unseen's 201", r)
	}

	// What run refuses, the commands refuse.
	for _, args := range [][]string{
		{"env", "play", "--env", "sciworld", "--agentgym-url", hs.URL, "--max-steps", "2"},                                                          // no splits for sciworld
		{"env", "play", "--env", "sciworld", "--agentgym-url", hs.URL, "--splits", "train=0:10,eval_seen=5:5,eval_unseen=20:1", "--max-steps", "2"}, // overlap
		{"env", "play", "--env", "alfworld", "--agentgym-url", hs.URL},                                                                              // no step limit
		{"env", "play", "--env", "alfworld", "--agentgym-url", hs.URL, "--max-steps", "2", "--expert"},                                              // no expert remotely
	} {
		if _, err := runApp(t, args...); err == nil {
			t.Errorf("seedctl %s was accepted", strings.Join(args, " "))
		}
	}
}

// A learner that cannot load is a nil Learner with the error (a typed nil
// inside the interface made the run's cleanup panic and hid the error),
// and a run folder whose state.json claims more iterations than its config
// is refused on resume, not reported as trained.
func TestDamagedRunsAreRefused(t *testing.T) {
	l, err := learner.Local("cpu")(orchestrator.LearnerSpec{Policy: filepath.Join(t.TempDir(), "missing")})
	if err == nil || l != nil {
		t.Fatalf("loading a missing policy: learner %v, err %v", l, err)
	}
	cfg := tinyRunConfig(t, orchestrator.AlgoGRPO)
	cfg.Iterations, cfg.Eval.Episodes = 1, 0
	deps := orchestrator.Deps{NewLearner: learner.Local("cpu"), Log: zerolog.Nop(), OpenBackend: openBackendFor(cfg.Backend, cfg.RL.DType, 0, zerolog.Nop())}
	res, err := orchestrator.Start(context.Background(), cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(res.Dir, "state.json")
	raw, _ := os.ReadFile(state)
	for _, c := range []struct{ from, to, want string }{
		{`"iteration": 1`, `"iteration": 99`, "99 iterations are done"},
		{`"iteration": 1`, `"iteration": -1`, "must not be negative"},
	} {
		os.WriteFile(state, []byte(strings.Replace(string(raw), c.from, c.to, 1)), 0o644)
		if _, err := orchestrator.Resume(context.Background(), res.Dir, deps); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("state.json with %s: resume said %v, want an error saying %q", c.to, err, c.want)
		}
	}
	os.WriteFile(state, raw, 0o644)
	// Files damaged after they were written ([hardening] 8): each is
	// refused, naming the file, where they used to be resumed silently.
	ck := filepath.Join(res.Dir, "checkpoints", "iter-1")
	for _, c := range []struct {
		name, file, want string
		damage           func(path string, b []byte)
	}{
		{"missing optimizer state", filepath.Join(ck, trainer.OptimizerStateFile), "optimizer.safetensors is missing", func(p string, _ []byte) { os.Remove(p) }},
		{"zeroed weights", filepath.Join(ck, "model.safetensors"), "model.safetensors changed since it was written", func(p string, b []byte) {
			z := append([]byte(nil), b...)
			for i := len(z) / 2; i < len(z)/2+4096 && i < len(z); i++ {
				z[i] = 0
			}
			os.WriteFile(p, z, 0o644)
		}},
		{"truncated weights", filepath.Join(ck, "model.safetensors"), "model.safetensors has", func(p string, b []byte) { os.WriteFile(p, b[:len(b)/2], 0o644) }},
		{"empty metrics", filepath.Join(res.Dir, "metrics.jsonl"), "metrics.jsonl is missing or empty", func(p string, _ []byte) { os.WriteFile(p, nil, 0o644) }},
	} {
		orig, err := os.ReadFile(c.file)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		c.damage(c.file, orig)
		if _, err := orchestrator.Resume(context.Background(), res.Dir, deps); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: resume said %v, want an error saying %q", c.name, err, c.want)
		}
		os.WriteFile(c.file, orig, 0o644)
	}
	// Restored, the folder resumes (a finished run: nothing left to do).
	if _, err := orchestrator.Resume(context.Background(), res.Dir, deps); err != nil {
		t.Errorf("the restored folder: %v", err)
	}
}

// env play --expert on an AgentGym TextCraft server: the planner plays
// from the first observation (answers recorded from the real server for
// goal 250).
func TestEnvPlayTextCraftExpert(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "envadapters", "agentgym", "testdata", "textcraft_expert.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rec struct {
		Episodes []struct {
			Index  int    `json:"index"`
			First  string `json:"first_observation"`
			Tagged struct {
				Steps []struct {
					Action, Observation string
					Won                 bool
				} `json:"steps"`
			} `json:"tagged"`
		} `json:"episodes"`
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	ep := rec.Episodes[250]
	answers := map[string]map[string]any{}
	for _, s := range ep.Tagged.Steps {
		r := 0
		if s.Won {
			r = 1
		}
		answers[s.Action] = map[string]any{"observation": s.Observation, "reward": r, "done": s.Won}
	}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		json.NewDecoder(r.Body).Decode(&body)
		switch r.URL.Path {
		case "/create", "/reset":
			json.NewEncoder(w).Encode(map[string]any{"id": 0, "observation": ep.First, "done": false, "reward": 0})
		case "/step":
			a, ok := answers[fmt.Sprint(body["action"])]
			if !ok {
				a = map[string]any{"observation": "Could not execute " + fmt.Sprint(body["action"]), "reward": 0, "done": false}
			}
			json.NewEncoder(w).Encode(a)
		default:
			json.NewEncoder(w).Encode(map[string]any{})
		}
	}))
	defer hs.Close()
	out, err := runApp(t, "env", "play", "--env", "textcraft", "--agentgym-url", hs.URL, "--splits", "train=250:1,eval_seen=300:1,eval_unseen=400:0", "--max-steps", "20", "--expert")
	if err != nil || !strings.Contains(out, "Episode over: solved") || strings.Contains(out, "Could not") {
		t.Fatalf("env play --expert on textcraft: %v\n%s", err, out)
	}
}
