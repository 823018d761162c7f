package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/seedctl/seedctl/orchestrator"
)

// Every run flag that writes a config key names a key the config has, of
// the flag's type, and writes it and nothing else; a misspelt key is an
// error naming it.
func TestRunConfigFlagsWriteTheirKeys(t *testing.T) {
	sample := map[string]any{"int": 7, "int64": int64(11), "float": 0.375, "string": "shuffled"}
	seen := map[string]bool{}
	for _, f := range runConfigFlags {
		if seen[f.Name] {
			t.Errorf("--%s is declared twice", f.Name)
		}
		seen[f.Name] = true
		cfg := orchestrator.Default()
		before := flatConfig(t, cfg)
		if err := setConfigKey(&cfg, f.Key, sample[f.Kind]); err != nil {
			t.Errorf("--%s: %v", f.Name, err)
			continue
		}
		after := flatConfig(t, cfg)
		want, _ := json.Marshal(sample[f.Kind])
		if got, _ := json.Marshal(after[f.Key]); string(got) != string(want) {
			t.Errorf("--%s wrote %s to %s, want %s", f.Name, got, f.Key, want)
		}
		for k, v := range after {
			b1, _ := json.Marshal(v)
			b0, _ := json.Marshal(before[k])
			if k != f.Key && string(b1) != string(b0) {
				t.Errorf("--%s also changed %s (%s → %s)", f.Name, k, b0, b1)
			}
		}
	}
	cfg := orchestrator.Default()
	if err := setConfigKey(&cfg, "rl.lamda", 0.1); err == nil || !strings.Contains(err.Error(), "rl.lamda") {
		t.Errorf("a misspelt key: %v", err)
	}
	if err := setConfigKey(&cfg, "rl.lambda", "a lot"); err == nil {
		t.Error("a string for a number was accepted")
	}
	// The flags the command line gets are the table's, beside run's own.
	names := map[string]int{}
	for _, fl := range runCommand().Flags {
		for _, n := range fl.Names() {
			names[n]++
		}
	}
	for _, f := range runConfigFlags {
		if names[f.Name] != 1 {
			t.Errorf("run has --%s %d times", f.Name, names[f.Name])
		}
	}
}

// flatConfig is cfg's JSON as dotted keys.
func flatConfig(t *testing.T, cfg orchestrator.Config) map[string]any {
	t.Helper()
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	json.Unmarshal(b, &m)
	out := map[string]any{}
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		if o, ok := v.(map[string]any); ok && prefix != "env.options" {
			for k, x := range o {
				p := k
				if prefix != "" {
					p = prefix + "." + k
				}
				walk(p, x)
			}
			return
		}
		out[prefix] = v
	}
	walk("", m)
	return out
}
