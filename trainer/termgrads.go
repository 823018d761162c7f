package trainer

import "math"

// lossTerm selects the part of the RL loss whose derivative a backward
// pass carries: all of it (a training step) or one weighted term (the
// per-term gradients of RLConfig.TermGradsEvery).
type lossTerm int

const (
	termAll lossTerm = iota
	termGRPO
	termOPD
	termKL
	termEntropy
)

// TermGrads are one step's gradient split by loss term: each term's share
// of the parameter gradient as it is applied (weights λ, c_KL and the
// entropy coefficient included, before clipping). The gradient is linear
// in the per-token derivatives, so the terms' gradients sum to the step's;
// each is computed by its own backward pass over the same mini-batch.
// Share is ⟨g_term, g⟩/‖g‖² (the shares sum to 1; a negative share
// opposes the update), Cos the cosine between two terms' gradients (0
// when either is zero).
type TermGrads struct {
	NormGRPO    float64 `json:"grad_norm_grpo"`
	NormOPD     float64 `json:"grad_norm_opd"`
	NormKL      float64 `json:"grad_norm_kl"`
	NormEntropy float64 `json:"grad_norm_entropy"`
	// NormSum is the norm of the terms' sum: the step's gradient norm
	// before clipping, recomputed from the parts.
	NormSum        float64 `json:"grad_norm_terms"`
	ShareGRPO      float64 `json:"grad_share_grpo"`
	ShareOPD       float64 `json:"grad_share_opd"`
	ShareKL        float64 `json:"grad_share_kl"`
	ShareEntropy   float64 `json:"grad_share_entropy"`
	CosGRPOOPD     float64 `json:"grad_cos_grpo_opd"`
	CosGRPOKL      float64 `json:"grad_cos_grpo_kl"`
	CosOPDKL       float64 `json:"grad_cos_opd_kl"`
	CosGRPOEntropy float64 `json:"grad_cos_grpo_entropy"`
}

// termVectors computes TermGrads from the four terms' flattened gradients
// (nil: the term is absent from the step, a zero vector).
func termVectors(grpo, opd, kl, ent []float32) *TermGrads {
	vs := [4][]float32{grpo, opd, kl, ent}
	n := 0
	for _, v := range vs {
		n = max(n, len(v))
	}
	var dot [4][4]float64
	var sumDot [4]float64 // ⟨g_i, Σ g⟩
	for k := 0; k < n; k++ {
		var x [4]float64
		s := 0.0
		for i, v := range vs {
			if v != nil {
				x[i] = float64(v[k])
				s += x[i]
			}
		}
		for i := range 4 {
			if x[i] == 0 {
				continue
			}
			sumDot[i] += x[i] * s
			for j := i; j < 4; j++ {
				dot[i][j] += x[i] * x[j]
			}
		}
	}
	total := sumDot[0] + sumDot[1] + sumDot[2] + sumDot[3] // ‖Σ g‖²
	cos := func(i, j int) float64 {
		if dot[i][i] == 0 || dot[j][j] == 0 {
			return 0
		}
		return dot[i][j] / math.Sqrt(dot[i][i]*dot[j][j])
	}
	share := func(i int) float64 {
		if total == 0 {
			return 0
		}
		return sumDot[i] / total
	}
	return &TermGrads{
		NormGRPO: math.Sqrt(dot[0][0]), NormOPD: math.Sqrt(dot[1][1]), NormKL: math.Sqrt(dot[2][2]), NormEntropy: math.Sqrt(dot[3][3]),
		NormSum:   math.Sqrt(math.Max(total, 0)),
		ShareGRPO: share(0), ShareOPD: share(1), ShareKL: share(2), ShareEntropy: share(3),
		CosGRPOOPD: cos(0, 1), CosGRPOKL: cos(0, 2), CosOPDKL: cos(1, 2), CosGRPOEntropy: cos(0, 3),
	}
}

// gradVector reads every parameter's accumulated gradient into one host
// vector (float32, parameters in order; an undefined gradient is zeros).
// It costs 4 bytes per parameter: a diagnostic for small models.
func (m *Model) gradVector() []float32 {
	total := int64(0)
	for _, p := range m.params {
		total += numel(p.shape)
	}
	out := make([]float32, 0, total)
	withoutGrad(func() {
		for _, p := range m.params {
			g := must(p.t.Grad(false))
			if !g.MustDefined() {
				drop(g)
				out = append(out, make([]float32, numel(p.shape))...)
				continue
			}
			flat := must(g.View([]int64{-1}, false))
			out = append(out, values1D(flat)...)
			drop(flat, g)
		}
	})
	return out
}

// termGradients runs one backward pass per active loss term over batch
// (each term's gradient summed over ranks when g is set), reads each, and
// leaves the gradients zeroed for the training pass. Statistics of these
// passes are thrown away.
func (m *Model) termGradients(batch []RLSequence, lens []int, g *ProcessGroup, cfg RLConfig, nTrain, nDistill, nKL int) (*TermGrads, error) {
	active := map[lossTerm]bool{
		termGRPO:    cfg.PGCoef > 0,
		termOPD:     cfg.Lambda > 0 && nDistill > 0,
		termKL:      cfg.KLCoef > 0 && nKL > 0,
		termEntropy: cfg.EntropyCoef > 0,
	}
	var vecs [4][]float32
	m.ZeroGrad()
	for term := termGRPO; term <= termEntropy; term++ {
		if !active[term] {
			continue
		}
		var st RLStats
		acc := rlSums{decisionLogP: cfg.decisionLogP(), only: term}
		if err := m.rlPasses(batch, lens, g, cfg, nTrain, nDistill, nKL, &st, &acc); err != nil {
			return nil, err
		}
		if g != nil {
			if err := m.allReduceGrads(g); err != nil {
				return nil, err
			}
		}
		vecs[term-termGRPO] = m.gradVector()
		m.ZeroGrad()
	}
	return termVectors(vecs[0], vecs[1], vecs[2], vecs[3]), nil
}
