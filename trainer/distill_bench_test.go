package trainer

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkDistillForms times one RL step (forward, backward, AdamW) of
// the gated NLL against the full-distribution reverse KL over the whole
// vocabulary and over the teacher's top k, every trained token distilled,
// side by side on one model; and the teacher's rescoring that makes the
// distributions (RescoreDistAt) against the sampled-token rescoring
// (RescoreAt). Reports each distribution set's host bytes per distilled
// token. A 32,768-token vocabulary stands for a real tokenizer's.
//
//	go test ./trainer -run '^$' -bench DistillForms -benchtime 5x
func BenchmarkDistillForms(b *testing.B) {
	c := benchConfig()
	c.VocabSize = 32768
	m, err := InitRandom(c, ModelOptions{}, 7)
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	const rows, seq = 4, 256
	var batch []RLSequence
	seqs, want := make([][]int, rows), make([][]bool, rows)
	for i := 0; i < rows; i++ {
		ids := make([]int, seq)
		for k := range ids {
			ids[k] = rng.IntN(c.VocabSize)
		}
		train := make([]bool, seq)
		for k := seq / 2; k < seq; k++ {
			train[k] = true
		}
		seqs[i], want[i] = ids, train
		batch = append(batch, RLSequence{ID: fmt.Sprint(i), IDs: ids, Train: train, Advantage: float64(i%2)*2 - 1, Distill: train})
	}
	old, err := m.Rescore(seqs, 1<<14)
	if err != nil {
		b.Fatal(err)
	}
	for i := range batch {
		batch[i].OldLogP, batch[i].TeacherLogP = old[i], old[i]
	}
	withDists := func(topK int) []RLSequence {
		_, ds, err := m.RescoreDistAt(seqs, want, 1<<14, 1, topK)
		if err != nil {
			b.Fatal(err)
		}
		out := make([]RLSequence, len(batch))
		bytes, n := 0, 0
		for i := range batch {
			out[i] = batch[i]
			out[i].TeacherDist = ds[i]
			for _, d := range ds[i] {
				if d != nil {
					bytes += 4*len(d.LogP) + 4*len(d.IDs)
					n++
				}
			}
		}
		b.Logf("top %d: %d bytes of teacher distribution per distilled token", topK, bytes/max(n, 1))
		return out
	}
	full, top64 := withDists(0), withDists(64)
	opt, err := m.NewAdamW(1e-6, 0)
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		form  string
		batch []RLSequence
	}{{"gated", DistillGatedNLL, batch}, {"full-top64", DistillFull, top64}, {"full-whole", DistillFull, full}} {
		b.Run("step/"+tc.name, func(b *testing.B) {
			cfg := DefaultRLConfig()
			cfg.Lambda, cfg.DistillForm = 1, tc.form
			for i := 0; i < b.N; i++ {
				if _, err := m.RLStep(opt, tc.batch, cfg); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	for _, k := range []int{-1, 64, 0} {
		name := map[int]string{-1: "sampled-token", 64: "top64", 0: "whole"}[k]
		b.Run("rescore/"+name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				var err error
				if k < 0 {
					_, err = m.Rescore(seqs, 1<<14)
				} else {
					_, _, err = m.RescoreDistAt(seqs, want, 1<<14, 1, k)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
