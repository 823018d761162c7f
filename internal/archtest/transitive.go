package archtest

import (
	"bytes"
	"fmt"
	"os/exec"
	"sort"
	"strings"
)

// Heavy lists the folders whose packages may link libtorch, directly or
// through others: the trainer, the embedded server built on it, the
// base-model builder and the process's assembly (cmd). Every other package
// of the module must not reach gotch or the trainer through any chain of
// imports (tests aside), so it builds with CGO_ENABLED=0 and can be listed
// and vetted without the prepared libtorch.
var Heavy = []string{"trainer", "learner", "inference/server", "basemodel", "cmd", "third_party"}

// heavyTargets are the imports a light package must not reach.
func heavyTarget(module, imp string) bool {
	return imp == "github.com/sugarme/gotch" || strings.HasPrefix(imp, "github.com/sugarme/gotch/") ||
		imp == module+"/trainer" || strings.HasPrefix(imp, module+"/trainer/")
}

// Graph is the import graph of a module and its dependencies: package →
// its direct imports (non-test).
type Graph map[string][]string

// LoadGraph reads the graph with `go list -deps` in root.
func LoadGraph(root string) (Graph, error) {
	cmd := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}\t{{join .Imports \" \"}}", "./...")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list -deps in %s: %w: %s", root, err, stderr.String())
	}
	g := Graph{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, imps, _ := strings.Cut(line, "\t")
		g[pkg] = strings.Fields(imps)
	}
	return g, nil
}

// CheckTransitive returns, for each package of module outside Heavy, the
// first chain of imports by which it reaches gotch or the trainer.
func CheckTransitive(module string, g Graph) []Violation {
	var pkgs []string
	for p := range g {
		if p == module || strings.HasPrefix(p, module+"/") {
			pkgs = append(pkgs, p)
		}
	}
	sort.Strings(pkgs)
	var out []Violation
	for _, p := range pkgs {
		rel := strings.TrimPrefix(strings.TrimPrefix(p, module), "/")
		heavy := false
		for _, h := range Heavy {
			heavy = heavy || under(rel, h)
		}
		if heavy {
			continue
		}
		if chain := pathTo(g, p, func(imp string) bool { return heavyTarget(module, imp) }); chain != nil {
			for i := range chain {
				chain[i] = strings.TrimPrefix(strings.TrimPrefix(chain[i], module), "/")
			}
			out = append(out, Violation{File: rel, Import: chain[len(chain)-1],
				Reason: fmt.Sprintf("links libtorch through %s; only %s may (reach the model through an interface and let cmd assemble it)", strings.Join(chain, " → "), strings.Join(Heavy, ", "))})
		}
	}
	return out
}

// pathTo is the shortest import chain from start to a package for which
// target holds (nil: none).
func pathTo(g Graph, start string, target func(string) bool) []string {
	prev := map[string]string{start: ""}
	queue := []string{start}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, imp := range g[p] {
			if _, seen := prev[imp]; seen {
				continue
			}
			prev[imp] = p
			if target(imp) {
				chain := []string{imp}
				for q := p; q != ""; q = prev[q] {
					chain = append([]string{q}, chain...)
				}
				return chain
			}
			queue = append(queue, imp)
		}
	}
	return nil
}
