package benchmarks

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/seedctl/seedctl/orchestrator"
)

// ArmRun is one finished run of an arm: its seed, its base and final
// evaluations and the means of its per-iteration instruments.
type ArmRun struct {
	Dir  string
	Seed int64
	// Base and Final are greedy eval-seen success (points); BaseT1 and
	// FinalT1 the same sampled at T = 1 (NaN when not played).
	Base, Final, BaseT1, FinalT1 float64
	// BaseWins and FinalWins are the per-task outcomes of eval-seen.
	BaseWins, FinalWins string
	// Instruments are the means over iterations of the metrics that say
	// what the update did (armInstruments), over the iterations that
	// reported each.
	Instruments map[string]float64
}

// Arm is one method's runs, one per seed.
type Arm struct {
	Name string
	Runs []ArmRun
	// Unfinished lists the folders left out for want of a final
	// evaluation (runs still going, or stopped).
	Unfinished []string
}

// armInstruments are the per-iteration metrics an arm table shows.
var armInstruments = []struct{ key, label string }{
	{"grad_share_grpo", "GRPO share"},
	{"grad_share_opd", "distill share"},
	{"grad_share_kl", "KL share"},
	{"grad_cos_grpo_opd", "cos(GRPO, distill)"},
	{"grad_norm_grpo", "‖g_GRPO‖"},
	{"grad_norm_opd", "‖g_distill‖"},
	{"adv_abs_mean", "mean abs(A)"},
	{"gate_mean", "gate"},
	{"gate_share_below_0.1", "gate < 0.1"},
	{"gate_share_above_0.9", "gate ≥ 0.9"},
	{"decision_mean_shift", "Δ decisions"},
	{"decision_teacher_shift", "ℓᵀ−ℓθ decisions (contrastive)"},
	{"decision_baseline_shift", "ℓᴮ−ℓθ decisions (contrastive)"},
	{"decision_mean_shift_pos_adv", "Δ decisions A>0"},
	{"decision_mean_shift_neg_adv", "Δ decisions A<0"},
	{"opd_loss", "distillation term (full form: reverse KL, nats)"},
	{"rejected_rate", "rejected actions"},
}

var errUnfinished = errors.New("not finished (no final evaluation)")

// LoadArm reads finished runs (run folders) as one arm; unfinished ones
// are listed in Unfinished.
func LoadArm(name string, dirs []string) (Arm, error) {
	a := Arm{Name: name}
	seen := map[int64]string{}
	for _, dir := range dirs {
		r, err := loadArmRun(dir)
		if errors.Is(err, errUnfinished) {
			a.Unfinished = append(a.Unfinished, dir)
			continue
		}
		if err != nil {
			return a, fmt.Errorf("arm %s: %w", name, err)
		}
		if prev, dup := seen[r.Seed]; dup {
			return a, fmt.Errorf("arm %s: %s and %s both ran seed %d", name, prev, dir, r.Seed)
		}
		seen[r.Seed] = dir
		a.Runs = append(a.Runs, r)
	}
	sort.Slice(a.Runs, func(i, j int) bool { return a.Runs[i].Seed < a.Runs[j].Seed })
	return a, nil
}

func loadArmRun(dir string) (ArmRun, error) {
	cfg, err := orchestrator.Load(filepath.Join(dir, "config.json"))
	if err != nil {
		return ArmRun{}, err
	}
	raw, err := os.ReadFile(filepath.Join(dir, "state.json"))
	if err != nil {
		return ArmRun{}, fmt.Errorf("run %s: %w", dir, err)
	}
	st, err := orchestrator.ParseState(raw)
	if err != nil {
		return ArmRun{}, fmt.Errorf("run %s: %w", dir, err)
	}
	if !st.Done || st.BaseEval == nil || st.FinalEval == nil {
		return ArmRun{}, fmt.Errorf("run %s: %w", dir, errUnfinished)
	}
	r := ArmRun{Dir: dir, Seed: cfg.Seed, Base: 100 * st.BaseEval.Seen, Final: 100 * st.FinalEval.Seen,
		BaseWins: st.BaseEval.SeenWins, FinalWins: st.FinalEval.SeenWins, BaseT1: math.NaN(), FinalT1: math.NaN(), Instruments: map[string]float64{}}
	if st.BaseEval.SampledTemperature > 0 && st.FinalEval.SampledTemperature > 0 {
		r.BaseT1, r.FinalT1 = 100*st.BaseEval.SeenSampled, 100*st.FinalEval.SeenSampled
	}
	lines, err := orchestrator.ReadMetrics(filepath.Join(dir, "metrics.jsonl"))
	if err != nil {
		return ArmRun{}, err
	}
	sum, n := map[string]float64{}, map[string]int{}
	for _, l := range lines {
		if l.Kind != "iteration" {
			continue
		}
		for _, in := range armInstruments {
			if v, ok := l.Values[in.key]; ok && !math.IsNaN(v) {
				sum[in.key] += v
				n[in.key]++
			}
		}
	}
	for k, s := range sum {
		r.Instruments[k] = s / float64(n[k])
	}
	return r, nil
}

// tQuantile975 is Student's t 0.975 quantile for df degrees of freedom
// (df ≥ 1; the normal's 1.96 beyond the table).
func tQuantile975(df int) float64 {
	table := []float64{12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
		2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
		2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042}
	if df < 1 {
		return math.NaN()
	}
	if df <= len(table) {
		return table[df-1]
	}
	return 1.96
}

// TInterval is the mean of xs and its 95% Student-t interval (NaN bounds
// for fewer than two values). Over seeds it is what a claim about the
// method needs: each seed one draw of the whole training run.
func TInterval(xs []float64) (mean, lo, hi float64) {
	n := len(xs)
	if n == 0 {
		return math.NaN(), math.NaN(), math.NaN()
	}
	for _, x := range xs {
		mean += x
	}
	mean /= float64(n)
	if n < 2 {
		return mean, math.NaN(), math.NaN()
	}
	ss := 0.0
	for _, x := range xs {
		ss += (x - mean) * (x - mean)
	}
	half := tQuantile975(n-1) * math.Sqrt(ss/float64(n-1)/float64(n))
	return mean, mean - half, mean + half
}

func fmtCI(m, lo, hi float64) string {
	if math.IsNaN(lo) {
		return fmt.Sprintf("%+.1f", m)
	}
	return fmt.Sprintf("%+.1f [%+.1f, %+.1f]", m, lo, hi)
}

// ArmsMarkdown compares arms with ref (an arm's name): each arm's gain
// over its base per seed (greedy and at T = 1), and against ref on the
// seeds both ran the difference of final greedy eval-seen success with
// its t-interval over seeds beside the paired bootstrap over seeds and
// tasks; then the instruments' means.
func ArmsMarkdown(arms []Arm, ref string) (string, error) {
	var refArm *Arm
	for i := range arms {
		if arms[i].Name == ref {
			refArm = &arms[i]
		}
	}
	if refArm == nil {
		return "", fmt.Errorf("no arm named %q to compare with", ref)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "| arm | seeds | eval-seen base → final (greedy) | gain (greedy), t-interval | gain at T=1, t-interval | − %s greedy (same seeds), t-interval | − %s at T=1 (same seeds), t-interval | − %s greedy, paired bootstrap (seeds × tasks) |\n|---|---|---|---|---|---|---|---|\n", ref, ref, ref)
	for _, a := range arms {
		var base, final, gain, gainT1 []float64
		for _, r := range a.Runs {
			base, final, gain = append(base, r.Base), append(final, r.Final), append(gain, r.Final-r.Base)
			if !math.IsNaN(r.FinalT1) {
				gainT1 = append(gainT1, r.FinalT1-r.BaseT1)
			}
		}
		mb, _, _ := TInterval(base)
		mf, _, _ := TInterval(final)
		g, glo, ghi := TInterval(gain)
		t1 := "—"
		if len(gainT1) > 0 {
			t1 = fmtCI(TInterval(gainT1))
		}
		vs, vsT1, boot := "—", "—", "—"
		if a.Name != ref {
			var diffs, diffsT1 []float64
			var aw, rw []string
			for _, r := range a.Runs {
				for _, q := range refArm.Runs {
					if q.Seed == r.Seed {
						diffs = append(diffs, r.Final-q.Final)
						if !math.IsNaN(r.FinalT1) && !math.IsNaN(q.FinalT1) {
							diffsT1 = append(diffsT1, r.FinalT1-q.FinalT1)
						}
						if r.FinalWins != "" && len(r.FinalWins) == len(q.FinalWins) {
							aw, rw = append(aw, r.FinalWins), append(rw, q.FinalWins)
						}
					}
				}
			}
			if len(diffs) > 0 {
				vs = fmtCI(TInterval(diffs)) + fmt.Sprintf(" (%d)", len(diffs))
			}
			if len(diffsT1) > 0 {
				vsT1 = fmtCI(TInterval(diffsT1)) + fmt.Sprintf(" (%d)", len(diffsT1))
			}
			if len(aw) > 0 {
				if ci, err := pairedBootstrap(aw, rw); err == nil {
					boot = ci.String()
				}
			}
		}
		seeds := fmt.Sprint(len(a.Runs))
		if len(a.Unfinished) > 0 {
			seeds += fmt.Sprintf(" (%d unfinished left out)", len(a.Unfinished))
		}
		fmt.Fprintf(&b, "| %s | %s | %.1f → %.1f | %s | %s | %s | %s | %s |\n", a.Name, seeds, mb, mf, fmtCI(g, glo, ghi), t1, vs, vsT1, boot)
	}
	b.WriteString("\nInstruments, means over iterations and seeds (gradient shares and cosines from the steps that measured them, `rl.term_grads_every`):\n\n| arm |")
	for _, in := range armInstruments {
		fmt.Fprintf(&b, " %s |", in.label)
	}
	b.WriteString("\n|---|" + strings.Repeat("---|", len(armInstruments)) + "\n")
	for _, a := range arms {
		fmt.Fprintf(&b, "| %s |", a.Name)
		for _, in := range armInstruments {
			var xs []float64
			for _, r := range a.Runs {
				if v, ok := r.Instruments[in.key]; ok {
					xs = append(xs, v)
				}
			}
			if len(xs) == 0 {
				b.WriteString(" — |")
				continue
			}
			m, _, _ := TInterval(xs)
			if in.key == "rejected_rate" {
				fmt.Fprintf(&b, " %.0f%% |", 100*m)
			} else {
				fmt.Fprintf(&b, " %.3g |", m)
			}
		}
		b.WriteString("\n")
	}
	return b.String(), nil
}
