package trainer

/*
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>

// OpenBLAS names the kernel set it picked at load time; other BLAS
// libraries lack the function.
static const char *seedctl_openblas_core(void) {
	char *(*f)(void) = (char *(*)(void))dlsym(RTLD_DEFAULT, "openblas_get_corename");
	return f ? f() : NULL;
}
*/
import "C"

import (
	"fmt"
	"os"
	"strings"
	"syscall"

	"golang.org/x/sys/cpu"
)

// BLASCoreEnv is the variable OpenBLAS reads, once, when the process loads
// it, to choose its kernels instead of detecting the CPU.
const BLASCoreEnv = "OPENBLAS_CORETYPE"

// BLASCore is the kernel set OpenBLAS runs ("Haswell", "SkylakeX", ...), or
// "" when libtorch's BLAS is not OpenBLAS.
func BLASCore() string {
	p := C.seedctl_openblas_core()
	if p == nil {
		return ""
	}
	return strings.TrimSpace(C.GoString(p))
}

// CPUHasAVX512 reports whether the CPU and OS support the AVX-512 subsets
// OpenBLAS's SkylakeX kernels use.
func CPUHasAVX512() bool {
	return cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512VL &&
		cpu.X86.HasAVX512DQ && cpu.X86.HasAVX512CD
}

// ForcedAVX2Kernels reports whether OPENBLAS_CORETYPE (forced, the value
// given) holds OpenBLAS to its AVX2 kernels on a CPU with AVX-512. Some
// machines set it for every process (this project's build machine sets
// OPENBLAS_CORETYPE=Haswell on an AMD EPYC with AVX-512 and bf16, where
// OpenBLAS 0.3.21 left alone picks Cooperlake); the AVX-512 sgemm measured
// 2x faster at the tiny models' shapes and an SFT step 1.3x (go test
// ./trainer -bench BLASCore).
func ForcedAVX2Kernels(forced, core string, hasAVX512 bool) bool {
	if forced == "" || !hasAVX512 {
		return false
	}
	switch strings.ToLower(core) {
	case "haswell", "zen", "sandybridge", "nehalem", "core2", "prescott":
		return true
	}
	return false
}

// BLASDetectedEnv carries, into the process FixBLASCore restarts, the
// kernels OpenBLAS had picked itself (for doctor and the logs).
const BLASDetectedEnv = "SEEDCTL_BLAS_DETECTED"

// BLASAutoEnv set to 0 keeps OpenBLAS's own pick (FixBLASCore does nothing).
const BLASAutoEnv = "SEEDCTL_BLAS_AUTO"

// CPUHasAVX2 reports whether the CPU and OS support the AVX2 and FMA
// instructions OpenBLAS's Haswell kernels use.
func CPUHasAVX2() bool { return cpu.X86.HasAVX2 && cpu.X86.HasFMA }

// BestBLASCore is the fastest OpenBLAS 0.3.21 kernel set a CPU with these
// features runs: Cooperlake (AVX-512 with bf16), SkylakeX (AVX-512),
// Haswell (AVX2 and FMA), or "" (nothing past what OpenBLAS's own
// detection finds on older CPUs). scripts/blas-core.sh applies the same
// rule to /proc/cpuinfo for `just test`.
func BestBLASCore(avx512, bf16, avx2 bool) string {
	switch {
	case avx512 && bf16:
		return "Cooperlake"
	case avx512:
		return "SkylakeX"
	case avx2:
		return "Haswell"
	}
	return ""
}

// CPUBestBLASCore is BestBLASCore for this CPU.
func CPUBestBLASCore() string {
	return BestBLASCore(CPUHasAVX512(), CPUHasAVX512() && cpu.X86.HasAVX512BF16, CPUHasAVX2())
}

// preAVX2Cores are OpenBLAS kernel sets without AVX2: what it falls back
// to when it does not recognise a CPU (a VM whose CPUID model is a generic
// "Intel Xeon Processor" gets Prescott, SSE3: sgemm measured 3.4x slower
// than SkylakeX on such a 2-core VM, seedctl doctor's matmul line).
var preAVX2Cores = []string{"prescott", "core2", "penryn", "dunnington", "nehalem", "atom", "sandybridge",
	"katmai", "coppermine", "northwood", "banias", "opteron", "barcelona", "bobcat", "bulldozer", "piledriver", "steamroller"}

// MisdetectedBLASCore reports whether OpenBLAS, left to detect the CPU
// (forced empty), picked kernels without AVX2 (core) on a CPU that runs
// better ones (best, from BestBLASCore).
func MisdetectedBLASCore(forced, core, best string) bool {
	if forced != "" || core == "" || best == "" {
		return false
	}
	for _, c := range preAVX2Cores {
		if strings.EqualFold(core, c) {
			return true
		}
	}
	return false
}

// FixBLASCore restarts this process (same executable, arguments and
// environment) with OPENBLAS_CORETYPE set to the CPU's best kernels when
// OpenBLAS did not recognise the CPU and fell back to pre-AVX2 ones:
// OpenBLAS reads the variable only when the process loads it, so setting
// it later does nothing. say is told what happens before the restart. It
// returns nil with nothing to do (kernels fine, OPENBLAS_CORETYPE already
// set, not OpenBLAS, or SEEDCTL_BLAS_AUTO=0), and an error only if the
// restart failed (the process then goes on with the slow kernels).
func FixBLASCore(say func(string)) error {
	if os.Getenv(BLASAutoEnv) == "0" {
		return nil
	}
	core, best := BLASCore(), CPUBestBLASCore()
	if !MisdetectedBLASCore(os.Getenv(BLASCoreEnv), core, best) {
		return nil
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("restarting with %s=%s: %w", BLASCoreEnv, best, err)
	}
	say(fmt.Sprintf("OpenBLAS did not recognise this CPU and picked its %s kernels (no AVX2); restarting with %s=%s (%s=0 keeps them)", core, BLASCoreEnv, best, BLASAutoEnv))
	env := append(os.Environ(), BLASCoreEnv+"="+best, BLASDetectedEnv+"="+core)
	if err := syscall.Exec(exe, os.Args, env); err != nil {
		return fmt.Errorf("restarting with %s=%s: %w", BLASCoreEnv, best, err)
	}
	return nil
}
