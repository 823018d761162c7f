package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// One process per run folder: a second Start or Resume on a folder in use
// fails at once, naming the holder, and the folder is free again when the
// holder lets go (or dies: flock's locks go with their process).
func TestRunFolderLock(t *testing.T) {
	root := t.TempDir()
	dir := runDir(filepath.Join(root, "r"))
	unlock, err := lockRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lockRun(dir); !errors.Is(err, ErrRunInUse) || !strings.Contains(err.Error(), fmt.Sprintf("process %d", os.Getpid())) {
		t.Errorf("second lock: %v, want ErrRunInUse naming this process", err)
	}
	cfg := Default()
	cfg.RunsDir, cfg.Name, cfg.Model = root, "r", t.TempDir()
	if _, err := Start(context.Background(), cfg, Deps{}); !errors.Is(err, ErrRunInUse) {
		t.Errorf("Start on a folder in use: %v", err)
	}
	if _, err := Resume(context.Background(), string(dir), Deps{}); !errors.Is(err, ErrRunInUse) {
		t.Errorf("Resume on a folder in use: %v", err)
	}
	if _, err := os.Stat(dir.config()); !os.IsNotExist(err) {
		t.Errorf("Start wrote into a folder in use: %v", err)
	}
	unlock()
	again, err := lockRun(dir)
	if err != nil {
		t.Fatalf("after unlock: %v", err)
	}
	again()
	if _, err := Resume(context.Background(), filepath.Join(root, "missing"), Deps{}); err == nil || errors.Is(err, ErrRunInUse) {
		t.Errorf("Resume of a folder that does not exist: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "missing")); !os.IsNotExist(err) {
		t.Error("Resume created the folder it was asked to resume")
	}
}
