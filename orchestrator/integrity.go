package orchestrator

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/seedctl/seedctl/internal/ckpthash"
)

// FileSum is a run-folder file's size and sha256 as recorded in
// state.json when the file was written.
type FileSum struct {
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// sumFiles sums every regular file under the run-folder-relative folders
// rels (absolute paths, such as a base model outside the run, are left
// out: the run does not own them). Keys are run-folder-relative paths.
func sumFiles(d runDir, rels ...string) (map[string]FileSum, error) {
	out := map[string]FileSum{}
	for _, rel := range rels {
		if rel == "" || filepath.IsAbs(rel) {
			continue
		}
		root := d.abs(rel)
		err := filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
			if err != nil || !e.Type().IsRegular() {
				return err
			}
			k, err := filepath.Rel(string(d), p)
			if err != nil {
				return err
			}
			sum, err := sumFile(p)
			if err != nil {
				return err
			}
			out[filepath.ToSlash(k)] = sum
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("checksumming %s: %w", rel, err)
		}
	}
	return out, nil
}

func sumFile(p string) (FileSum, error) {
	sum, size, err := ckpthash.File(p)
	return FileSum{Size: size, SHA256: sum}, err
}

// recordFiles sums the current checkpoint and reference into the state
// (saved by the caller).
//
// The reference does not change after stage 1: its sums already in the
// state are kept, not computed again every iteration.
func (r *run) recordFiles() error {
	sums, err := sumFiles(r.dir, r.st.Checkpoint)
	if err != nil {
		return err
	}
	if ref := r.st.Reference; ref != r.st.Checkpoint && ref != "" && !filepath.IsAbs(ref) {
		prefix := filepath.ToSlash(filepath.Clean(ref)) + "/"
		kept := false
		for k, v := range r.st.Files {
			if strings.HasPrefix(k, prefix) {
				sums[k], kept = v, true
			}
		}
		if !kept {
			refSums, err := sumFiles(r.dir, ref)
			if err != nil {
				return err
			}
			maps.Copy(sums, refSums)
		}
	}
	r.st.Files = sums
	return nil
}

// checkFiles compares the run folder with the sums in its state: a file
// missing, resized or changed since it was written is a damaged folder,
// refused with what differs and how to recover. A state without sums (a
// run from before they were recorded) passes.
func checkFiles(d runDir, st *State) error {
	var bad []string
	for _, k := range slices.Sorted(maps.Keys(st.Files)) {
		want := st.Files[k]
		got, err := sumFile(filepath.Join(string(d), filepath.FromSlash(k)))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			bad = append(bad, fmt.Sprintf("%s is missing (written with %d bytes)", k, want.Size))
		case err != nil:
			bad = append(bad, fmt.Sprintf("%s cannot be read: %v", k, err))
		case got.Size != want.Size:
			bad = append(bad, fmt.Sprintf("%s has %d bytes, %d when written", k, got.Size, want.Size))
		case got.SHA256 != want.SHA256:
			bad = append(bad, fmt.Sprintf("%s changed since it was written (sha256 %.12s, written %.12s)", k, got.SHA256, want.SHA256))
		}
	}
	if len(bad) == 0 {
		return nil
	}
	return fmt.Errorf("the run folder is damaged: %s; restore those files from a copy of the folder, or start a new run (seedctl run --model %s for the last good checkpoint's weights, when they survive)",
		strings.Join(bad, "; "), d.abs(st.Checkpoint))
}
