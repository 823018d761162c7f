package main

import (
	"fmt"
	"path/filepath"

	"github.com/urfave/cli/v2"

	"github.com/seedctl/seedctl/orchestrator"
)

func reportCommand() *cli.Command {
	return &cli.Command{
		Name:      "report",
		Usage:     "rewrite a run's report (report/index.html, results.md, PNG curves), or compare runs (training-rollout curves and evals side by side)",
		ArgsUsage: "RUN [RUN...]",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "out", Usage: "folder for compare.md and compare.png (default: compare/ next to the first run)"},
		},
		Action: func(c *cli.Context) error {
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
