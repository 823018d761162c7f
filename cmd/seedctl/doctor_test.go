package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/seedctl/seedctl/trainer"
)

type fakeProbe struct {
	info       trainer.RuntimeInfo
	runtimeErr error
	gflops     float64
	matmulErr  error
	justPath   string
	justOut    string
	justErr    error
	gotCUDA    bool
	noDist     bool
	distErr    error
	gotBackend string
}

func (f *fakeProbe) Dist(backend string) (time.Duration, bool, error) {
	f.gotBackend = backend
	return 12 * time.Millisecond, !f.noDist, f.distErr
}

func (f *fakeProbe) Runtime() (trainer.RuntimeInfo, error) { return f.info, f.runtimeErr }
func (f *fakeProbe) Matmul(_ context.Context, n int64, d time.Duration, cuda bool) (trainer.MatmulResult, error) {
	f.gotCUDA = cuda
	if f.matmulErr != nil {
		return trainer.MatmulResult{}, f.matmulErr
	}
	dev := "CPU"
	if cuda {
		dev = "CUDA"
	}
	return trainer.MatmulResult{N: n, Iters: 10, Elapsed: d, GFLOPS: f.gflops, Device: dev}, nil
}
func (f *fakeProbe) LookPath(string) (string, error) {
	if f.justPath == "" {
		return "", errors.New("not found")
	}
	return f.justPath, nil
}
func (f *fakeProbe) CommandOutput(context.Context, string, ...string) (string, error) {
	return f.justOut, f.justErr
}

func healthyProbe() *fakeProbe {
	return &fakeProbe{
		info: trainer.RuntimeInfo{
			LibtorchVersion: "1.13.1", VersionSource: "Debian package libtorch1.13",
			LibtorchPath: "/usr/lib/x86_64-linux-gnu/libtorch_cpu.so.1.13.0",
			BLAS:         trainer.BLASInfo{Kind: trainer.BLASOpenBLAS, Path: "/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3"},
		},
		gflops:   110,
		justPath: "/usr/local/bin/just",
		justOut:  "just 1.57.0",
	}
}

func statuses(rs []checkResult) string {
	var b []string
	for _, r := range rs {
		b = append(b, r.Name+"="+r.Status)
	}
	return strings.Join(b, " ")
}

func TestRunDoctor(t *testing.T) {
	tests := []struct {
		name       string
		mutate     func(*fakeProbe)
		want       string
		wantFailed []string
		wantText   []string // substrings of the printed report
	}{
		{
			name:     "healthy CPU machine",
			mutate:   func(*fakeProbe) {},
			want:     "libtorch=ok device=ok blas=ok matmul=ok dist=ok just=ok",
			wantText: []string{"1.13.1", "CPU", "OpenBLAS", "110.0 GFLOP/s", "just 1.57.0"},
		},
		{
			name: "reference BLAS warns loudly",
			mutate: func(p *fakeProbe) {
				p.info.BLAS = trainer.BLASInfo{Kind: trainer.BLASReference, Path: "/usr/lib/x86_64-linux-gnu/blas/libblas.so.3"}
				p.gflops = 3
			},
			want:     "libtorch=ok device=ok blas=WARN matmul=WARN dist=ok just=ok",
			wantText: []string{"REFERENCE BLAS", "libopenblas0-pthread", "3.0 GFLOP/s"},
		},
		{
			name: "OPENBLAS_CORETYPE holding an AVX-512 CPU to AVX2 kernels warns",
			mutate: func(p *fakeProbe) {
				p.info.BLAS.Core, p.info.BLAS.Forced, p.info.BLAS.AVX512 = "Haswell", "Haswell", true
			},
			want:     "libtorch=ok device=ok blas=WARN matmul=ok dist=ok just=ok",
			wantText: []string{"Haswell kernels because OPENBLAS_CORETYPE=Haswell", "unset OPENBLAS_CORETYPE"},
		},
		{
			name: "pre-AVX2 kernels OpenBLAS fell back to on a CPU it did not recognise warn",
			mutate: func(p *fakeProbe) {
				p.info.BLAS.Core, p.info.BLAS.Best, p.info.BLAS.AVX512 = "Prescott", "Cooperlake", true
			},
			want:     "libtorch=ok device=ok blas=WARN matmul=ok dist=ok just=ok",
			wantText: []string{"Prescott kernels, no AVX2", "set OPENBLAS_CORETYPE=Cooperlake", "SEEDCTL_BLAS_AUTO=0"},
		},
		{
			name: "kernels seedctl set at start, after OpenBLAS misjudged the CPU, are fine and say so",
			mutate: func(p *fakeProbe) {
				p.info.BLAS.Core, p.info.BLAS.Forced, p.info.BLAS.Best, p.info.BLAS.Detected, p.info.BLAS.AVX512 = "Cooperlake", "Cooperlake", "Cooperlake", "Prescott", true
			},
			want:     "libtorch=ok device=ok blas=ok matmul=ok dist=ok just=ok",
			wantText: []string{"Cooperlake kernels (OPENBLAS_CORETYPE=Cooperlake set by seedctl at start: OpenBLAS had picked its Prescott kernels"},
		},
		{
			name: "the kernels OpenBLAS picked itself are fine",
			mutate: func(p *fakeProbe) {
				p.info.BLAS.Core, p.info.BLAS.AVX512 = "Cooperlake", true
			},
			want:     "libtorch=ok device=ok blas=ok matmul=ok dist=ok just=ok",
			wantText: []string{"Cooperlake kernels"},
		},
		{
			name:     "just missing warns with the fix (seedctl runs without it)",
			mutate:   func(p *fakeProbe) { p.justPath = "" },
			want:     "libtorch=ok device=ok blas=ok matmul=ok dist=ok just=WARN",
			wantText: []string{"npm install -g rust-just"},
		},
		{
			name:       "libtorch not loaded skips the checks that need it",
			mutate:     func(p *fakeProbe) { p.runtimeErr = trainer.ErrLibtorchNotMapped },
			want:       "libtorch=FAIL just=ok",
			wantFailed: []string{"libtorch"},
			wantText:   []string{"./setup.sh"},
		},
		{
			name:       "matmul error fails",
			mutate:     func(p *fakeProbe) { p.matmulErr = errors.New("out of memory") },
			want:       "libtorch=ok device=ok blas=ok matmul=FAIL dist=ok just=ok",
			wantFailed: []string{"matmul"},
			wantText:   []string{"out of memory"},
		},
		{
			name: "CUDA is measured on the GPU and not held to the CPU floor",
			mutate: func(p *fakeProbe) {
				p.info.CUDAAvailable, p.info.CUDADevices = true, 2
				p.gflops = 5
			},
			want:     "libtorch=ok device=ok blas=ok matmul=ok dist=ok just=ok",
			wantText: []string{"CUDA (2 device(s)", "on CUDA", "NCCL: a one-rank group formed"},
		},
		{
			name:     "a build without the GPU's process group warns and says how to get it",
			mutate:   func(p *fakeProbe) { p.info.CUDAAvailable, p.info.CUDADevices, p.noDist = true, 1, true },
			want:     "libtorch=ok device=ok blas=ok matmul=ok dist=WARN just=ok",
			wantText: []string{"no NCCL process group", "fetch-cuda-headers.sh"},
		},
		{
			name:       "a process group that fails fails",
			mutate:     func(p *fakeProbe) { p.distErr = errors.New("Connection refused") },
			want:       "libtorch=ok device=ok blas=ok matmul=ok dist=FAIL just=ok",
			wantFailed: []string{"dist"},
			wantText:   []string{"Gloo: a one-rank group failed: Connection refused"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := healthyProbe()
			tt.mutate(p)
			rs := runDoctor(context.Background(), p, defaultDoctorOptions(), zerolog.Nop())
			if got := statuses(rs); got != tt.want {
				t.Errorf("statuses = %s, want %s", got, tt.want)
			}
			if got := strings.Join(failures(rs), ","); got != strings.Join(tt.wantFailed, ",") {
				t.Errorf("failures = %q, want %q", got, strings.Join(tt.wantFailed, ","))
			}
			if want := map[bool]string{true: trainer.BackendNCCL, false: trainer.BackendGloo}[p.info.CUDAAvailable]; p.runtimeErr == nil && p.gotBackend != want {
				t.Errorf("dist checked %q, want %q", p.gotBackend, want)
			}
			if p.gotCUDA != p.info.CUDAAvailable && p.runtimeErr == nil {
				t.Errorf("matmul measured with cuda=%v, libtorch reports CUDA=%v", p.gotCUDA, p.info.CUDAAvailable)
			}
			var buf bytes.Buffer
			printChecks(&buf, rs)
			for _, s := range tt.wantText {
				if !strings.Contains(buf.String(), s) {
					t.Errorf("report lacks %q:\n%s", s, buf.String())
				}
			}
		})
	}
}

func TestDoctorOptionsValidate(t *testing.T) {
	if err := defaultDoctorOptions().Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	o := defaultDoctorOptions()
	o.MatmulSize = 0
	if err := o.Validate(); err == nil || !strings.Contains(err.Error(), "--matmul-size") {
		t.Errorf("size 0: err = %v, want one naming --matmul-size", err)
	}
	o = defaultDoctorOptions()
	o.MatmulTime = 0
	if err := o.Validate(); err == nil || !strings.Contains(err.Error(), "--matmul-time") {
		t.Errorf("time 0: err = %v, want one naming --matmul-time", err)
	}
}

func TestNewLogger(t *testing.T) {
	var buf bytes.Buffer
	log, err := newLogger(&buf, "warn", "json")
	if err != nil {
		t.Fatal(err)
	}
	log.Info().Msg("hidden")
	log.Warn().Str("k", "v").Msg("shown")
	out := buf.String()
	if strings.Contains(out, "hidden") || !strings.Contains(out, `"level":"warn"`) || !strings.Contains(out, `"k":"v"`) {
		t.Errorf("json logger at warn wrote %q", out)
	}
	buf.Reset()
	log, err = newLogger(&buf, "debug", "console")
	if err != nil {
		t.Fatal(err)
	}
	log.Debug().Msg("for people")
	if !strings.Contains(buf.String(), "for people") || strings.Contains(buf.String(), `"message"`) {
		t.Errorf("console logger wrote %q", buf.String())
	}
	for _, bad := range [][2]string{{"loud", "json"}, {"info", "xml"}} {
		if _, err := newLogger(&buf, bad[0], bad[1]); err == nil {
			t.Errorf("newLogger(%q, %q) accepted", bad[0], bad[1])
		}
	}
}

// TestAppRunsVersion runs the real CLI wiring in-process.
func TestAppRunsVersion(t *testing.T) {
	app := newApp()
	var out bytes.Buffer
	app.Writer = &out
	if err := app.Run([]string{"seedctl", "--log-format", "json", "version"}); err != nil {
		t.Fatalf("seedctl version: %v", err)
	}
	for _, s := range []string{"seedctl ", "gotch   v0.9.1", "libtorch "} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("version output lacks %q:\n%s", s, out.String())
		}
	}
	if err := newApp().Run([]string{"seedctl", "--log-level", "shouty", "version"}); err == nil {
		t.Error("a bad --log-level was accepted")
	}
}
