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
	grpoFull := func(o Outcome, _ float64) bool { return o.Algo == orchestrator.AlgoGRPO && o.DataShare == 1 }
	return pairedByShare(outs, orchestrator.AlgoSEED, grpoFull)
}

// seedVsGRPOSameShare is, at each share below 100% where both ran, SEED
// minus GRPO at that share: the method's effect with the data held equal.
func seedVsGRPOSameShare(outs []Outcome) map[string]PairedCI {
	grpoThere := func(o Outcome, share float64) bool { return o.Algo == orchestrator.AlgoGRPO && o.DataShare == share }
	return below100(pairedByShare(outs, orchestrator.AlgoSEED, grpoThere))
}

// grpoShareVsFull is, at each share below 100%, GRPO there minus GRPO with
// all the tasks: the control of the data-efficiency claim. A testbed on
// which GRPO loses nothing with fewer tasks cannot show that SEED needs
// fewer.
func grpoShareVsFull(outs []Outcome) map[string]PairedCI {
	grpoFull := func(o Outcome, _ float64) bool { return o.Algo == orchestrator.AlgoGRPO && o.DataShare == 1 }
	return below100(pairedByShare(outs, orchestrator.AlgoGRPO, grpoFull))
}

func below100(m map[string]PairedCI) map[string]PairedCI {
	delete(m, shareKey(1))
	if len(m) == 0 {
		return nil
	}
	return m
}

// pairedByShare computes, for each share algo ran at, the paired interval
// of algo's runs there minus the reference runs (ref(o, share) picks
// them), over the seeds both have finished with per-task outcomes. Swept
// runs, unfinished ones and runs from before EvalPoint.SeenWins are left
// out.
func pairedByShare(outs []Outcome, algo string, ref func(o Outcome, share float64) bool) map[string]PairedCI {
	usable := func(o Outcome) bool {
		return o.Skipped == "" && o.Done && o.Final != nil && o.Final.SeenWins != "" && !o.Swept()
	}
	runs := map[float64]map[int64]string{}
	for _, o := range outs {
		if usable(o) && o.Algo == algo {
			if runs[o.DataShare] == nil {
				runs[o.DataShare] = map[int64]string{}
			}
			runs[o.DataShare][o.Seed] = o.Final.SeenWins
		}
	}
	out := map[string]PairedCI{}
	for share, bySeed := range runs {
		refs := map[int64]string{}
		for _, o := range outs {
			if usable(o) && ref(o, share) {
				refs[o.Seed] = o.Final.SeenWins
			}
		}
		var ids []int64
		for s := range bySeed {
			if _, ok := refs[s]; ok {
				ids = append(ids, s)
			}
		}
		sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
		var a, b []string
		for _, s := range ids {
			a, b = append(a, bySeed[s]), append(b, refs[s])
		}
		if ci, err := pairedBootstrap(a, b); err == nil {
			out[shareKey(share)] = ci
		}
	}
	return out
}
