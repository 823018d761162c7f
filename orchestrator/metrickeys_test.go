package orchestrator

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

var updateMetricsDoc = flag.Bool("update-metrics-doc", false, "rewrite docs/metrics.md")

// Every value the loop writes, under every algorithm and form the harness
// runs, is one of MetricKeys, on a line kind the catalogue names; the
// catalogue has no key twice; docs/metrics.md is the catalogue.
func TestMetricKeysCatalogueTheLoop(t *testing.T) {
	seen := map[string]bool{}
	for _, k := range MetricKeys {
		if seen[k.Key] {
			t.Errorf("%s is catalogued twice", k.Key)
		}
		seen[k.Key] = true
		if k.Meaning == "" || len(k.Kinds) == 0 || k.From == "" {
			t.Errorf("%s: incomplete %+v", k.Key, k)
		}
	}
	written := map[string]bool{}
	for _, set := range []func(*Config){
		func(c *Config) { c.Stage1.HeldOut, c.Eval.SampledTemperature = 3, 1 },
		func(c *Config) {
			c.Algo, c.RL.DistillForm, c.RL.DistillBaseline = AlgoSEEDNoSFT, "signed", DistillBaselineShuffled
		},
	} {
		h := newHarness(t)
		cfg := h.config(t, AlgoSEED)
		set(&cfg)
		res, err := Start(context.Background(), cfg, h.deps())
		if err != nil {
			t.Fatal(err)
		}
		lines, err := ReadMetrics(filepath.Join(res.Dir, "metrics.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range lines {
			if u := UnknownMetricKeys(l.Values); len(u) > 0 {
				t.Errorf("%s line %d writes keys MetricKeys lacks: %v", l.Kind, l.Iteration, u)
			}
			for k := range l.Values {
				written[k] = true
				if mk, ok := metricKeySet[k]; ok && !slices.Contains(mk.Kinds, l.Kind) {
					t.Errorf("%s is on a %s line; the catalogue says %v", k, l.Kind, mk.Kinds)
				}
			}
		}
	}
	// What the loop itself writes on every run is there.
	for _, k := range MetricKeys {
		if k.From == "loop" && !written[k.Key] {
			t.Errorf("%s is catalogued as the loop's but no run wrote it", k.Key)
		}
	}
	var b strings.Builder
	b.WriteString("# Metrics\n\nGenerated from `orchestrator.MetricKeys` by `go test ./orchestrator -run TestMetricKeysCatalogueTheLoop -update-metrics-doc`; a test fails when the loop writes a key this list lacks. Each line of a run's `metrics.jsonl` has a `kind` (`iteration`, `eval`, `eval_sampled`, `stage1`), an `iteration` and `values`; learner statistics are averaged over the iteration's optimizer steps.\n\n| key | lines | written by | meaning |\n|---|---|---|---|\n")
	for _, k := range MetricKeys {
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", k.Key, strings.Join(k.Kinds, ", "), k.From, k.Meaning)
	}
	path := filepath.Join("..", "docs", "metrics.md")
	if *updateMetricsDoc {
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if got, _ := os.ReadFile(path); string(got) != b.String() {
		t.Errorf("docs/metrics.md is stale: go test ./orchestrator -run TestMetricKeysCatalogueTheLoop -update-metrics-doc")
	}
}

// The report and the comparison read catalogued keys only (their reads by
// name, found in their source).
func TestReportsReadCataloguedMetrics(t *testing.T) {
	re := regexp.MustCompile(`(?:Values|\bv)\["([a-z_0-9.]+)"\]`)
	n := 0
	for _, f := range []string{"report.go", "compare.go", "htmlreport.go"} {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllStringSubmatch(string(src), -1) {
			n++
			if !IsMetricKey(m[1]) {
				t.Errorf("%s reads %q, which MetricKeys lacks", f, m[1])
			}
		}
	}
	if n < 10 {
		t.Errorf("found %d reads by name; the pattern no longer matches the code", n)
	}
}
