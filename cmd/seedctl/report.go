package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/seedctl/seedctl/benchmarks"
	"github.com/seedctl/seedctl/internal/atomicfile"
	"github.com/seedctl/seedctl/orchestrator"
)

func reportCommand() *cli.Command {
	return &cli.Command{
		Name:      "report",
		Usage:     "rewrite a run's report (report/index.html, results.md, PNG curves), or compare runs (training-rollout curves and evals side by side)",
		ArgsUsage: "RUN [RUN...]",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "out", Usage: "folder for compare.md and compare.png (default: compare/ next to the first run)"},
			&cli.StringSliceFlag{Name: "arm", Usage: "NAME=RUNS: finished runs of one arm, one per seed (a glob, quoted, e.g. 'grpo=runs/grpo-s*'; repeat per arm): prints each arm's gain with t-intervals over seeds and its difference with --ref on the same seeds (t-interval and paired bootstrap), then the update's instruments"},
			&cli.StringFlag{Name: "ref", Usage: "with --arm: the arm the others are compared with (default: the first)"},
		},
		Action: func(c *cli.Context) error {
			if arms := c.StringSlice("arm"); len(arms) > 0 {
				return reportArms(c, arms, c.String("ref"))
			}
			dirs := c.Args().Slice()
			if len(dirs) == 0 {
				return cli.Exit("report: give at least one run directory (runs/NAME), e.g. seedctl report runs/seed-default", 2)
			}
			for _, d := range dirs {
				if err := checkRunFolder("report: argument", d); err != nil {
					return cli.Exit(err.Error(), 2)
				}
			}
			if len(dirs) == 1 && c.String("out") == "" {
				if err := orchestrator.WriteReport(dirs[0]); err != nil {
					return cli.Exit("report: "+err.Error(), 1)
				}
				fmt.Fprintf(c.App.Writer, "wrote %s and %s\n", orchestrator.HTMLReportPath(dirs[0]), filepath.Join(dirs[0], "report", "results.md"))
				return nil
			}
			out := c.String("out")
			if out == "" {
				out = filepath.Join(filepath.Dir(filepath.Clean(dirs[0])), "compare")
			}
			runs, err := orchestrator.CompareRuns(dirs, out)
			if err != nil {
				return cli.Exit("report: "+err.Error(), 1)
			}
			fmt.Fprintf(c.App.Writer, "compared %d runs: %s\n", len(runs), filepath.Join(out, "compare.md"))
			return nil
		},
	}
}

// reportArms prints (and with --out writes as arms.md) the comparison of
// arms given as NAME=GLOB.
func reportArms(c *cli.Context, specs []string, ref string) error {
	var order []string
	dirs := map[string][]string{}
	for _, sp := range specs {
		name, glob, ok := strings.Cut(sp, "=")
		if !ok || name == "" || glob == "" {
			return cli.Exit(fmt.Sprintf("report: --arm %q: want NAME=RUNS (a run folder or a quoted glob)", sp), 2)
		}
		matches, err := filepath.Glob(glob)
		if err != nil || len(matches) == 0 {
			return cli.Exit(fmt.Sprintf("report: --arm %s: no run folder matches %q", name, glob), 2)
		}
		if _, seen := dirs[name]; !seen {
			order = append(order, name)
		}
		dirs[name] = append(dirs[name], matches...)
	}
	if ref == "" {
		ref = order[0]
	}
	var arms []benchmarks.Arm
	for _, name := range order {
		a, err := benchmarks.LoadArm(name, dirs[name])
		if err != nil {
			return cli.Exit("report: "+err.Error(), 1)
		}
		arms = append(arms, a)
	}
	md, err := benchmarks.ArmsMarkdown(arms, ref)
	if err != nil {
		return cli.Exit("report: "+err.Error(), 2)
	}
	fmt.Fprint(c.App.Writer, md)
	if out := c.String("out"); out != "" {
		if err := os.MkdirAll(out, 0o755); err != nil {
			return err
		}
		if err := atomicfile.WriteBytes(filepath.Join(out, "arms.md"), []byte(md)); err != nil {
			return cli.Exit("report: "+err.Error(), 1)
		}
	}
	return nil
}
