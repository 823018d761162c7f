package trainer

import (
	"errors"
	"math"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/sugarme/gotch/ts"
)

// TestNLLHeadWithoutReadBacks: the NLL step, its derivatives known before
// its log-probs, gives the gradients (to the bit) and the loss of the
// per-chunk form that reads each chunk's log-probs back and asks for the
// derivatives first; and however many chunks its head runs in, it reads
// back from the device once and copies to it a fixed number of times,
// where the per-chunk form reads back once per chunk.
func TestNLLHeadWithoutReadBacks(t *testing.T) {
	defer func(n int) { headChunkTokens = n }(headChunkTokens)
	// Bit-exact only as training runs: on one OS thread, no finalizer
	// running mid-step (TestOptimizerStateResumesExactly).
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	defer pinThread()()
	for _, rec := range []bool{false, true} {
		m, _ := newTiny(t, ArchQwen2, 5)
		m.SetRecompute(rec)
		in := testInput()
		targets := [][]int{{17, 3, 88, 41, 9, 60, -1}, {7, 12, 30, 2, 96, -1, -1}}
		weights := [][]float32{{1, 2, 1, 0.5, 1, 1, 0}, {1, 1, 3, 1, 1, 0, 0}}
		const denom = 9.0
		rows, width, err := in.shape()
		if err != nil {
			t.Fatal(err)
		}
		perChunk := func() (float64, error) {
			sum := 0.0
			err := m.headBackward(in, targets, 1, entropyNone, nil, func(j int, l, _ float64) (float64, float64, error) {
				b, k := j/width, j%width
				if targets[b][k] < 0 {
					return 0, 0, nil
				}
				w := float64(weights[b][k])
				sum += w * l
				return -w / denom, 0, nil
			})
			return -sum / denom, err
		}
		fixedUploads := int64(-1)
		for _, chunk := range []int{1 << 20, 5, 2} {
			headChunkTokens = chunk
			chunks := int64((rows*width + chunk - 1) / chunk)
			quiesceGC()
			u0, r0 := uploads.Load(), readBacks.Load()
			loss, err := m.nllBackward(in, targets, weights, denom)
			if err != nil {
				t.Fatal(err)
			}
			ups, reads := uploads.Load()-u0, readBacks.Load()-r0
			got := gradValues(m)
			m.ZeroGrad()
			quiesceGC()
			r0 = readBacks.Load()
			want, err := perChunk()
			if err != nil {
				t.Fatal(err)
			}
			oldReads := readBacks.Load() - r0
			wantGrads := gradValues(m)
			m.ZeroGrad()
			if len(got) != len(m.params) || len(wantGrads) != len(m.params) {
				t.Fatalf("recompute %v, chunk %d: gradients of %d and %d parameters, want %d", rec, chunk, len(got), len(wantGrads), len(m.params))
			}
			for name, w := range wantGrads {
				for i := range w {
					if got[name][i] != w[i] {
						t.Fatalf("recompute %v, chunk %d: %s[%d] = %v, per-chunk form %v", rec, chunk, name, i, got[name][i], w[i])
					}
				}
			}
			if math.Abs(loss-want) > 1e-12*math.Abs(want) || loss == 0 {
				t.Errorf("recompute %v, chunk %d: loss %v, per-chunk form %v", rec, chunk, loss, want)
			}
			if reads != 1 || oldReads != chunks {
				t.Errorf("recompute %v, chunk %d: %d read-backs (want 1), per-chunk form %d (want %d)", rec, chunk, reads, oldReads, chunks)
			}
			if fixedUploads >= 0 && ups != fixedUploads {
				t.Errorf("recompute %v, chunk %d: %d uploads, %d with one chunk", rec, chunk, ups, fixedUploads)
			}
			fixedUploads = ups
		}
		m.Close()
	}
}

// TestNLLRefusesNonFiniteLogProb: a NaN log-prob is an error wrapping
// ErrNonFinite that names the first position it was found at.
func TestNLLRefusesNonFiniteLogProb(t *testing.T) {
	defer func(n int) { headChunkTokens = n }(headChunkTokens)
	headChunkTokens = 3
	m, _ := newTiny(t, ArchQwen2, 5)
	defer m.Close()
	// Token 5 opens row 0 and appears nowhere else: NaN its embedding.
	row := must(m.embed.Narrow(0, 5, 1, false))
	nan := ts.FloatScalar(math.NaN())
	withoutGrad(func() { must0(row.Fill_(nan)) })
	runtime.KeepAlive(nan)
	drop(row)
	_, err := m.NLLBackward(testInput(), [][]int{{17, 3, 88, 41, 9, 60, -1}, {7, 12, 30, 2, 96, -1, -1}})
	if !errors.Is(err, ErrNonFinite) || !strings.Contains(err.Error(), "row 0 position 0") {
		t.Fatalf("NLL step over a NaN embedding: %v, want ErrNonFinite at row 0 position 0", err)
	}
}

// TestRLHeadOneRoundTripPerChunk: the RL step's head reads each chunk's
// log-probs and entropies back in one copy and sends their derivatives in
// one, with the entropy bonus or without: every extra chunk costs one
// read-back and one upload.
func TestRLHeadOneRoundTripPerChunk(t *testing.T) {
	defer func(n int) { headChunkTokens = n }(headChunkTokens)
	m, _ := newTiny(t, ArchQwen3, 33)
	defer m.Close()
	batch := withTeacher(rlBatch(t, m, []float64{1, -0.5, 0.3}), 0.4)
	positions := 0
	for _, s := range batch {
		positions = max(positions, len(s.IDs)-1)
	}
	positions *= len(batch)
	for _, bonus := range []float64{0, 0.01} {
		cfg := DefaultRLConfig()
		cfg.Lambda, cfg.EntropyCoef = 0.5, bonus
		count := func(chunk int) (ups, reads int64) {
			headChunkTokens = chunk
			u0, r0 := uploads.Load(), readBacks.Load()
			if _, err := m.rlBackward(batch, cfg); err != nil {
				t.Fatal(err)
			}
			m.ZeroGrad()
			return uploads.Load() - u0, readBacks.Load() - r0
		}
		u1, r1 := count(1 << 20)
		u3, r3 := count(3)
		extra := int64((positions+2)/3 - 1)
		if u3-u1 != extra || r3-r1 != extra {
			t.Errorf("entropy bonus %v: %d more chunks cost %d uploads and %d read-backs, want %d of each", bonus, extra, u3-u1, r3-r1, extra)
		}
	}
}
