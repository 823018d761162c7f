package trainer

import (
	"math"
	"sort"
	"testing"
)

// termBatch is rows with every loss term in play: advantages of both
// signs, a teacher on every trained token, and a reference on one row.
func termBatch(t *testing.T, m *Model) []RLSequence {
	t.Helper()
	batch := withTeacher(rlBatch(t, m, []float64{0.9, -1.1, 0.4}), -0.4)
	ref := make([]float32, len(batch[0].IDs))
	for k := range ref {
		ref[k] = batch[0].OldLogP[k] - 0.3
	}
	batch[0].RefLogP = ref
	return batch
}

// flatGrads is a gradient snapshot as one vector, parameters by name.
func flatGrads(g map[string][]float64) []float64 {
	names := make([]string, 0, len(g))
	for k := range g {
		names = append(names, k)
	}
	sort.Strings(names)
	var out []float64
	for _, k := range names {
		out = append(out, g[k]...)
	}
	return out
}

func dot(a, b []float64) float64 {
	s := 0.0
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}

// TestTermGradsMatchEachTermAlone: each term's gradient norm, the cosines
// and the shares agree with gradients of configurations that keep one term
// alone (advantages 0 silence GRPO, coefficients 0 the others), the
// terms' sum is the step's gradient, and measuring leaves the update
// unchanged.
func TestTermGradsMatchEachTermAlone(t *testing.T) {
	for _, agg := range []string{AggTokenMean, AggVerl} {
		t.Run(agg, func(t *testing.T) {
			m, _ := newTiny(t, ArchQwen2, 31)
			batch := termBatch(t, m)
			cfg := DefaultRLConfig()
			cfg.Lambda, cfg.EntropyCoef, cfg.KLCoef, cfg.ClipNorm = 0.5, 0.01, 0.2, 0
			cfg.Agg, cfg.MicroBatchRows = agg, 2
			alone := func(grpo bool, lambda, kl, ent float64) []float64 {
				rows := append([]RLSequence(nil), batch...)
				if !grpo {
					for i := range rows {
						rows[i].Advantage = 0
					}
				}
				c := cfg
				c.Lambda, c.KLCoef, c.EntropyCoef = lambda, kl, ent
				if lambda == 0 {
					c.Lambda = 0
				}
				m.ZeroGrad()
				if _, err := m.rlBackward(rows, c); err != nil {
					t.Fatal(err)
				}
				g := flatGrads(gradValues(m))
				m.ZeroGrad()
				return g
			}
			gG := alone(true, 0, 0, 0)
			gO := alone(false, cfg.Lambda, 0, 0)
			gK := alone(false, 0, cfg.KLCoef, 0)
			gE := alone(false, 0, 0, cfg.EntropyCoef)
			sum := make([]float64, len(gG))
			for i := range sum {
				sum[i] = gG[i] + gO[i] + gK[i] + gE[i]
			}
			norm := func(v []float64) float64 { return math.Sqrt(dot(v, v)) }
			cos := func(a, b []float64) float64 { return dot(a, b) / (norm(a) * norm(b)) }

			cfg.TermGradsEvery = 1
			opt, _ := m.NewAdamW(1e-2, 0)
			st, err := m.RLStep(opt, batch, cfg)
			if err != nil {
				t.Fatal(err)
			}
			tg := st.TermGrads
			if tg == nil {
				t.Fatal("no per-term gradients on a measured step")
			}
			near := func(name string, got, want, tol float64) {
				t.Helper()
				if math.Abs(got-want) > tol*math.Max(math.Abs(want), 1e-9) {
					t.Errorf("%s %.8g, want %.8g", name, got, want)
				}
			}
			near("grpo norm", tg.NormGRPO, norm(gG), 1e-4)
			near("opd norm", tg.NormOPD, norm(gO), 1e-4)
			near("kl norm", tg.NormKL, norm(gK), 1e-4)
			near("entropy norm", tg.NormEntropy, norm(gE), 1e-4)
			near("sum norm", tg.NormSum, norm(sum), 1e-4)
			near("step's gradient norm", tg.NormSum, st.GradNorm, 1e-4)
			near("cos grpo/opd", tg.CosGRPOOPD, cos(gG, gO), 1e-3)
			near("cos grpo/kl", tg.CosGRPOKL, cos(gG, gK), 1e-3)
			near("cos opd/kl", tg.CosOPDKL, cos(gO, gK), 1e-3)
			near("cos grpo/entropy", tg.CosGRPOEntropy, cos(gG, gE), 1e-3)
			s2 := dot(sum, sum)
			near("grpo share", tg.ShareGRPO, dot(gG, sum)/s2, 1e-3)
			near("opd share", tg.ShareOPD, dot(gO, sum)/s2, 1e-3)
			near("shares' sum", tg.ShareGRPO+tg.ShareOPD+tg.ShareKL+tg.ShareEntropy, 1, 1e-6)
			for _, v := range []float64{tg.NormGRPO, tg.NormOPD, tg.NormKL, tg.NormEntropy} {
				if v == 0 {
					t.Fatalf("a term's gradient is zero (%+v): the fixture does not exercise every term", tg)
				}
			}

			// The measured step's update is the plain step's.
			m2, _ := newTiny(t, ArchQwen2, 31)
			plain := cfg
			plain.TermGradsEvery = 0
			opt2, _ := m2.NewAdamW(1e-2, 0)
			st2, err := m2.RLStep(opt2, termBatch(t, m2), plain)
			if err != nil {
				t.Fatal(err)
			}
			a, _ := m.ParamChecksum()
			b, _ := m2.ParamChecksum()
			if a != b || st2.TermGrads != nil || st.Loss != st2.Loss {
				t.Errorf("measured step: checksum %v loss %v; plain step: %v %v (terms %v)", a, st.Loss, b, st2.Loss, st2.TermGrads)
			}
			// Every second step only: the optimizer has taken one.
			cfg.TermGradsEvery = 2
			st3, err := m.RLStep(opt, batch, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if st3.TermGrads != nil {
				t.Error("term_grads_every 2 measured the second step")
			}
		})
	}
}

func TestTermVectors(t *testing.T) {
	tg := termVectors([]float32{1, 0, 0}, []float32{1, 1, 0}, nil, []float32{-1, 0, 0})
	// Σ = (1, 1, 0): ‖Σ‖² = 2; ⟨grpo, Σ⟩ = 1, ⟨opd, Σ⟩ = 2, ⟨ent, Σ⟩ = −1.
	want := TermGrads{NormGRPO: 1, NormOPD: math.Sqrt2, NormEntropy: 1, NormSum: math.Sqrt2,
		ShareGRPO: 0.5, ShareOPD: 1, ShareEntropy: -0.5, CosGRPOOPD: 1 / math.Sqrt2, CosGRPOEntropy: -1}
	if math.Abs(tg.NormOPD-want.NormOPD) > 1e-12 || math.Abs(tg.CosGRPOOPD-want.CosGRPOOPD) > 1e-12 {
		t.Errorf("got %+v, want %+v", *tg, want)
	}
	tg.NormOPD, tg.CosGRPOOPD, want.NormOPD, want.CosGRPOOPD = 0, 0, 0, 0
	tg.NormSum, want.NormSum = math.Round(tg.NormSum*1e12), math.Round(want.NormSum*1e12)
	if *tg != want {
		t.Errorf("got %+v, want %+v", *tg, want)
	}
}

// The distillation term is a mean over distilled tokens: trained tokens
// without a teacher (advantage 0 here, so GRPO adds nothing) leave its
// gradient unchanged. Dividing by the trained tokens instead would shrink
// it by their share; every other fixture distils every trained token,
// where the two counts agree.
func TestDistillationMeansOverDistilledTokens(t *testing.T) {
	m, _ := newTiny(t, ArchQwen2, 32)
	batch := withTeacher(rlBatch(t, m, []float64{0, 0, 0}), 0.5)
	cfg := DefaultRLConfig()
	cfg.Lambda, cfg.KLCoef, cfg.EntropyCoef = 1, 0, 0
	grad := func(rows []RLSequence) []float64 {
		m.ZeroGrad()
		if _, err := m.rlBackward(rows, cfg); err != nil {
			t.Fatal(err)
		}
		g := flatGrads(gradValues(m))
		m.ZeroGrad()
		return g
	}
	distilled := grad(batch)
	plain := rlBatch(t, m, []float64{0, 0, 0}) // the same rows, no teacher
	mixed := append(append([]RLSequence(nil), batch...), plain...)
	for i := len(batch); i < len(mixed); i++ {
		mixed[i].ID += "-plain"
	}
	withPlain := grad(mixed)
	diff, scale := 0.0, 0.0
	for i := range distilled {
		diff = math.Max(diff, math.Abs(distilled[i]-withPlain[i]))
		scale = math.Max(scale, math.Abs(distilled[i]))
	}
	if scale == 0 || diff > 1e-5*scale {
		t.Errorf("undistilled trained tokens changed the distillation gradient by %.3g (largest entry %.3g)", diff, scale)
	}
}

// The signed form's gradient is Δ̃ times the NLL's: a token the teacher
// endorses (Δ > 0) is raised, one it rejects (Δ < 0) lowered, and a shift
// beyond the clip weighs as the clip.
func TestRLStepSignedDistillation(t *testing.T) {
	for _, tc := range []struct{ delta, want float64 }{{0.3, 0.3}, {-0.4, -0.4}, {7, 5}, {-9, -5}} {
		m, _ := newTiny(t, ArchQwen2, 13)
		ids := []int{5, 17, 3, 88}
		old, _ := m.Rescore([][]int{ids}, 64)
		s := RLSequence{ID: "one", IDs: ids, Train: []bool{false, false, false, true}, OldLogP: old[0],
			TeacherLogP: []float32{0, 0, 0, old[0][3] + float32(tc.delta)}, Distill: []bool{false, false, false, true}}
		cfg := DefaultRLConfig()
		cfg.Lambda, cfg.KLCoef, cfg.ClipNorm, cfg.EntropyCoef, cfg.DistillForm = 1, 0, 0, 0, DistillSigned
		m.ZeroGrad()
		if _, err := m.rlBackward([]RLSequence{s}, cfg); err != nil {
			t.Fatal(err)
		}
		signed := flatGrads(gradValues(m))
		m.ZeroGrad()
		if _, err := m.NLLBackward(Input{IDs: [][]int{ids[:3]}}, [][]int{{-1, -1, 88}}); err != nil {
			t.Fatal(err)
		}
		nll := flatGrads(gradValues(m))
		m.ZeroGrad()
		worst, scale := 0.0, 0.0
		for i := range nll {
			worst = math.Max(worst, math.Abs(signed[i]-tc.want*nll[i]))
			scale = math.Max(scale, math.Abs(tc.want*nll[i]))
		}
		if worst > 1e-4*scale {
			t.Errorf("Δ=%v: signed gradient differs from %v × the NLL's by %.3g (scale %.3g)", tc.delta, tc.want, worst, scale)
		}
	}
	bad := DefaultRLConfig()
	bad.DistillForm = "forward"
	if bad.Validate() == nil {
		t.Error("an unknown distill_form was accepted")
	}
}

// The gate's distribution: a teacher that endorses every sampled token
// by 1 nat puts every gate (σ(5) ≈ 0.99) in the top bin; −1 nat in the
// bottom one; no shift at all leaves them at 0.5.
func TestRLStepGateBins(t *testing.T) {
	for _, tc := range []struct {
		delta float64
		bin   int
	}{{1, 4}, {-1, 0}, {0, 2}} {
		m, _ := newTiny(t, ArchQwen2, 12)
		opt, _ := m.NewAdamW(0, 0)
		st, err := m.RLStep(opt, withTeacher(rlBatch(t, m, []float64{0, 0, 0}), tc.delta), DefaultRLConfig())
		if err != nil {
			t.Fatal(err)
		}
		if len(st.GateBins) != len(GateBinNames) || st.GateBins[tc.bin] != 1 {
			t.Errorf("Δ=%v: gate bins %v, want all in bin %d", tc.delta, st.GateBins, tc.bin)
		}
	}
	m, _ := newTiny(t, ArchQwen2, 12)
	opt, _ := m.NewAdamW(0, 0)
	if st, _ := m.RLStep(opt, rlBatch(t, m, []float64{1, -1, 0}), DefaultRLConfig()); st.GateBins != nil {
		t.Errorf("no distilled tokens: gate bins %v", st.GateBins)
	}
}
