package benchmarks

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/seedctl/seedctl/internal/plot"
	"github.com/seedctl/seedctl/orchestrator"
)

// Stat is a mean ± std over seeds.
type Stat struct {
	Mean float64 `json:"mean"`
	Std  float64 `json:"std"`
	N    int     `json:"n"`
}

func stat(xs []float64) Stat {
	if len(xs) == 0 {
		return Stat{Mean: math.NaN()}
	}
	m := 0.0
	for _, x := range xs {
		m += x
	}
	m /= float64(len(xs))
	v := 0.0
	for _, x := range xs {
		v += (x - m) * (x - m)
	}
	if len(xs) > 1 {
		v /= float64(len(xs) - 1)
	}
	return Stat{Mean: m, Std: math.Sqrt(v), N: len(xs)}
}

func (s Stat) String() string {
	if s.N == 0 {
		return "—"
	}
	if s.N == 1 {
		return fmt.Sprintf("%.1f", s.Mean)
	}
	return fmt.Sprintf("%.1f ± %.1f", s.Mean, s.Std)
}

// evalNoise is the binomial standard error, in points, of one run's
// eval-seen success on n tasks at the T1 rows' mean success p (in %).
func evalNoise(main map[string]map[string]Stat, n int) (se, p float64) {
	sum, k := 0.0, 0
	for _, row := range main {
		if s, ok := row["seen"]; ok && s.N > 0 {
			sum += s.Mean
			k++
		}
	}
	if k == 0 || n <= 0 {
		return 0, 0
	}
	p = sum / float64(k)
	q := p / 100
	return 100 * math.Sqrt(q*(1-q)/float64(n)), p
}

// ofSeeds formats s and says over how many seeds when fewer than the
// grid's finished (a grid grown a sitting at a time has rows of 1 and 3).
func ofSeeds(s Stat, seeds int) string {
	if s.N > 0 && s.N < seeds {
		return fmt.Sprintf("%s (%d of %d seeds)", s, s.N, seeds)
	}
	return s.String()
}

// fixed formats with the given decimals (for values that are not percents).
func (s Stat) fixed(dec int) string {
	switch s.N {
	case 0:
		return "—"
	case 1:
		return fmt.Sprintf("%.*f", dec, s.Mean)
	}
	return fmt.Sprintf("%.*f ± %.*f", dec, s.Mean, dec, s.Std)
}

// pctStat shows a share in [0, 1] as a percent.
func pctStat(s Stat) string {
	return Stat{Mean: 100 * s.Mean, Std: 100 * s.Std, N: s.N}.String()
}

// Figures is every number the tables and plots show.
type Figures struct {
	Main        map[string]map[string]Stat `json:"t1_main"`       // algo → seen/unseen/score → %
	ShareSeen   map[string]map[string]Stat `json:"t2_share_seen"` // algo → share → %
	ShareNeeded string                     `json:"t2_seed_share_to_match_grpo_full"`
	// SeedMinusGRPO is, per share, SEED there minus GRPO with all the
	// training tasks, with a paired bootstrap interval (PairedCI).
	SeedMinusGRPO map[string]PairedCI `json:"t2_seed_minus_grpo_full_ci,omitempty"`
	// SeedMinusGRPOSameShare is SEED minus GRPO at the same share below
	// 100%, and GRPOShareMinusFull GRPO at a share minus GRPO with all
	// the tasks (the control: whether fewer tasks cost GRPO anything).
	SeedMinusGRPOSameShare map[string]PairedCI        `json:"t2_seed_minus_grpo_same_share_ci,omitempty"`
	GRPOShareMinusFull     map[string]PairedCI        `json:"t2_grpo_share_minus_full_ci,omitempty"`
	Families               map[string]map[string]Stat `json:"t3_unseen_by_family"` // algo → family → %
	Cost                   map[string]map[string]Stat `json:"t4_cost_s"`           // algo → phase → seconds per iteration
	CostRatio              float64                    `json:"t4_seed_over_grpo_iteration_time"`
	// Diagnostics are the distillation signal's statistics per method that
	// distills (mean over iterations and seeds): what to look at when SEED
	// does not beat GRPO.
	Diagnostics map[string]map[string]Stat `json:"t6_distillation_diagnostics"`
	// Exploration is each method's first-action agreement and rollout
	// success in its first and last iteration: whether the policy samples
	// more than one opening per task, without which neither RL nor a
	// distillation loss on sampled tokens can find a better one.
	Exploration map[string]map[string]Stat `json:"t7_exploration,omitempty"`
	// Sweep is T8: SEED's λ and β sweep on one seed, the base run first.
	Sweep   []SweepRow `json:"t8_sweep,omitempty"`
	Skipped []string   `json:"skipped,omitempty"`
	// RunSeconds is each finished experiment's wall time; RunsTotal their sum.
	RunSeconds map[string]float64 `json:"run_seconds,omitempty"`
	RunsTotal  string             `json:"runs_total"`
	// HasScore is whether the environment reports a score besides success
	// (WebShop's 0–100); household and Search-QA do not.
	HasScore bool   `json:"has_score"`
	Duration string `json:"duration"`
	Host     string `json:"host"`
}

func shareKey(s float64) string { return fmt.Sprintf("%.0f%%", 100*s) }

// Summarize computes the figures from outcomes.
func Summarize(outs []Outcome) Figures {
	var f Figures
	collect := map[string]map[string][]float64{}
	put := func(m map[string]map[string][]float64, a, k string, v float64) {
		if m[a] == nil {
			m[a] = map[string][]float64{}
		}
		m[a][k] = append(m[a][k], v)
	}
	share := map[string]map[string][]float64{}
	fam := map[string]map[string][]float64{}
	cost := map[string]map[string][]float64{}
	diag := map[string]map[string][]float64{}
	explore := map[string]map[string][]float64{}
	// Prompting-only is the base policy, evaluated before training in every
	// run: it counts once per seed.
	baseSeeds := map[int64]bool{}
	f.RunSeconds = map[string]float64{}
	total := 0.0
	for _, o := range outs {
		if o.Skipped != "" || !o.Done || o.Final == nil {
			f.Skipped = append(f.Skipped, o.Name()+": "+o.Skipped)
			continue
		}
		f.RunSeconds[o.Name()] = o.Seconds
		total += o.Seconds
		if o.Swept() {
			continue // T8's, not the tables'
		}
		f.HasScore = f.HasScore || o.Final.SeenScore != 0 || o.Base != nil && o.Base.SeenScore != 0
		put(share, o.Algo, shareKey(o.DataShare), 100*o.Final.Seen)
		// T6 and T7 have a row per method and share ("seed @20%"): what
		// the signal did in the runs with fewer tasks too.
		row := o.Algo
		if o.DataShare != 1 {
			row += " @" + shareKey(o.DataShare)
		}
		var iters []orchestrator.MetricsLine
		for _, l := range o.Metrics {
			if l.Kind == "iteration" {
				iters = append(iters, l)
			}
		}
		if n := len(iters); n > 0 {
			if _, ok := iters[0].Values["first_action_agreement"]; ok {
				put(explore, row, "agreement_first", iters[0].Values["first_action_agreement"])
				put(explore, row, "agreement_last", iters[n-1].Values["first_action_agreement"])
				put(explore, row, "success_first", 100*iters[0].Values["success"])
				put(explore, row, "success_last", 100*iters[n-1].Values["success"])
			}
		}
		for _, l := range iters {
			if _, ok := l.Values["skill_share"]; ok {
				for _, k := range diagKeys {
					if v, ok := l.Values[k]; ok {
						put(diag, row, k, v)
					}
				}
			}
		}
		if o.DataShare != 1 {
			continue
		}
		for _, l := range iters {
			for _, k := range costKeys {
				put(cost, o.Algo, k, l.Values[k])
			}
		}
		put(collect, o.Algo, "seen", 100*o.Final.Seen)
		put(collect, o.Algo, "unseen", 100*o.Final.Unseen)
		put(collect, o.Algo, "score", o.Final.SeenScore)
		if o.Base != nil && !baseSeeds[o.Seed] {
			baseSeeds[o.Seed] = true
			put(collect, "prompting-only", "seen", 100*o.Base.Seen)
			put(collect, "prompting-only", "unseen", 100*o.Base.Unseen)
			put(collect, "prompting-only", "score", o.Base.SeenScore)
		}
		for fm, v := range o.Final.UnseenByFamily {
			put(fam, o.Algo, fm, 100*v)
		}
	}
	f.RunsTotal = (time.Duration(total) * time.Second).String()
	f.Main, f.ShareSeen, f.Families, f.Cost, f.Diagnostics, f.Exploration = stats(collect), stats(share), stats(fam), stats(cost), stats(diag), stats(explore)
	f.SeedMinusGRPO = seedVsGRPO(outs)
	f.SeedMinusGRPOSameShare, f.GRPOShareMinusFull = seedVsGRPOSameShare(outs), grpoShareVsFull(outs)
	f.ShareNeeded = "not reached"
	if g, ok := f.ShareSeen[orchestrator.AlgoGRPO]["100%"]; ok {
		var shares []string
		for k := range f.ShareSeen[orchestrator.AlgoSEED] {
			shares = append(shares, k)
		}
		sort.Slice(shares, func(i, j int) bool { return pct(shares[i]) < pct(shares[j]) })
		for _, k := range shares {
			if f.ShareSeen[orchestrator.AlgoSEED][k].Mean >= g.Mean {
				f.ShareNeeded = k
				break
			}
		}
	}
	if s, ok := f.Cost[orchestrator.AlgoSEED]["iteration_s"]; ok {
		if g, ok := f.Cost[orchestrator.AlgoGRPO]["iteration_s"]; ok && g.Mean > 0 {
			f.CostRatio = s.Mean / g.Mean
		}
	}
	return f
}

// SweepRow is one point of T8: SEED with all the tasks at one λ and β.
type SweepRow struct {
	Lambda float64 `json:"lambda"`
	Beta   float64 `json:"beta"`
	Seed   int64   `json:"seed"`
	Seen   float64 `json:"seen"`   // eval-seen success, %
	Unseen float64 `json:"unseen"` // eval-unseen success, %
	// VsGRPO is this run minus GRPO with all the tasks and the same seed,
	// eval-seen points, with a 95% bootstrap interval over the eval tasks
	// (nil without that GRPO run).
	VsGRPO *PairedCI `json:"vs_grpo_full,omitempty"`
	// Gate, DecisionShift and OPDLoss are the iterations' mean gate
	// σ(β·Δ), mean Δ on the decision tokens and distillation loss: what the
	// setting did to the signal.
	Gate          float64 `json:"gate_mean"`
	DecisionShift float64 `json:"decision_mean_shift"`
	OPDLoss       float64 `json:"opd_loss"`
	Base          bool    `json:"base"` // the base config's λ and β
}

// sweepRows collects T8 from the finished SEED runs with all the tasks and
// the sweep's seed (the first of the spec's): the base run and the swept.
func sweepRows(spec Spec, outs []Outcome) []SweepRow {
	if (len(spec.Lambdas) == 0 && len(spec.Betas) == 0) || len(spec.Seeds) == 0 {
		return nil
	}
	seed := spec.Seeds[0]
	var grpo string
	for _, o := range outs {
		if o.Done && o.Final != nil && o.Algo == orchestrator.AlgoGRPO && o.DataShare == 1 && o.Seed == seed && !o.Swept() {
			grpo = o.Final.SeenWins
		}
	}
	var rows []SweepRow
	for _, o := range outs {
		if !o.Done || o.Final == nil || o.Algo != orchestrator.AlgoSEED || o.DataShare != 1 || o.Seed != seed {
			continue
		}
		r := SweepRow{Lambda: spec.Base.RL.Lambda, Beta: spec.Base.RL.Beta, Seed: seed, Seen: 100 * o.Final.Seen, Unseen: 100 * o.Final.Unseen, Base: !o.Swept()}
		if o.Lambda != 0 {
			r.Lambda = o.Lambda
		}
		if o.Beta != 0 {
			r.Beta = o.Beta
		}
		if grpo != "" && o.Final.SeenWins != "" {
			if ci, err := pairedBootstrap([]string{o.Final.SeenWins}, []string{grpo}); err == nil {
				r.VsGRPO = &ci
			}
		}
		var gate, shift, opd []float64
		for _, l := range o.Metrics {
			if l.Kind != "iteration" {
				continue
			}
			if v, ok := l.Values["gate_mean"]; ok {
				gate = append(gate, v)
			}
			if v, ok := l.Values["decision_mean_shift"]; ok {
				shift = append(shift, v)
			}
			if v, ok := l.Values["opd_loss"]; ok {
				opd = append(opd, v)
			}
		}
		r.Gate, r.DecisionShift, r.OPDLoss = stat(gate).Mean, stat(shift).Mean, stat(opd).Mean
		rows = append(rows, r)
	}
	sort.SliceStable(rows, func(i, j int) bool {
		if rows[i].Base != rows[j].Base {
			return rows[i].Base
		}
		if rows[i].Lambda != rows[j].Lambda {
			return rows[i].Lambda < rows[j].Lambda
		}
		return rows[i].Beta < rows[j].Beta
	})
	return rows
}

// costKeys are the per-iteration times and token counts the cost table
// averages.
var costKeys = []string{"rollout_s", "analysis_s", "rescore_s", "update_s", "publish_s", "iteration_s", "analysis_tokens"}

// diagKeys are the per-iteration metrics T6 averages: how many trajectories
// got a usable skill, whether the analyzer's answers parsed, and how the
// teacher context moved the sampled tokens (the gate σ(β·Δ), the share of
// tokens with Δ > 0, the mean Δ in nats) and the OPD loss; then the same
// on the decision tokens alone (those the policy gave p < 0.9; the
// trainer's RLStats), where a teacher can move a sure policy at all.
var diagKeys = []string{"skill_share", "skill_parse_ok", "gate_mean", "positive_shift", "mean_shift", "opd_loss",
	"decision_share", "decision_gate_mean", "decision_positive_shift", "decision_mean_shift",
	"decision_mean_shift_pos_adv", "decision_mean_shift_neg_adv"}

// stats turns samples by (row, column) into mean ± std.
func stats(m map[string]map[string][]float64) map[string]map[string]Stat {
	out := map[string]map[string]Stat{}
	for a, row := range m {
		out[a] = map[string]Stat{}
		for k, xs := range row {
			out[a][k] = stat(xs)
		}
	}
	return out
}

func pct(k string) float64 {
	var v float64
	fmt.Sscanf(strings.TrimSuffix(k, "%"), "%g", &v)
	return v
}

// WriteResults writes results.md, figures.json and the plots into out.
func WriteResults(out string, spec Spec, outs []Outcome, took time.Duration) error {
	f := Summarize(outs)
	f.Sweep = sweepRows(spec, outs)
	f.Duration = took.Round(time.Second).String()
	f.Host, _ = os.Hostname()
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# seedctl bench — %s on %s\n\n", spec.Base.Env.Name, f.Host)
	set := "the whole train split"
	if spec.Base.TrainTasks > 0 {
		set = fmt.Sprintf("%d training tasks", spec.Base.TrainTasks)
	}
	invocation := "" // a --report rewrite runs nothing
	if took >= time.Second {
		invocation = " (this invocation " + f.Duration + ")"
	}
	env := ""
	if keys := slices.Sorted(maps.Keys(spec.Base.Env.Options)); len(keys) > 0 {
		var kv []string
		for _, k := range keys {
			kv = append(kv, fmt.Sprintf("`%s=%s`", k, spec.Base.Env.Options[k]))
		}
		env = "; environment options " + strings.Join(kv, ", ")
	}
	fmt.Fprintf(&b, "Model `%s`%s; %d iterations × %d tasks × %d trajectories per run; training set %s (data shares are of it); seeds %v; wall time of the finished runs %s%s. Success in %% on %d eval tasks per split, mean ± std over seeds; %s.\n\n",
		spec.Base.Model, env, spec.Base.Iterations, spec.Base.TasksPerIteration, spec.Base.Rollout.GroupSize, set, spec.Seeds, f.RunsTotal, invocation, spec.Base.Eval.Episodes, spec.Base.EvalProtocol())
	if note := ledgerNote(outs); note != "" {
		b.WriteString(note + "\n\n")
	}
	head, rule := "| method | eval-seen | eval-unseen |", "|---|---|---|"
	if f.HasScore {
		head, rule = head+" score |", rule+"---|"
	}
	b.WriteString("## T1 main table (all training tasks)\n\n" + head + "\n" + rule + "\n")
	for _, a := range append([]string{"prompting-only"}, spec.Algos...) {
		m, ok := f.Main[a]
		if !ok {
			continue
		}
		fmt.Fprintf(&b, "| %s | %s | %s |", a, ofSeeds(m["seen"], len(spec.Seeds)), ofSeeds(m["unseen"], len(spec.Seeds)))
		if f.HasScore {
			fmt.Fprintf(&b, " %s |", ofSeeds(m["score"], len(spec.Seeds)))
		}
		b.WriteString("\n")
	}
	if se, p := evalNoise(f.Main, spec.Base.Eval.Episodes); se > 0 {
		fmt.Fprintf(&b, "\nNoise: one run's success on %d tasks has a binomial standard error of about %.1f points at the table's mean success (%.0f%%); differences of one run within about twice that are not evidence.\n", spec.Base.Eval.Episodes, se, p)
	}
	b.WriteString("\n## T2 sample efficiency (eval-seen success by share of training tasks)\n\n| method |")
	shares := append(append([]float64{}, spec.Shares...), 1)
	sort.Float64s(shares)
	shares = slices.Compact(shares) // `--shares 1` asks for T1 alone: one 100% column
	for _, s := range shares {
		fmt.Fprintf(&b, " %s |", shareKey(s))
	}
	b.WriteString("\n|---|" + strings.Repeat("---|", len(shares)) + "\n")
	for _, a := range compared {
		fmt.Fprintf(&b, "| %s |", a)
		for _, s := range shares {
			fmt.Fprintf(&b, " %s |", f.ShareSeen[a][shareKey(s)])
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "\nShare of training tasks SEED needs to reach GRPO's 100%% score: **%s**.\n", f.ShareNeeded)
	if len(f.SeedMinusGRPO) > 0 {
		b.WriteString("\nSEED at each share minus GRPO with all the tasks, eval-seen points, with a 95% paired bootstrap interval (runs paired by seed, outcomes by eval task; seeds and tasks resampled):\n\n| share | SEED − GRPO@100% | seeds × tasks |\n|---|---|---|\n")
		keys := slices.Sorted(maps.Keys(f.SeedMinusGRPO))
		sort.Slice(keys, func(i, j int) bool { return pct(keys[i]) < pct(keys[j]) })
		for _, k := range keys {
			c := f.SeedMinusGRPO[k]
			fmt.Fprintf(&b, "| %s | %s | %d × %d |\n", k, c, c.Seeds, c.Tasks)
		}
	}
	if len(f.SeedMinusGRPOSameShare) > 0 || len(f.GRPOShareMinusFull) > 0 {
		b.WriteString("\nThe control, at each share below 100% where GRPO ran too (same intervals): SEED minus GRPO with the same tasks, and GRPO minus GRPO with all the tasks. If fewer tasks cost GRPO nothing, SEED matching GRPO@100% with them says nothing about data efficiency.\n\n| share | SEED − GRPO, same share | seeds × tasks | GRPO@share − GRPO@100% | seeds × tasks |\n|---|---|---|---|---|\n")
		keys := slices.Collect(maps.Keys(f.GRPOShareMinusFull))
		for k := range f.SeedMinusGRPOSameShare {
			if !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
		}
		sort.Slice(keys, func(i, j int) bool { return pct(keys[i]) < pct(keys[j]) })
		cell := func(m map[string]PairedCI, k string) string {
			if c, ok := m[k]; ok {
				return fmt.Sprintf("%s | %d × %d", c, c.Seeds, c.Tasks)
			}
			return "— | —"
		}
		for _, k := range keys {
			fmt.Fprintf(&b, "| %s | %s | %s |\n", k, cell(f.SeedMinusGRPOSameShare, k), cell(f.GRPOShareMinusFull, k))
		}
	}
	b.WriteString("\n## T3 eval-unseen success per task family\n\n| family | GRPO | SEED |\n|---|---|---|\n")
	famSet := map[string]bool{}
	for _, a := range compared {
		for k := range f.Families[a] {
			famSet[k] = true
		}
	}
	for _, k := range slices.Sorted(maps.Keys(famSet)) {
		fmt.Fprintf(&b, "| %s | %s | %s |\n", k, f.Families[orchestrator.AlgoGRPO][k], f.Families[orchestrator.AlgoSEED][k])
	}
	b.WriteString("\n## T4 cost (seconds per iteration; analyzer tokens written per iteration)\n\n| method | rollout | analysis | rescoring | update | publish | total | analyzer tokens |\n|---|---|---|---|---|---|---|---|\n")
	for _, a := range slices.Sorted(maps.Keys(f.Cost)) {
		c := f.Cost[a]
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", a, c["rollout_s"], c["analysis_s"], c["rescore_s"], c["update_s"], c["publish_s"], c["iteration_s"], c["analysis_tokens"])
	}
	if f.CostRatio > 0 {
		fmt.Fprintf(&b, "\nSEED / GRPO time per iteration: **%.2f**.\n", f.CostRatio)
	}
	if len(f.Diagnostics) > 0 {
		b.WriteString("\n## T6 distillation diagnostics (mean over iterations)\n\n| method | trajectories with a skill | analyzer answers parsed | gate σ(βΔ) | tokens with Δ>0 | mean Δ (nats) | OPD loss | decision tokens (p<0.9) | their gate | their Δ>0 | their mean Δ | their mean Δ, A>0 | their mean Δ, A<0 |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, a := range slices.Sorted(maps.Keys(f.Diagnostics)) {
			d := f.Diagnostics[a]
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", a, pctStat(d["skill_share"]), pctStat(d["skill_parse_ok"]), d["gate_mean"].fixed(2), pctStat(d["positive_shift"]), d["mean_shift"].fixed(3), d["opd_loss"].fixed(3),
				pctStat(d["decision_share"]), d["decision_gate_mean"].fixed(2), pctStat(d["decision_positive_shift"]), d["decision_mean_shift"].fixed(3), d["decision_mean_shift_pos_adv"].fixed(3), d["decision_mean_shift_neg_adv"].fixed(3))
		}
		b.WriteString("\nReading it: Δ = ℓᵀ − ℓold is how much the skill in context changes the log-prob of each sampled token. A gate near 0.50 with Δ > 0 on about half the tokens and a mean Δ near 0 means the skills barely move the policy — the distillation term is then noise of weight λ, and SEED can only match GRPO. A strong teacher shows Δ far from 0 on many tokens (the gate spread towards 0 and 1). A nearly deterministic policy gives its sampled tokens ℓ ≈ 0, where Δ cannot be positive and the gate stays at 0.5 whatever the skill says; the decision columns keep only the tokens the policy was unsure of (p < 0.9), where a teacher can show what it endorses; split by the trajectory's advantage, a teacher that knows what went right raises the decisions of trajectories that beat their group (A>0) more than the others' (A<0), while a context that moves every decision alike — as a skill from another episode (random-skill) can — shows no gap (— where the runs predate these figures).\n")
	}
	if len(f.Exploration) > 0 {
		b.WriteString("\n## T7 exploration at the first decision (training rollouts, first and last iteration)\n\n| method | first-action agreement, first | last | rollout success %, first | last |\n|---|---|---|---|---|\n")
		for _, a := range slices.Sorted(maps.Keys(f.Exploration)) {
			e := f.Exploration[a]
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", a, e["agreement_first"].fixed(2), e["agreement_last"].fixed(2), e["success_first"].fixed(1), e["success_last"].fixed(1))
		}
		b.WriteString("\nReading it: first-action agreement is the share of a task's G samples that open with the task's most common first action (1: one opening per task). GRPO can only prefer openings it sampled, and SEED's distillation loss is on sampled tokens, so a teacher that knows a better opening (the hindsight skill names where the object was) cannot teach it unless the policy sometimes samples it. Agreement near 1 means whatever the skills know about where to go first stays out of reach.\n")
	}
	if len(f.Sweep) > 0 {
		fmt.Fprintf(&b, "\n## T8 λ and β sweep (SEED, all the training tasks, seed %d)\n\n| λ | β | eval-seen | eval-unseen | − GRPO@100%%, same seed (95%% CI over tasks) | gate σ(βΔ) | decision mean Δ | OPD loss |\n|---|---|---|---|---|---|---|---|\n", f.Sweep[0].Seed)
		for _, r := range f.Sweep {
			ci := "—"
			if r.VsGRPO != nil {
				ci = r.VsGRPO.String()
			}
			mark := ""
			if r.Base {
				mark = " (base)"
			}
			fmt.Fprintf(&b, "| %g%s | %g | %.1f | %.1f | %s | %.2f | %.3f | %.3f |\n", r.Lambda, mark, r.Beta, r.Seen, r.Unseen, ci, r.Gate, r.DecisionShift, r.OPDLoss)
		}
		b.WriteString("\nReading it: one seed, so a row's interval covers the eval tasks' noise, not the seed's (three seeds of the base spread by about ±2 points on this testbed); a setting is worth running over three seeds only if it stands out by more than that.\n")
	}
	if len(f.Skipped) > 0 {
		b.WriteString("\nNot run or unfinished: " + strings.Join(f.Skipped, "; ") + "\n")
	}
	b.WriteString("\n![learning curves](learning_curves.png)\n![success vs data share](data_share.png)\n")
	if err := os.WriteFile(filepath.Join(out, "results.md"), []byte(b.String()), 0o644); err != nil {
		return err
	}
	js, _ := json.MarshalIndent(f, "", "  ")
	if err := os.WriteFile(filepath.Join(out, "figures.json"), append(js, '\n'), 0o644); err != nil {
		return err
	}
	return writePlots(out, spec, outs, f)
}

// writePlots draws learning curves (rollout success per iteration, mean
// over seeds with the min–max band shaded) and success against data share.
func writePlots(out string, spec Spec, outs []Outcome, f Figures) error {
	curves := plot.Chart{Title: "training rollout success by iteration (seeds shaded)", XLabel: "iteration", YLabel: "success %", YFromZero: true}
	for _, a := range spec.Algos {
		byIter := map[int][]float64{}
		for _, o := range outs {
			if o.Algo != a || o.DataShare != 1 || o.Swept() {
				continue
			}
			for _, l := range o.Metrics {
				if l.Kind == "iteration" {
					byIter[l.Iteration] = append(byIter[l.Iteration], 100*l.Values["success"])
				}
			}
		}
		if len(byIter) == 0 {
			continue
		}
		s := plot.Series{Name: a}
		iters := make([]int, 0, len(byIter))
		for k := range byIter {
			iters = append(iters, k)
		}
		sort.Ints(iters)
		for _, k := range iters {
			xs := byIter[k]
			st := stat(xs)
			lo, hi := xs[0], xs[0]
			for _, x := range xs {
				lo, hi = math.Min(lo, x), math.Max(hi, x)
			}
			s.X, s.Y, s.Lo, s.Hi = append(s.X, float64(k)), append(s.Y, st.Mean), append(s.Lo, lo), append(s.Hi, hi)
		}
		curves.Series = append(curves.Series, s)
	}
	if err := curves.PNG(filepath.Join(out, "learning_curves.png"), 800, 450); err != nil {
		return err
	}
	ds := plot.Chart{Title: "eval-seen success vs share of training tasks", XLabel: "share of training tasks (%)", YLabel: "success %", YFromZero: true}
	for _, a := range compared {
		s := plot.Series{Name: a}
		keys := slices.Sorted(maps.Keys(f.ShareSeen[a]))
		sort.Slice(keys, func(i, j int) bool { return pct(keys[i]) < pct(keys[j]) })
		for _, k := range keys {
			st := f.ShareSeen[a][k]
			s.X, s.Y = append(s.X, pct(k)), append(s.Y, st.Mean)
			s.Lo, s.Hi = append(s.Lo, st.Mean-st.Std), append(s.Hi, st.Mean+st.Std)
		}
		if len(s.X) > 0 {
			ds.Series = append(ds.Series, s)
		}
	}
	return ds.PNG(filepath.Join(out, "data_share.png"), 800, 450)
}
