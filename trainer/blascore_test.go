package trainer

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

func TestForcedAVX2Kernels(t *testing.T) {
	for _, tt := range []struct {
		forced, core string
		avx512       bool
		want         bool
	}{
		{"Haswell", "Haswell", true, true},
		{"ZEN", "Zen", true, true},
		{"", "Haswell", true, false},         // OpenBLAS's own choice stands
		{"Haswell", "Haswell", false, false}, // no AVX-512: nothing better
		{"SKYLAKEX", "SkylakeX", true, false},
		{"COOPERLAKE", "Cooperlake", true, false},
		{"Haswell", "", true, false}, // not OpenBLAS
	} {
		if got := ForcedAVX2Kernels(tt.forced, tt.core, tt.avx512); got != tt.want {
			t.Errorf("ForcedAVX2Kernels(%q, %q, %v) = %v, want %v", tt.forced, tt.core, tt.avx512, got, tt.want)
		}
	}
}

// childEnv is this process's environment with OPENBLAS_CORETYPE set to
// core ("": unset, OpenBLAS detects the CPU) and the child marker.
func childEnv(core string) []string {
	env := []string{"SEEDCTL_BLAS_CHILD=1"}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, BLASCoreEnv+"=") {
			env = append(env, kv)
		}
	}
	if core != "" {
		env = append(env, BLASCoreEnv+"="+core)
	}
	return env
}

// childCore runs this test binary's TestBLASCoreChild with
// OPENBLAS_CORETYPE=core and returns the kernels it reports.
func childCore(t *testing.T, core string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run", "^TestBLASCoreChild$", "-test.v")
	cmd.Env = childEnv(core)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if c, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "core="); ok {
			return c
		}
	}
	t.Fatalf("child printed no core:\n%s", out)
	return ""
}

// TestBLASCoreChild is the child process of TestBLASCore.
func TestBLASCoreChild(t *testing.T) {
	if os.Getenv("SEEDCTL_BLAS_CHILD") != "1" {
		t.Skip("child process of TestBLASCore")
	}
	fmt.Printf("core=%s\n", BLASCore())
}

// BLASCore names the kernels OpenBLAS runs, and OPENBLAS_CORETYPE (read
// when the process loads) decides them.
func TestBLASCore(t *testing.T) {
	if BLASCore() == "" {
		t.Skip("libtorch's BLAS is not OpenBLAS")
	}
	if core := childCore(t, "HASWELL"); core != "Haswell" {
		t.Fatalf("%s=HASWELL: OpenBLAS runs %q", BLASCoreEnv, core)
	}
	if CPUHasAVX512() {
		if core := childCore(t, "SKYLAKEX"); core != "SkylakeX" {
			t.Fatalf("%s=SKYLAKEX on an AVX-512 CPU: OpenBLAS runs %q", BLASCoreEnv, core)
		}
	}
	t.Logf("this process: %s (%s=%q); detected by OpenBLAS: %s", BLASCore(), BLASCoreEnv, os.Getenv(BLASCoreEnv), childCore(t, ""))
}

// BenchmarkBLASCore runs BenchmarkMicroBatch in child processes under
// OpenBLAS's AVX2 Haswell kernels and its AVX-512 SkylakeX ones,
// alternating, and reports the 2,048-token micro-batch rates and their
// ratio.
func BenchmarkBLASCore(b *testing.B) {
	if BLASCore() == "" || !CPUHasAVX512() {
		b.Skip("needs OpenBLAS on an AVX-512 CPU")
	}
	if os.Getenv("SEEDCTL_BLAS_CHILD") == "1" {
		b.Skip("child process")
	}
	rate := func(core string) float64 {
		cmd := exec.Command(os.Args[0], "-test.run", "^$", "-test.bench", "^BenchmarkMicroBatch$", "-test.benchtime", "1x")
		cmd.Env = childEnv(core)
		out, err := cmd.CombinedOutput()
		if err != nil {
			b.Fatalf("child with %s: %v\n%s", core, err, out)
		}
		f := strings.Fields(string(out))
		for i := 1; i < len(f); i++ {
			if f[i] == "tok/s-mb2048" {
				v, err := strconv.ParseFloat(f[i-1], 64)
				if err != nil {
					b.Fatal(err)
				}
				return v
			}
		}
		b.Fatalf("no tok/s-mb2048 in the child's output:\n%s", out)
		return 0
	}
	var avx2, avx512 float64
	for i := 0; i < b.N; i++ {
		avx2 += rate("HASWELL")
		avx512 += rate("SKYLAKEX")
	}
	b.ReportMetric(avx2/float64(b.N), "tok/s-haswell")
	b.ReportMetric(avx512/float64(b.N), "tok/s-skylakex")
	b.ReportMetric(avx512/avx2, "x-skylakex")
}

func TestBestAndMisdetectedBLASCore(t *testing.T) {
	for _, tt := range []struct {
		avx512, bf16, avx2 bool
		want               string
	}{
		{true, true, true, "Cooperlake"},
		{true, false, true, "SkylakeX"},
		{false, false, true, "Haswell"},
		{false, true, false, ""}, // bf16 without AVX-512 is not a thing OpenBLAS uses
		{false, false, false, ""},
	} {
		if got := BestBLASCore(tt.avx512, tt.bf16, tt.avx2); got != tt.want {
			t.Errorf("BestBLASCore(%v, %v, %v) = %q, want %q", tt.avx512, tt.bf16, tt.avx2, got, tt.want)
		}
	}
	for _, tt := range []struct {
		forced, core, best string
		want               bool
	}{
		{"", "Prescott", "Cooperlake", true}, // a VM's generic CPUID model
		{"", "Sandybridge", "Haswell", true},
		{"", "Haswell", "SkylakeX", false},            // AVX2: OpenBLAS's own choice stands (ForcedAVX2Kernels is about forcing)
		{"", "Cooperlake", "Cooperlake", false},       // recognised
		{"PRESCOTT", "Prescott", "Cooperlake", false}, // asked for: kept
		{"", "Prescott", "", false},                   // the CPU has nothing better
		{"", "", "Haswell", false},                    // not OpenBLAS
	} {
		if got := MisdetectedBLASCore(tt.forced, tt.core, tt.best); got != tt.want {
			t.Errorf("MisdetectedBLASCore(%q, %q, %q) = %v, want %v", tt.forced, tt.core, tt.best, got, tt.want)
		}
	}
}

// scripts/blas-core.sh (what `just test` exports) and CPUBestBLASCore
// (what seedctl restarts with) agree on this CPU.
func TestBLASCoreScriptAgrees(t *testing.T) {
	out, err := exec.Command("../scripts/blas-core.sh").Output()
	if err != nil {
		t.Fatalf("scripts/blas-core.sh: %v", err)
	}
	if got, want := strings.TrimSpace(string(out)), CPUBestBLASCore(); got != want {
		t.Errorf("scripts/blas-core.sh says %q, CPUBestBLASCore %q", got, want)
	}
}

// TestFixBLASCoreChild is the child process of TestFixBLASCore.
func TestFixBLASCoreChild(t *testing.T) {
	if os.Getenv("SEEDCTL_BLAS_CHILD") != "1" {
		t.Skip("child process of TestFixBLASCore")
	}
	if err := FixBLASCore(func(msg string) { fmt.Printf("said=%s\n", msg) }); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("core=%s detected=%s\n", BLASCore(), os.Getenv(BLASDetectedEnv))
}

// FixBLASCore restarts a process OpenBLAS misjudged with the CPU's best
// kernels, and leaves every other alone. Which branch runs depends on the
// machine: on a VM OpenBLAS does not recognise (the 2-core Intel VM of
// 2026-12-04: Prescott) the restart; elsewhere the no-op.
func TestFixBLASCore(t *testing.T) {
	if BLASCore() == "" {
		t.Skip("libtorch's BLAS is not OpenBLAS")
	}
	run := func(env ...string) string {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestFixBLASCoreChild$", "-test.v")
		cmd.Env = append(childEnv(""), env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("child: %v\n%s", err, out)
		}
		return string(out)
	}
	natural := childCore(t, "")
	best := CPUBestBLASCore()
	out := run()
	if MisdetectedBLASCore("", natural, best) {
		if !strings.Contains(out, "core="+best+" detected="+natural) || !strings.Contains(out, "restarting with "+BLASCoreEnv+"="+best) {
			t.Errorf("OpenBLAS picked %s on a CPU that runs %s; the child did not restart with it:\n%s", natural, best, out)
		}
		t.Logf("restarted: %s → %s", natural, best)
	} else if strings.Contains(out, "said=") || !strings.Contains(out, "core="+natural+" detected=\n") {
		t.Errorf("OpenBLAS picked %s itself (best %s): the child restarted anyway:\n%s", natural, best, out)
	}
	// Opted out, or kernels asked for: no restart.
	for _, tt := range []struct{ env, core string }{{BLASAutoEnv + "=0", natural}, {BLASCoreEnv + "=HASWELL", "Haswell"}} {
		if out := run(tt.env); strings.Contains(out, "said=") || !strings.Contains(out, "core="+tt.core+" detected=\n") {
			t.Errorf("%s: want %s kernels and no restart:\n%s", tt.env, tt.core, out)
		}
	}
}
