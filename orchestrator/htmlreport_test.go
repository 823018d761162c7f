package orchestrator

import (
	"bytes"
	"context"
	"fmt"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/seedctl/seedctl/skills"
)

// reportRun writes a run directory with every chart's metrics, evals, and a
// skill store holding hostile model output, and returns it.
func reportRun(t *testing.T) string {
	t.Helper()
	dir := fakeRun(t, t.TempDir(), "seed-s1", AlgoSEED, []float64{0.2, 0.25, 0.3}, &EvalPoint{Iteration: 3, Seen: 0.27, Unseen: 0.115, Episodes: 200,
		UnseenByFamily: map[string]float64{"pick_and_place": 0.235, "look_at_obj_in_light": 0.061}})
	d := runDir(dir)
	st, err := readState(d)
	if err != nil {
		t.Fatal(err)
	}
	st.BaseEval.UnseenByFamily = map[string]float64{"pick_and_place": 0.176, "look_at_obj_in_light": 0}
	if err := writeJSON(d.state(), st); err != nil {
		t.Fatal(err)
	}
	// Rewrite the metrics with the full set of keys.
	os.Remove(d.metrics())
	var lines []MetricsLine
	for k := 1; k <= 3; k++ {
		v := map[string]float64{"success": 0.1 * float64(k), "mean_return": 0.1 * float64(k), "loss": 0.01, "grpo_loss": 0.008, "opd_loss": 0.002,
			"kl": 0.001 * float64(k), "entropy": 0.07, "gate_mean": 0.48, "positive_shift": 0.46, "skill_share": 0.5, "flat_failing_share": 0.375,
			"clip_frac": 0.001, "grad_norm": 0.3, "rollout_s": 30, "analysis_s": 10, "rescore_s": 12, "update_s": 20, "publish_s": 1}
		lines = append(lines, MetricsLine{Kind: "iteration", Iteration: k, Time: time.Unix(1700000000+int64(k), 0), Values: v})
	}
	lines = append(lines,
		MetricsLine{Kind: "eval", Iteration: 0, Split: "eval_seen", Values: map[string]float64{"success": 0.21}},
		MetricsLine{Kind: "eval", Iteration: 3, Split: "eval_seen", Values: map[string]float64{"success": 0.27}},
		// An iteration the state never finished: left out.
		MetricsLine{Kind: "iteration", Iteration: 4, Values: map[string]float64{"success": 0.99, "rollout_s": 1}})
	if err := appendMetrics(d.metrics(), lines...); err != nil {
		t.Fatal(err)
	}
	var recs []skills.Record
	for i := 0; i < 12; i++ {
		r := skills.Record{TrajectoryID: fmt.Sprintf("it3-g%d-s%d", i/4, i%4), TaskID: fmt.Sprintf("household/train/%d", i/4), Iteration: 3, Won: i%2 == 0,
			Skill: &skills.Skill{EpisodeSummary: fmt.Sprintf("summary %d", i), EpisodeSkill: fmt.Sprintf("skill %d", i), StepSkills: map[int]string{2: "go to cabinet 1 first", 0: "look"}}}
		if i == 1 {
			r.Skill.EpisodeSkill = `<script>document.title="pwned"</script><img src=x onerror=alert(1)>`
		}
		if i == 3 {
			r.Skill, r.ParseError = nil, `missing "episode_skill"`
		}
		recs = append(recs, r)
	}
	if err := skills.WriteStore(d.skills(3), recs); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestHTMLReportContent(t *testing.T) {
	dir := reportRun(t)
	if err := WriteReport(dir); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(HTMLReportPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	for _, want := range []string{
		"<td>base</td><td>6.0%</td><td>4.0%</td><td>50</td>",
		"<td>trained</td><td>27.0%</td><td>11.5%</td><td>200</td>",
		"<td>pick_and_place</td><td>17.6%</td><td>23.5%</td>",
		"eval protocol: household",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if strings.Contains(page, "<script>document.title") || strings.Contains(page, "<img src=x") {
		t.Error("a skill's markup reached the page unescaped")
	}
	if !strings.Contains(page, "&lt;script&gt;document.title") {
		t.Error("the hostile skill is not shown (escaped)")
	}
	// One chart per metric group with data, the success chart and the
	// phase-time bars: success, return, losses, KL/entropy, gate,
	// skills/groups, clipping, grad norm, phases.
	if n := strings.Count(page, `<svg class="chart"`); n != 9 {
		t.Errorf("%d charts, want 9", n)
	}
	// Skills: 4 won and 4 failed at most, one per task first (tasks 0, 1,
	// 2 for each outcome), then filled up in store order.
	rows := regexp.MustCompile(`<td>(it3-g\d-s\d)</td>`).FindAllStringSubmatch(page, -1)
	var ids []string
	for _, r := range rows {
		ids = append(ids, r[1])
	}
	if got, want := strings.Join(ids, " "), "it3-g0-s0 it3-g0-s1 it3-g0-s2 it3-g0-s3 it3-g1-s0 it3-g1-s1 it3-g2-s0 it3-g2-s1"; got != want {
		t.Errorf("sampled skills %s, want %s", got, want)
	}
	if !strings.Contains(page, "step 0: look<br>step 2: go to cabinet 1 first") || !strings.Contains(page, "parse error: missing &#34;episode_skill&#34;") {
		t.Error("step skills in step order, or the parse error, missing")
	}
	if !strings.Contains(page, "12 analyses in skills/iter-3.jsonl, 11 parsed into skills") {
		t.Error("the skill counts are missing")
	}
	// The killed iteration's line (success 0.99) is not drawn or listed.
	if strings.Contains(page, "99.0 at 4") || strings.Contains(page, "<td>4</td>") {
		t.Error("an unfinished iteration's metrics are in the report")
	}
	md, err := os.ReadFile(filepath.Join(dir, "report", "results.md"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(md), "| 4 |") || !strings.Contains(string(md), "| 3 |") {
		t.Errorf("results.md lists the unfinished iteration 4, or not the finished 3:\n%s", md)
	}
	if strings.Contains(page, "http://") && !strings.Contains(page, `xmlns="http://www.w3.org/2000/svg"`) || strings.Contains(page, "<link") || strings.Contains(page, "src=\"http") {
		t.Error("the page refers to something outside itself")
	}
}

// TestHTMLReportRendersInChromium opens the page in a real headless
// browser (Debian's chromium, which ./setup.sh installs): its script marks
// the root element "ok" once every chart has data and has laid out, and
// the screenshot shows the charts' colours.
func TestHTMLReportRendersInChromium(t *testing.T) {
	browser := ""
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			browser = p
			break
		}
	}
	if browser == "" {
		if os.Getenv("SEEDCTL_REQUIRE_BROWSER") == "1" {
			t.Fatal("no chromium on PATH (./setup.sh installs Debian's chromium)")
		}
		t.Skip("no chromium on PATH; ./setup.sh installs it")
	}
	dir := reportRun(t)
	if err := WriteReport(dir); err != nil {
		t.Fatal(err)
	}
	url := "file://" + HTMLReportPath(dir)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	profile := t.TempDir()
	headless := func(args ...string) []byte {
		t.Helper()
		cmd := exec.CommandContext(ctx, browser, append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--user-data-dir=" + profile}, args...)...)
		cmd.Dir = profile
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s %v: %v\n%s", browser, args, err, stderr.String())
		}
		return out
	}
	mark := func(url string) (string, string) {
		t.Helper()
		dom := string(headless("--dump-dom", url))
		m := regexp.MustCompile(`<html[^>]*data-render="([^"]*)"`).FindStringSubmatch(dom)
		if m == nil {
			t.Fatalf("no render mark; the DOM begins:\n%.600s", dom)
		}
		return m[1], dom
	}
	got, dom := mark(url)
	if got != "ok" {
		t.Fatalf("render mark %q, want ok", got)
	}
	if !strings.Contains(dom, `data-charts="9"`) {
		t.Errorf("the browser counted other than 9 charts")
	}
	if strings.Contains(dom, "pwned") && !strings.Contains(dom, "&lt;script&gt;document.title") {
		t.Error("the hostile skill ran in the browser")
	}
	// The check can fail: a chart stripped of its points is reported.
	page, _ := os.ReadFile(HTMLReportPath(dir))
	first := strings.Index(string(page), "</svg>")
	stripped := regexp.MustCompile(`<circle class="point"[^>]*>.*?</circle>`).ReplaceAllString(string(page[:first]), "") + string(page[first:])
	broken := filepath.Join(profile, "broken.html")
	if err := os.WriteFile(broken, []byte(stripped), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, _ := mark("file://" + broken); !strings.HasPrefix(got, "error: chart without data") {
		t.Errorf("a chart without points: render mark %q, want an error", got)
	}
	shot := filepath.Join(profile, "shot.png")
	headless("--hide-scrollbars", "--window-size=1360,1800", "--screenshot="+shot, url)
	f, err := os.Open(shot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("the screenshot: %v", err)
	}
	// The first series' blue (#1f77b4) and the phase bars' colours are
	// painted: the SVG was drawn, not just parsed.
	blue := 0
	bnd := img.Bounds()
	for y := bnd.Min.Y; y < bnd.Max.Y; y += 2 {
		for x := bnd.Min.X; x < bnd.Max.X; x += 2 {
			r, g, b, _ := img.At(x, y).RGBA()
			if r>>8 == 0x1f && g>>8 == 0x77 && b>>8 == 0xb4 {
				blue++
			}
		}
	}
	if blue < 50 {
		t.Errorf("%d pixels of the first series' colour in the screenshot; the charts were not painted", blue)
	}
}
