package orchestrator

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/seedctl/seedctl/internal/plot"
)

// RunSummary is what CompareRuns shows of one run.
type RunSummary struct {
	Dir, Label, Algo string
	Iterations       int
	// Rollout is the training-rollout success of each finished iteration.
	Rollout    []float64
	Base, Last *EvalPoint // base and latest evaluation (nil when none)
	Seconds    float64
	Done       bool
}

// SummarizeRun reads a run directory (finished or not).
func SummarizeRun(dir string) (RunSummary, error) {
	d := runDir(dir)
	cfg, err := Load(d.config())
	if err != nil {
		return RunSummary{}, fmt.Errorf("summarizing run %s: %w", dir, err)
	}
	st, err := readState(d)
	if err != nil {
		return RunSummary{}, fmt.Errorf("summarizing run %s: %w", dir, err)
	}
	lines, err := ReadMetrics(d.metrics())
	if err != nil {
		return RunSummary{}, fmt.Errorf("summarizing run %s: %w", dir, err)
	}
	s := RunSummary{Dir: dir, Label: filepath.Base(filepath.Clean(dir)), Algo: cfg.Algo, Iterations: st.Iteration, Base: st.BaseEval,
		Last: st.FinalEval, Seconds: st.Seconds, Done: st.Done}
	if s.Last == nil {
		s.Last = lastEval(lines)
	}
	for _, l := range lines {
		if l.Kind == "iteration" && l.Iteration <= st.Iteration {
			s.Rollout = append(s.Rollout, l.Values["success"])
		}
	}
	return s, nil
}

// lastEval rebuilds the latest eval point after iteration 0 from metrics
// lines (a run still going has no final eval in its state).
func lastEval(lines []MetricsLine) *EvalPoint {
	var ep *EvalPoint
	for _, l := range lines {
		if l.Kind != "eval" || l.Iteration == 0 {
			continue
		}
		if ep == nil || l.Iteration > ep.Iteration {
			ep = &EvalPoint{Iteration: l.Iteration, Episodes: int(l.Values["episodes"])}
		}
		if l.Iteration == ep.Iteration {
			if l.Split == "eval_seen" {
				ep.Seen = l.Values["success"]
			} else {
				ep.Unseen = l.Values["success"]
			}
		}
	}
	return ep
}

// CompareRuns writes out/compare.md (one row per run: rollout success at the
// start and over its last three iterations, base and latest eval, time) and
// out/compare.png (the runs' training-rollout success by iteration).
func CompareRuns(dirs []string, out string) ([]RunSummary, error) {
	if len(dirs) == 0 {
		return nil, fmt.Errorf("comparing runs: no run directories given")
	}
	var runs []RunSummary
	for _, d := range dirs {
		s, err := SummarizeRun(d)
		if err != nil {
			return nil, err
		}
		runs = append(runs, s)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, fmt.Errorf("comparing runs: %w", err)
	}
	ch := plot.Chart{Title: "training-rollout success by iteration (%)", XLabel: "iteration", YLabel: "success %", YFromZero: true}
	for _, r := range runs {
		var x, y []float64
		for i, v := range r.Rollout {
			x, y = append(x, float64(i+1)), append(y, 100*v)
		}
		ch.Series = append(ch.Series, plot.Series{Name: r.Label + " (" + r.Algo + ")", X: x, Y: y})
	}
	if err := ch.PNG(filepath.Join(out, "compare.png"), 800, 450); err != nil {
		return nil, fmt.Errorf("comparing runs: %w", err)
	}
	var b strings.Builder
	b.WriteString("# Runs compared\n\nSuccess in %. Rollouts are the training tasks, sampled; evals are greedy on eval-seen / eval-unseen.\n\n")
	b.WriteString("| run | algo | iterations | rollout, first | rollout, last 3 | eval-seen base → latest | eval-unseen base → latest | eval tasks | time |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range runs {
		first, last := "—", "—"
		if n := len(r.Rollout); n > 0 {
			first = fmt.Sprintf("%.1f", 100*r.Rollout[0])
			k := min(3, n)
			sum := 0.0
			for _, v := range r.Rollout[n-k:] {
				sum += v
			}
			last = fmt.Sprintf("%.1f", 100*sum/float64(k))
		}
		seen, unseen, eps := "—", "—", "—"
		if r.Base != nil {
			seen, unseen, eps = fmt.Sprintf("%.1f → ", 100*r.Base.Seen), fmt.Sprintf("%.1f → ", 100*r.Base.Unseen), fmt.Sprint(r.Base.Episodes)
			if r.Last != nil && r.Last.Iteration > 0 {
				seen += fmt.Sprintf("%.1f", 100*r.Last.Seen)
				unseen += fmt.Sprintf("%.1f", 100*r.Last.Unseen)
			} else {
				seen, unseen = seen+"—", unseen+"—"
			}
		}
		status := ""
		if !r.Done {
			status = " (unfinished)"
		}
		fmt.Fprintf(&b, "| %s%s | %s | %d | %s | %s | %s | %s | %s | %s |\n", r.Label, status, r.Algo, r.Iterations, first, last, seen, unseen, eps,
			fmtDuration(r.Seconds))
	}
	b.WriteString("\n![training-rollout success](compare.png)\n")
	if err := writeAtomic(filepath.Join(out, "compare.md"), []byte(b.String())); err != nil {
		return nil, fmt.Errorf("comparing runs: %w", err)
	}
	return runs, nil
}

func fmtDuration(sec float64) string {
	m := int(sec/60 + 0.5)
	if m < 60 {
		return fmt.Sprintf("%d min", m)
	}
	return fmt.Sprintf("%dh%02d", m/60, m%60)
}
