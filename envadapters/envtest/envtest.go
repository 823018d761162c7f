// Package envtest holds checks shared by the built-in environments' tests.
package envtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seedctl/seedctl/envadapters"
)

// GoldenTranscripts plays the expert on the first n tasks of every split
// and compares the transcripts with testdata/<split>.golden (rewritten when
// update is set): the same seed must give the same tasks and transcripts.
func GoldenTranscripts(t *testing.T, b envadapters.Builtin, n int, update bool) {
	t.Helper()
	e, err := b.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, split := range envadapters.Splits {
		tasks, err := b.Tasks(split, n)
		if err != nil {
			t.Fatal(err)
		}
		var sb strings.Builder
		for _, task := range tasks {
			st, err := e.Reset(ctx, task)
			if err != nil {
				t.Fatal(err)
			}
			x, err := b.Expert(e)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&sb, "=== %s (%s, difficulty %d)\n%s\n", task.ID, task.Family, task.Difficulty, st.Observation)
			for !st.Done {
				a, err := x.Act()
				if err != nil {
					t.Fatal(err)
				}
				if st, err = e.Step(ctx, a); err != nil {
					t.Fatal(err)
				}
				fmt.Fprintf(&sb, "> %s\n%s\n", a, st.Observation)
			}
			fmt.Fprintf(&sb, "reward %.2f score %.2f\n\n", st.Reward, st.Score)
		}
		path := filepath.Join("testdata", string(split)+".golden")
		if update {
			if err := os.MkdirAll("testdata", 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(sb.String()), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run go test -update once)", err)
		}
		if sb.String() != string(want) {
			t.Errorf("%s transcripts differ from %s; rerun with -update if the change is intended", split, path)
		}
	}
}
