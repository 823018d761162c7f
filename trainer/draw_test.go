package trainer

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/sugarme/gotch"
)

// refDraw is the host sampler's rule in float64, written plainly: greedy
// is the first most likely id; otherwise the first id, in id order, whose
// cumulative weight exp((l − max)/T) reaches u × the total. Log-probs are
// under the raw distribution; alternatives by log-prob, ties by lower id.
func refDraw(logits []float32, temp, u float64, k int) Drawn {
	mx := math.Inf(-1)
	for _, v := range logits {
		if float64(v) > mx || v != v {
			mx = float64(v)
		}
	}
	if math.IsNaN(mx) || math.IsInf(mx, 0) {
		return Drawn{Err: ErrNonFiniteLogits}
	}
	lse := 0.0
	for _, v := range logits {
		lse += math.Exp(float64(v) - mx)
	}
	lse = mx + math.Log(lse)
	id := 0
	if temp <= 0 {
		for i, v := range logits {
			if v > logits[id] {
				id = i
			}
		}
	} else {
		w := make([]float64, len(logits))
		total := 0.0
		for i, v := range logits {
			w[i] = math.Exp((float64(v) - mx) / temp)
			total += w[i]
		}
		r := u * total
		id = -1
		last := 0
		for i, x := range w {
			if x > 0 {
				last = i
			}
			r -= x
			if r <= 0 && x > 0 {
				id = i
				break
			}
		}
		if id < 0 {
			id = last
		}
	}
	d := Drawn{ID: id, LogProb: float64(logits[id]) - lse}
	for len(d.Top) < min(k, len(logits)) {
		best := -1
		for i, v := range logits {
			taken := false
			for _, t := range d.Top {
				taken = taken || t.ID == i
			}
			if !taken && (best < 0 || v > logits[best]) {
				best = i
			}
		}
		d.Top = append(d.Top, TokenLogProb{ID: best, LogProb: float64(logits[best]) - lse})
	}
	return d
}

func stepLogits(t *testing.T, rows [][]float32) *StepLogits {
	t.Helper()
	v := len(rows[0])
	flat := make([]float32, 0, len(rows)*v)
	for _, r := range rows {
		flat = append(flat, r...)
	}
	var sl *StepLogits
	withoutGrad(func() {
		sl = &StepLogits{t: upload(flat, []int64{int64(len(rows)), int64(v)}, gotch.CPU), dev: gotch.CPU, rows: len(rows), vocab: v}
	})
	t.Cleanup(sl.Free)
	return sl
}

// TestDrawMatchesTheHostRule draws in libtorch and by the host sampler's
// rule (float64, written plainly) from the same logits and uniforms:
// vocabularies below, at and across the block size, greedy and sampled
// rows at several temperatures in one batch, peaked and flat rows, masked
// (−Inf) ids, ties, uniforms at both ends, alternatives. Ids must be
// equal, log-probs equal to float32 rounding.
func TestDrawMatchesTheHostRule(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 9))
	temps := []float64{0, 1, 0.7, 1.3, 1}
	for _, v := range []int{3, 100, drawBlock, 2*drawBlock + 517, 151_669} {
		for round := 0; round < 4; round++ {
			b := 6
			rows := make([][]float32, b)
			specs := make([]DrawSpec, b)
			us := make([]float64, b)
			for i := range rows {
				rows[i] = make([]float32, v)
				scale := []float32{0.5, 3, 12}[(i+round)%3]
				for k := range rows[i] {
					rows[i][k] = float32(rng.NormFloat64()) * scale
				}
				switch i {
				case 1: // masked ids
					for k := 0; k < v; k += 3 {
						rows[i][k] = float32(math.Inf(-1))
					}
				case 2: // a tie at the top
					rows[i][v-1] = 40
					rows[i][v/2] = 40
				}
				specs[i] = DrawSpec{Temperature: temps[(i+round)%len(temps)], TopLogprobs: []int{0, 5, 1}[i%3]}
				us[i] = rng.Float64()
			}
			us[3], us[4] = 0, math.Nextafter(1, 0)
			sl := stepLogits(t, rows)
			var asked []int
			got, err := sl.Draw(specs, func(i int) float64 { asked = append(asked, i); return us[i] })
			if err != nil {
				t.Fatal(err)
			}
			var wantAsked []int
			for i := range rows {
				if specs[i].Temperature > 0 {
					wantAsked = append(wantAsked, i)
				}
				want := refDraw(rows[i], specs[i].Temperature, us[i], specs[i].TopLogprobs)
				name := fmt.Sprintf("vocab %d round %d row %d (T=%g, u=%g)", v, round, i, specs[i].Temperature, us[i])
				if i == 4 && specs[i].Temperature > 0 {
					// u one ulp below 1 lands on the far tail, ids whose
					// probabilities float32 rounds to or near 0: the pick
					// must lie at or past where u = 1 − 1e-3 lands, on an
					// id of non-zero probability.
					at := refDraw(rows[i], specs[i].Temperature, 1-1e-3, 0)
					if got[i].ID < at.ID || got[i].ID >= v || rows[i][got[i].ID] == float32(math.Inf(-1)) {
						t.Errorf("%s: id %d, want one at or after %d of non-zero probability", name, got[i].ID, at.ID)
					}
					lse := float64(rows[i][want.ID]) - want.LogProb
					want.ID, want.LogProb = got[i].ID, float64(rows[i][got[i].ID])-lse
				}
				if got[i].ID != want.ID {
					t.Errorf("%s: id %d, the host rule %d", name, got[i].ID, want.ID)
				}
				if math.Abs(got[i].LogProb-want.LogProb) > 1e-4*(1+math.Abs(want.LogProb)) {
					t.Errorf("%s: log-prob %.7f, the host rule %.7f", name, got[i].LogProb, want.LogProb)
				}
				if len(got[i].Top) != len(want.Top) {
					t.Fatalf("%s: %d alternatives, want %d", name, len(got[i].Top), len(want.Top))
				}
				for k := range want.Top {
					if got[i].Top[k].ID != want.Top[k].ID || math.Abs(got[i].Top[k].LogProb-want.Top[k].LogProb) > 1e-4 {
						t.Errorf("%s: alternative %d is %+v, want %+v", name, k, got[i].Top[k], want.Top[k])
					}
				}
			}
			if fmt.Sprint(asked) != fmt.Sprint(wantAsked) {
				t.Errorf("vocab %d round %d: uniforms asked for rows %v, want %v (sampled rows, in order)", v, round, asked, wantAsked)
			}
		}
	}
}

// TestDrawFrequencies: over many draws from one small distribution, each
// id comes up at its probability (a check that does not lean on the
// reference rule above).
func TestDrawFrequencies(t *testing.T) {
	logits := []float32{0, float32(math.Log(2)), float32(math.Log(3)), float32(math.Inf(-1)), float32(math.Log(4))}
	probs := []float64{0.1, 0.2, 0.3, 0, 0.4}
	const n = 4000
	rows := make([][]float32, n)
	specs := make([]DrawSpec, n)
	for i := range rows {
		rows[i] = logits
		specs[i] = DrawSpec{Temperature: 1}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	got, err := stepLogits(t, rows).Draw(specs, func(int) float64 { return rng.Float64() })
	if err != nil {
		t.Fatal(err)
	}
	counts := make([]int, len(logits))
	for _, d := range got {
		counts[d.ID]++
	}
	for id, p := range probs {
		sd := math.Sqrt(p * (1 - p) / n)
		if f := float64(counts[id]) / n; math.Abs(f-p) > 5*sd+1e-9 {
			t.Errorf("id %d drawn %.4f of the time, want %.2f ± %.4f", id, f, p, 5*sd)
		}
		if want := math.Log(p); p > 0 && got[0].ID == id && math.Abs(got[0].LogProb-want) > 1e-5 {
			t.Errorf("id %d: log-prob %.6f, want %.6f", id, got[0].LogProb, want)
		}
	}
}

// TestDrawNonFiniteRows: a row with a NaN, a +Inf, or only −Inf is
// ErrNonFiniteLogits and draws no uniform; the other rows are unharmed.
func TestDrawNonFiniteRows(t *testing.T) {
	inf := float32(math.Inf(1))
	nan := float32(math.NaN())
	rows := [][]float32{
		{1, 2, 3, 4},
		{1, nan, 3, 4},
		{1, inf, 3, 4},
		{-inf, -inf, -inf, -inf},
		{4, 3, 2, 1},
	}
	specs := []DrawSpec{{Temperature: 1}, {Temperature: 1}, {Temperature: 0}, {Temperature: 0.5, TopLogprobs: 2}, {Temperature: 0, TopLogprobs: 2}}
	var asked []int
	got, err := stepLogits(t, rows).Draw(specs, func(i int) float64 { asked = append(asked, i); return 0.5 })
	if err != nil {
		t.Fatal(err)
	}
	for i, wantErr := range []bool{false, true, true, true, false} {
		if gotErr := errors.Is(got[i].Err, ErrNonFiniteLogits); gotErr != wantErr {
			t.Errorf("row %d: error %v, want non-finite %v", i, got[i].Err, wantErr)
		}
	}
	if fmt.Sprint(asked) != "[0]" {
		t.Errorf("uniforms asked for rows %v, want [0]", asked)
	}
	if want := refDraw(rows[0], 1, 0.5, 0); got[0].ID != want.ID {
		t.Errorf("row 0: id %d, want %d", got[0].ID, want.ID)
	}
	if got[4].ID != 0 || len(got[4].Top) != 2 || got[4].Top[1].ID != 1 {
		t.Errorf("row 4: %+v, want id 0 with alternatives 0, 1", got[4])
	}
}

// TestDecodeBatchLogitsRows: the kept logits are DecodeBatch's, row by row.
func TestDecodeBatchLogitsRows(t *testing.T) {
	m, _ := newTiny(t, ArchQwen2, 31)
	prompts := [][]int{{5, 9, 2}, {1, 2, 3, 4}}
	c1, next1, _ := prefilled(t, m, prompts)
	c2, next2, _ := prefilled(t, m, prompts)
	want, err := m.DecodeBatch(c1, next1)
	if err != nil {
		t.Fatal(err)
	}
	sl, err := m.DecodeBatchLogits(c2, next2)
	if err != nil {
		t.Fatal(err)
	}
	defer sl.Free()
	for i := range want {
		row, err := sl.Row(i)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(row) != fmt.Sprint(want[i]) {
			t.Errorf("row %d differs from DecodeBatch's", i)
		}
	}
	if _, err := sl.Row(2); err == nil {
		t.Error("row 2 of 2: no error")
	}
}
