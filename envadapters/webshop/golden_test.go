package webshop

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seedctl/seedctl/envadapters"
)

var update = flag.Bool("update", false, "rewrite testdata golden transcripts")

// TestGoldenTranscripts: the same seed gives the same tasks and transcripts.
func TestGoldenTranscripts(t *testing.T) {
	e, err := builtin{}.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, split := range envadapters.Splits {
		tasks, _ := builtin{}.Tasks(split, 4)
		var b strings.Builder
		for _, task := range tasks {
			st, err := e.Reset(ctx, task)
			if err != nil {
				t.Fatal(err)
			}
			x, _ := builtin{}.Expert(e)
			fmt.Fprintf(&b, "=== %s (%s, difficulty %d)\n%s\n", task.ID, task.Family, task.Difficulty, st.Observation)
			for !st.Done {
				a, err := x.Act()
				if err != nil {
					t.Fatal(err)
				}
				st, _ = e.Step(ctx, a)
				fmt.Fprintf(&b, "> %s\n%s\n", a, st.Observation)
			}
			fmt.Fprintf(&b, "reward %.2f score %.2f\n\n", st.Reward, st.Score)
		}
		path := filepath.Join("testdata", string(split)+".golden")
		if *update {
			if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run go test -update once)", err)
		}
		if b.String() != string(want) {
			t.Errorf("%s transcripts differ from %s; rerun with -update if the change is intended", split, path)
		}
	}
}
