// Package archtest holds the import rules of docs/architecture.md (the architecture)
// and a checker that reads every Go file of the module and reports the
// imports that break them. Its test runs the checker on this repository, so
// `go test ./...` fails on a forbidden import.
package archtest

import (
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Rule says which of the module's own packages the packages under Dir may
// import, besides those under Dir itself. Dir is module-relative; the rule
// with the longest matching Dir applies.
type Rule struct {
	Dir     string
	MayUse  []string // module-relative folders; "*" means any
	Comment string
}

// ExternalRule confines an external module to some folders of ours.
type ExternalRule struct {
	ImportPrefix string
	OnlyIn       []string
	Why          string
}

// Rules is the architecture: docs/architecture.md's table. A new top-level package
// needs a row here before it can be built.
var Rules = []Rule{
	{Dir: "cmd", MayUse: []string{"*"}, Comment: "CLI and wiring"},
	{Dir: "orchestrator", MayUse: []string{"rollout", "skills", "envadapters", "inference", "internal"},
		Comment: "reaches the trainer through an interface it declares; cmd wires the implementation"},
	{Dir: "rollout", MayUse: []string{"envadapters", "inference", "tokenizer", "internal"}},
	{Dir: "skills", MayUse: []string{"rollout", "inference", "tokenizer", "envadapters", "internal"},
		Comment: "teacher contexts are token sequences (tokenizer); tasks are envadapters' small shared type"},
	{Dir: "envadapters", MayUse: []string{"internal"}},
	{Dir: "trainer", MayUse: []string{"tokenizer", "internal"}},
	{Dir: "inference", MayUse: []string{"tokenizer", "internal"}},
	{Dir: "inference/server", MayUse: []string{"inference", "trainer", "tokenizer", "internal"},
		Comment: "the embedded server reaches the model through trainer, never gotch"},
	{Dir: "tokenizer", MayUse: []string{"internal"}},
	{Dir: "benchmarks", MayUse: []string{"orchestrator", "internal"}},
	{Dir: "learner", MayUse: []string{"orchestrator", "trainer", "internal"},
		Comment: "the orchestrator's Learner over the trainer: one process, or ranks over c10d"},
	{Dir: "basemodel", MayUse: []string{"envadapters", "rollout", "skills", "tokenizer", "trainer", "inference", "internal"},
		Comment: "builds the tiny base policies: expert corpus (envadapters, rollout prompts, oracle skills), BPE (tokenizer), pre-training (trainer)"},
	{Dir: "internal", MayUse: nil, Comment: "small shared types and test helpers"},
}

// ExternalRules keep heavy or vendor-specific dependencies in one place.
var ExternalRules = []ExternalRule{
	{ImportPrefix: "github.com/sugarme/gotch", OnlyIn: []string{"trainer"},
		Why: "libtorch stays behind trainer's API"},
	{ImportPrefix: "github.com/sashabaranov/go-openai", OnlyIn: []string{"inference"},
		Why: "the OpenAI wire format stays behind inference's Backend"},
}

// Violation is one forbidden import.
type Violation struct {
	File   string // module-relative
	Import string
	Reason string
}

func (v Violation) String() string {
	return fmt.Sprintf("%s imports %q: %s", v.File, v.Import, v.Reason)
}

// under reports whether rel is dir or inside it.
func under(rel, dir string) bool {
	return rel == dir || strings.HasPrefix(rel, dir+"/")
}

func ruleFor(pkgDir string) (Rule, bool) {
	best, found := Rule{}, false
	for _, r := range Rules {
		if under(pkgDir, r.Dir) && len(r.Dir) >= len(best.Dir) {
			best, found = r, true
		}
	}
	return best, found
}

// sameTop reports whether two module-relative folders share a top-level folder.
func sameTop(a, b string) bool {
	ta, _, _ := strings.Cut(a, "/")
	tb, _, _ := strings.Cut(b, "/")
	return ta == tb
}

// CheckImport applies the rules to one import edge: a package in pkgDir
// (module-relative, "/"-separated) importing imp. module is the module path.
func CheckImport(module, pkgDir, imp string) (ok bool, reason string) {
	for _, er := range ExternalRules {
		if imp == er.ImportPrefix || strings.HasPrefix(imp, er.ImportPrefix+"/") {
			for _, d := range er.OnlyIn {
				if under(pkgDir, d) {
					return true, ""
				}
			}
			return false, fmt.Sprintf("%s may only be imported in %s (%s)", er.ImportPrefix, strings.Join(er.OnlyIn, ", "), er.Why)
		}
	}
	if imp != module && !strings.HasPrefix(imp, module+"/") {
		return true, ""
	}
	target := strings.TrimPrefix(strings.TrimPrefix(imp, module), "/")
	rule, found := ruleFor(pkgDir)
	if !found {
		return false, fmt.Sprintf("package %s has no row in the architecture table (internal/archtest.Rules); add one", pkgDir)
	}
	if sameTop(pkgDir, target) {
		// Packages of one top-level folder may use each other; a sub-folder's
		// own row (inference/server) only widens what that sub-folder reaches.
		return true, ""
	}
	for _, m := range rule.MayUse {
		if m == "*" || under(target, m) {
			return true, ""
		}
	}
	allowed := "nothing of ours"
	if len(rule.MayUse) > 0 {
		allowed = strings.Join(rule.MayUse, ", ")
	}
	return false, fmt.Sprintf("%s may import %s, not %s", rule.Dir, allowed, target)
}

// Check walks root (a module directory) and returns every forbidden import
// in its Go files, test files included. Hidden folders, testdata and vendor
// trees are skipped.
func Check(root string) ([]Violation, error) {
	module, err := modulePath(filepath.Join(root, "go.mod"))
	if err != nil {
		return nil, err
	}
	var out []Violation
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "vendor" || name == "node_modules") {
				return filepath.SkipDir
			}
			if path != root {
				if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
					return filepath.SkipDir // a nested module is not ours to check
				}
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return fmt.Errorf("reading imports of %s: %w", path, err)
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		pkgDir := filepath.ToSlash(filepath.Dir(rel))
		for _, is := range f.Imports {
			imp, err := strconv.Unquote(is.Path.Value)
			if err != nil {
				return fmt.Errorf("%s: bad import %s: %w", rel, is.Path.Value, err)
			}
			if pkgDir == "." {
				if strings.HasPrefix(imp, module) {
					out = append(out, Violation{File: rel, Import: imp, Reason: "the module root holds no package of the architecture"})
				}
				continue
			}
			if ok, why := CheckImport(module, pkgDir, imp); !ok {
				out = append(out, Violation{File: rel, Import: imp, Reason: why})
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("checking imports under %s: %w", root, err)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].File != out[j].File {
			return out[i].File < out[j].File
		}
		return out[i].Import < out[j].Import
	})
	return out, nil
}

func modulePath(goMod string) (string, error) {
	b, err := os.ReadFile(goMod)
	if err != nil {
		return "", fmt.Errorf("reading module path: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if rest, ok := strings.CutPrefix(line, "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`), nil
		}
	}
	return "", fmt.Errorf("reading module path: no module line in %s", goMod)
}
