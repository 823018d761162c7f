package orchestrator

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seedctl/seedctl/envadapters"
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
