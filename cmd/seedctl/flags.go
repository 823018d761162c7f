package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/seedctl/seedctl/trainer"
)

// checkModelFlag refuses a checkpoint argument that is not a Hugging Face
// checkpoint folder, naming it (what: "--model", "DIR") and what to pass.
func checkModelFlag(what, dir string) error {
	if dir == "" {
		return nil
	}
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("%s %s: no such folder; pass a Hugging Face checkpoint folder (config.json and *.safetensors), e.g. one written by `seedctl model init` or `seedctl model bootstrap`, or a run's runs/NAME/checkpoints/iter-K", what, dir)
	case err != nil:
		return fmt.Errorf("%s %s: %w", what, dir, err)
	case !st.IsDir():
		return fmt.Errorf("%s %s: a file, not a checkpoint folder; pass the folder that holds config.json", what, dir)
	}
	if _, err := os.Stat(filepath.Join(dir, "config.json")); err != nil {
		return fmt.Errorf("%s %s: no config.json there, so not a Hugging Face checkpoint folder; pass the folder that holds config.json and the *.safetensors files", what, dir)
	}
	return nil
}

// checkDeviceFlag refuses a --device the trainer cannot use here.
func checkDeviceFlag(name string) error {
	if err := trainer.CheckDevice(name); err != nil {
		return fmt.Errorf("--device %s: %w", name, err)
	}
	return nil
}

// checkRunFolder refuses a --resume or report argument that is not a run
// folder (config.json and state.json, written by `seedctl run`).
func checkRunFolder(what, dir string) error {
	for _, f := range []string{"config.json", "state.json"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			return fmt.Errorf("%s %s: not a run folder (no %s); run folders are runs/NAME, under the config's runs_dir or --runs-dir", what, dir, f)
		}
	}
	return nil
}

// runFlagKeys maps each of run's config-overriding flags to the config
// key whose validation message names it.
var runFlagKeys = []struct{ flag, key string }{
	{"algo", "algo "}, {"iterations", "iterations "}, {"tasks", "tasks_per_iteration "}, {"group", "group_size "},
	{"data-share", "data_share "}, {"train-tasks", "train_tasks "}, {"eval-episodes", "eval.episodes "}, {"eval-every", "eval.every "},
	{"plateau-patience", "plateau_patience "}, {"stage1-episodes", "stage1.episodes "}, {"stage1-held-out", "stage1.held_out "}, {"lr", "lr "}, {"max-steps", "max_steps "},
	{"lambda", "lambda "}, {"beta", "beta "},
	{"name", "name "}, {"model", "model "},
}

// withRunFlag adds to a config validation error the flag that set the
// offending value, when one did: a user who typed --tasks 0 reads
// "(set by --tasks)" rather than a config key they never wrote.
func withRunFlag(c *cli.Context, err error) error {
	msg := err.Error()
	for _, fk := range runFlagKeys {
		if c.IsSet(fk.flag) && strings.Contains(msg, fk.key) {
			return fmt.Errorf("%w (set by --%s)", err, fk.flag)
		}
	}
	return err
}

// addFlagChecks makes every command that takes --model or --device check
// them before it starts work (a wrong device found after a base eval of
// several minutes, or a missing checkpoint reported as a missing
// config.json, is friction a user should not meet).
func addFlagChecks(prefix string, cs []*cli.Command) {
	for _, c := range cs {
		path := strings.TrimSpace(prefix + " " + c.Name)
		names := map[string]bool{}
		for _, f := range c.Flags {
			for _, n := range f.Names() {
				names[n] = true
			}
		}
		if names["model"] || names["device"] {
			prev := c.Before
			c.Before = func(ctx *cli.Context) error {
				if prev != nil {
					if err := prev(ctx); err != nil {
						return err
					}
				}
				if names["model"] && ctx.IsSet("model") {
					if err := checkModelFlag("--model", ctx.String("model")); err != nil {
						return cli.Exit(path+": "+err.Error(), 2)
					}
				}
				if names["device"] {
					if err := checkDeviceFlag(ctx.String("device")); err != nil {
						return cli.Exit(path+": "+err.Error(), 2)
					}
				}
				return nil
			}
		}
		addFlagChecks(path, c.Subcommands)
	}
}
