package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seedctl/seedctl/envadapters"
	"github.com/seedctl/seedctl/envadapters/agentgym"
)

// goalServer is a remote env whose index → goal map can be changed under
// a run, as another machine's TextCraft server would.
type goalServer struct{ goals map[int]string }

func (s *goalServer) New(envadapters.Options) (envadapters.Env, error) { return &goalEnv{s: s}, nil }

type goalEnv struct{ s *goalServer }

func (e *goalEnv) Reset(_ context.Context, t envadapters.Task) (envadapters.Step, error) {
	return envadapters.Step{Observation: fmt.Sprintf("Crafting commands:\ncraft 1 %[1]s using 1 stone\n\nGoal: craft %[1]s.", e.s.goals[t.Index])}, nil
}
func (e *goalEnv) Step(context.Context, string) (envadapters.Step, error) {
	return envadapters.Step{}, nil
}
func (e *goalEnv) Close() error { return nil }

// TestGoalBook: a run records each index's goal in its folder; a resumed
// run (or one given env.goals_file) refuses a server that answers an index
// with another goal, naming the index, both goals and the record.
func TestGoalBook(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, goalsFile)
	srv := &goalServer{goals: map[int]string{3: "stone pickaxe", 4: "oak planks"}}
	book, err := openGoalBook(path, "")
	if err != nil {
		t.Fatal(err)
	}
	f := goalChecked{inner: srv, book: book}
	reset := func(f goalChecked, i int) error {
		e, _ := f.New(nil)
		_, err := e.Reset(context.Background(), envadapters.Task{Index: i, ID: fmt.Sprintf("textcraft/train/%d", i)})
		return err
	}
	for _, i := range []int{3, 4, 3} {
		if err := reset(f, i); err != nil {
			t.Fatal(err)
		}
	}
	b, _ := os.ReadFile(path)
	if !strings.Contains(string(b), `"3": "stone pickaxe"`) || !strings.Contains(string(b), `"4": "oak planks"`) {
		t.Fatalf("record:\n%s", b)
	}
	// Resumed against a server whose index 4 is another goal.
	srv.goals[4] = "birch planks"
	book, err = openGoalBook(path, "")
	if err != nil {
		t.Fatal(err)
	}
	f = goalChecked{inner: srv, book: book}
	if err := reset(f, 3); err != nil {
		t.Fatal(err)
	}
	err = reset(f, 4)
	if err == nil || !strings.Contains(err.Error(), "task index 4") || !strings.Contains(err.Error(), `"birch planks"`) || !strings.Contains(err.Error(), `"oak planks"`) || !strings.Contains(err.Error(), path) {
		t.Fatalf("a changed goal: %v", err)
	}
	// A given goals file binds a fresh run too, and must agree with the record.
	given := filepath.Join(dir, "given.json")
	os.WriteFile(given, []byte(`{"4": "oak planks", "9": "torch"}`), 0o644)
	book, err = openGoalBook(filepath.Join(t.TempDir(), goalsFile), given)
	if err != nil {
		t.Fatal(err)
	}
	if err := reset(goalChecked{inner: srv, book: book}, 4); err == nil || !strings.Contains(err.Error(), given) {
		t.Fatalf("against env.goals_file: %v", err)
	}
	os.WriteFile(given, []byte(`{"3": "wooden pickaxe"}`), 0o644)
	if _, err := openGoalBook(path, given); err == nil || !strings.Contains(err.Error(), "task index 3") {
		t.Fatalf("a record that disagrees with env.goals_file: %v", err)
	}
	os.WriteFile(given, []byte(`{"x": "torch"}`), 0o644)
	if _, err := openGoalBook(path, given); err == nil || !strings.Contains(err.Error(), `"x"`) {
		t.Fatalf("a bad key: %v", err)
	}
}

// fakeFlavorServer answers AgentGym's create/reset/close with obs(index).
func fakeFlavorServer(t *testing.T, obs func(int) string) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		json.NewDecoder(r.Body).Decode(&body)
		idx, _ := body["data_idx"].(float64)
		switch r.URL.Path {
		case "/create", "/reset":
			json.NewEncoder(w).Encode(map[string]any{"id": 0, "observation": obs(int(idx)), "done": false, "reward": 0})
		default:
			json.NewEncoder(w).Encode(map[string]any{"observation": "", "done": false, "reward": 0})
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestProbeRemoteEnv: config check --probe resets one env and tells a
// TextCraft server from another flavor's (SciWorld's), and holds the
// server to env.goals_file; a flavor with no recorded observations
// (BabyAI) is a warning. Both fakes answer with first observations
// recorded from the real servers.
func TestProbeRemoteEnv(t *testing.T) {
	var rec struct {
		Episodes []struct {
			Goal  string `json:"goal"`
			First string `json:"first_observation"`
		} `json:"episodes"`
	}
	readJSON(t, filepath.Join("..", "envadapters", "agentgym", "testdata", "textcraft_expert.json"), &rec)
	var sci []struct {
		Reset struct {
			Observation string `json:"observation"`
		} `json:"reset"`
	}
	readJSON(t, filepath.Join("..", "envadapters", "agentgym", "testdata", "recordings", "sciworld-driver-random.json"), &sci)
	splits := map[string]agentgym.Range{"train": {Start: 5, Count: 10}, "eval_seen": {Start: 100, Count: 10}, "eval_unseen": {}}
	textcraft := fakeFlavorServer(t, func(i int) string { return rec.Episodes[i].First })
	other := fakeFlavorServer(t, func(int) string { return sci[0].Reset.Observation })
	goal := rec.Episodes[5].Goal
	c := agentgymConfig(agentgym.TextCraft, splits).Env
	c.URL = textcraft.URL
	detail, err := ProbeRemoteEnv(context.Background(), c)
	if err != nil || !strings.Contains(detail, "task index 5") || !strings.Contains(detail, fmt.Sprintf("%q", goal)) {
		t.Fatalf("textcraft at a textcraft server: %q, %v", detail, err)
	}
	c.URL = other.URL
	if _, err := ProbeRemoteEnv(context.Background(), c); err == nil || !strings.Contains(err.Error(), "Crafting commands:") || errors.Is(err, agentgym.ErrNoFlavorMarks) {
		t.Fatalf("textcraft at a sciworld server: %v", err)
	}
	c.URL = textcraft.URL
	c.GoalsFile = filepath.Join(t.TempDir(), "goals.json")
	os.WriteFile(c.GoalsFile, []byte(fmt.Sprintf(`{"5": %q}`, goal)), 0o644)
	if detail, err := ProbeRemoteEnv(context.Background(), c); err != nil || !strings.Contains(detail, "env.goals_file") {
		t.Fatalf("goals file that agrees: %q, %v", detail, err)
	}
	os.WriteFile(c.GoalsFile, []byte(`{"5": "torch"}`), 0o644)
	if _, err := ProbeRemoteEnv(context.Background(), c); err == nil || !strings.Contains(err.Error(), `"torch"`) {
		t.Fatalf("goals file that disagrees: %v", err)
	}
	// BabyAI, recorded too (testdata/babyai_refusals.json): a BabyAI
	// config at a SciWorld server fails, at a BabyAI server passes.
	var baby struct {
		Episodes []struct {
			First string `json:"first_observation"`
		} `json:"episodes"`
	}
	readJSON(t, filepath.Join("..", "envadapters", "agentgym", "testdata", "babyai_refusals.json"), &baby)
	b := agentgymConfig(agentgym.BabyAI, splits).Env
	b.URL = other.URL
	if _, err := ProbeRemoteEnv(context.Background(), b); err == nil || !strings.Contains(err.Error(), "Your goal: ") || errors.Is(err, agentgym.ErrNoFlavorMarks) {
		t.Fatalf("babyai at a sciworld server: %v", err)
	}
	b.URL = fakeFlavorServer(t, func(i int) string { return baby.Episodes[i%40].First }).URL
	if _, err := ProbeRemoteEnv(context.Background(), b); err != nil {
		t.Fatalf("babyai at a babyai server: %v", err)
	}
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
