package orchestrator

import (
	"fmt"

	"github.com/seedctl/seedctl/envadapters"
)

type fakeTasks struct{ n int }

func (f fakeTasks) SplitSize(envadapters.Split) int { return f.n }
func (f fakeTasks) Tasks(s envadapters.Split, n int) ([]envadapters.Task, error) {
	out := make([]envadapters.Task, n)
	for i := range out {
		out[i] = envadapters.Task{Split: s, Index: i, ID: fmt.Sprintf("fake/%s/%d", s, i)}
	}
	return out, nil
}
