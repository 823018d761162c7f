package orchestrator

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"reflect"
	"strings"
	"testing"
)

var updateDocs = flag.Bool("update", false, "rewrite docs/configuration.md from the config structs")

const configDocPath = "../docs/configuration.md"

// configDoc renders docs/configuration.md from config.go's struct fields:
// every JSON key with its type, the embedded default's value and the
// field's own comment, so the reference cannot drift from the code.
func configDoc(t *testing.T) []byte {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "config.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	structs := map[string]*ast.StructType{}
	docs := map[string]string{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok {
			continue
		}
		for _, sp := range g.Specs {
			if ts, ok := sp.(*ast.TypeSpec); ok {
				if st, ok := ts.Type.(*ast.StructType); ok {
					structs[ts.Name.Name] = st
					docs[ts.Name.Name] = strings.TrimSpace(g.Doc.Text())
				}
			}
		}
	}
	var defaults map[string]any
	b, _ := json.Marshal(Default())
	json.Unmarshal(b, &defaults)
	lookup := func(path []string) string {
		var v any = defaults
		for _, p := range path {
			m, ok := v.(map[string]any)
			if !ok {
				return ""
			}
			v = m[p]
		}
		if v == nil {
			return ""
		}
		js, _ := json.Marshal(v)
		return "`" + string(js) + "`"
	}
	oneLine := func(s string) string {
		s = strings.Join(strings.Fields(s), " ")
		return strings.ReplaceAll(s, "|", "\\|")
	}
	var out bytes.Buffer
	out.WriteString("# Run configuration reference\n\n")
	out.WriteString("Generated from the comments of `orchestrator/config.go` by `go test ./orchestrator -run TestConfigDoc -update`; a test fails when this file and the code disagree. A config file is JSON read over the embedded default (`seedctl config default` prints it); unknown keys are errors naming the key. `seedctl config check FILE` validates a file and prints its resolved recipe with the source of each value. The default column is the embedded default's value (the GPU presets in `configs/` state their own).\n")
	var walk func(title string, prefix []string, st *ast.StructType)
	walk = func(title string, prefix []string, st *ast.StructType) {
		type row struct{ key, typ, def, doc string }
		var rows []row
		type sub struct {
			title  string
			prefix []string
			st     *ast.StructType
		}
		var subs []sub
		for _, fld := range st.Fields.List {
			if fld.Tag == nil || len(fld.Names) == 0 {
				continue
			}
			tag := reflect.StructTag(strings.Trim(fld.Tag.Value, "`")).Get("json")
			name := strings.Split(tag, ",")[0]
			if name == "" || name == "-" {
				continue
			}
			doc := fld.Doc.Text()
			if doc == "" {
				doc = fld.Comment.Text()
			}
			path := append(append([]string{}, prefix...), name)
			key := strings.Join(path, ".")
			switch ty := fld.Type.(type) {
			case *ast.StructType:
				subs = append(subs, sub{key, path, ty})
				continue
			case *ast.Ident:
				if s, ok := structs[ty.Name]; ok {
					subs = append(subs, sub{key, path, s})
					continue
				}
			}
			typ := fmt.Sprint(fld.Type)
			switch ty := fld.Type.(type) {
			case *ast.ArrayType:
				typ = "list of " + fmt.Sprint(ty.Elt)
			case *ast.MapType:
				typ = fmt.Sprintf("map of %v to %v", ty.Key, ty.Value)
			}
			if typ == "Duration" {
				typ = "duration (\"30s\")"
			}
			rows = append(rows, row{key, typ, lookup(path), oneLine(doc)})
		}
		if len(rows) > 0 {
			fmt.Fprintf(&out, "\n## %s\n\n| key | type | default | meaning |\n|---|---|---|---|\n", title)
			for _, r := range rows {
				fmt.Fprintf(&out, "| `%s` | %s | %s | %s |\n", r.key, r.typ, r.def, r.doc)
			}
		}
		for _, s := range subs {
			walk("`"+s.title+"`", s.prefix, s.st)
		}
	}
	walk("Top level", nil, structs["Config"])
	return out.Bytes()
}

func TestConfigDoc(t *testing.T) {
	got := configDoc(t)
	if *updateDocs {
		if err := os.WriteFile(configDocPath, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(configDocPath)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("docs/configuration.md is stale (or missing: %v); run: go test ./orchestrator -run TestConfigDoc -update", err)
	}
}
