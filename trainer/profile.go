package trainer

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/sugarme/gotch/libtch/seedops"
	"github.com/sugarme/gotch/ts"
)

// Profile runs fn under libtorch's own profiler (Kineto, the one
// torch.profiler drives) and writes its Chrome trace to path: the libtorch
// ops fn calls and, on CUDA, the kernels and copies they launch, so that a
// step of seedctl's and the same step in PyTorch eager can be compared
// kernel by kernel (scripts/gpu/trace_summary.py). fn runs locked to one
// OS thread: the profiler records the ops of the thread that started it
// and of the autograd threads it hands work to. A libtorch built without
// Kineto (Debian's) cannot write a trace: Profile says so.
func (m *Model) Profile(path string, fn func() error) (err error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := seedops.ProfileStart(m.device.IsCuda()); err != nil {
		return fmt.Errorf("profile: %w", err)
	}
	ferr := fn()
	if m.device.IsCuda() {
		// The kernels fn launched finish inside the trace.
		if err := ts.CudaSynchronize(); err != nil && ferr == nil {
			ferr = fmt.Errorf("profile: synchronising CUDA: %w", err)
		}
	}
	if err := seedops.ProfileStop(path); err != nil {
		return errors.Join(ferr, fmt.Errorf("profile: %w", err))
	}
	return ferr
}
