package jsonl

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

type line struct {
	N int `json:"n"`
}

func TestRead(t *testing.T) {
	for _, c := range []struct {
		name, file string
		want       []int
		wantErr    string // substring; "" for none
	}{
		{name: "lines in order, blank ones skipped", file: "{\"n\":1}\n\n{\"n\":2}\n", want: []int{1, 2}},
		{name: "no trailing newline on a whole line", file: "{\"n\":1}\n{\"n\":2}", want: []int{1, 2}},
		{name: "a last line torn by a kill is dropped", file: "{\"n\":1}\n{\"n\":2}\n{\"n\":", want: []int{1, 2}},
		{name: "a bad last line that was finished is an error", file: "{\"n\":1}\n{\"n\":\n", wantErr: "line 2"},
		{name: "a bad line inside is an error", file: "{\"n\":1}\ngarbage\n{\"n\":3}\n", wantErr: "line 2"},
		{name: "check refuses a line", file: "{\"n\":1}\n{\"n\":-1}\n", wantErr: "line 2: negative"},
		{name: "empty file", file: "", want: nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "x.jsonl")
			if err := os.WriteFile(p, []byte(c.file), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := Read(p, func(l line) error {
				if l.N < 0 {
					return errors.New("negative")
				}
				return nil
			})
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) || !strings.Contains(err.Error(), p) {
					t.Fatalf("error %v, want one naming %s and %q", err, p, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var ns []int
			for _, l := range got {
				ns = append(ns, l.N)
			}
			if len(ns) != len(c.want) {
				t.Fatalf("got %v, want %v", ns, c.want)
			}
			for i := range ns {
				if ns[i] != c.want[i] {
					t.Fatalf("got %v, want %v", ns, c.want)
				}
			}
		})
	}
}

func TestReadMissingFile(t *testing.T) {
	got, err := Read[line](filepath.Join(t.TempDir(), "none.jsonl"), nil)
	if err != nil || got != nil {
		t.Errorf("missing file: %v, %v", got, err)
	}
}
