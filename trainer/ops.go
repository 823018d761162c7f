package trainer

import (
	"errors"
	"fmt"
	"runtime"

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
