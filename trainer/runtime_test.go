package trainer

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestMappedLibraries(t *testing.T) {
	maps := `55d0c0a00000-55d0c0a01000 r--p 00000000 fe:01 123 /usr/local/bin/seedctl
7f0000000000-7f0000001000 r-xp 00000000 fe:01 456 /usr/lib/x86_64-linux-gnu/libtorch_cpu.so.1.13.0
7f0000001000-7f0000002000 r--p 00001000 fe:01 456 /usr/lib/x86_64-linux-gnu/libtorch_cpu.so.1.13.0
7f0000003000-7f0000004000 r-xp 00000000 fe:01 789 /usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3
7f0000005000-7f0000006000 rw-p 00000000 00:00 0 
7f0000007000-7f0000008000 r-xp 00000000 fe:01 790 /opt/my libs/libfoo.so
7ffd00000000-7ffd00001000 rw-p 00000000 00:00 0                          [stack]
`
	got, err := mappedLibraries(strings.NewReader(maps))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"/usr/lib/x86_64-linux-gnu/libtorch_cpu.so.1.13.0",
		"/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3",
		"/opt/my libs/libfoo.so",
	}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("mappedLibraries = %q, want %q", got, want)
	}
}

func TestClassifyBLAS(t *testing.T) {
	tests := []struct {
		libs []string
		want BLASKind
	}{
		{[]string{"/usr/lib/x86_64-linux-gnu/libc10.so", "/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3"}, BLASOpenBLAS},
		{[]string{"/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblasp-r0.3.21.so"}, BLASOpenBLAS},
		{[]string{"/usr/lib/x86_64-linux-gnu/blas/libblas.so.3"}, BLASReference},
		// The reference libblas is loaded alongside, but OpenBLAS answers the calls.
		{[]string{"/usr/lib/x86_64-linux-gnu/blas/libblas.so.3", "/usr/lib/libopenblas.so.0"}, BLASOpenBLAS},
		{[]string{"/opt/intel/lib/libmkl_rt.so.2"}, BLASMKL},
		{[]string{"/usr/lib/x86_64-linux-gnu/blis-openmp/libblas.so.3"}, BLASBLIS},
		{[]string{"/usr/lib/x86_64-linux-gnu/atlas/libblas.so.3"}, BLASAtlas},
		{[]string{"/opt/libtorch/lib/libtorch_cpu.so"}, BLASBuiltin},
	}
	for _, tt := range tests {
		got := classifyBLAS(tt.libs)
		if got.Kind != tt.want {
			t.Errorf("classifyBLAS(%q) = %s, want %s", tt.libs, got.Kind, tt.want)
		}
		if got.Slow() != (tt.want == BLASReference) {
			t.Errorf("classifyBLAS(%q).Slow() = %v", tt.libs, got.Slow())
		}
	}
}

func TestVersionHeaderRegexp(t *testing.T) {
	h := "#pragma once\n#define TORCH_VERSION_MAJOR 2\n#define TORCH_VERSION \\\n  \"2.1.0\"\n"
	m := versionHeaderRe.FindStringSubmatch(h)
	if m == nil || m[1] != "2.1.0" {
		t.Fatalf("version header parsed as %q", m)
	}
}

// TestPythonTorchVersion: the libtorch inside a Python torch package is
// versioned by its torch/version.py, local build tag included.
func TestPythonTorchVersion(t *testing.T) {
	root := filepath.Join(t.TempDir(), "torch")
	os.MkdirAll(filepath.Join(root, "lib"), 0o755)
	os.WriteFile(filepath.Join(root, "version.py"), []byte("from typing import Optional\n\n__version__ = '2.11.0+cu130'\ncuda: Optional[str] = '13.0'\n"), 0o644)
	v, src := libtorchVersion(filepath.Join(root, "lib", "libtorch_cpu.so"))
	if v != "2.11.0+cu130" || src != filepath.Join(root, "version.py") {
		t.Errorf("version %q from %q, want 2.11.0+cu130 from version.py", v, src)
	}
}

// TestRuntimeOnThisMachine checks what the running test binary really loaded.
func TestRuntimeOnThisMachine(t *testing.T) {
	info, err := Runtime()
	if err != nil {
		t.Fatalf("Runtime: %v", err)
	}
	if info.LibtorchPath == "" || info.LibtorchVersion == "" || info.LibtorchVersion == "unknown" {
		t.Errorf("libtorch not identified: %+v", info)
	}
	if info.BLAS.Slow() {
		t.Errorf("libtorch is running on the reference BLAS (%s); ./setup.sh installs libopenblas0-pthread", info.BLAS.Path)
	}
	t.Logf("libtorch %s (%s) at %s, %s, BLAS %s %s", info.LibtorchVersion, info.VersionSource, info.LibtorchPath, info.Device(), info.BLAS.Kind, info.BLAS.Path)
}

func TestMeasureMatmul(t *testing.T) {
	r, err := MeasureMatmul(context.Background(), 64, 20*time.Millisecond, false)
	if err != nil {
		t.Fatal(err)
	}
	if r.Iters < 1 || r.GFLOPS <= 0 || r.N != 64 || r.Device != "CPU" {
		t.Fatalf("MeasureMatmul = %+v", r)
	}
	if _, err := MeasureMatmul(context.Background(), 0, time.Millisecond, false); err == nil {
		t.Error("size 0 accepted")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := MeasureMatmul(ctx, 32, time.Hour, false); err == nil {
		t.Error("a cancelled context did not stop the measurement")
	}
}
