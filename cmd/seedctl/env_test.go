package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestEnvCommands(t *testing.T) {
	out, err := runApp(t, "env", "list")
	if err != nil || !strings.Contains(out, "household") || !strings.Contains(out, "pick_heat_then_place") {
		t.Fatalf("env list: %v\n%s", err, out)
	}
	out, err = runApp(t, "env", "play", "--env", "household", "--split", "unseen", "--task", "7", "--expert")
	if err != nil || !strings.Contains(out, "Episode over: solved") {
		t.Fatalf("env play --expert: %v\n%s", err, out)
	}

	// --env-opt reaches the environment: with a placement prior the same
	// task (same task line) starts with its objects elsewhere.
	prior, err := runApp(t, "env", "play", "--task", "3", "--expert", "--env-opt", "placement_prior=1")
	if err != nil || !strings.Contains(prior, "Episode over: solved") {
		t.Fatalf("env play --env-opt placement_prior=1: %v\n%s", err, prior)
	}
	plain, err := runApp(t, "env", "play", "--task", "3", "--expert")
	if err != nil {
		t.Fatal(err)
	}
	taskLine := func(s string) string {
		_, after, _ := strings.Cut(s, "Your task is to: ")
		line, _, _ := strings.Cut(after, "\n")
		return line
	}
	if taskLine(prior) == "" || taskLine(prior) != taskLine(plain) || prior == plain {
		t.Errorf("placement prior: task lines %q and %q, transcripts equal: %v", taskLine(prior), taskLine(plain), prior == plain)
	}

	// A person typing: an action by number, one by text, garbage, then EOF.
	app := newApp()
	var buf bytes.Buffer
	app.Writer = &buf
	app.Reader = strings.NewReader("1\ninventory\nxyzzy\n")
	if err := app.Run([]string{"seedctl", "env", "play", "--task", "0"}); err != nil {
		t.Fatal(err)
	}
	got := buf.String()
	for _, want := range []string{"Your task is to:", "Admissible actions:", "You arrive at", "You are not carrying anything.", "Nothing happens.", "(input ended)"} {
		if !strings.Contains(got, want) {
			t.Errorf("play transcript lacks %q:\n%s", want, got)
		}
	}
	for _, bad := range [][]string{
		{"env", "play", "--env", "chess"},
		{"env", "play", "--split", "test"},
		{"env", "play", "--task", "-1"},
		{"env", "play", "--max-steps", "-3", "--task", "1"},
		{"env", "play", "--env-opt", "placement_prior", "--task", "1"},
		{"env", "play", "--env-opt", "placement_prior=often", "--task", "1"},
		{"env", "play", "--env-opt", "colour=red", "--task", "1"},
	} {
		if _, err := runApp(t, bad...); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}
