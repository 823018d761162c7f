package trainer

import (
	"os"
	"strconv"

	"github.com/sugarme/gotch/ts"
)

// DefaultTensorBallast is the Go memory each libtorch tensor's wrapper
// carries (bytes). gotch's own is 100 kB, so that the Go heap grows with
// the C tensors and the GC runs their finalizers often; allocating and
// zeroing it was a fifth of the embedded server's decode time. seedctl
// frees its tensors itself (the leak tests count them), so a small one
// suffices to keep a leak from growing without bound between collections.
// SEEDCTL_TENSOR_BALLAST overrides it (e.g. 100000: gotch's).
const DefaultTensorBallast = 4096

func init() {
	ts.Ballast = DefaultTensorBallast
	if v := os.Getenv("SEEDCTL_TENSOR_BALLAST"); v != "" {
		if n, err := strconv.Atoi(v); err == nil && n >= 0 {
			ts.Ballast = n
		}
	}
}

// LiveTensors is the number of libtorch tensors created through gotch
// and not yet freed (leak tests).
func LiveTensors() int { return ts.LiveTensors() }
