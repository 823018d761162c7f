package basemodel

import (
	"context"
	"regexp"
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

// TestTransferDonors: each donor is another training task of the same
// family about the same object type; eval_seen tasks mostly have one,
// eval_unseen's held-out object types none; and under a placement prior a
// donor's oracle hint names the place the task's own hint names more often
// than without one — the knowledge the "oracle-other" eval measures.
func TestTransferDonors(t *testing.T) {
	b, err := envadapters.Lookup(household.Name)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	seen, _ := b.Tasks(envadapters.EvalSeen, 60)
	donors, err := TransferDonors(b, seen)
	if err != nil {
		t.Fatal(err)
	}
	if len(donors) < len(seen)*3/4 {
		t.Errorf("%d of %d eval_seen tasks have a donor", len(donors), len(seen))
	}
	for _, task := range seen {
		d, ok := donors[task.ID]
		if !ok {
			continue
		}
		if d.Split != envadapters.Train || d.Family != task.Family || household.GoalObject(d.Goal) != household.GoalObject(task.Goal) || household.GoalObject(d.Goal) == "" {
			t.Fatalf("%s (%q) got donor %s (%q)", task.ID, task.Goal, d.ID, d.Goal)
		}
	}
	unseen, _ := b.Tasks(envadapters.EvalUnseen, 60)
	ud, err := TransferDonors(b, unseen)
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range unseen {
		if _, ok := ud[task.ID]; ok && (household.GoalObject(task.Goal) == "potato" || household.GoalObject(task.Goal) == "watch") {
			t.Errorf("%s about a held-out object type %q has a donor", task.ID, household.GoalObject(task.Goal))
		}
	}
	place := regexp.MustCompile(`\b([a-z]+ \d+)\b`)
	agree := func(opts envadapters.Options) float64 {
		var from, to []envadapters.Task
		for _, task := range seen[:30] {
			if d, ok := donors[task.ID]; ok {
				from, to = append(from, d), append(to, task)
			}
		}
		own, err := OracleHints(ctx, b, to, opts)
		if err != nil {
			t.Fatal(err)
		}
		other, err := OracleHints(ctx, b, from, opts)
		if err != nil {
			t.Fatal(err)
		}
		same := 0
		for i := range to {
			if p := place.FindString(own[to[i].ID]); p != "" && p == place.FindString(other[from[i].ID]) {
				same++
			}
		}
		return float64(same) / float64(len(to))
	}
	uniform, prior := agree(nil), agree(envadapters.Options{household.OptPlacementPrior: "0.8"})
	t.Logf("donor's hint names the task's own first place: %.0f%% uniform, %.0f%% with placement_prior 0.8", 100*uniform, 100*prior)
	if prior < uniform+0.2 {
		t.Errorf("the placement prior does not make hints transfer: %.2f vs %.2f uniform", prior, uniform)
	}
}
