package trainer

import (
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sugarme/gotch/libtch/seedops"
)

// TestProfileWritesTrace: Model.Profile writes libtorch's Chrome trace of
// the step it wraps, with the step's ops in it. Debian's libtorch 1.13 has
// no Kineto: there it must say so, clearly, and still run the step.
func TestProfileWritesTrace(t *testing.T) {
	m, _ := newTiny(t, ArchQwen2, 1)
	defer m.Close()
	path := filepath.Join(t.TempDir(), "trace.json")
	ran := false
	err := m.Profile(path, func() error {
		ran = true
		_, err := m.NLLBackward(testInput(), [][]int{{17, 3, 88, 41, 9, 60, -1}, {7, 12, 30, 2, 96, -1, -1}})
		return err
	})
	if !ran {
		t.Fatal("Profile did not run its function")
	}
	libtorch2 := seedops.FusedAvailable(true) // compiled against libtorch 2.x headers
	if err != nil {
		if libtorch2 || !strings.Contains(err.Error(), "Kineto") {
			t.Fatalf("Profile: %v", err)
		}
		t.Logf("no trace from this libtorch, as expected: %v", err)
		return
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading the trace: %v", err)
	}
	var trace struct {
		TraceEvents []struct {
			Name string  `json:"name"`
			Cat  string  `json:"cat"`
			Dur  float64 `json:"dur"`
		} `json:"traceEvents"`
	}
	if err := json.Unmarshal(data, &trace); err != nil {
		t.Fatalf("the trace is not JSON: %v", err)
	}
	ops := map[string]int{}
	for _, e := range trace.TraceEvents {
		if e.Cat == "cpu_op" {
			ops[e.Name]++
		}
	}
	// The forward's matmuls, the head's log-softmax, and the backward's
	// matmuls (run on autograd's thread) are all in it.
	for _, want := range []string{"aten::log_softmax", "aten::mm", "LogSoftmaxBackward0"} {
		found := false
		for name := range ops {
			if strings.Contains(name, want) {
				found = true
			}
		}
		if !found {
			t.Errorf("trace has no %q among its %d op kinds", want, len(ops))
		}
	}
}

// TestTraceSummary: scripts/gpu/trace_summary.py reads a CUDA trace as
// Kineto writes it (kernels, copies, runtime calls, nested host ops) and
// gets the GPU's busy time as the union of its intervals, the idle gaps,
// the host's waits and the kernel kinds right.
func TestTraceSummary(t *testing.T) {
	ev := func(cat, name string, tid int, ts, dur float64) map[string]any {
		return map[string]any{"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur}
	}
	trace := map[string]any{"traceEvents": []any{
		ev("cpu_op", "aten::linear", 1, 0, 50),
		ev("cpu_op", "aten::addmm", 1, 5, 40), // nested in linear
		ev("cpu_op", "aten::log_softmax", 1, 60, 20),
		ev("cuda_runtime", "cudaLaunchKernel", 1, 10, 5),
		ev("cuda_runtime", "cudaLaunchKernel", 1, 62, 5),
		ev("cuda_runtime", "cudaStreamSynchronize", 1, 90, 300),
		ev("kernel", "sm90_xmma_gemm_bf16bf16_bf16f32", 7, 20, 100),
		ev("kernel", "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4>", 7, 100, 50), // overlaps the gemm by 20
		ev("gpu_memcpy", "Memcpy DtoH (Device -> Pageable)", 7, 300, 10),                           // after a 150 µs gap
	}}
	dir := t.TempDir()
	in, out := filepath.Join(dir, "t.json"), filepath.Join(dir, "sum.json")
	data, _ := json.Marshal(trace)
	if err := os.WriteFile(in, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if msg, err := exec.Command("python3", "../scripts/gpu/trace_summary.py", in, "--labels", "x", "--json", out).CombinedOutput(); err != nil {
		t.Fatalf("trace_summary.py: %v\n%s", err, msg)
	}
	var sums map[string]struct {
		SpanMS       float64            `json:"span_ms"`
		TopLevel     int                `json:"ops_top_level"`
		All          int                `json:"ops_all"`
		Kernels      int                `json:"kernels"`
		KernelMS     float64            `json:"kernel_ms"`
		BusyMS       float64            `json:"gpu_busy_ms"`
		Gaps         int                `json:"gaps_over_50us"`
		GapMS        float64            `json:"gap_ms_over_50us"`
		Waits        int                `json:"host_waits"`
		WaitMS       float64            `json:"host_wait_ms"`
		Launches     int                `json:"launches"`
		KernelByKind map[string]float64 `json:"kernel_ms_by_kind"`
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &sums); err != nil {
		t.Fatal(err)
	}
	s := sums["x"]
	near := func(what string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-9 {
			t.Errorf("%s = %v, want %v", what, got, want)
		}
	}
	near("span", s.SpanMS, 0.390)
	near("kernel time", s.KernelMS, 0.150)
	near("GPU busy", s.BusyMS, 0.140) // 20..150 and 300..310
	near("gap time", s.GapMS, 0.150)
	near("host wait", s.WaitMS, 0.300)
	near("matmul", s.KernelByKind["matmul"], 0.100)
	near("softmax", s.KernelByKind["softmax"], 0.050)
	if s.TopLevel != 2 || s.All != 3 || s.Kernels != 2 || s.Gaps != 1 || s.Waits != 1 || s.Launches != 2 {
		t.Errorf("counts: top-level %d (want 2), all %d (3), kernels %d (2), gaps %d (1), waits %d (1), launches %d (2)",
			s.TopLevel, s.All, s.Kernels, s.Gaps, s.Waits, s.Launches)
	}
}
