package dirlock

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestLock(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b")
	unlock, err := Lock(dir, "x.lock", "test folder")
	if err != nil {
		t.Fatal(err)
	}
	_, err = Lock(dir, "x.lock", "test folder")
	if !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), fmt.Sprintf("process %d", os.Getpid())) || !strings.Contains(err.Error(), "test folder "+dir) {
		t.Errorf("second lock: %v", err)
	}
	if other, err := Lock(dir, "y.lock", "test folder"); err != nil {
		t.Errorf("another lock file in the same folder: %v", err)
	} else {
		other()
	}
	unlock()
	again, err := Lock(dir, "x.lock", "test folder")
	if err != nil {
		t.Fatalf("after unlock: %v", err)
	}
	again()
}

// TestLockChild is the child process of TestLockReleasedOnKill.
func TestLockChild(t *testing.T) {
	dir := os.Getenv("DIRLOCK_CHILD_DIR")
	if dir == "" {
		t.Skip("child process of TestLockReleasedOnKill")
	}
	if _, err := Lock(dir, "x.lock", "test folder"); err != nil {
		t.Fatal(err)
	}
	fmt.Println("locked")
	time.Sleep(time.Minute)
}

// A holder killed with SIGKILL lets go of the lock.
func TestLockReleasedOnKill(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run", "^TestLockChild$", "-test.v")
	cmd.Env = append(os.Environ(), "DIRLOCK_CHILD_DIR="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	var seen strings.Builder
	for !strings.Contains(seen.String(), "locked") {
		n, err := out.Read(buf)
		if err != nil {
			t.Fatalf("child: %v: %s", err, seen.String())
		}
		seen.Write(buf[:n])
	}
	if _, err := Lock(dir, "x.lock", "test folder"); !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), fmt.Sprintf("process %d", cmd.Process.Pid)) {
		t.Errorf("while the child holds it: %v", err)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	unlock, err := Lock(dir, "x.lock", "test folder")
	if err != nil {
		t.Fatalf("after the holder was killed: %v", err)
	}
	unlock()
}
