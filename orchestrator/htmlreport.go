package orchestrator

import (
	"bytes"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"maps"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/seedctl/seedctl/internal/plot"
	"github.com/seedctl/seedctl/skills"
)

// The HTML report: one self-contained page (inline CSS and SVG, no
// network, no external files) that a person opens to see how a run went.
// Everything model-written (skills, parse errors) is escaped by
// html/template; the charts are SVG built by internal/plot with escaped
// text. A small inline script marks the page's root element with
// data-render="ok" once every chart has laid out, or with the errors it
// met; tests read that mark from a headless browser.

// htmlReportName is the page's file name inside the run's report folder.
const htmlReportName = "index.html"

// HTMLReportPath is where a run's HTML report is written.
func HTMLReportPath(dir string) string { return filepath.Join(runDir(dir).report(), htmlReportName) }

// metricChart is one chart of per-iteration metrics.
type metricChart struct {
	title, ylabel string
	keys          []string // metrics.jsonl keys, one series each
	scale         float64  // multiplies the values (100 for shares shown in %)
}

var reportCharts = []metricChart{
	{title: "mean episode return of training rollouts", ylabel: "return", keys: []string{"mean_return"}, scale: 1},
	{title: "loss terms", ylabel: "loss", keys: []string{"loss", "grpo_loss", "opd_loss"}, scale: 1},
	{title: "KL to the reference and policy entropy", ylabel: "nats", keys: []string{"kl", "entropy"}, scale: 1},
	{title: "distillation: gate and share of tokens the teacher endorses", ylabel: "%", keys: []string{"gate_mean", "positive_shift", "decision_gate_mean", "decision_positive_shift"}, scale: 100},
	{title: "skills and groups", ylabel: "%", keys: []string{"skill_share", "skill_parse_ok", "flat_group_share", "flat_failing_share", "first_action_agreement"}, scale: 100},
	{title: "PPO clipping", ylabel: "% of tokens", keys: []string{"clip_frac", "dual_clip_frac"}, scale: 100},
	{title: "gradient norm (before clipping)", ylabel: "norm", keys: []string{"grad_norm"}, scale: 1},
}

// phaseKeys are the per-iteration phase times, stacked in the time chart.
var phaseKeys = []string{"rollout_s", "analysis_s", "rescore_s", "update_s", "publish_s"}

// samplesPerOutcome is how many skills of each outcome the page shows.
const samplesPerOutcome = 4

type reportPage struct {
	Name, Summary, Protocol string
	Evals                   []evalRow
	Families                []familyRow
	Charts                  []template.HTML
	SkillsFrom              string
	Skills                  []skillSample
	SkillCounts             string
	IterKeys                []string
	Iters                   []iterRow
}

type evalRow struct {
	Policy, Seen, Unseen string
	Episodes             int
}

type familyRow struct{ Family, Base, Trained string }

type skillSample struct {
	Trajectory, Task, Outcome, Summary, Skill, ParseError string
	Steps                                                 []string
	Won                                                   bool
}

type iterRow struct {
	Iteration int
	Values    []string
}

// WriteHTMLReport writes dir/report/index.html from the run's
// metrics.jsonl, state.json, config.json and skill stores.
func WriteHTMLReport(dir string) error {
	d := runDir(dir)
	lines, st, cfg, err := readRun(d)
	if err != nil {
		return err
	}
	return writeHTMLReport(d, lines, st, cfg)
}

func writeHTMLReport(d runDir, lines []MetricsLine, st *State, cfg Config) error {
	page := reportPage{
		Name: filepath.Base(filepath.Clean(string(d))),
		Summary: fmt.Sprintf("algo %s, env %s, model %s, seed %d, %d iterations × %d tasks × %d trajectories, data share %.0f%%",
			cfg.Algo, cfg.Env.Name, cfg.Model, cfg.Seed, st.Iteration, cfg.TasksPerIteration, cfg.Rollout.GroupSize, 100*cfg.DataShare),
		Protocol: cfg.EvalProtocol(),
	}
	pct := func(v float64) string { return fmt.Sprintf("%.1f%%", 100*v) }
	for _, row := range []struct {
		name string
		ep   *EvalPoint
	}{{"base", st.BaseEval}, {"trained", st.FinalEval}} {
		if row.ep != nil {
			page.Evals = append(page.Evals, evalRow{row.name, pct(row.ep.Seen), pct(row.ep.Unseen), row.ep.Episodes})
		}
	}
	if st.BaseEval != nil && st.FinalEval != nil {
		for _, f := range slices.Sorted(maps.Keys(st.FinalEval.UnseenByFamily)) {
			page.Families = append(page.Families, familyRow{f, pct(st.BaseEval.UnseenByFamily[f]), pct(st.FinalEval.UnseenByFamily[f])})
		}
	}

	var iters []MetricsLine
	for _, l := range lines {
		if l.Kind == "iteration" {
			iters = append(iters, l)
		}
	}
	series := func(key string, scale float64) (plot.Series, bool) {
		s := plot.Series{Name: key}
		for _, l := range iters {
			if v, ok := l.Values[key]; ok {
				s.X, s.Y = append(s.X, float64(l.Iteration)), append(s.Y, scale*v)
			}
		}
		return s, len(s.X) > 0
	}
	charts := []plot.Chart{successChart(lines, cfg)}
	for _, mc := range reportCharts {
		c := plot.Chart{Title: mc.title, XLabel: "iteration", YLabel: mc.ylabel}
		if mc.scale == 100 {
			c.YMin, c.YMax = 0, 100
		}
		for _, k := range mc.keys {
			if s, ok := series(k, mc.scale); ok {
				c.Series = append(c.Series, s)
			}
		}
		if len(c.Series) > 0 {
			charts = append(charts, c)
		}
	}
	for _, c := range charts {
		if len(c.Series) == 0 {
			continue
		}
		svg, err := c.SVG(640, 340)
		if err != nil {
			return fmt.Errorf("drawing %q: %w", c.Title, err)
		}
		page.Charts = append(page.Charts, template.HTML(svg))
	}
	if len(iters) > 0 {
		bars := plot.StackedBars{Title: "time per iteration, by phase", XLabel: "iteration", YLabel: "seconds"}
		for _, l := range iters {
			bars.X = append(bars.X, float64(l.Iteration))
		}
		for _, k := range phaseKeys {
			layer := plot.Stack{Name: strings.TrimSuffix(k, "_s")}
			seen := false
			for _, l := range iters {
				v, ok := l.Values[k]
				seen = seen || ok
				layer.Values = append(layer.Values, max(v, 0))
			}
			if seen {
				bars.Stacks = append(bars.Stacks, layer)
			}
		}
		if len(bars.Stacks) > 0 {
			svg, err := bars.SVG(640, 340)
			if err != nil {
				return fmt.Errorf("drawing the phase times: %w", err)
			}
			page.Charts = append(page.Charts, template.HTML(svg))
		}
		keys := map[string]bool{}
		for _, l := range iters {
			for k := range l.Values {
				keys[k] = true
			}
		}
		page.IterKeys = slices.Sorted(maps.Keys(keys))
		for _, l := range iters {
			row := iterRow{Iteration: l.Iteration}
			for _, k := range page.IterKeys {
				if v, ok := l.Values[k]; ok {
					row.Values = append(row.Values, fmt.Sprintf("%.4g", v))
				} else {
					row.Values = append(row.Values, "")
				}
			}
			page.Iters = append(page.Iters, row)
		}
	}
	if err := page.addSkills(d, st.Iteration); err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := reportTemplate.Execute(&buf, page); err != nil {
		return fmt.Errorf("writing the HTML report: %w", err)
	}
	return writeAtomic(filepath.Join(d.report(), htmlReportName), buf.Bytes())
}

// addSkills samples the latest skill store: up to samplesPerOutcome
// skills of won and of failed trajectories, in store order.
func (p *reportPage) addSkills(d runDir, last int) error {
	var recs []skills.Record
	for k := last; k >= 0; k-- {
		path := d.skills(k)
		if k == 0 {
			path = d.path("skills", "stage1.jsonl")
		}
		r, err := skills.ReadStore(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		recs, p.SkillsFrom = r, filepath.Join("skills", filepath.Base(path))
		break
	}
	// Up to samplesPerOutcome of each outcome, from as many tasks as
	// possible (a group's trajectories share their task): a first pass
	// takes one per task and outcome, a second fills up in store order.
	parsed := 0
	for _, r := range recs {
		if r.Skill != nil {
			parsed++
		}
	}
	taken := make([]bool, len(recs))
	count := map[bool]int{}
	for pass := 0; pass < 2; pass++ {
		seen := map[string]bool{}
		for i, r := range recs {
			key := fmt.Sprintf("%v/%s", r.Won, r.TaskID)
			if taken[i] || count[r.Won] >= samplesPerOutcome || (pass == 0 && seen[key]) {
				continue
			}
			seen[key], taken[i] = true, true
			count[r.Won]++
		}
	}
	for i, r := range recs {
		if !taken[i] {
			continue
		}
		s := skillSample{Trajectory: r.TrajectoryID, Task: r.TaskID, Won: r.Won, Outcome: "failed", ParseError: r.ParseError}
		if r.Won {
			s.Outcome = "won"
		}
		if r.Skill != nil {
			s.Summary, s.Skill = r.Skill.EpisodeSummary, r.Skill.EpisodeSkill
			steps := make([]int, 0, len(r.Skill.StepSkills))
			for k := range r.Skill.StepSkills {
				steps = append(steps, k)
			}
			sort.Ints(steps)
			for _, k := range steps {
				s.Steps = append(s.Steps, fmt.Sprintf("step %d: %s", k, r.Skill.StepSkills[k]))
			}
		} else if s.ParseError != "" {
			s.Skill = "(no skill: the analysis did not parse)"
		}
		p.Skills = append(p.Skills, s)
	}
	if len(recs) > 0 {
		p.SkillCounts = fmt.Sprintf("%d analyses in %s, %d parsed into skills", len(recs), p.SkillsFrom, parsed)
	}
	return nil
}

var reportTemplate = template.Must(template.New("report").Parse(`<!DOCTYPE html>
<html lang="en" data-render="pending">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>seedctl run {{.Name}}</title>
<style>
body { font-family: sans-serif; margin: 1.5em auto; max-width: 1340px; padding: 0 1em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 1.6em; }
.meta { color: #555; }
table { border-collapse: collapse; margin: 0.5em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.5em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
.charts { display: flex; flex-wrap: wrap; gap: 12px; }
.charts svg { border: 1px solid #e3e3e3; max-width: 100%; height: auto; }
.won { color: #1a7f37; font-weight: bold; } .failed { color: #b42318; font-weight: bold; }
.skills td { max-width: 34em; white-space: pre-wrap; }
.scroll { overflow-x: auto; }
</style>
</head>
<body>
<h1>Run {{.Name}}</h1>
<p class="meta">{{.Summary}}<br>{{.Protocol}}</p>
{{if .Evals}}<h2>Evaluation</h2>
<table id="evals"><tr><th>policy</th><th>eval-seen success</th><th>eval-unseen success</th><th>episodes per split</th></tr>
{{range .Evals}}<tr><td>{{.Policy}}</td><td>{{.Seen}}</td><td>{{.Unseen}}</td><td>{{.Episodes}}</td></tr>
{{end}}</table>
{{if .Families}}<table id="families"><tr><th>family (eval-unseen)</th><th>base</th><th>trained</th></tr>
{{range .Families}}<tr><td>{{.Family}}</td><td>{{.Base}}</td><td>{{.Trained}}</td></tr>
{{end}}</table>{{end}}{{end}}
<h2>Curves</h2>
<div class="charts">
{{range .Charts}}{{.}}
{{end}}</div>
<h2>Sample skills</h2>
{{if .Skills}}<p class="meta">{{.SkillCounts}}; up to {{len .Skills}} shown, won and failed trajectories.</p>
<table class="skills" id="skills"><tr><th>trajectory</th><th>task</th><th>outcome</th><th>summary</th><th>skill</th><th>step skills</th></tr>
{{range .Skills}}<tr><td>{{.Trajectory}}</td><td>{{.Task}}</td><td class="{{.Outcome}}">{{.Outcome}}</td><td>{{.Summary}}</td><td>{{.Skill}}{{if .ParseError}}<br><small>parse error: {{.ParseError}}</small>{{end}}</td><td>{{range .Steps}}{{.}}<br>{{end}}</td></tr>
{{end}}</table>
{{else}}<p class="meta">No skills were written in this run (a baseline without skills, or no iteration finished).</p>{{end}}
{{if .Iters}}<h2>Every iteration's metrics</h2>
<details><summary>{{len .Iters}} iterations × {{len .IterKeys}} metrics (metrics.jsonl)</summary>
<div class="scroll"><table id="iterations"><tr><th>iteration</th>{{range .IterKeys}}<th>{{.}}</th>{{end}}</tr>
{{range .Iters}}<tr><td>{{.Iteration}}</td>{{range .Values}}<td>{{.}}</td>{{end}}</tr>
{{end}}</table></div></details>{{end}}
<script>
(function () {
  var errors = [];
  function mark() {
    document.documentElement.setAttribute("data-render", errors.length ? "error: " + errors.join("; ") : "ok");
  }
  window.addEventListener("error", function (e) { errors.push(String(e.message)); mark(); });
  var charts = document.querySelectorAll("svg.chart");
  for (var i = 0; i < charts.length; i++) {
    var svg = charts[i], name = svg.getAttribute("aria-label");
    var marks = svg.querySelectorAll(".point, .bar");
    if (marks.length === 0) { errors.push("chart without data: " + name); continue; }
    var box = marks[0].getBBox();
    if (!(box.width > 0 && box.height >= 0)) { errors.push("chart not laid out: " + name); }
  }
  document.documentElement.setAttribute("data-charts", String(charts.length));
  mark();
})();
</script>
</body>
</html>
`))
