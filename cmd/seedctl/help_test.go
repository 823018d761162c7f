package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/seedctl/seedctl/tokenizer"
)

// Every command says in one line what it is for and shows one example; the
// example names only commands and flags that exist.
func TestEveryCommandHasUsageAndExample(t *testing.T) {
	app := newApp()
	global := map[string]bool{}
	for _, f := range app.Flags {
		for _, n := range f.Names() {
			global[n] = true
		}
	}
	paths := map[string]bool{"": true}
	var walk func(prefix string, cs []*cli.Command)
	walk = func(prefix string, cs []*cli.Command) {
		for _, c := range cs {
			if c.Hidden {
				continue // started by seedctl itself, not by users
			}
			path := strings.TrimSpace(prefix + " " + c.Name)
			paths[path] = true
			if c.Usage == "" || strings.Contains(c.Usage, "\n") {
				t.Errorf("seedctl %s: usage %q, want one line", path, c.Usage)
			}
			if !strings.Contains(c.Description, "Example:\n   seedctl ") {
				t.Errorf("seedctl %s: no example in its help", path)
			}
			walk(path, c.Subcommands)
		}
	}
	walk("", app.Commands)
	for path, ex := range commandExamples {
		if !paths[path] {
			t.Errorf("an example for %q, which is no command", path)
			continue
		}
		words := strings.Fields(strings.SplitN(ex, "#", 2)[0])
		if len(words) == 0 || words[0] != "seedctl" {
			t.Errorf("%q: the example %q does not start with seedctl", path, ex)
			continue
		}
		// Follow the subcommands the example names.
		cmds, resolved, flags := app.Commands, "", global
		for _, w := range words[1:] {
			if strings.HasPrefix(w, "-") {
				break
			}
			var next *cli.Command
			for _, c := range cmds {
				if c.Name == w {
					next = c
				}
			}
			if next == nil {
				break
			}
			resolved = strings.TrimSpace(resolved + " " + w)
			cmds = next.Subcommands
			flags = map[string]bool{}
			for _, f := range next.Flags {
				for _, n := range f.Names() {
					flags[n] = true
				}
			}
		}
		if resolved != path && !strings.HasPrefix(resolved, path+" ") && path != "" {
			t.Errorf("%q: the example runs %q", path, resolved)
		}
		for _, w := range words[1:] {
			if name, ok := strings.CutPrefix(w, "--"); ok {
				name, _, _ = strings.Cut(name, "=")
				if !flags[name] && !global[name] {
					t.Errorf("%q: the example's --%s is no flag of seedctl %s", path, name, resolved)
				}
			}
		}
	}
	out, err := runApp(t, "model", "init", "--help")
	if err != nil || !strings.Contains(out, "Example:") || !strings.Contains(out, commandExamples["model init"]) {
		t.Errorf("model init --help (%v) shows no example:\n%s", err, out)
	}
}

// Errors a user causes with a wrong flag or path name the flag (or the
// argument) and say what to pass, before any work starts.
func TestWrongFlagsNameTheFlagAndAFix(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "config.json")
	if err := os.WriteFile(file, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	runs := t.TempDir()
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"run", "--device", "tpu"}, []string{"--device tpu", "want cpu, cuda or cuda:N"}},
		{[]string{"run", "--resume", "/nonexistent"}, []string{"--resume /nonexistent", "not a run folder", "runs/NAME"}},
		{[]string{"run", "--config", "/nonexistent.json"}, []string{"--config /nonexistent.json", "configs/"}},
		{[]string{"run", "--runs-dir", runs, "--model", "/nonexistent"}, []string{"--model /nonexistent", "no such folder", "seedctl model init"}},
		{[]string{"run", "--runs-dir", runs, "--model", dir, "--tasks", "0"}, []string{"tasks_per_iteration 0", "(set by --tasks)"}},
		{[]string{"run", "--runs-dir", runs, "--model", dir, "--group", "1"}, []string{"group_size 1", "(set by --group)"}},
		{[]string{"run", "--runs-dir", runs, "--model", dir, "--lr", "-1"}, []string{"lr", "(set by --lr)"}},
		{[]string{"run", "--runs-dir", runs, "--model", dir, "--data-share", "2"}, []string{"data_share 2", "(set by --data-share)"}},
		{[]string{"run", "--runs-dir", runs, "--model", dir, "--train-tasks", "-1"}, []string{"train_tasks -1", "(set by --train-tasks)"}},
		{[]string{"run", "--runs-dir", runs, "--model", dir, "--algo", "ppo"}, []string{`algo "ppo"`, "grpo", "(set by --algo)"}},
		{[]string{"eval", "--model", file}, []string{"--model " + file, "a file, not a checkpoint folder"}},
		{[]string{"eval", "--model", dir, "--dtype", "float8"}, []string{"--dtype float8", "float32 or bfloat16"}},
		{[]string{"serve", "--model", t.TempDir()}, []string{"--model", "no config.json there"}},
		{[]string{"model", "inspect", "/nonexistent"}, []string{"DIR /nonexistent", "no such folder"}},
		{[]string{"model", "init", "--out", filepath.Join(dir, "m"), "--tokenizer", "/nonexistent"}, []string{"--tokenizer /nonexistent", "tokenizer.json"}},
		{[]string{"model", "init", "--out", filepath.Join(dir, "m"), "--tokenizer", dir, "--corpus", file}, []string{"--tokenizer and --corpus both given"}},
		{[]string{"model", "init", "--out", filepath.Join(dir, "m"), "--env", "nope"}, []string{`--env "nope"`, "known: household"}},
		{[]string{"analyze", "--in", "/nonexistent"}, []string{"--in /nonexistent", "seedctl collect --out"}},
		{[]string{"report", "/nonexistent"}, []string{"/nonexistent", "not a run folder"}},
		{[]string{"report"}, []string{"give at least one run directory", "seedctl report runs/"}},
	} {
		_, err := runApp(t, tc.args...)
		if err == nil {
			t.Errorf("seedctl %s: no error", strings.Join(tc.args, " "))
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("seedctl %s: %q lacks %q", strings.Join(tc.args, " "), err, w)
			}
		}
		if ec, ok := err.(cli.ExitCoder); !ok || ec.ExitCode() != 2 {
			t.Errorf("seedctl %s: exit code %v, want 2 (usage)", strings.Join(tc.args, " "), err)
		}
	}
	if entries, _ := os.ReadDir(runs); len(entries) > 0 {
		t.Errorf("a refused run left %d folders in --runs-dir", len(entries))
	}
}

// model init with neither --tokenizer nor --corpus trains a tokenizer on
// the household environment's episodes: a working default.
func TestModelInitDefaultTokenizer(t *testing.T) {
	out := filepath.Join(t.TempDir(), "m")
	if _, err := runApp(t, "model", "init", "--out", out, "--layers", "1"); err != nil {
		t.Fatal(err)
	}
	tok, _, err := tokenizer.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := tok.Encode("go to cabinet 1")
	if err != nil || tok.VocabSize() < 512 || len(ids) > 8 {
		t.Errorf("vocabulary %d; %q → %d tokens (%v): not trained on household's text", tok.VocabSize(), "go to cabinet 1", len(ids), err)
	}
	js, err := runApp(t, "model", "inspect", "--json", out)
	var rep inspectReport
	if err != nil || json.Unmarshal([]byte(js), &rep) != nil || len(rep.Problems) > 0 || rep.Tokenizer == nil || !rep.Tokenizer.ChatTemplate {
		t.Errorf("inspect (%v): %+v", err, rep)
	}
}
