package basemodel

import (
	"context"
	"strings"
	"testing"

	"github.com/seedctl/seedctl/envadapters"
	"github.com/seedctl/seedctl/envadapters/household"
)

// TestOracleHintsFollowEnvOptions: the oracle's hint is about the expert
// solving the task in the environment the eval plays, so with a placement
// prior it names where the objects start under that prior.
func TestOracleHintsFollowEnvOptions(t *testing.T) {
	b, err := envadapters.Lookup(household.Name)
	if err != nil {
		t.Fatal(err)
	}
	tasks, err := b.Tasks(envadapters.EvalSeen, 12)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	plain, err := OracleHints(ctx, b, tasks, nil)
	if err != nil {
		t.Fatal(err)
	}
	prior, err := OracleHints(ctx, b, tasks, envadapters.Options{household.OptPlacementPrior: "1"})
	if err != nil {
		t.Fatal(err)
	}
	differ := 0
	for _, task := range tasks {
		if plain[task.ID] == "" || prior[task.ID] == "" {
			t.Fatalf("%s: no hint (plain %q, prior %q)", task.ID, plain[task.ID], prior[task.ID])
		}
		if plain[task.ID] != prior[task.ID] {
			differ++
		}
	}
	if differ == 0 {
		t.Errorf("the placement prior changed none of %d hints:\n%s", len(tasks), strings.Join([]string{plain[tasks[0].ID], prior[tasks[0].ID]}, "\n"))
	}
	if _, err := OracleHints(ctx, b, tasks[:1], envadapters.Options{household.OptPlacementPrior: "2"}); err == nil || !strings.Contains(err.Error(), household.OptPlacementPrior) {
		t.Errorf("an out-of-range option: %v", err)
	}
}
