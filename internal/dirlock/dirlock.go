// Package dirlock gives a folder to one process at a time: an exclusive
// flock on a file inside it, released when the process lets go or ends
// (kill -9 included), with the holder's process id written in the file.
package dirlock

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// ErrInUse is returned when another process holds the lock.
var ErrInUse = errors.New("in use by another process")

// Lock takes the lock file name in dir without waiting, creating dir if
// needed. what names the folder in errors ("run folder", "bench folder").
// The returned function releases it.
func Lock(dir, name, what string) (func(), error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("locking %s %s: %w", what, dir, err)
	}
	path := filepath.Join(dir, name)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("locking %s %s: %w", what, dir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder := "another process"
		if b, rerr := os.ReadFile(path); rerr == nil {
			if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); perr == nil {
				holder = fmt.Sprintf("process %d", pid)
			}
		}
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%s %s: %w (%s holds it; wait for it to end or stop it first)", what, dir, ErrInUse, holder)
		}
		return nil, fmt.Errorf("locking %s %s: %w", what, dir, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}
