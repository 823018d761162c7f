package trainer

import (
	"errors"
	"math"
	"os"
	"testing"
)

func sigmoid(x float64) float64 { return 1 / (1 + math.Exp(-x)) }

// TestTermsAtHandComputed checks every loss piece and its derivative on
// values worked out by hand.
func TestTermsAtHandComputed(t *testing.T) {
	cfg := DefaultRLConfig()
	ln := math.Log
	tests := []struct {
		name                     string
		lp, old, adv             float64
		teacher, ref, baseline   *float64
		grpo, dGRPO              float64
		clipped, dual            bool
		opd, dOPD, gate, kl, dKL float64
	}{
		{name: "ratio 1, A=1", lp: -1, old: -1, adv: 1, grpo: -1, dGRPO: -1},
		{name: "ratio 1.5, A=1: clipped at 1.2", lp: -1 + ln(1.5), old: -1, adv: 1, grpo: -1.2, clipped: true},
		{name: "ratio 0.5, A=-1: clipped at 0.8", lp: -1 + ln(0.5), old: -1, adv: -1, grpo: 0.8, clipped: true},
		{name: "ratio 1.5, A=-1: unclipped (pessimistic)", lp: -1 + ln(1.5), old: -1, adv: -1, grpo: 1.5, dGRPO: 1.5},
		{name: "ratio 0.5, A=1: unclipped", lp: -1 + ln(0.5), old: -1, adv: 1, grpo: -0.5, dGRPO: -0.5},
		// Dual-clip (c=3): with A<0 the pessimistic term −r·A is capped at
		// −c·A = 3·|A|; below r=c it acts as plain PPO.
		{name: "dual-clip: ratio 4, A=-1: capped at 3", lp: -1 + ln(4), old: -1, adv: -1, grpo: 3, dual: true},
		{name: "dual-clip: ratio 4, A=-0.5: capped at 1.5", lp: -1 + ln(4), old: -1, adv: -0.5, grpo: 1.5, dual: true},
		{name: "dual-clip: ratio 2.5, A=-1: under the cap", lp: -1 + ln(2.5), old: -1, adv: -1, grpo: 2.5, dGRPO: 2.5},
		{name: "dual-clip: ratio 4, A=1: ordinary clip", lp: -1 + ln(4), old: -1, adv: 1, grpo: -1.2, clipped: true},
		{name: "teacher endorses (Δ=0.5), A=0", lp: -1, old: -1, adv: 0, teacher: ptr(-0.5),
			opd: sigmoid(2.5) * 0.5, dOPD: -sigmoid(2.5), gate: sigmoid(2.5)},
		{name: "teacher rejects (Δ=-2), A=0", lp: -1, old: -1, adv: 0, teacher: ptr(-3),
			opd: sigmoid(-10) * -2, dOPD: -sigmoid(-10), gate: sigmoid(-10)},
		// The contrastive gap: Δ = ℓᵀ − ℓᴮ whatever ℓθ is. Every skill
		// lowers ℓᵀ (−2.5 here) but the other task's skill lowers it
		// more (−3): the gap endorses. Off-policy (ℓθ = ℓold + 0.2) the
		// value moves by −g·0.2 and the derivative stays −g.
		{name: "contrastive: ℓᵀ=-2.5, ℓᴮ=-3 (Δ=0.5)", lp: -1, old: -1, adv: 0, teacher: ptr(-2.5), baseline: ptr(-3),
			opd: sigmoid(2.5) * 0.5, dOPD: -sigmoid(2.5), gate: sigmoid(2.5)},
		{name: "contrastive off-policy: Δ=-1", lp: -0.8, old: -1, adv: 0, teacher: ptr(-4), baseline: ptr(-3),
			opd: sigmoid(-5)*-1 - sigmoid(-5)*0.2, dOPD: -sigmoid(-5), gate: sigmoid(-5)},
		{name: "k3 KL, ρ=-0.2", lp: -1, old: -1, adv: 0, ref: ptr(-1.2),
			kl: math.Exp(-0.2) + 0.2 - 1, dKL: 1 - math.Exp(-0.2)},
		// verl's low_var_kl clamps k3 to [−10, 10]: at ρ = 3 k3 = e³−4 =
		// 16.0855 becomes 10, its gradient 0 (unclamped: 1−e³ = −19.0855).
		{name: "k3 KL, ρ=3: clamped at 10", lp: -4, old: -4, adv: 0, ref: ptr(-1), kl: 10, dKL: 0},
		{name: "k3 KL, ρ=2.4: under the clamp", lp: -3.4, old: -3.4, adv: 0, ref: ptr(-1),
			kl: math.Exp(2.4) - 3.4, dKL: 1 - math.Exp(2.4)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := &RLSequence{IDs: []int{0, 0}, Train: []bool{false, true}, Advantage: tc.adv, OldLogP: []float32{0, float32(tc.old)}}
			if tc.teacher != nil {
				s.TeacherLogP, s.Distill = []float32{0, float32(*tc.teacher)}, []bool{false, true}
			}
			if tc.baseline != nil {
				s.BaselineLogP = []float32{0, float32(*tc.baseline)}
			}
			if tc.ref != nil {
				s.RefLogP = []float32{0, float32(*tc.ref)}
			}
			// float32 storage of ℓold/ℓᵀ/ℓref: compare at 1e-6.
			got := termsAt(tc.lp, s, 1, cfg)
			check := func(what string, got, want float64) {
				if math.Abs(got-want) > 2e-6 {
					t.Errorf("%s = %.7f, want %.7f", what, got, want)
				}
			}
			check("grpo", got.grpo, tc.grpo)
			check("dGRPO", got.dGRPO, tc.dGRPO)
			check("opd", got.opd, tc.opd)
			check("dOPD", got.dOPD, tc.dOPD)
			check("gate", got.gate, tc.gate)
			check("kl", got.kl, tc.kl)
			check("dKL", got.dK, tc.dKL)
			if got.clipped != tc.clipped || got.dualClipped != tc.dual {
				t.Errorf("clipped = %v, dual-clipped = %v, want %v, %v", got.clipped, got.dualClipped, tc.clipped, tc.dual)
			}
		})
	}
	// With the clamp off, ρ = 3 gives the raw k3 and its gradient.
	off := cfg
	off.KLClamp = 0
	ks := &RLSequence{IDs: []int{0, 0}, Train: []bool{false, true}, OldLogP: []float32{0, -4}, RefLogP: []float32{0, -1}}
	if got := termsAt(-4, ks, 1, off); math.Abs(got.kl-(math.Exp(3)-4)) > 2e-5 || math.Abs(got.dK-(1-math.Exp(3))) > 2e-5 {
		t.Errorf("unclamped k3 at ρ=3: %v (gradient %v), want %v (%v)", got.kl, got.dK, math.Exp(3)-4, 1-math.Exp(3))
	}
	// Without dual-clip the A<0, r=4 token is plain PPO's: −r·A = 4.
	cfg.ClipRatioC = 0
	s := &RLSequence{IDs: []int{0, 0}, Train: []bool{false, true}, Advantage: -1, OldLogP: []float32{0, -1}}
	if got := termsAt(-1+ln(4), s, 1, cfg); math.Abs(got.grpo-4) > 2e-6 || math.Abs(got.dGRPO-4) > 2e-6 || got.dualClipped {
		t.Errorf("no dual clip: grpo %v dGRPO %v dual %v, want 4, 4, false", got.grpo, got.dGRPO, got.dualClipped)
	}
	// Per-position advantages override the row's.
	s.Advantages = []float32{0, 2}
	if got := termsAt(-1, s, 1, cfg); math.Abs(got.grpo+2) > 2e-6 {
		t.Errorf("per-position advantage 2 at ratio 1: grpo %v, want -2", got.grpo)
	}
}

// The entropy bonus −coef·H̄: with no other term, the step's gradient is
// coef·∇H̄, linear in coef, and the step raises the entropy; coef 0 leaves
// no gradient at all. The loss reports −coef·H̄.
func TestRLStepEntropyBonus(t *testing.T) {
	gradNorm := func(coef float64) (float64, RLStats) {
		m, _ := newTiny(t, ArchQwen2, 16)
		opt, _ := m.NewAdamW(0, 0)
		cfg := DefaultRLConfig()
		cfg.Lambda, cfg.KLCoef, cfg.ClipNorm, cfg.EntropyCoef = 0, 0, 0, coef
		st, err := m.RLStep(opt, rlBatch(t, m, []float64{0, 0, 0}), cfg)
		if err != nil {
			t.Fatal(err)
		}
		return st.GradNorm, st
	}
	g0, _ := gradNorm(0)
	g1, st1 := gradNorm(0.01)
	g2, _ := gradNorm(0.02)
	if g0 != 0 {
		t.Errorf("coef 0 and A=0: gradient norm %v, want 0", g0)
	}
	if g1 <= 0 || math.Abs(g2/g1-2) > 1e-4 {
		t.Errorf("gradient norms %v (coef 0.01) and %v (coef 0.02): want a positive norm that doubles", g1, g2)
	}
	if st1.Entropy <= 0 || math.Abs(st1.Loss+0.01*st1.Entropy) > 1e-9 {
		t.Errorf("loss %v with entropy %v: want −0.01·H", st1.Loss, st1.Entropy)
	}
	m, _ := newTiny(t, ArchQwen2, 16)
	opt, _ := m.NewAdamW(1e-2, 0)
	cfg := DefaultRLConfig()
	cfg.Lambda, cfg.KLCoef, cfg.EntropyCoef = 0, 0, 1
	batch := rlBatch(t, m, []float64{0, 0, 0})
	first, err := m.RLStep(opt, batch, cfg)
	if err != nil {
		t.Fatal(err)
	}
	second, err := m.RLStep(opt, batch, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if second.Entropy <= first.Entropy {
		t.Errorf("entropy %v → %v after an entropy-bonus step, want a rise", first.Entropy, second.Entropy)
	}
}

// A row whose per-position advantages all equal a is the row with
// advantage a, bit for bit.
func TestRLStepPerPositionAdvantages(t *testing.T) {
	run := func(perPos bool) float64 {
		m, _ := newTiny(t, ArchQwen2, 17)
		opt, _ := m.NewAdamW(1e-2, 0)
		batch := rlBatch(t, m, []float64{0.7, -1.2, 0.5})
		if perPos {
			for i := range batch {
				batch[i].Advantages = make([]float32, len(batch[i].IDs))
				for k := range batch[i].Advantages {
					batch[i].Advantages[k] = float32(batch[i].Advantage)
				}
				batch[i].Advantage = 99 // ignored
			}
		}
		for i := range batch {
			batch[i].Advantage = float64(float32(batch[i].Advantage))
		}
		if _, err := m.RLStep(opt, batch, DefaultRLConfig()); err != nil {
			t.Fatal(err)
		}
		sum, _ := m.ParamChecksum()
		return sum
	}
	if a, b := run(false), run(true); a != b {
		t.Errorf("per-position advantages: checksum %v, row advantage %v", b, a)
	}
}

func ptr(v float64) *float64 { return &v }

// rlBatch makes rows over the tiny vocabulary whose second half is
// "sampled"; ℓold is the model's own log-prob.
func rlBatch(t *testing.T, m *Model, adv []float64) []RLSequence {
	t.Helper()
	rows := [][]int{{5, 17, 3, 88, 41, 9, 60, 12}, {7, 7, 12, 30, 2, 96, 4}, {11, 13, 15, 17, 19, 21}}
	old, err := m.Rescore(rows, 1024)
	if err != nil {
		t.Fatal(err)
	}
	var out []RLSequence
	for i, ids := range rows {
		train := make([]bool, len(ids))
		for k := len(ids) / 2; k < len(ids); k++ {
			train[k] = true
		}
		out = append(out, RLSequence{ID: string(rune('a' + i)), IDs: ids, Train: train, Advantage: adv[i], OldLogP: old[i]})
	}
	return out
}

// trainedLogProb sums the current log-probs of each row's trained tokens.
func trainedLogProb(t *testing.T, m *Model, batch []RLSequence) []float64 {
	t.Helper()
	seqs := make([][]int, len(batch))
	for i := range batch {
		seqs[i] = batch[i].IDs
	}
	lp, err := m.Rescore(seqs, 1024)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]float64, len(batch))
	for i, s := range batch {
		for k, tr := range s.Train {
			if tr {
				out[i] += float64(lp[i][k])
			}
		}
	}
	return out
}

func TestRLStepGRPODirections(t *testing.T) {
	m, _ := newTiny(t, ArchQwen2, 11)
	opt, _ := m.NewAdamW(1e-3, 0)
	batch := rlBatch(t, m, []float64{1, -1, 0})
	before := trainedLogProb(t, m, batch)
	st, err := m.RLStep(opt, batch, DefaultRLConfig())
	if err != nil {
		t.Fatal(err)
	}
	after := trainedLogProb(t, m, batch)
	if after[0] <= before[0] || after[1] >= before[1] {
		t.Errorf("A>0 row %.4f→%.4f (want up), A<0 row %.4f→%.4f (want down)", before[0], after[0], before[1], after[1])
	}
	if st.RatioMaxDev > 1e-4 || st.ClipFrac != 0 || st.Tokens != 4+4+3 || st.Sequences != 3 || st.Entropy <= 0 || st.GradNorm <= 0 {
		t.Errorf("stats %+v", st)
	}
	// With ℓold = ℓθ the GRPO loss is −mean(A) over tokens.
	if want := -(4*1.0 + 4*-1.0) / 11; math.Abs(st.GRPOLoss-want) > 1e-5 {
		t.Errorf("grpo loss %v, want %v", st.GRPOLoss, want)
	}
}

// withTeacher gives every trained token of every row a teacher log-prob
// shifted by delta from the model's own.
func withTeacher(batch []RLSequence, delta float64) []RLSequence {
	out := make([]RLSequence, len(batch))
	for i, s := range batch {
		s.TeacherLogP = make([]float32, len(s.IDs))
		s.Distill = make([]bool, len(s.IDs))
		for k := range s.IDs {
			if s.Train[k] {
				s.TeacherLogP[k] = s.OldLogP[k] + float32(delta)
				s.Distill[k] = true
			}
		}
		out[i] = s
	}
	return out
}

func TestRLStepDistillationGainsWhereTeacherEndorses(t *testing.T) {
	m, _ := newTiny(t, ArchQwen2, 12)
	opt, _ := m.NewAdamW(1e-3, 0)
	batch := withTeacher(rlBatch(t, m, []float64{0, 0, 0}), 1)
	cfg := DefaultRLConfig()
	cfg.Lambda = 1
	before := trainedLogProb(t, m, batch)
	st, err := m.RLStep(opt, batch, cfg)
	if err != nil {
		t.Fatal(err)
	}
	after := trainedLogProb(t, m, batch)
	for i := range before {
		if after[i] <= before[i] {
			t.Errorf("row %d: Δ>0, A=0 tokens went %.4f → %.4f, want a gain", i, before[i], after[i])
		}
	}
	if math.Abs(st.GateMean-sigmoid(5)) > 1e-4 || st.PositiveShift != 1 || math.Abs(st.MeanShift-1) > 1e-4 || st.DistillTokens != 11 {
		t.Errorf("gate mean %v (want σ(5)=%v), positive shift %v, mean shift %v, distilled %d", st.GateMean, sigmoid(5), st.PositiveShift, st.MeanShift, st.DistillTokens)
	}
	// A random tiny model is unsure of every token (p ≪ DecisionProb), so
	// the decision figures are the whole batch's.
	if st.DecisionShare != 1 || math.Abs(st.DecisionGate-st.GateMean) > 1e-9 || st.DecisionPositive != 1 || math.Abs(st.DecisionShift-st.MeanShift) > 1e-9 {
		t.Errorf("decision share %v gate %v positive %v shift %v, want the batch's (1, %v, 1, %v)", st.DecisionShare, st.DecisionGate, st.DecisionPositive, st.DecisionShift, st.GateMean, st.MeanShift)
	}
}

// The decision shift split by advantage sign: rows that beat their group
// (A>0) and rows that did worse (A<0) are averaged apart; flat rows are
// in neither.
func TestRLStepDecisionShiftByAdvantage(t *testing.T) {
	m, _ := newTiny(t, ArchQwen2, 12)
	batch := rlBatch(t, m, []float64{1, -1, 0})
	for i, d := range []float64{0.5, -0.3, 2} {
		batch[i] = withTeacher(batch[i:i+1], d)[0]
	}
	opt, _ := m.NewAdamW(1e-3, 0)
	st, err := m.RLStep(opt, batch, DefaultRLConfig())
	if err != nil {
		t.Fatal(err)
	}
	if st.DecisionShiftPosAdv == nil || st.DecisionShiftNegAdv == nil {
		t.Fatalf("split missing: %+v", st)
	}
	if math.Abs(*st.DecisionShiftPosAdv-0.5) > 1e-4 || math.Abs(*st.DecisionShiftNegAdv+0.3) > 1e-4 {
		t.Errorf("decision Δ with A>0 %v (want 0.5), with A<0 %v (want −0.3)", *st.DecisionShiftPosAdv, *st.DecisionShiftNegAdv)
	}
	if st.DecisionTeacherShift != nil || st.DecisionBaselineShift != nil {
		t.Errorf("no baseline, yet raw shifts %v %v", st.DecisionTeacherShift, st.DecisionBaselineShift)
	}
	// A contrastive baseline 0.8 below the old log-probs: Δ = ℓᵀ − ℓᴮ is
	// the teacher's shift + 0.8, and the two raw shifts are reported.
	contrast := withTeacher(rlBatch(t, m, []float64{1, -1, 0}), -0.2)
	for i := range contrast {
		contrast[i].BaselineLogP = make([]float32, len(contrast[i].IDs))
		for k, d := range contrast[i].Distill {
			if d {
				contrast[i].BaselineLogP[k] = contrast[i].OldLogP[k] - 0.8
			}
		}
	}
	if st, err = m.RLStep(opt, contrast, DefaultRLConfig()); err != nil {
		t.Fatal(err)
	}
	if st.DecisionTeacherShift == nil || st.DecisionBaselineShift == nil {
		t.Fatalf("raw shifts missing: %+v", st)
	}
	// ℓθ moved from ℓold by the previous step: compare differences.
	if got := st.DecisionShift; math.Abs(got-0.6) > 1e-4 {
		t.Errorf("contrastive decision Δ %v, want ℓᵀ − ℓᴮ = 0.6", got)
	}
	if d := *st.DecisionTeacherShift - *st.DecisionBaselineShift; math.Abs(d-0.6) > 1e-4 {
		t.Errorf("raw shifts %v and %v differ by %v, want 0.6", *st.DecisionTeacherShift, *st.DecisionBaselineShift, d)
	}
	flat := withTeacher(rlBatch(t, m, []float64{0, 0, 0}), 1)
	if st, err = m.RLStep(opt, flat, DefaultRLConfig()); err != nil {
		t.Fatal(err)
	}
	if st.DecisionShiftPosAdv != nil || st.DecisionShiftNegAdv != nil {
		t.Errorf("flat groups gave a split: %v %v", st.DecisionShiftPosAdv, st.DecisionShiftNegAdv)
	}
}

// Tokens the policy is sure of are left out of the decision figures: with
// the threshold below every token's probability, none is a decision.
func TestRLStepDecisionFiguresSkipCertainTokens(t *testing.T) {
	m, _ := newTiny(t, ArchQwen2, 12)
	batch := withTeacher(rlBatch(t, m, []float64{0, 0, 0}), 1)
	cfg := DefaultRLConfig()
	cfg.DecisionProb = 1e-30
	opt, _ := m.NewAdamW(1e-3, 0)
	st, err := m.RLStep(opt, batch, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if st.DistillTokens == 0 || st.DecisionShare != 0 || st.DecisionGate != 0 || st.DecisionShift != 0 {
		t.Errorf("no token is below p=1e-30, yet decision share %v gate %v shift %v (distilled %d)", st.DecisionShare, st.DecisionGate, st.DecisionShift, st.DistillTokens)
	}
	cfg.DecisionProb = 2
	if cfg.Validate() == nil {
		t.Error("decision_prob 2 accepted")
	}
}

// The OPD gradient is −g·∇ℓθ with g = σ(β·Δ) held constant: for one
// distilled token it is g times the NLL gradient of that token. Were the
// gate differentiated, the factor would be g + g(1−g)·β·Δ instead.
func TestRLStepGateCarriesNoGradient(t *testing.T) {
	for _, delta := range []float64{0.3, -0.4} {
		m, _ := newTiny(t, ArchQwen2, 13)
		ids := []int{5, 17, 3, 88}
		old, _ := m.Rescore([][]int{ids}, 64)
		s := RLSequence{ID: "one", IDs: ids, Train: []bool{false, false, false, true}, OldLogP: old[0],
			TeacherLogP: []float32{0, 0, 0, old[0][3] + float32(delta)}, Distill: []bool{false, false, false, true}}
		cfg := DefaultRLConfig()
		cfg.Lambda, cfg.KLCoef, cfg.ClipNorm, cfg.EntropyCoef = 1, 0, 0, 0
		opt, _ := m.NewAdamW(0, 0) // lr 0: measure the gradient only
		_ = opt
		st, err := m.RLStep(opt, []RLSequence{s}, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.NLLBackward(Input{IDs: [][]int{ids[:3]}}, [][]int{{-1, -1, 88}}); err != nil {
			t.Fatal(err)
		}
		nll, _ := opt.GradNorm()
		m.ZeroGrad()
		g := sigmoid(5 * delta)
		if ratio := st.GradNorm / nll; math.Abs(ratio-g) > 1e-4*g {
			t.Errorf("Δ=%v: OPD/NLL gradient ratio %.6f, want σ(βΔ)=%.6f (differentiated gate: %.6f)", delta, ratio, g, g+g*(1-g)*5*delta)
		}
	}
}

func TestRLStepLambdaZeroIsGRPO(t *testing.T) {
	run := func(lambda float64, teacher bool) float64 {
		m, _ := newTiny(t, ArchQwen2, 14)
		opt, _ := m.NewAdamW(1e-2, 0.01)
		batch := rlBatch(t, m, []float64{0.7, -1.2, 0.5})
		if teacher {
			batch = withTeacher(batch, 0.8)
		}
		cfg := DefaultRLConfig()
		cfg.Lambda = lambda
		if _, err := m.RLStep(opt, batch, cfg); err != nil {
			t.Fatal(err)
		}
		sum, _ := m.ParamChecksum()
		return sum
	}
	grpo := run(0, false)
	if got := run(0, true); got != grpo {
		t.Errorf("λ=0 with teacher log-probs: checksum %v, GRPO alone %v (want identical)", got, grpo)
	}
	if got := run(0.5, true); got == grpo {
		t.Error("λ=0.5 gave the GRPO update exactly")
	}
}

func TestRLStepMicroBatchesAccumulate(t *testing.T) {
	run := func(mbTokens int) (float64, RLStats) {
		m, _ := newTiny(t, ArchQwen2, 15)
		opt, _ := m.NewAdamW(1e-2, 0)
		batch := withTeacher(rlBatch(t, m, []float64{0.7, -1.2, 0.5}), -0.3)
		cfg := DefaultRLConfig()
		cfg.Lambda, cfg.MicroBatchTokens = 0.5, mbTokens
		st, err := m.RLStep(opt, batch, cfg)
		if err != nil {
			t.Fatal(err)
		}
		sum, _ := m.ParamChecksum()
		return sum, st
	}
	one, st1 := run(1024)
	many, st3 := run(8)
	if st1.MicroBatches != 1 || st3.MicroBatches != 3 {
		t.Fatalf("micro-batches %d and %d, want 1 and 3", st1.MicroBatches, st3.MicroBatches)
	}
	if math.Abs(one-many) > 1e-5*math.Abs(one) || math.Abs(st1.Loss-st3.Loss) > 1e-6 || math.Abs(st1.GradNorm-st3.GradNorm) > 1e-5*st1.GradNorm {
		t.Errorf("one micro-batch: checksum %v loss %v norm %v; three: %v %v %v", one, st1.Loss, st1.GradNorm, many, st3.Loss, st3.GradNorm)
	}
}

func TestRLStepRefusesNonFinite(t *testing.T) {
	m, _ := newTiny(t, ArchQwen2, 16)
	opt, _ := m.NewAdamW(1e-2, 0)
	before, _ := m.ParamChecksum()
	batch := rlBatch(t, m, []float64{1, -1, 0})
	batch[1].OldLogP[5] = float32(math.Inf(-1)) // r = +Inf
	_, err := m.RLStep(opt, batch, DefaultRLConfig())
	if !errors.Is(err, ErrNonFinite) {
		t.Fatalf("step with an infinite ratio: %v, want ErrNonFinite", err)
	}
	if after, _ := m.ParamChecksum(); after != before {
		t.Error("a refused step changed the weights")
	}
	batch = rlBatch(t, m, []float64{1, -1, 0})
	if _, err := m.RLStep(opt, batch, DefaultRLConfig()); err != nil {
		t.Fatalf("the next finite step: %v", err)
	}
}

func TestRLStepRejectsBadRows(t *testing.T) {
	m, _ := newTiny(t, ArchQwen2, 17)
	opt, _ := m.NewAdamW(1e-2, 0)
	good := func() RLSequence {
		return RLSequence{ID: "r", IDs: []int{1, 2, 3}, Train: []bool{false, true, true}, OldLogP: []float32{0, -1, -1}}
	}
	tests := []struct {
		name string
		edit func(*RLSequence)
	}{
		{"short train mask", func(s *RLSequence) { s.Train = s.Train[:2] }},
		{"token 0 trained", func(s *RLSequence) { s.Train[0] = true }},
		{"id outside vocabulary", func(s *RLSequence) { s.IDs[2] = 500 }},
		{"distill without teacher", func(s *RLSequence) { s.Distill = []bool{false, true, true} }},
		{"distilled but not trained", func(s *RLSequence) {
			s.Train[1] = false
			s.Distill, s.TeacherLogP = []bool{false, true, true}, []float32{0, 0, 0}
		}},
		{"NaN advantage", func(s *RLSequence) { s.Advantage = math.NaN() }},
		{"baseline without distill marks", func(s *RLSequence) { s.BaselineLogP = []float32{0, 0, 0} }},
		{"short baseline", func(s *RLSequence) {
			s.Distill, s.TeacherLogP, s.BaselineLogP = []bool{false, true, true}, []float32{0, 0, 0}, []float32{0, 0}
		}},
	}
	for _, tc := range tests {
		s := good()
		tc.edit(&s)
		if _, err := m.RLStep(opt, []RLSequence{s}, DefaultRLConfig()); err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
}

func TestRescoreMatchesUnbatched(t *testing.T) {
	m, _ := newTiny(t, ArchQwen2, 18)
	seqs := [][]int{{5, 17, 3, 88, 41, 9, 60}, {7, 7}, {12, 30, 2, 96, 4}}
	batched, err := m.Rescore(seqs, 1024)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range seqs {
		one, err := m.Rescore([][]int{s}, 1024)
		if err != nil {
			t.Fatal(err)
		}
		if len(one[0]) != len(s) || one[0][0] != 0 {
			t.Fatalf("row %d: %d log-probs, first %v", i, len(one[0]), one[0][0])
		}
		for k := range s {
			if d := math.Abs(float64(one[0][k] - batched[i][k])); d > 1e-5 {
				t.Errorf("row %d pos %d: batched %v, alone %v", i, k, batched[i][k], one[0][k])
			}
		}
	}
}

func TestRLConfigValidate(t *testing.T) {
	bad := []func(*RLConfig){
		func(c *RLConfig) { c.ClipEps = 0 },
		func(c *RLConfig) { c.Lambda = -1 },
		func(c *RLConfig) { c.Beta = 0 },
		func(c *RLConfig) { c.KLCoef = -0.1 },
		func(c *RLConfig) { c.MicroBatchTokens = 1 },
		func(c *RLConfig) { c.Temperature = -0.5 },
	}
	for i, f := range bad {
		c := DefaultRLConfig()
		f(&c)
		if c.Validate() == nil {
			t.Errorf("case %d accepted", i)
		}
	}
	if err := DefaultRLConfig().Validate(); err != nil {
		t.Error(err)
	}
}

// Log-probs at a sampling temperature are those of softmax(logits/T), and
// the RL step scores ℓθ at the same temperature: with ℓold rescored at T
// the ratio is 1, with ℓold at 1 it is not.
func TestTemperatureScalesLogits(t *testing.T) {
	m, _ := newTiny(t, ArchQwen2, 23)
	seq := []int{5, 17, 3, 88, 41, 9}
	logits, err := m.Logits(Input{IDs: [][]int{seq[:len(seq)-1]}})
	if err != nil {
		t.Fatal(err)
	}
	for _, temp := range []float64{0.5, 1, 2} {
		got, err := m.RescoreAt([][]int{seq}, 1024, temp)
		if err != nil {
			t.Fatal(err)
		}
		for k := 1; k < len(seq); k++ {
			row := logits[0][k-1]
			mx := math.Inf(-1)
			for _, v := range row {
				mx = math.Max(mx, float64(v)/temp)
			}
			sum := 0.0
			for _, v := range row {
				sum += math.Exp(float64(v)/temp - mx)
			}
			want := float64(row[seq[k]])/temp - mx - math.Log(sum)
			if d := math.Abs(float64(got[0][k]) - want); d > 1e-4 {
				t.Errorf("T=%v pos %d: log-prob %v, want %v", temp, k, got[0][k], want)
			}
		}
	}
	if _, err := m.RescoreAt([][]int{seq}, 1024, -1); err == nil {
		t.Error("a negative temperature accepted")
	}

	cfg := DefaultRLConfig()
	cfg.Temperature = 0.5
	for _, tc := range []struct {
		oldTemp float64
		atOne   bool
	}{{0.5, true}, {1, false}} {
		batch := rlBatch(t, m, []float64{1, -1, 0})
		for i := range batch {
			old, err := m.RescoreAt([][]int{batch[i].IDs}, 1024, tc.oldTemp)
			if err != nil {
				t.Fatal(err)
			}
			batch[i].OldLogP = old[0]
		}
		opt, _ := m.NewAdamW(0, 0)
		st, err := m.RLStep(opt, batch, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if (st.RatioMaxDev < 1e-4) != tc.atOne {
			t.Errorf("ℓold at T=%v, step at T=0.5: max |r-1| %v", tc.oldTemp, st.RatioMaxDev)
		}
	}
}

// verl's aggregation: each term's token mean within a micro-batch of
// MicroBatchRows rows, divided by the micro-batch count. With 2-row
// micro-batches over 4 rows of unequal lengths the gradient is the mean
// of the two micro-batches' own token-mean gradients, and the loss the
// mean of their losses — not the whole batch's token mean, which weighs
// each token alike.
func TestRLStepVerlAggregation(t *testing.T) {
	m, _ := newTiny(t, ArchQwen2, 21)
	batch := withTeacher(rlBatch(t, m, []float64{0.9, -1.1, 0.4}), -0.4)
	extra := RLSequence{ID: "d", IDs: []int{3, 9, 27, 81, 50, 20, 61, 44, 8, 2}, Advantage: -0.6}
	extra.Train = make([]bool, len(extra.IDs))
	for k := 3; k < len(extra.IDs); k++ {
		extra.Train[k] = true
	}
	old, _ := m.Rescore([][]int{extra.IDs}, 1024)
	extra.OldLogP = old[0]
	ref := make([]float32, len(extra.IDs))
	for k := range ref {
		ref[k] = old[0][k] - 0.3 // a reference, so the KL term is in play
	}
	extra.RefLogP = ref
	batch = append(batch, extra)
	cfg := DefaultRLConfig()
	cfg.Lambda, cfg.EntropyCoef = 0.5, 0.01
	backward := func(rows []RLSequence, c RLConfig) (map[string][]float64, RLStats) {
		m.ZeroGrad()
		st, err := m.rlBackward(rows, c)
		if err != nil {
			t.Fatal(err)
		}
		return gradValues(m), st
	}
	g1, s1 := backward(batch[:2], cfg)
	g2, s2 := backward(batch[2:], cfg)
	verl := cfg
	verl.Agg, verl.MicroBatchRows = AggVerl, 2
	gv, sv := backward(batch, verl)
	gt, st := backward(batch, cfg)
	want := map[string][]float64{}
	for k, a := range g1 {
		w := make([]float64, len(a))
		for i := range a {
			w[i] = (a[i] + g2[k][i]) / 2
		}
		want[k] = w
	}
	if rel, same := compareGrads(gv, want); !same || rel > 1e-5 {
		t.Errorf("verl gradient vs the mean of the micro-batches' own: relative difference %v", rel)
	}
	if math.Abs(sv.Loss-(s1.Loss+s2.Loss)/2) > 1e-6 {
		t.Errorf("verl loss %v, want the micro-batches' mean %v", sv.Loss, (s1.Loss+s2.Loss)/2)
	}
	if rel, _ := compareGrads(gv, gt); rel < 1e-3 {
		t.Errorf("verl and whole-batch token means agree to %v on unequal micro-batches: the test shows nothing", rel)
	}
	if math.Abs(st.Loss-sv.Loss) < 1e-4 {
		t.Errorf("losses %v and %v: the aggregations should differ here", st.Loss, sv.Loss)
	}
	bad := cfg
	bad.Agg = AggVerl
	if bad.Validate() == nil {
		t.Error("verl aggregation without micro_batch_rows was accepted")
	}
}

// Scoring applies the head in chunks of positions: the log-probs are those
// of one chunk covering everything, and at temperature 0.7 too.
func TestRescoreChunkedHeadMatchesWhole(t *testing.T) {
	m, _ := newTiny(t, ArchQwen2, 18)
	seqs := [][]int{{5, 17, 3, 88, 41, 9, 60}, {7, 7}, {12, 30, 2, 96, 4}}
	for _, temp := range []float64{1, 0.7} {
		defer func(n int) { headChunkTokens = n }(headChunkTokens)
		headChunkTokens = 1 << 20
		whole, err := m.RescoreAt(seqs, 1024, temp)
		if err != nil {
			t.Fatal(err)
		}
		headChunkTokens = 4 // chunks that straddle rows and padding
		chunked, err := m.RescoreAt(seqs, 1024, temp)
		if err != nil {
			t.Fatal(err)
		}
		for i := range seqs {
			for k := range seqs[i] {
				if d := math.Abs(float64(whole[i][k] - chunked[i][k])); d > 1e-5 {
					t.Errorf("T=%g row %d pos %d: chunked %v, whole %v", temp, i, k, chunked[i][k], whole[i][k])
				}
			}
		}
	}
}

// TestRescorePeakMemoryIsOneChunkOfLogits: scoring a micro-batch of 8,192
// positions over a 32,768-token vocabulary (B×T×V logits: 1 GiB in
// float32) raises the process's peak resident set by about one chunk's
// [1,024, V] logits (128 MiB), not by the whole tensor ([hardening] 2).
func TestRescorePeakMemoryIsOneChunkOfLogits(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates a few hundred MiB")
	}
	c := tinyConfig(ArchQwen2)
	c.VocabSize, c.NumHiddenLayers, c.MaxPositionEmbeddings = 32768, 1, 4096
	m, err := InitRandom(c, ModelOptions{}, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	// 64 rows of 128 positions: attention's [B, heads, T, T] stays small
	// (16 MiB), the logits would not.
	seqs := make([][]int, 64)
	for i := range seqs {
		seqs[i] = make([]int, 129)
		for k := range seqs[i] {
			seqs[i][k] = (k*7919 + i*104729) % c.VocabSize
		}
	}
	// Warm up (libtorch's thread pools, the first allocations), then
	// measure from what is live.
	if _, err := m.Rescore(seqs[:1], 8192); err != nil {
		t.Fatal(err)
	}
	trimHeap()
	before, err := procStatus("VmRSS")
	if err != nil {
		t.Skip(err)
	}
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Skipf("cannot reset the peak resident set: %v", err)
	}
	out, err := m.Rescore(seqs, 8192)
	if err != nil {
		t.Fatal(err)
	}
	peak, err := procStatus("VmHWM")
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 64 || len(out[63]) != 129 {
		t.Fatalf("scored %d rows", len(out))
	}
	const limit = 512 << 20 // four chunks' logits; the whole tensor is 1 GiB
	if grew := peak - before; grew > limit {
		t.Errorf("scoring 8,192 positions × 32,768 tokens raised the peak resident set by %d MiB, want at most %d MiB (one chunk's logits is 128 MiB)", grew>>20, limit>>20)
	} else {
		t.Logf("peak resident set rose by %d MiB", grew>>20)
	}
}
