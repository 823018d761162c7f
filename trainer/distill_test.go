package trainer

import (
	"bytes"
	"encoding/json"
	"math"
	"os/exec"
	"sort"
	"strconv"
	"testing"
)

// distBatch is rlBatch with every trained token distilled from teacher's
// distributions (top k; 0: the whole vocabulary) at temperature temp.
func distBatch(t *testing.T, m, teacher *Model, topK int, temp float64) []RLSequence {
	t.Helper()
	batch := rlBatch(t, m, []float64{0.5, -1, 0})
	seqs, want := make([][]int, len(batch)), make([][]bool, len(batch))
	for i := range batch {
		seqs[i], want[i] = batch[i].IDs, batch[i].Train
	}
	lps, dists, err := teacher.RescoreDistAt(seqs, want, 1024, temp, topK)
	if err != nil {
		t.Fatal(err)
	}
	for i := range batch {
		s := &batch[i]
		s.Distill = append([]bool(nil), s.Train...)
		s.TeacherLogP, s.TeacherDist = lps[i], dists[i]
	}
	return batch
}

func fullDistillConfig(temp float64) RLConfig {
	cfg := DefaultRLConfig()
	cfg.PGCoef, cfg.KLCoef, cfg.EntropyCoef, cfg.Lambda = 0, 0, 0, 0.7
	cfg.DistillForm, cfg.Temperature = DistillFull, temp
	return cfg
}

// torchDistill runs testdata/torch_distill.py on batch's distilled
// positions: the reference loss and parameter gradients.
func torchDistill(t *testing.T, dir string, batch []RLSequence, cfg RLConfig) (float64, map[string][]float64) {
	t.Helper()
	py := "/usr/bin/python3"
	if out, err := exec.Command(py, "-c", "import torch, numpy").CombinedOutput(); err != nil {
		t.Fatalf("Debian's python3-torch is needed for the reference (run ./setup.sh): %v: %s", err, out)
	}
	type dist struct {
		IDs  []int32   `json:"ids"`
		LogP []float32 `json:"logp"`
	}
	type row struct {
		IDs   []int           `json:"ids"`
		Dists map[string]dist `json:"dists"`
	}
	var rows []row
	for _, s := range batch {
		r := row{IDs: s.IDs, Dists: map[string]dist{}}
		for k, d := range s.Distill {
			if d {
				r.Dists[strconv.Itoa(k)] = dist{IDs: s.TeacherDist[k].IDs, LogP: s.TeacherDist[k].LogP}
			}
		}
		rows = append(rows, r)
	}
	body, _ := json.Marshal(map[string]any{"temperature": cfg.Temperature, "lambda": cfg.Lambda, "beta": cfg.jsdBeta(), "rows": rows})
	cmd := exec.Command(py, "testdata/torch_distill.py", dir)
	cmd.Stdin = bytes.NewReader(body)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("torch_distill.py: %v: %s", err, stderr.String())
	}
	var res struct {
		Loss  float64              `json:"loss"`
		Grads map[string][]float64 `json:"grads"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("torch_distill.py output: %v", err)
	}
	return res.Loss, res.Grads
}

// TestFullDistillMatchesTorch: the full-distribution reverse KL's loss
// and every parameter's gradient agree with an independent PyTorch
// autograd computation, over the whole vocabulary and over a top-k
// teacher with its tail bucket, at T = 1 and T = 0.7; and so do the
// forward KL and TRL's generalized JSD between them.
func TestFullDistillMatchesTorch(t *testing.T) {
	for _, tc := range []struct {
		name string
		topK int
		temp float64
		beta float64 // RLConfig.JSDBeta
	}{{"whole-vocab", 0, 1, 0}, {"top8", 8, 1, 0}, {"top8-T0.7", 8, 0.7, 0}, {"whole-vocab-T0.7", 0, 0.7, 0},
		{"forward-whole", 0, 1, JSDForward}, {"forward-top8", 8, 1, JSDForward}, {"jsd0.5-whole", 0, 1, 0.5}, {"jsd0.3-top8", 8, 0.7, 0.3}} {
		t.Run(tc.name, func(t *testing.T) {
			m, dir := newTiny(t, ArchQwen2, 31)
			teacher, _ := newTiny(t, ArchQwen2, 32)
			batch := distBatch(t, m, teacher, tc.topK, tc.temp)
			cfg := fullDistillConfig(tc.temp)
			cfg.JSDBeta = tc.beta
			m.ZeroGrad()
			st, err := m.rlBackward(batch, cfg)
			if err != nil {
				t.Fatal(err)
			}
			got := gradValues(m)
			wantLoss, want := torchDistill(t, dir, batch, cfg)
			if d := math.Abs(st.Loss - wantLoss); d > 1e-5*math.Max(1, math.Abs(wantLoss)) {
				t.Errorf("loss %v, torch %v", st.Loss, wantLoss)
			}
			if st.OPDLoss <= 0 {
				t.Errorf("reverse KL %v: two different random models must disagree", st.OPDLoss)
			}
			for name := range got { // parameters torch saw no gradient for are zero here
				if _, ok := want[name]; !ok {
					delete(got, name)
				}
			}
			rel, same := compareGrads(want, got)
			t.Logf("%s: loss %.6f (torch %.6f), max |Δgrad|/max|grad| %.2e", tc.name, st.Loss, wantLoss, rel)
			if !same || rel > 1e-4 {
				t.Errorf("gradients differ from torch: relative %g (same parameters %v)", rel, same)
			}
		})
	}
}

// TestFullDistillChunkedMatchesWhole: the loss and gradients do not depend
// on how many positions' log-softmax exist at once.
func TestFullDistillChunkedMatchesWhole(t *testing.T) {
	for _, topK := range []int{0, 5} {
		m, _ := newTiny(t, ArchQwen2, 41)
		teacher, _ := newTiny(t, ArchQwen2, 42)
		defer func(n int) { headChunkTokens = n }(headChunkTokens)
		headChunkTokens = 1 << 20
		batch := distBatch(t, m, teacher, topK, 1)
		cfg := fullDistillConfig(1)
		m.ZeroGrad()
		whole, err := m.rlBackward(batch, cfg)
		if err != nil {
			t.Fatal(err)
		}
		gw := gradValues(m)
		headChunkTokens = 3 // chunks that straddle rows and padding
		m.ZeroGrad()
		chunked, err := m.rlBackward(batch, cfg)
		if err != nil {
			t.Fatal(err)
		}
		gc := gradValues(m)
		if math.Abs(whole.Loss-chunked.Loss) > 1e-6 || math.Abs(whole.OPDLoss-chunked.OPDLoss) > 1e-6 {
			t.Errorf("top %d: loss %v / KL %v chunked, %v / %v whole", topK, chunked.Loss, chunked.OPDLoss, whole.Loss, whole.OPDLoss)
		}
		if rel, same := compareGrads(gw, gc); !same || rel > 1e-5 {
			t.Errorf("top %d: chunked gradients differ: relative %g", topK, rel)
		}
	}
}

// TestRescoreDistAt: the whole-vocabulary distribution is the log-softmax
// of the logits, a top-k one is its k largest entries in order, the
// sampled tokens' log-probs are RescoreAt's, and chunking changes nothing.
func TestRescoreDistAt(t *testing.T) {
	m, _ := newTiny(t, ArchQwen2, 51)
	seqs := [][]int{{5, 17, 3, 88, 41, 9, 60}, {7, 7}, {12, 30, 2, 96, 4}}
	want := [][]bool{{false, false, true, false, true, true, false}, {false, true}, {false, true, true, true, true}}
	logits, err := m.Logits(Input{IDs: [][]int{seqs[0][:6]}})
	if err != nil {
		t.Fatal(err)
	}
	ref := logSoftmax(logits[0][3]) // position 4's distribution
	plain, err := m.RescoreAt(seqs, 1024, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer func(n int) { headChunkTokens = n }(headChunkTokens)
	for _, chunk := range []int{1 << 20, 2} {
		headChunkTokens = chunk
		lps, full, err := m.RescoreDistAt(seqs, want, 1024, 1, 0)
		if err != nil {
			t.Fatal(err)
		}
		_, top, err := m.RescoreDistAt(seqs, want, 1024, 1, 4)
		if err != nil {
			t.Fatal(err)
		}
		for i := range seqs {
			for k := range seqs[i] {
				if d := math.Abs(float64(lps[i][k] - plain[i][k])); d > 1e-5 {
					t.Errorf("chunk %d row %d pos %d: log-prob %v, RescoreAt %v", chunk, i, k, lps[i][k], plain[i][k])
				}
				if (full[i][k] != nil) != want[i][k] || (top[i][k] != nil) != want[i][k] {
					t.Fatalf("chunk %d row %d pos %d: distribution present %v/%v, wanted %v", chunk, i, k, full[i][k] != nil, top[i][k] != nil, want[i][k])
				}
				if full[i][k] == nil {
					continue
				}
				f := full[i][k]
				if f.IDs != nil || len(f.LogP) != 97 {
					t.Fatalf("whole-vocabulary distribution: %d ids, %d log-probs", len(f.IDs), len(f.LogP))
				}
				if d := math.Abs(float64(f.LogP[seqs[i][k]] - lps[i][k])); d > 1e-5 {
					t.Errorf("row %d pos %d: distribution gives the sampled token %v, log-prob %v", i, k, f.LogP[seqs[i][k]], lps[i][k])
				}
				order := make([]int, len(f.LogP))
				for v := range order {
					order[v] = v
				}
				sort.SliceStable(order, func(a, b int) bool { return f.LogP[order[a]] > f.LogP[order[b]] })
				tp := top[i][k]
				for q := range tp.IDs {
					if tp.LogP[q] != f.LogP[tp.IDs[q]] || math.Abs(float64(tp.LogP[q]-f.LogP[order[q]])) > 1e-6 {
						t.Errorf("row %d pos %d: top-%d entry %d is id %d at %v; the whole distribution's %d-th largest is %v", i, k, len(tp.IDs), q, tp.IDs[q], tp.LogP[q], q, f.LogP[order[q]])
					}
				}
			}
		}
		for v, l := range full[0][4].LogP {
			if math.Abs(float64(l)-ref[v]) > 1e-5 {
				t.Fatalf("chunk %d: log p(%d) = %v, log-softmax of the logits %v", chunk, v, l, ref[v])
			}
		}
	}
}

func logSoftmax(x []float32) []float64 {
	mx := math.Inf(-1)
	for _, v := range x {
		mx = math.Max(mx, float64(v))
	}
	s := 0.0
	for _, v := range x {
		s += math.Exp(float64(v) - mx)
	}
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v) - mx - math.Log(s)
	}
	return out
}

// TestFullDistillMovesTowardTeacher: steps of the reverse KL alone (no
// policy gradient) lower the KL to the teacher, on the very tokens scored
// and by more than the first step's noise.
func TestFullDistillMovesTowardTeacher(t *testing.T) {
	m, _ := newTiny(t, ArchQwen2, 61)
	teacher, _ := newTiny(t, ArchQwen2, 62)
	opt, err := m.NewAdamW(3e-3, 0)
	if err != nil {
		t.Fatal(err)
	}
	batch := distBatch(t, m, teacher, 0, 1)
	cfg := fullDistillConfig(1)
	var kls []float64
	for i := 0; i < 6; i++ {
		st, err := m.RLStep(opt, batch, cfg)
		if err != nil {
			t.Fatal(err)
		}
		kls = append(kls, st.OPDLoss)
	}
	t.Logf("reverse KL per step: %v", kls)
	if !(kls[5] < 0.8*kls[0]) {
		t.Errorf("reverse KL went %v → %v over six steps, want a drop of at least a fifth", kls[0], kls[5])
	}
}

// TestFullDistillRefusesMissingOrBadDistributions: a distilled token
// without a distribution, a distribution of the wrong size, mixed shapes
// and NaN are errors that name the row, never a silent zero.
func TestFullDistillRefusesMissingOrBadDistributions(t *testing.T) {
	m, _ := newTiny(t, ArchQwen2, 71)
	cfg := fullDistillConfig(1)
	cases := map[string]func(b []RLSequence){
		"missing":   func(b []RLSequence) { b[1].TeacherDist[5] = nil },
		"no slice":  func(b []RLSequence) { b[0].TeacherDist = nil },
		"short":     func(b []RLSequence) { b[0].TeacherDist[6] = &TokenDist{LogP: []float32{-1, -2}} },
		"mixed":     func(b []RLSequence) { b[0].TeacherDist[6] = &TokenDist{IDs: []int32{3}, LogP: []float32{-1}} },
		"nan":       func(b []RLSequence) { b[2].TeacherDist[4].LogP[0] = float32(math.NaN()) },
		"bad id":    func(b []RLSequence) { b[0].TeacherDist[6] = &TokenDist{IDs: []int32{300}, LogP: []float32{-1}} },
		"above one": func(b []RLSequence) { b[2].TeacherDist[4].LogP[3] = 0.5 },
	}
	for name, spoil := range cases {
		batch := distBatch(t, m, m, 0, 1)
		spoil(batch)
		m.ZeroGrad()
		if _, err := m.rlBackward(batch, cfg); err == nil {
			t.Errorf("%s: no error", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}

// TestPGCoefZeroLeavesOnlyTheOtherTerms: with pg_coef 0 and no other
// term the step's gradient is zero; at 1 it is the default's.
func TestPGCoefZeroLeavesOnlyTheOtherTerms(t *testing.T) {
	m, _ := newTiny(t, ArchQwen2, 81)
	batch := rlBatch(t, m, []float64{1, -1, 0.5})
	cfg := DefaultRLConfig()
	cfg.KLCoef, cfg.EntropyCoef, cfg.PGCoef = 0, 0, 0
	m.ZeroGrad()
	if _, err := m.rlBackward(batch, cfg); err != nil {
		t.Fatal(err)
	}
	for name, g := range gradValues(m) {
		for _, v := range g {
			if v != 0 {
				t.Fatalf("pg_coef 0: %s has gradient %v", name, v)
			}
		}
	}
	cfg.PGCoef = 2
	m.ZeroGrad()
	st2, err := m.rlBackward(batch, cfg)
	if err != nil {
		t.Fatal(err)
	}
	g2 := gradValues(m)
	cfg.PGCoef = 1
	m.ZeroGrad()
	st1, err := m.rlBackward(batch, cfg)
	if err != nil {
		t.Fatal(err)
	}
	g1 := gradValues(m)
	for name, a := range g1 {
		for i := range a {
			if math.Abs(g2[name][i]-2*a[i]) > 1e-6*math.Max(1, math.Abs(a[i])) {
				t.Fatalf("pg_coef 2's gradient is not twice 1's at %s[%d]: %v vs %v", name, i, g2[name][i], a[i])
			}
		}
	}
	if math.Abs(st2.Loss-2*st1.Loss) > 1e-9 {
		t.Errorf("loss %v at pg_coef 2, %v at 1", st2.Loss, st1.Loss)
	}
}
