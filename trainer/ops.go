package trainer

import (
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"unsafe"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"
)

// gotch's Must* functions call log.Fatal on a libtorch error, which would
// take a whole server down. The trainer calls the error-returning variants
// through must(), which panics with a torchError, and every exported entry
// point turns that panic back into an error with guard().

type torchError struct{ err error }

func (e torchError) Error() string { return e.err.Error() }
func (e torchError) Unwrap() error { return e.err }

// ErrTorch marks errors that came from libtorch.
var ErrTorch = errors.New("libtorch")

func must(t *ts.Tensor, err error) *ts.Tensor {
	if err != nil {
		panic(torchError{fmt.Errorf("%w: %w", ErrTorch, err)})
	}
	return t
}

func must0(err error) {
	if err != nil {
		panic(torchError{fmt.Errorf("%w: %w", ErrTorch, err)})
	}
}

// guard converts a torchError panic into *err, prefixed with what was being
// done. Other panics are programming errors and propagate.
func guard(err *error, what string) {
	if r := recover(); r != nil {
		te, ok := r.(torchError)
		if !ok {
			panic(r)
		}
		*err = fmt.Errorf("%s: %w", what, te.err)
	}
}

// noBias stands for an absent bias in torch::linear (a null tensor pointer).
var noBias = &ts.Tensor{}

func linear(x, w, b *ts.Tensor) *ts.Tensor {
	if b == nil {
		b = noBias
	}
	return must(ts.Linear(x, w, b))
}

// withoutGrad runs fn with autograd off. libtorch's grad mode is per OS
// thread, so the goroutine is pinned to its thread for the duration.
func withoutGrad(fn func()) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	prev, err := ts.GradSetEnabled(false)
	must0(err)
	defer func() {
		_, err := ts.GradSetEnabled(prev)
		must0(err)
	}()
	fn()
}

// drop frees tensors now instead of at the next garbage collection, which
// does not see libtorch's memory.
func drop(xs ...*ts.Tensor) {
	for _, x := range xs {
		if x != nil && x != noBias {
			x.MustDrop()
		}
	}
}

// Scalars handed to libtorch carry a finalizer that frees their C side; Go
// may run it as soon as the last Go use is passed, even while the C call is
// still reading the scalar. These helpers keep the scalar alive until the
// call returns.

func mulScalar(x *ts.Tensor, v float64, del bool) *ts.Tensor {
	s := ts.FloatScalar(v)
	out := must(x.MulScalar(s, del))
	runtime.KeepAlive(s)
	return out
}

func addScalar(x *ts.Tensor, v float64, del bool) *ts.Tensor {
	s := ts.FloatScalar(v)
	out := must(x.AddScalar(s, del))
	runtime.KeepAlive(s)
	return out
}

// scalarFloat reads a one-element tensor as float64. gotch's Float64Values
// converts to a temporary it does not keep alive across the copy, so the
// garbage collector may free it mid-read; here every tensor involved stays
// referenced until the copy is done.
func scalarFloat(t *ts.Tensor) float64 {
	d := must(t.Totype(gotch.Double, false))
	c := must(d.To(gotch.CPU, false))
	out := make([]float64, 1)
	must0(c.CopyData(out, 1))
	runtime.KeepAlive(t)
	drop(c, d)
	return out[0]
}

// scalarInt reads a one-element integer tensor.
func scalarInt(t *ts.Tensor) int64 {
	d := must(t.Totype(gotch.Int64, false))
	c := must(d.To(gotch.CPU, false))
	out := make([]int64, 1)
	must0(c.CopyData(out, 1))
	runtime.KeepAlive(t)
	drop(c, d)
	return out[0]
}

// quiesceGC runs a full collection and waits until the finalizers it
// queued (gotch frees tensors in finalizers) have run, so none runs while
// libtorch computes. Training calls it between steps with automatic GC off:
// finalizers that fire mid-step have been seen to perturb backward passes
// in the last bits, breaking same-seed reproducibility.
func quiesceGC() {
	runtime.GC()
	done := make(chan struct{})
	sentinel := new([16]byte)
	runtime.SetFinalizer(sentinel, func(*[16]byte) { close(done) })
	sentinel = nil
	runtime.GC()
	<-done
}

// uploads and readBacks count the copies of host memory to a tensor's
// device (upload) and of tensors to host memory (hostCopy) since the
// process started: on a GPU each waits for the device's queue to drain,
// so tests hold hot paths to a fixed number of them.
var uploads, readBacks atomic.Int64

// fromSlice makes a CPU tensor of the given shape from vals with one
// memcpy; gotch's OfSlice encodes element by element through reflection,
// which dominated step time for attention masks of long sequences.
func fromSlice[T float32 | int64 | float64](vals []T, shape []int64) *ts.Tensor {
	dt := dtypeOf[T]()
	if numel(shape) != int64(len(vals)) {
		panic(torchError{fmt.Errorf("fromSlice: %d values for shape %v", len(vals), shape)})
	}
	t := must(ts.Empty(shape, dt, gotch.CPU))
	if len(vals) > 0 {
		p, err := t.DataPtr()
		must0(err)
		copy(unsafe.Slice((*T)(p), len(vals)), vals)
	}
	return t
}

// upload copies vals to a new tensor of the given shape on dev.
func upload[T float32 | int64 | float64](vals []T, shape []int64, dev gotch.Device) *ts.Tensor {
	uploads.Add(1)
	return must(fromSlice(vals, shape).To(dev, true))
}

// dtypeOf is the libtorch dtype of a Go element type.
func dtypeOf[T float32 | int64 | float64]() gotch.DType {
	var zero T
	switch any(zero).(type) {
	case int64:
		return gotch.Int64
	case float64:
		return gotch.Double
	}
	return gotch.Float
}

// toSlice copies x's values (its dtype must be T's: Float, Int64 or
// Double) to a new Go slice, in x's logical order; x is kept. gotch's
// CopyData checks its destination element by element through reflection
// (an allocation each): 4 ms for a decode step's 64 × 1,295 logits, a
// fifth of the step.
func toSlice[T float32 | int64 | float64](x *ts.Tensor) []T {
	want := dtypeOf[T]()
	if x.DType() != want {
		panic(torchError{fmt.Errorf("toSlice: a %v tensor read as %v", x.DType(), want)})
	}
	return hostCopy[T](x)
}

// hostCopy copies x's data, in its logical order, into a new slice of T
// with one memcpy from a contiguous CPU copy; x is kept. T's size must
// divide the data's (toSlice: x's own element type; tensorBytes: bytes).
func hostCopy[T any](x *ts.Tensor) []T {
	readBacks.Add(1)
	c := must(must(x.To(gotch.CPU, false)).Contiguous(true))
	defer drop(c)
	var zero T
	n := int(c.Numel()) * int(c.DType().Size()) / int(unsafe.Sizeof(zero))
	out := make([]T, n)
	if n > 0 {
		p, err := c.DataPtr()
		must0(err)
		copy(out, unsafe.Slice((*T)(p), n))
	}
	return out
}

// pinThread keeps the calling goroutine on its OS thread until the returned
// function runs. A training step whose libtorch calls move between OS
// threads midway is not bit-reproducible (measured: 1–3 distinct gradients
// in 20 repeats of one forward+backward; 0 in 24 when each repeat stays on
// one thread, whichever thread that is), so steps run pinned. It is also
// faster on CPU: libtorch's intra-op pool (OpenMP) is the calling
// thread's, so calls that wander between threads wake several pools whose
// workers then spin against each other for the cores (the step benchmark
// ran 1.1–1.9× faster pinned on 2 cores: README, Benchmarks).
func pinThread() func() {
	runtime.LockOSThread()
	return runtime.UnlockOSThread
}
