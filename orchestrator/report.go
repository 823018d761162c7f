package orchestrator

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/seedctl/seedctl/internal/plot"
)

// WriteReport writes dir/report: learning curves (PNG), a results table
// (Markdown) and the HTML page (index.html) from metrics.jsonl and
// state.json.
func WriteReport(dir string) error {
	d := runDir(dir)
	lines, st, cfg, err := readRun(d)
	if err != nil {
		return err
	}
	var it, ret, gate, pos []float64
	for _, l := range lines {
		if l.Kind == "iteration" {
			it = append(it, float64(l.Iteration))
			ret = append(ret, l.Values["mean_return"])
			gate = append(gate, l.Values["gate_mean"])
			pos = append(pos, l.Values["positive_shift"])
		}
	}
	ch := successChart(lines, cfg)
	if err := ch.PNG(filepath.Join(d.report(), "learning_curve.png"), 800, 450); err != nil {
		return err
	}
	if len(it) > 0 {
		rc := plot.Chart{Title: "mean episode return of training rollouts (success − invalid-action penalties)", XLabel: "iteration", YLabel: "return",
			Series: []plot.Series{{Name: "mean return", X: it, Y: ret}}}
		if err := rc.PNG(filepath.Join(d.report(), "return.png"), 800, 450); err != nil {
			return err
		}
	}
	if cfg.Distills() && len(it) > 0 {
		g := plot.Chart{Title: "distillation: gate mean and share of tokens with teacher shift > 0", XLabel: "iteration", YMin: 0, YMax: 1,
			Series: []plot.Series{{Name: "gate mean", X: it, Y: gate}, {Name: "share Δ>0", X: it, Y: pos}}}
		if err := g.PNG(filepath.Join(d.report(), "distillation.png"), 800, 450); err != nil {
			return err
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# Run %s\n\n", filepath.Base(dir))
	fmt.Fprintf(&b, "algo `%s`, env `%s`, model `%s` (%s), seed %d, %d iterations × %d tasks × %d trajectories, data share %.0f%%\n\n",
		cfg.Algo, cfg.Env.Name, cfg.Model, st.baseName(), cfg.Seed, st.Iteration, cfg.TasksPerIteration, cfg.Rollout.GroupSize, 100*cfg.DataShare)
	fmt.Fprintf(&b, "%s.\n\n", cfg.EvalProtocol())
	b.WriteString("| policy | eval-seen success | eval-unseen success | episodes per split |\n|---|---|---|---|\n")
	for _, row := range []struct {
		name string
		ep   *EvalPoint
	}{{"base", st.BaseEval}, {"trained", st.FinalEval}} {
		if row.ep != nil {
			fmt.Fprintf(&b, "| %s | %.1f%% | %.1f%% | %d |\n", row.name, 100*row.ep.Seen, 100*row.ep.Unseen, row.ep.Episodes)
		}
	}
	if st.BaseEval != nil && st.FinalEval != nil && st.FinalEval.SampledTemperature > 0 {
		fmt.Fprintf(&b, "\nSampled at T=%g (eval_seen, one sample per task): base %.1f%%, trained %.1f%%.\n",
			st.FinalEval.SampledTemperature, 100*st.BaseEval.SeenSampled, 100*st.FinalEval.SeenSampled)
	}
	if st.BaseEval != nil && st.FinalEval != nil && len(st.FinalEval.UnseenByFamily) > 0 {
		b.WriteString("\n## eval-unseen success per family\n\n| family | base | trained |\n|---|---|---|\n")
		fams := make([]string, 0)
		for f := range st.FinalEval.UnseenByFamily {
			fams = append(fams, f)
		}
		sort.Strings(fams)
		for _, f := range fams {
			fmt.Fprintf(&b, "| %s | %.1f%% | %.1f%% |\n", f, 100*st.BaseEval.UnseenByFamily[f], 100*st.FinalEval.UnseenByFamily[f])
		}
	}
	if len(it) > 0 {
		b.WriteString("\n## iterations\n\n| iteration | rollout success | return | skills | gate mean | Δ>0 | loss | KL | time (s) |\n|---|---|---|---|---|---|---|---|---|\n")
		for _, l := range lines {
			if l.Kind != "iteration" {
				continue
			}
			v := l.Values
			fmt.Fprintf(&b, "| %d | %.1f%% | %.3f | %.0f%% | %.3f | %.0f%% | %.4f | %.5f | %.0f |\n", l.Iteration, 100*v["success"], v["mean_return"],
				100*v["skill_share"], v["gate_mean"], 100*v["positive_shift"], v["loss"], v["kl"], v["iteration_s"])
		}
	}
	b.WriteString("\n![learning curve](learning_curve.png)\n")
	if len(it) > 0 {
		b.WriteString("![mean return](return.png)\n")
	}
	if err := writeAtomic(filepath.Join(d.report(), "results.md"), []byte(b.String())); err != nil {
		return err
	}
	return writeHTMLReport(d, lines, st, cfg)
}

// successChart is the success curve of a run's report: the training
// rollouts' success per iteration and each eval split's.
func successChart(lines []MetricsLine, cfg Config) plot.Chart {
	train := plot.Series{Name: "train rollouts"}
	evals := map[string]*plot.Series{}
	for _, l := range lines {
		switch l.Kind {
		case "iteration":
			train.X, train.Y = append(train.X, float64(l.Iteration)), append(train.Y, 100*l.Values["success"])
		case "eval":
			s := evals[l.Split]
			if s == nil {
				s = &plot.Series{Name: "eval " + l.Split}
				evals[l.Split] = s
			}
			s.X, s.Y = append(s.X, float64(l.Iteration)), append(s.Y, 100*l.Values["success"])
		}
	}
	ch := plot.Chart{Title: fmt.Sprintf("%s on %s: success (%%)", cfg.Algo, cfg.Env.Name), XLabel: "iteration", YLabel: "success %", YFromZero: true}
	if len(train.X) > 0 {
		ch.Series = append(ch.Series, train)
	}
	for _, split := range slices.Sorted(maps.Keys(evals)) {
		ch.Series = append(ch.Series, *evals[split])
	}
	return ch
}

// readRun reads what the reports are made from: the metrics of the
// finished iterations (a killed run may have written lines of the one it
// did not finish), the state and the config of the run in d.
func readRun(d runDir) ([]MetricsLine, *State, Config, error) {
	lines, err := ReadMetrics(d.metrics())
	if err != nil {
		return nil, nil, Config{}, err
	}
	st, err := readState(d)
	if err != nil {
		return nil, nil, Config{}, err
	}
	cfg, err := Load(d.config())
	if err != nil {
		return nil, nil, Config{}, err
	}
	lines = slices.DeleteFunc(lines, func(l MetricsLine) bool { return l.Iteration > st.Iteration })
	return lines, st, cfg, nil
}
