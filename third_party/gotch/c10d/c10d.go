// Package c10d is seedctl's binding of libtorch's c10d (c10d_shim.h);
// scripts/prepare-gotch.sh copies it into gotch's tree as libtch/c10d with
// libtch's cgo flags.
package c10d

// #include <stdlib.h>
// #include "c10d_shim.h"
import "C"

import (
	"errors"
	"time"
	"unsafe"
)

func c10dErr(cerr *C.char) error {
	if cerr == nil {
		return errors.New("c10d: unknown error")
	}
	defer C.free(unsafe.Pointer(cerr))
	return errors.New(C.GoString(cerr))
}

// Process group backends.
const (
	Gloo = 0 // CPU tensors
	NCCL = 1 // CUDA tensors
)

// Available reports whether this build has the backend's process group.
func Available(backend int) bool { return C.seed_c10d_available(C.int(backend)) == 1 }

// BindsMasterAddr reports whether rank 0's TCP rendezvous listens on its
// address alone (libtorch 2.x) rather than on every interface (1.13).
func BindsMasterAddr() bool { return C.seed_c10d_binds_master_addr() == 1 }

// New joins a process group of the backend: through the FileStore at
// storeFile when it is not empty (ranks on one host; no port opened),
// else through a TCPStore at host:port that rank 0 serves; device is the
// rank's CUDA device (NCCL).
func New(host string, port int, storeFile string, rank, world int, timeout time.Duration, backend, device int) (unsafe.Pointer, error) {
	ch := C.CString(host)
	defer C.free(unsafe.Pointer(ch))
	cf := C.CString(storeFile)
	defer C.free(unsafe.Pointer(cf))
	var cerr *C.char
	pg := C.seed_c10d_new(ch, C.int(port), cf, C.int(rank), C.int(world), C.int64_t(timeout.Milliseconds()), C.int(backend), C.int(device), &cerr)
	if pg == nil {
		return nil, c10dErr(cerr)
	}
	return unsafe.Pointer(pg), nil
}

// Reduction operations of AllReduce.
const (
	Sum = 0
	Max = 1
)

// AllReduce reduces ts across the group in place (op Sum or Max).
func AllReduce(pg unsafe.Pointer, ts []unsafe.Pointer, op int) error {
	if len(ts) == 0 {
		return nil
	}
	var cerr *C.char
	if C.seed_c10d_allreduce(C.seed_pg(pg), (*C.seed_tensor)(unsafe.Pointer(&ts[0])), C.int(len(ts)), C.int(op), &cerr) != 0 {
		return c10dErr(cerr)
	}
	return nil
}

// Broadcast copies root's ts to every rank.
func Broadcast(pg unsafe.Pointer, ts []unsafe.Pointer, root int) error {
	if len(ts) == 0 {
		return nil
	}
	var cerr *C.char
	if C.seed_c10d_broadcast(C.seed_pg(pg), (*C.seed_tensor)(unsafe.Pointer(&ts[0])), C.int(len(ts)), C.int(root), &cerr) != 0 {
		return c10dErr(cerr)
	}
	return nil
}

// Barrier waits for every rank.
func Barrier(pg unsafe.Pointer) error {
	var cerr *C.char
	if C.seed_c10d_barrier(C.seed_pg(pg), &cerr) != 0 {
		return c10dErr(cerr)
	}
	return nil
}

// Free leaves the group.
func Free(pg unsafe.Pointer) { C.seed_c10d_free(C.seed_pg(pg)) }
