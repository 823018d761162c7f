package trainer

import (
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"sync"
	"testing"
	"time"
)

// BenchmarkDataParallelStep times one RL step (SEED's loss, AdamW) of
// benchConfig's model on 16 rows of 128 tokens: in one process, then as 2
// ranks of a Gloo group (goroutines of this process with their own model
// and process group, each training on 8 of the rows, sharing libtorch's
// thread pool as two processes would share the 2 cores), with and without
// ZeRO-1. Reported: each layout's ms per step and its ratio to one
// process, and per rank and step the time inside collectives (waiting for
// the other rank included) and the bytes handed to them.
//
//	go test ./trainer -run '^$' -bench DataParallelStep -benchtime 10x
func BenchmarkDataParallelStep(b *testing.B) {
	if !DistAvailable(BackendGloo) {
		b.Skip("this libtorch build has no Gloo process group")
	}
	const rows, seq = 16, 128
	cfg := benchConfig()
	rl := DefaultRLConfig()
	rl.Lambda, rl.KLCoef = 0.01, 0
	newModel := func() *Model {
		m, err := InitRandom(cfg, ModelOptions{}, 1)
		if err != nil {
			b.Fatal(err)
		}
		return m
	}
	m0 := newModel()
	r := rand.New(rand.NewPCG(3, 4))
	seqs := make([][]int, rows)
	for i := range seqs {
		seqs[i] = make([]int, seq)
		for k := range seqs[i] {
			seqs[i][k] = r.IntN(cfg.VocabSize)
		}
	}
	old, err := m0.Rescore(seqs, 4096)
	if err != nil {
		b.Fatal(err)
	}
	batch := make([]RLSequence, rows)
	for i, ids := range seqs {
		train, distill := make([]bool, seq), make([]bool, seq)
		teacher := make([]float32, seq)
		for k := seq / 2; k < seq; k++ {
			train[k], distill[k] = true, true
			teacher[k] = old[i][k] + 0.3*float32(r.NormFloat64())
		}
		batch[i] = RLSequence{ID: fmt.Sprint(i), IDs: ids, Train: train, Advantage: r.NormFloat64(), OldLogP: old[i], TeacherLogP: teacher, Distill: distill}
	}
	steps := max(b.N, 2)

	// One process: the whole batch.
	opt, err := m0.NewAdamW(1e-5, 0)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := m0.RLStep(opt, batch, rl); err != nil { // warm-up
		b.Fatal(err)
	}
	b.ResetTimer()
	start := time.Now()
	for range steps {
		if _, err := m0.RLStep(opt, batch, rl); err != nil {
			b.Fatal(err)
		}
	}
	one := time.Since(start).Seconds() / float64(steps)
	b.StopTimer()
	b.ReportMetric(1000*one, "1rank-ms/step")

	for _, zero := range []bool{false, true} {
		const world = 2
		port := freePort(b)
		var wg sync.WaitGroup
		errs := make([]error, world)
		comm := make([]CommStats, world)
		elapsed := make([]float64, world)
		restoreGC := debug.SetGCPercent(100)
		for rank := range world {
			m := newModel()
			wg.Add(1)
			go func() {
				defer wg.Done()
				dc := DefaultDistConfig()
				dc.Port, dc.Rank, dc.World, dc.Timeout = port, rank, world, time.Minute
				g, err := NewProcessGroup(dc)
				if err != nil {
					errs[rank] = err
					return
				}
				defer g.Close()
				o, err := m.NewAdamW(1e-5, 0)
				if zero {
					o, err = m.NewShardedAdamW(1e-5, 0, g)
				}
				if err != nil {
					errs[rank] = err
					return
				}
				shard := RankShare(batch, rank, world)
				if _, err := m.RLStepDist(o, g, shard, rl); err != nil { // warm-up
					errs[rank] = err
					return
				}
				if err := g.Barrier(); err != nil {
					errs[rank] = err
					return
				}
				c0, t0 := g.Comm(), time.Now()
				for range steps {
					if _, err := m.RLStepDist(o, g, shard, rl); err != nil {
						errs[rank] = err
						return
					}
				}
				elapsed[rank], comm[rank] = time.Since(t0).Seconds()/float64(steps), g.Comm().Sub(c0)
			}()
		}
		wg.Wait()
		debug.SetGCPercent(restoreGC)
		for rank, err := range errs {
			if err != nil {
				b.Fatalf("rank %d: %v", rank, err)
			}
		}
		name := "2ranks"
		if zero {
			name = "2ranks-zero"
		}
		step := max(elapsed[0], elapsed[1])
		b.ReportMetric(1000*step, name+"-ms/step")
		b.ReportMetric(step/one, name+"/1rank")
		b.ReportMetric(1000*comm[0].Seconds/float64(steps), name+"-comm-ms/step")
		b.ReportMetric(float64(comm[0].Bytes)/float64(steps)/(1<<20), name+"-comm-MiB/step")
	}
}
