// Package seedops is seedctl's binding of its own libtorch calls
// (seedops.h): the optimizer step in C++ and causal attention without a
// mask, one decode step's attention. scripts/prepare-gotch.sh copies it into gotch's tree as
// libtch/seedops with libtch's cgo flags.
package seedops

// #include <stdlib.h>
// #include "seedops.h"
import "C"

import (
	"errors"
	"unsafe"
)

func opsErr(cerr *C.char) error {
	if cerr == nil {
		return errors.New("seedops: unknown error")
	}
	defer C.free(unsafe.Pointer(cerr))
	return errors.New(C.GoString(cerr))
}

// FusedAvailable reports whether this libtorch has the fused AdamW kernel
// for CUDA (cuda) or CPU tensors.
func FusedAvailable(cuda bool) bool {
	c := 0
	if cuda {
		c = 1
	}
	return C.seed_optim_fused_available(C.int(c)) == 1
}

func ptr(ts []unsafe.Pointer) *C.seed_tensor {
	if len(ts) == 0 {
		return nil
	}
	return (*C.seed_tensor)(unsafe.Pointer(&ts[0]))
}

// GradNorm is the L2 norm of the parameters' gradients (those that have
// one), summed in float64 from each tensor's float32 norm.
func GradNorm(params []unsafe.Pointer) (float64, error) {
	var norm C.double
	var cerr *C.char
	if C.seed_optim_grad_norm(ptr(params), C.int(len(params)), &norm, &cerr) != 0 {
		return 0, opsErr(cerr)
	}
	return float64(norm), nil
}

// AdamW holds one update's settings.
type AdamW struct {
	GradScale, LR, WeightDecay, Beta1, Beta2, Eps float64
	Step                                          int64
	Fused                                         bool
	// Chunk bounds the float32 gradient copies the fused update holds at
	// once (elements).
	Chunk int64
}

// Update applies one AdamW update (optim_shim.h): master may be nil;
// nil entries of exp skip their parameter. exp and expSq have len(params)
// entries, as has master when not nil.
func Update(params, master, exp, expSq []unsafe.Pointer, a AdamW) error {
	if len(exp) != len(params) || len(expSq) != len(params) || (master != nil && len(master) != len(params)) {
		return errors.New("seedops: AdamW update: the parameter, master and moment lists differ in length")
	}
	fused := 0
	if a.Fused {
		fused = 1
	}
	var cerr *C.char
	if C.seed_optim_adamw(ptr(params), ptr(master), ptr(exp), ptr(expSq), C.int(len(params)), C.double(a.GradScale),
		C.double(a.LR), C.double(a.WeightDecay), C.double(a.Beta1), C.double(a.Beta2), C.double(a.Eps),
		C.int64_t(a.Step), C.int(fused), C.int64_t(a.Chunk), &cerr) != 0 {
		return opsErr(cerr)
	}
	return nil
}

// CausalAttention is scaled_dot_product_attention(q, k, v, is_causal)
// without a mask: a new tensor handle (gotch's ts.FromCtensor takes it).
func CausalAttention(q, k, v unsafe.Pointer) (unsafe.Pointer, error) {
	var out C.seed_tensor
	var cerr *C.char
	if C.seed_sdpa_causal(C.seed_tensor(q), C.seed_tensor(k), C.seed_tensor(v), &out, &cerr) != 0 {
		return nil, opsErr(cerr)
	}
	return unsafe.Pointer(out), nil
}

// ProfileStart starts libtorch's profiler (Kineto) on the calling OS
// thread: CPU ops, and CUDA kernels when cuda. The caller must hold the
// thread (runtime.LockOSThread) until ProfileStop.
func ProfileStart(cuda bool) error {
	c := 0
	if cuda {
		c = 1
	}
	var cerr *C.char
	if C.seed_profile_start(C.int(c), &cerr) != 0 {
		return opsErr(cerr)
	}
	return nil
}

// ProfileStop stops the profiler and writes its Chrome trace to path.
func ProfileStop(path string) error {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var cerr *C.char
	if C.seed_profile_stop(cpath, &cerr) != 0 {
		return opsErr(cerr)
	}
	return nil
}

// DecodeAttention is one decode step's attention on the CPU
// (seed_decode_attention): q [B, H, 1, d], k and v [B, KVH, S, d], row b
// attending to its keys from starts[b] on; a new tensor handle [B, H, 1, d].
func DecodeAttention(q, k, v unsafe.Pointer, starts []int64, scale float64) (unsafe.Pointer, error) {
	if len(starts) == 0 {
		return nil, errors.New("decode attention: no rows")
	}
	var out C.seed_tensor
	var cerr *C.char
	if C.seed_decode_attention(C.seed_tensor(q), C.seed_tensor(k), C.seed_tensor(v), (*C.int64_t)(unsafe.Pointer(&starts[0])), C.int64_t(len(starts)), C.double(scale), &out, &cerr) != 0 {
		return nil, opsErr(cerr)
	}
	return unsafe.Pointer(out), nil
}

// DecodeAttentionPortable makes DecodeAttention use its portable loops
// even where the CPU has AVX2 (tests compare both); it returns the
// previous setting.
func DecodeAttentionPortable(on bool) bool {
	c := 0
	if on {
		c = 1
	}
	return C.seed_decode_attention_portable(C.int(c)) == 1
}
