// Package atomicfile writes files so that a reader, or a process started
// after a crash, sees either the old content or the new, never a part: the
// new content goes to a temporary file in the same folder, is synced to
// disk, gets mode 0644 and is renamed over the path, and the folder is
// synced so the rename itself survives a power loss. Concurrent writers of
// one path each use their own temporary file; the last rename wins.
package atomicfile

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
)

// Write replaces path with what write produces. write gets a buffered
// writer; a failure leaves path as it was and no temporary file behind.
func Write(path string, write func(io.Writer) error) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	done := false
	defer func() {
		if !done {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	bw := bufio.NewWriterSize(tmp, 1<<20)
	if err := write(bw); err != nil {
		return err
	}
	// CreateTemp makes the file private; the files this writes are not.
	if err := errors.Join(bw.Flush(), tmp.Chmod(0o644), tmp.Sync()); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		done = true
		return fmt.Errorf("writing %s: %w", path, err)
	}
	done = true
	return SyncDir(dir)
}

// WriteBytes replaces path with b.
func WriteBytes(path string, b []byte) error {
	return Write(path, func(w io.Writer) error {
		_, err := w.Write(b)
		return err
	})
}

// SyncDir syncs a folder, so that renames and creations in it are on
// disk. File systems that cannot sync a folder are not an error.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("syncing %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOTSUP) {
		return fmt.Errorf("syncing %s: %w", dir, err)
	}
	return nil
}
