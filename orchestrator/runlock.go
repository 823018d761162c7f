package orchestrator

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// lockFile is the run folder's lock: held (flock, exclusive) by the one
// process that runs or resumes it, released when that process ends, kill
// -9 included. Two processes on one run folder would both write its
// checkpoints, metrics and state.
const lockFile = "run.lock"

// ErrRunInUse is returned when another process holds the run folder.
var ErrRunInUse = errors.New("the run folder is in use by another process")

// lockRun takes dir's lock without waiting, creating dir if needed, and
// writes this process's id into it. The returned function releases it.
func lockRun(dir runDir) (func(), error) {
	if err := os.MkdirAll(string(dir), 0o755); err != nil {
		return nil, fmt.Errorf("locking run folder %s: %w", dir, err)
	}
	path := filepath.Join(string(dir), lockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("locking run folder %s: %w", dir, err)
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
			return nil, fmt.Errorf("run folder %s: %w (%s is running or resuming it; wait for it to end or stop it first)", dir, ErrRunInUse, holder)
		}
		return nil, fmt.Errorf("locking run folder %s: %w", dir, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}
