package benchmarks

import (
	"fmt"
	"math/rand/v2"
	"sort"

	"github.com/seedctl/seedctl/orchestrator"
)

// PairedCI is SEED's eval-seen success at one data share minus GRPO's
// with all the training tasks, in points, with a 95% paired bootstrap
// interval: the runs of one seed are paired, and so are the outcomes of one
// eval task (every run plays the same tasks).
type PairedCI struct {
	Diff  float64 `json:"diff"`
	Lo    float64 `json:"lo"`
	Hi    float64 `json:"hi"`
	Seeds int     `json:"seeds"`
	Tasks int     `json:"tasks"`
}

func (c PairedCI) String() string {
	return fmt.Sprintf("%+.1f [%+.1f, %+.1f]", c.Diff, c.Lo, c.Hi)
}

// bootstrapReplicates is how many resamples an interval takes.
const bootstrapReplicates = 4000

// pairedBootstrap computes PairedCI from per-seed outcome strings a[i] and
// b[i] (EvalPoint.SeenWins of the two methods' runs with the i-th seed).
// Each replicate draws seeds with replacement and, independently, eval
// tasks with replacement (the same task draw for every seed, as the tasks
// are shared), and takes the mean difference over the drawn cells; the
// interval is the replicates' 2.5th and 97.5th percentiles. The random
// stream is fixed, so a report is reproducible.
func pairedBootstrap(a, b []string) (PairedCI, error) {
	k := len(a)
	if k == 0 || len(b) != k {
		return PairedCI{}, fmt.Errorf("paired bootstrap: %d and %d runs", len(a), len(b))
	}
	n := len(a[0])
	if n == 0 {
		return PairedCI{}, fmt.Errorf("paired bootstrap: no per-task outcomes")
	}
	d := make([][]float64, k)
	for i := range k {
		if len(a[i]) != n || len(b[i]) != n {
			return PairedCI{}, fmt.Errorf("paired bootstrap: seed %d has %d and %d outcomes, want %d", i, len(a[i]), len(b[i]), n)
		}
		d[i] = make([]float64, n)
		for t := range n {
			d[i][t] = float64(a[i][t]-'0') - float64(b[i][t]-'0')
		}
	}
	mean := func(seeds, tasks []int) float64 {
		s := 0.0
		for _, i := range seeds {
			for _, t := range tasks {
				s += d[i][t]
			}
		}
		return 100 * s / float64(len(seeds)*len(tasks))
	}
	all := func(m int) []int {
		out := make([]int, m)
		for i := range out {
			out[i] = i
		}
		return out
	}
	ci := PairedCI{Diff: mean(all(k), all(n)), Seeds: k, Tasks: n}
	r := rand.New(rand.NewPCG(2026, 12))
	reps := make([]float64, bootstrapReplicates)
	seeds, tasks := make([]int, k), make([]int, n)
	for j := range reps {
		for i := range seeds {
			seeds[i] = r.IntN(k)
		}
		for t := range tasks {
			tasks[t] = r.IntN(n)
		}
		reps[j] = mean(seeds, tasks)
	}
	sort.Float64s(reps)
	ci.Lo, ci.Hi = reps[int(0.025*float64(len(reps)))], reps[int(0.975*float64(len(reps)))-1]
	return ci, nil
}

// seedVsGRPO computes, for each share SEED ran at, the paired interval of
// SEED there minus GRPO at 100%, over the seeds both have finished with
// per-task outcomes (runs from before EvalPoint.SeenWins have none and
// are left out).
func seedVsGRPO(outs []Outcome) map[string]PairedCI {
	grpo := map[int64]string{}
	seed := map[string]map[int64]string{}
	for _, o := range outs {
		if o.Skipped != "" || !o.Done || o.Final == nil || o.Final.SeenWins == "" || o.Swept() {
			continue
		}
		switch {
		case o.Algo == orchestrator.AlgoGRPO && o.DataShare == 1:
			grpo[o.Seed] = o.Final.SeenWins
		case o.Algo == orchestrator.AlgoSEED:
			k := shareKey(o.DataShare)
			if seed[k] == nil {
				seed[k] = map[int64]string{}
			}
			seed[k][o.Seed] = o.Final.SeenWins
		}
	}
	out := map[string]PairedCI{}
	for share, runs := range seed {
		var ids []int64
		for s := range runs {
			if _, ok := grpo[s]; ok {
				ids = append(ids, s)
			}
		}
		sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
		var a, b []string
		for _, s := range ids {
			a, b = append(a, runs[s]), append(b, grpo[s])
		}
		if ci, err := pairedBootstrap(a, b); err == nil {
			out[share] = ci
		}
	}
	return out
}
