package trainer

import (
	"context"
	"fmt"
	"time"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"
)

// MatmulResult is a measured square fp32 matrix-multiply rate.
type MatmulResult struct {
	N       int64
	Iters   int
	Elapsed time.Duration
	GFLOPS  float64
	Device  string
}

// MeasureMatmul multiplies two n×n fp32 matrices repeatedly for at least
// minTime (after one warm-up product) and reports the rate. It is the peak
// that model-FLOPs utilisation is measured against.
func MeasureMatmul(ctx context.Context, n int64, minTime time.Duration, cuda bool) (MatmulResult, error) {
	if n <= 0 {
		return MatmulResult{}, fmt.Errorf("measuring matmul: size %d must be positive", n)
	}
	dev, name := gotch.CPU, "CPU"
	if cuda {
		dev, name = gotch.CudaBuilder(0), "CUDA"
	}
	a, err := ts.Randn([]int64{n, n}, gotch.Float, dev)
	if err != nil {
		return MatmulResult{}, fmt.Errorf("measuring matmul: allocating %dx%d: %w", n, n, err)
	}
	defer a.MustDrop()
	b, err := ts.Randn([]int64{n, n}, gotch.Float, dev)
	if err != nil {
		return MatmulResult{}, fmt.Errorf("measuring matmul: allocating %dx%d: %w", n, n, err)
	}
	defer b.MustDrop()

	step := func() error {
		c, err := a.Matmul(b, false)
		if err != nil {
			return fmt.Errorf("measuring matmul: %w", err)
		}
		c.MustDrop()
		return nil
	}
	sync := func() error {
		if cuda {
			return ts.CudaSynchronize()
		}
		return nil
	}
	if err := step(); err != nil { // warm-up: thread pools, allocator
		return MatmulResult{}, err
	}
	if err := sync(); err != nil {
		return MatmulResult{}, err
	}
	start := time.Now()
	iters := 0
	for {
		if err := ctx.Err(); err != nil {
			return MatmulResult{}, fmt.Errorf("measuring matmul: %w", err)
		}
		if err := step(); err != nil {
			return MatmulResult{}, err
		}
		iters++
		if time.Since(start) >= minTime {
			break
		}
	}
	if err := sync(); err != nil {
		return MatmulResult{}, err
	}
	el := time.Since(start)
	flops := 2 * float64(n) * float64(n) * float64(n) * float64(iters)
	return MatmulResult{N: n, Iters: iters, Elapsed: el, GFLOPS: flops / el.Seconds() / 1e9, Device: name}, nil
}
