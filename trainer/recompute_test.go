package trainer

import (
	"math"
	"testing"

	"github.com/sugarme/gotch"
)

// gradValues snapshots every parameter's gradient (nil where none).
func gradValues(m *Model) map[string][]float64 {
	out := map[string][]float64{}
	for _, p := range m.params {
		g := must(p.t.Grad(false))
		if ok, _ := g.Defined(); ok {
			out[p.name] = must(g.Totype(gotch.Double, false)).Float64Values(true)
		}
		drop(g)
	}
	return out
}

// compareGrads returns the largest difference between two snapshots
// relative to the largest gradient, and whether they cover the same
// parameters.
func compareGrads(a, b map[string][]float64) (rel float64, same bool) {
	if len(a) != len(b) {
		return math.Inf(1), false
	}
	worst, scale := 0.0, 0.0
	for k, av := range a {
		bv, ok := b[k]
		if !ok || len(bv) != len(av) {
			return math.Inf(1), false
		}
		for i := range av {
			worst = math.Max(worst, math.Abs(av[i]-bv[i]))
			scale = math.Max(scale, math.Abs(av[i]))
		}
	}
	return worst / math.Max(scale, 1e-12), true
}

// TestRecomputeGradientsMatch: with activation recomputation the NLL and
// RL losses give the same gradients as without (every parameter, each
// architecture), the loss values are unchanged, and forward-only scoring
// is untouched by the setting.
func TestRecomputeGradientsMatch(t *testing.T) {
	for _, arch := range []Arch{ArchQwen2, ArchQwen3, ArchLlama} {
		m, _ := newTiny(t, arch, 31)
		in := testInput()
		targets := [][]int{{17, 3, 88, 41, 9, 60, -1}, {7, 12, -1, 2, 96, -1, -1}}

		plainLoss, err := m.NLLBackward(in, targets)
		if err != nil {
			t.Fatal(err)
		}
		plain := gradValues(m)
		m.ZeroGrad()
		m.SetRecompute(true)
		recLoss, err := m.NLLBackward(in, targets)
		if err != nil {
			t.Fatal(err)
		}
		rec := gradValues(m)
		m.ZeroGrad()
		if rel, ok := compareGrads(plain, rec); !ok || rel > 1e-5 || math.Abs(plainLoss-recLoss) > 1e-6 {
			t.Errorf("%s NLL: gradients differ by %.3g of the largest (same parameters: %v), loss %v vs %v", arch, rel, ok, plainLoss, recLoss)
		}
		if len(plain) != len(m.params) {
			t.Errorf("%s: %d of %d parameters got a gradient", arch, len(plain), len(m.params))
		}

		// An RL step's loss: GRPO with dual-clip, distillation, KL and the
		// entropy bonus, over two micro-batches.
		m.SetRecompute(false)
		batch := withTeacher(rlBatch(t, m, []float64{1, -0.5, 0.3}), 0.4)
		for i := range batch {
			batch[i].RefLogP = batch[i].OldLogP
		}
		cfg := DefaultRLConfig()
		cfg.Lambda, cfg.KLCoef, cfg.EntropyCoef, cfg.MicroBatchTokens = 0.5, 0.1, 0.01, 16
		stPlain, err := m.rlBackward(batch, cfg)
		if err != nil {
			t.Fatal(err)
		}
		plain = gradValues(m)
		m.ZeroGrad()
		m.SetRecompute(true)
		stRec, err := m.rlBackward(batch, cfg)
		if err != nil {
			t.Fatal(err)
		}
		rec = gradValues(m)
		m.ZeroGrad()
		if rel, ok := compareGrads(plain, rec); !ok || rel > 1e-5 || math.Abs(stPlain.Loss-stRec.Loss) > 1e-6 || stRec.MicroBatches < 2 {
			t.Errorf("%s RL: gradients differ by %.3g of the largest (same parameters: %v), loss %v vs %v, %d micro-batches", arch, rel, ok, stPlain.Loss, stRec.Loss, stRec.MicroBatches)
		}
		if m.pending != nil {
			t.Errorf("%s: a recomputed forward is still pending after the step", arch)
		}

		// Scoring without gradients does not recompute anything.
		seqs := [][]int{{5, 17, 3, 88, 41, 9}}
		a, err := m.Rescore(seqs, 1024)
		if err != nil {
			t.Fatal(err)
		}
		if m.pending != nil {
			t.Errorf("%s: scoring left a recomputed forward pending", arch)
		}
		m.SetRecompute(false)
		b, err := m.Rescore(seqs, 1024)
		if err != nil {
			t.Fatal(err)
		}
		for k := range a[0] {
			if a[0][k] != b[0][k] {
				t.Errorf("%s: rescoring differs with recomputation on at %d: %v vs %v", arch, k, a[0][k], b[0][k])
			}
		}
		m.Close()
	}
}

// TestChunkedHeadGradientsMatch: applying the language-model head a few
// positions at a time (chunks that split rows, with and without
// recomputation) gives the RL step the gradients and figures of one chunk
// over the whole micro-batch.
func TestChunkedHeadGradientsMatch(t *testing.T) {
	defer func(n int) { headChunkTokens = n }(headChunkTokens)
	m, _ := newTiny(t, ArchQwen3, 33)
	defer m.Close()
	batch := withTeacher(rlBatch(t, m, []float64{1, -0.5, 0.3}), 0.4)
	for i := range batch {
		batch[i].RefLogP = batch[i].OldLogP
	}
	cfg := DefaultRLConfig()
	cfg.Lambda, cfg.KLCoef, cfg.EntropyCoef, cfg.Temperature = 0.5, 0.1, 0.01, 0.7
	for _, rec := range []bool{false, true} {
		m.SetRecompute(rec)
		headChunkTokens = 1 << 20
		whole, err := m.rlBackward(batch, cfg)
		if err != nil {
			t.Fatal(err)
		}
		want := gradValues(m)
		m.ZeroGrad()
		headChunkTokens = 3
		chunked, err := m.rlBackward(batch, cfg)
		if err != nil {
			t.Fatal(err)
		}
		got := gradValues(m)
		m.ZeroGrad()
		if rel, ok := compareGrads(want, got); !ok || rel > 1e-5 || len(got) != len(m.params) {
			t.Errorf("recompute %v: chunked head gradients differ by %.3g of the largest (same parameters: %v, %d of %d)", rec, rel, ok, len(got), len(m.params))
		}
		for name, pair := range map[string][2]float64{"loss": {whole.Loss, chunked.Loss}, "entropy": {whole.Entropy, chunked.Entropy}, "kl": {whole.KL, chunked.KL}, "opd": {whole.OPDLoss, chunked.OPDLoss}} {
			if math.Abs(pair[0]-pair[1]) > 1e-6 || pair[0] == 0 {
				t.Errorf("recompute %v: %s %v whole, %v chunked", rec, name, pair[0], pair[1])
			}
		}
	}
}
