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
	"strings"

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
