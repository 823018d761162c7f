package archtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const mod = "github.com/seedctl/seedctl"

// TestRepositoryFollowsArchitecture is the architecture test: it fails when
// any Go file of this module imports across the rules of docs/architecture.md.
func TestRepositoryFollowsArchitecture(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	vs, err := Check(root)
	if err != nil {
		t.Fatalf("checking %s: %v", root, err)
	}
	for _, v := range vs {
		t.Errorf("architecture: %s", v)
	}
}

func TestCheckImportEdges(t *testing.T) {
	tests := []struct {
		pkg, imp string
		ok       bool
		reason   string // substring of the reason when forbidden
	}{
		{"trainer", "github.com/sugarme/gotch/ts", true, ""},
		{"trainer/model", "github.com/sugarme/gotch", true, ""},
		{"rollout", "github.com/sugarme/gotch/ts", false, "gotch may only be imported in trainer"},
		{"inference/server", "github.com/sugarme/gotch/nn", false, "gotch may only be imported in trainer"},
		{"cmd/seedctl", "github.com/sugarme/gotch", false, "gotch may only be imported in trainer"},
		{"inference", "github.com/sashabaranov/go-openai", true, ""},
		{"inference/vllm", "github.com/sashabaranov/go-openai", true, ""},
		{"skills", "github.com/sashabaranov/go-openai", false, "go-openai may only be imported in inference"},
		{"trainer", "github.com/sashabaranov/go-openai", false, "go-openai"},
		{"inference/server", mod + "/trainer", true, ""},
		{"inference", mod + "/trainer", false, "inference may import tokenizer, internal, not trainer"},
		{"inference/vllm", mod + "/trainer", false, "not trainer"},
		{"inference", mod + "/inference/server", true, ""},
		{"orchestrator", mod + "/trainer", false, "not trainer"},
		{"orchestrator", mod + "/rollout", true, ""},
		{"rollout", mod + "/skills", false, "not skills"},
		{"skills", mod + "/rollout", true, ""},
		{"envadapters/household", mod + "/envadapters", true, ""},
		{"envadapters", mod + "/inference", false, "not inference"},
		{"tokenizer", mod + "/trainer", false, "tokenizer may import internal, not trainer"},
		{"internal/plot", mod + "/trainer", false, "may import nothing of ours"},
		{"trainer", mod + "/tokenizer", true, ""},
		{"benchmarks", mod + "/orchestrator", true, ""},
		{"benchmarks", mod + "/trainer", false, "not trainer"},
		{"cmd/seedctl", mod + "/trainer", true, ""},
		{"newpkg", mod + "/trainer", false, "no row in the architecture table"},
		{"rollout", "fmt", true, ""},
		{"rollout", "github.com/rs/zerolog", true, ""},
	}
	for _, tt := range tests {
		ok, reason := CheckImport(mod, tt.pkg, tt.imp)
		if ok != tt.ok {
			t.Errorf("%s → %s: allowed=%v, want %v (reason %q)", tt.pkg, tt.imp, ok, tt.ok, reason)
			continue
		}
		if !ok && !strings.Contains(reason, tt.reason) {
			t.Errorf("%s → %s: reason %q, want it to mention %q", tt.pkg, tt.imp, reason, tt.reason)
		}
	}
}

// TestCheckFindsViolationInTemporaryModule builds a throwaway module where a
// rollout test file imports gotch and an inference file imports trainer, and
// expects exactly those two violations.
func TestCheckFindsViolationInTemporaryModule(t *testing.T) {
	root := t.TempDir()
	write := func(rel, body string) {
		t.Helper()
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module "+mod+"\n\ngo 1.26\n")
	write("trainer/t.go", "package trainer\nimport _ \"github.com/sugarme/gotch/ts\"\n")
	write("rollout/r.go", "package rollout\nimport _ \""+mod+"/inference\"\n")
	write("rollout/r_test.go", "package rollout\nimport _ \"github.com/sugarme/gotch\"\n")
	write("inference/i.go", "package inference\nimport _ \""+mod+"/trainer\"\n")
	write("inference/server/s.go", "package server\nimport _ \""+mod+"/trainer\"\n")
	// Skipped: hidden folders (the prepared gotch copy lives in .build) and testdata.
	write(".build/gotch/x.go", "package x\nimport _ \"github.com/sashabaranov/go-openai\"\n")
	write("skills/testdata/x.go", "package x\nimport _ \"github.com/sugarme/gotch\"\n")

	vs, err := Check(root)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, v := range vs {
		got = append(got, v.File+" -> "+v.Import)
	}
	want := []string{
		"inference/i.go -> " + mod + "/trainer",
		"rollout/r_test.go -> github.com/sugarme/gotch",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("violations:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestCheckReportsUnparsableFile(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "go.mod"), []byte("module x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "rollout"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "rollout", "bad.go"), []byte("package rollout\nimport (\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Check(root); err == nil || !strings.Contains(err.Error(), "bad.go") {
		t.Fatalf("Check on a broken file: err = %v, want one naming bad.go", err)
	}
}

// TestCheckTransitiveLayers: no package outside Heavy reaches libtorch
// through any chain of imports, and those packages build without cgo.
func TestCheckTransitiveLayers(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	g, err := LoadGraph(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range CheckTransitive(mod, g) {
		t.Errorf("architecture: %s", v)
	}
	var light []string
	for p := range g {
		rel, ok := strings.CutPrefix(p, mod+"/")
		if !ok {
			continue
		}
		heavy := false
		for _, h := range Heavy {
			heavy = heavy || under(rel, h)
		}
		if !heavy {
			light = append(light, "./"+rel)
		}
	}
	cmd := exec.Command("go", append([]string{"build"}, light...)...) // several packages: built, nothing written
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("the packages above the model do not build with CGO_ENABLED=0: %v\n%s", err, out)
	}
}

// The checker finds a chain through an intermediate package and names it.
func TestCheckTransitiveFindsTheChain(t *testing.T) {
	g := Graph{
		mod + "/orchestrator":     {mod + "/inference", "fmt"},
		mod + "/inference":        {mod + "/inference/server"},
		mod + "/inference/server": {mod + "/trainer"},
		mod + "/trainer":          {"github.com/sugarme/gotch/ts"},
		mod + "/rollout":          {mod + "/tokenizer"},
		mod + "/tokenizer":        {},
		mod + "/cmd/seedctl":      {mod + "/trainer"},
	}
	vs := CheckTransitive(mod, g)
	got := map[string]string{}
	for _, v := range vs {
		got[v.File] = v.Reason
	}
	if len(vs) != 2 || !strings.Contains(got["orchestrator"], "orchestrator → inference → inference/server → trainer") || got["inference"] == "" {
		t.Errorf("violations %v: want orchestrator (through inference, inference/server, trainer) and inference", vs)
	}
}
