// Package jsonl reads the JSON-lines files seedctl appends to (a run's
// metrics.jsonl, a bench folder's ledger), with the one rule for a line a
// kill tore mid-write.
package jsonl

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
)

// maxLine bounds one line (a ledger record holds every task's outcome).
const maxLine = 1 << 28

// Read decodes each non-blank line of path into a T, in order. A missing
// file gives none and no error. A last line that does not parse and does
// not end in a newline was torn by a kill mid-write: it is dropped (its
// work was not finished). Any other line that does not parse is an error
// naming the file and line, as is one that check (when not nil) refuses.
func Read[T any](path string, check func(T) error) ([]T, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	var lines [][]byte
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), maxLine)
	for sc.Scan() {
		lines = append(lines, sc.Bytes())
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	var out []T
	for n, l := range lines {
		if len(bytes.TrimSpace(l)) == 0 {
			continue
		}
		var v T
		if err := json.Unmarshal(l, &v); err != nil {
			if n == len(lines)-1 && !bytes.HasSuffix(b, []byte("\n")) {
				break // torn by a kill mid-write
			}
			return nil, fmt.Errorf("%s line %d: %w", path, n+1, err)
		}
		if check != nil {
			if err := check(v); err != nil {
				return nil, fmt.Errorf("%s line %d: %w", path, n+1, err)
			}
		}
		out = append(out, v)
	}
	return out, nil
}
