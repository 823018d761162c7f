package tfevents

import (
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

func writeRun(t *testing.T, dir string, steps []int64) map[int64]map[string]float64 {
	t.Helper()
	w, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int64]map[string]float64{}
	for _, s := range steps {
		vals := map[string]float64{"train/success": 0.125 * float64(s), "train/loss": -0.5 + float64(s), "eval_seen/success": 1 / float64(s+3)}
		if err := w.Scalars(s, time.Unix(1700000000+s, 0), vals); err != nil {
			t.Fatal(err)
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		want[s] = vals
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return want
}

// Every value written is read back at its step (as float32), after the
// file-version event; a reopened writer (a resumed run) appends to the
// same file; a record torn by a kill is cut before appending.
func TestWriteReadBack(t *testing.T) {
	dir := t.TempDir()
	want := writeRun(t, dir, []int64{1, 2})
	files := Files(dir)
	if len(files) != 1 {
		t.Fatalf("%d event files", len(files))
	}
	// A kill in the middle of a record.
	f, _ := os.OpenFile(files[0], os.O_WRONLY|os.O_APPEND, 0)
	f.Write([]byte{7, 0, 0, 0, 0, 0, 0, 0, 1, 2})
	f.Close()
	for k, v := range writeRun(t, dir, []int64{3}) {
		want[k] = v
	}
	if got := Files(dir); len(got) != 1 {
		t.Fatalf("a resumed writer made a new file: %v", got)
	}
	evs, err := Read(files[0])
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 4 || evs[0].FileVersion != FileVersion {
		t.Fatalf("%d events, first %+v", len(evs), evs[0])
	}
	for _, ev := range evs[1:] {
		w := want[ev.Step]
		if len(ev.Values) != len(w) || ev.WallTime != float64(1700000000+ev.Step) {
			t.Fatalf("step %d: %v at %v, want %v", ev.Step, ev.Values, ev.WallTime, w)
		}
		for tag, v := range w {
			if ev.Values[tag] != float32(v) {
				t.Errorf("step %d %s = %v, want %v", ev.Step, tag, ev.Values[tag], float32(v))
			}
		}
	}
	// A flipped byte is caught by the checksum.
	b, _ := os.ReadFile(files[0])
	b[len(b)-6] ^= 0xff
	bad := filepath.Join(t.TempDir(), Prefix+"x")
	os.WriteFile(bad, b, 0o644)
	if _, err := Read(bad); err == nil {
		t.Error("a corrupted record was read without error")
	}
}

// TensorBoard's own reader (the tensorboard package from PyPI, its
// EventAccumulator) reads every scalar back.
func TestTensorBoardReadsIt(t *testing.T) {
	if err := exec.Command("python3", "-c", "import tensorboard").Run(); err != nil {
		if os.Getenv("SEEDCTL_REQUIRE_PY_REFS") == "1" {
			t.Fatalf("python3 cannot import tensorboard (./setup.sh installs it): %v", err)
		}
		t.Skip("tensorboard (PyPI) not installed; ./setup.sh installs it")
	}
	dir := t.TempDir()
	want := writeRun(t, dir, []int64{1, 2, 3})
	out, err := exec.Command("python3", "testdata/read_scalars.py", dir).Output()
	if err != nil {
		t.Fatalf("TensorBoard's reader: %v", err)
	}
	var got map[string][][2]float64
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if len(got) != 3 {
		t.Fatalf("tags %v, want 3", got)
	}
	for tag, pts := range got {
		if len(pts) != 3 {
			t.Fatalf("%s: %d points", tag, len(pts))
		}
		for _, p := range pts {
			step := int64(p[0])
			if w := float64(float32(want[step][tag])); math.Abs(p[1]-w) > 1e-7 {
				t.Errorf("%s step %d: TensorBoard read %v, wrote %v", tag, step, p[1], w)
			}
		}
	}
}
