package trainer

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/libtch/c10d"
	"github.com/sugarme/gotch/ts"
)

// Data parallelism over libtorch's own distributed engine, c10d: ranks
// meet at a TCPStore (rank 0 serves it) and form a process group (Gloo
// for CPU ranks, NCCL for CUDA ranks, one GPU each);
// each rank computes gradients on its share of the rows, the gradients
// are summed across ranks in buckets, and every rank then takes the same
// optimizer step, so all ranks hold identical weights. The loss's token
// means use the counts of the whole batch (summed across ranks first),
// so the step equals the single-process step on the concatenated batch.

// DistConfig says how a learner joins a data-parallel group; the fields
// are torchrun's environment (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE).
type DistConfig struct {
	Addr string
	Port int
	// Store, when set, is a file path every rank can reach on one host:
	// the ranks meet there (c10d's FileStore) and no rendezvous port is
	// opened; Port is then unused. Multi-host groups leave it empty.
	Store string
	Rank  int
	World int
	// Timeout bounds the rendezvous and every collective: a rank that
	// died makes the others fail after it instead of hanging.
	Timeout time.Duration
	// BucketBytes is the size of the gradient buckets all-reduced at once
	// (PyTorch DDP's default is 25 MiB).
	BucketBytes int64
	// Backend is the process group's: BackendGloo (CPU tensors, the
	// default when empty) or BackendNCCL (CUDA tensors).
	Backend string
	// Device is this rank's CUDA device index (NCCL): its model's GPU.
	Device int
}

// Process group backends.
const (
	BackendGloo = "gloo"
	BackendNCCL = "nccl"
)

// BackendFor is the backend of ranks whose model is on device: NCCL for
// "cuda"/"cuda:N", Gloo otherwise.
func BackendFor(device string) string {
	if device == "cuda" || strings.HasPrefix(device, "cuda:") {
		return BackendNCCL
	}
	return BackendGloo
}

// CUDAIndex is the GPU index a device name gives ("cuda" is 0, "cuda:N"
// is N); ok is false for a CPU device.
func CUDAIndex(device string) (index int, ok bool) {
	if device == "cuda" {
		return 0, true
	}
	if n, err := strconv.Atoi(strings.TrimPrefix(device, "cuda:")); err == nil && strings.HasPrefix(device, "cuda:") && n >= 0 {
		return n, true
	}
	return 0, false
}

func (c DistConfig) backend() (int, error) {
	switch c.Backend {
	case "", BackendGloo:
		return c10d.Gloo, nil
	case BackendNCCL:
		return c10d.NCCL, nil
	}
	return 0, fmt.Errorf("dist: backend %q: want %s or %s", c.Backend, BackendGloo, BackendNCCL)
}

// DefaultDistConfig is one rank of one (no parallelism) on loopback.
func DefaultDistConfig() DistConfig {
	return DistConfig{Addr: "127.0.0.1", Port: 29500, Rank: 0, World: 1, Timeout: 5 * time.Minute, BucketBytes: 25 << 20}
}

// Validate names the first bad field.
func (c DistConfig) Validate() error {
	switch {
	case c.World < 1:
		return fmt.Errorf("dist: world size %d must be at least 1", c.World)
	case c.Rank < 0 || c.Rank >= c.World:
		return fmt.Errorf("dist: rank %d must be in [0, %d)", c.Rank, c.World)
	case c.Addr == "":
		return errors.New("dist: the rendezvous address (MASTER_ADDR) is empty")
	case c.Store == "" && (c.Port < 1 || c.Port > 65535):
		return fmt.Errorf("dist: port %d (MASTER_PORT) must be in 1..65535", c.Port)
	case c.Timeout <= 0:
		return fmt.Errorf("dist: timeout %v must be positive", c.Timeout)
	case c.BucketBytes < 1:
		return fmt.Errorf("dist: bucket size %d bytes must be positive", c.BucketBytes)
	case c.Device < 0:
		return fmt.Errorf("dist: CUDA device %d must not be negative", c.Device)
	}
	_, err := c.backend()
	return err
}

// DistConfigFromEnv reads torchrun's variables (MASTER_ADDR, MASTER_PORT,
// RANK, WORLD_SIZE) over the defaults; ok is false when WORLD_SIZE is unset.
func DistConfigFromEnv() (cfg DistConfig, ok bool, err error) {
	cfg = DefaultDistConfig()
	ws := os.Getenv("WORLD_SIZE")
	if ws == "" {
		return cfg, false, nil
	}
	num := func(name string, into *int) error {
		v := os.Getenv(name)
		if v == "" {
			return nil
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("dist: %s=%q is not an integer", name, v)
		}
		*into = n
		return nil
	}
	if err := errors.Join(num("WORLD_SIZE", &cfg.World), num("RANK", &cfg.Rank), num("MASTER_PORT", &cfg.Port)); err != nil {
		return cfg, true, err
	}
	if a := os.Getenv("MASTER_ADDR"); a != "" {
		cfg.Addr = a
	}
	return cfg, true, cfg.Validate()
}

// DistAvailable reports whether this build has the backend's process
// group: Gloo with Debian's libtorch and libgloo-dev (PyPI's torch wheels
// ship no Gloo headers); NCCL with a CUDA libtorch 2.x built with NCCL's
// and CUDA's headers (scripts/prepare-gotch.sh, docs/gpu.md).
func DistAvailable(backend string) bool {
	b, err := DistConfig{Backend: backend}.backend()
	return err == nil && c10d.Available(b)
}

// RendezvousBindsAddr reports whether a multi-host rendezvous listens on
// its address alone (libtorch 2.x) or on every interface (libtorch 1.13,
// whose TCPStore cannot be given a bound socket: firewall its port).
// One-host groups (DistConfig.Store) open no port either way.
func RendezvousBindsAddr() bool { return c10d.BindsMasterAddr() }

// ProcessGroup is this process's membership of a data-parallel group.
type ProcessGroup struct {
	h           unsafe.Pointer
	rank, world int
	dev         gotch.Device // where the host numbers reduced go (NCCL: the rank's GPU)
	bucketBytes int64
	comm        CommStats // since the group was formed
}

// CommStats is what a rank spent in collectives: wall time inside them
// (waiting for slower ranks included) and the bytes of the tensors it
// handed them. A ring all-reduce sends about 2(N−1)/N of a tensor's bytes
// per rank over the wire; a broadcast sends the root's tensor to N−1.
type CommStats struct {
	Seconds float64 `json:"comm_s"`
	Bytes   int64   `json:"comm_bytes"`
	Calls   int     `json:"comm_calls"`
}

// Sub is s − o (the part of s after the snapshot o).
func (s CommStats) Sub(o CommStats) CommStats {
	return CommStats{Seconds: s.Seconds - o.Seconds, Bytes: s.Bytes - o.Bytes, Calls: s.Calls - o.Calls}
}

// Comm is what this rank has spent in collectives since the group formed.
func (g *ProcessGroup) Comm() CommStats { return g.comm }

// count adds one collective over xs that began at start.
func (g *ProcessGroup) count(xs []*ts.Tensor, start time.Time) {
	g.comm.Seconds += time.Since(start).Seconds()
	g.comm.Calls++
	for _, x := range xs {
		n := int64(x.DType().Size())
		for _, d := range x.MustSize() {
			n *= d
		}
		g.comm.Bytes += n
	}
}

// NewProcessGroup joins the group cfg names; it returns when all World
// ranks have joined, or fails after cfg.Timeout.
func NewProcessGroup(cfg DistConfig) (*ProcessGroup, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	b, _ := cfg.backend()
	h, err := c10d.New(cfg.Addr, cfg.Port, cfg.Store, cfg.Rank, cfg.World, cfg.Timeout, b, cfg.Device)
	if err != nil {
		at := fmt.Sprintf("%s:%d", cfg.Addr, cfg.Port)
		if cfg.Store != "" {
			at = cfg.Store
		}
		return nil, fmt.Errorf("dist: rank %d of %d joining %s (%s): %w", cfg.Rank, cfg.World, at, cfg.Backend, err)
	}
	dev := gotch.CPU
	if b == c10d.NCCL {
		dev = gotch.CudaBuilder(uint(cfg.Device))
	}
	return &ProcessGroup{h: h, rank: cfg.Rank, world: cfg.World, dev: dev, bucketBytes: cfg.BucketBytes}, nil
}

// Rank is this process's rank; World the group's size.
func (g *ProcessGroup) Rank() int  { return g.rank }
func (g *ProcessGroup) World() int { return g.world }

// Close leaves the group.
func (g *ProcessGroup) Close() {
	if g != nil && g.h != nil {
		c10d.Free(g.h)
		g.h = nil
	}
}

// RankShare is rank's share of xs in a group of world ranks: items rank,
// rank+world, rank+2·world, … (how steps, SFT rows and rescoring are
// split across ranks).
func RankShare[T any](xs []T, rank, world int) []T {
	var out []T
	for i := rank; i < len(xs); i += world {
		out = append(out, xs[i])
	}
	return out
}

func ptrs(xs []*ts.Tensor) []unsafe.Pointer {
	out := make([]unsafe.Pointer, len(xs))
	for i, x := range xs {
		out[i] = x.Ctensor()
	}
	return out
}

// AllReduceSum sums the tensors across the group, in place.
func (g *ProcessGroup) AllReduceSum(xs []*ts.Tensor) error {
	defer g.count(xs, time.Now())
	if err := c10d.AllReduce(g.h, ptrs(xs), c10d.Sum); err != nil {
		return fmt.Errorf("dist: rank %d: all-reduce: %w", g.rank, err)
	}
	return nil
}

// Broadcast copies root's tensors to every rank, in place.
func (g *ProcessGroup) Broadcast(xs []*ts.Tensor, root int) error {
	defer g.count(xs, time.Now())
	if err := c10d.Broadcast(g.h, ptrs(xs), root); err != nil {
		return fmt.Errorf("dist: rank %d: broadcast from %d: %w", g.rank, root, err)
	}
	return nil
}

// Barrier returns when every rank has reached it.
func (g *ProcessGroup) Barrier() error {
	if err := c10d.Barrier(g.h); err != nil {
		return fmt.Errorf("dist: rank %d: barrier: %w", g.rank, err)
	}
	return nil
}

// reduceFloats reduces a few host numbers across the group (op c10d.Sum
// or c10d.Max), in float64.
func (g *ProcessGroup) reduceFloats(v []float64, op int) (out []float64, err error) {
	if len(v) == 0 {
		return nil, nil
	}
	defer guard(&err, "dist: reducing statistics")
	t := ts.MustOfSlice(v)
	if g.dev != gotch.CPU {
		c := must(t.To(g.dev, true))
		drop(t)
		t = c
	}
	defer drop(t)
	defer g.count([]*ts.Tensor{t}, time.Now())
	if err := c10d.AllReduce(g.h, []unsafe.Pointer{t.Ctensor()}, op); err != nil {
		return nil, fmt.Errorf("dist: rank %d: all-reduce of %d numbers: %w", g.rank, len(v), err)
	}
	return t.Float64Values(), nil
}

// SumFloats sums host numbers across the group.
func (g *ProcessGroup) SumFloats(v []float64) ([]float64, error) { return g.reduceFloats(v, c10d.Sum) }

// maxFloats takes each number's maximum across the group.
func (g *ProcessGroup) maxFloats(v []float64) ([]float64, error) { return g.reduceFloats(v, c10d.Max) }

// BroadcastParams makes every rank's weights root's (before the first
// step, so ranks that loaded or initialised differently agree).
func (m *Model) BroadcastParams(g *ProcessGroup, root int) (err error) {
	defer guard(&err, "dist: broadcasting the weights")
	xs := make([]*ts.Tensor, len(m.params))
	for i, p := range m.params {
		xs[i] = p.t
	}
	withoutGrad(func() { err = g.Broadcast(xs, root) })
	return err
}

// allReduceGrads sums every parameter's gradient across the group in
// buckets of about g.bucketBytes: each bucket's gradients (one dtype) are
// flattened into one tensor, all-reduced in one collective and copied back.
// A parameter without a gradient here contributes zeros, so ranks whose
// rows did not reach it still take part.
func (m *Model) allReduceGrads(g *ProcessGroup) (err error) {
	defer guard(&err, "dist: all-reducing gradients")
	if err := m.defineGrads(); err != nil {
		return err
	}
	withoutGrad(func() {
		type item struct {
			grad  *ts.Tensor
			numel int64
		}
		var bucket []item
		var bytes int64
		flush := func() {
			if len(bucket) == 0 || err != nil {
				return
			}
			flat := make([]*ts.Tensor, len(bucket))
			for i, it := range bucket {
				flat[i] = must(it.grad.View([]int64{-1}, false))
			}
			buf := must(ts.Cat(flat, 0))
			drop(flat...)
			if err = g.AllReduceSum([]*ts.Tensor{buf}); err == nil {
				off := int64(0)
				for _, it := range bucket {
					part := must(buf.Narrow(0, off, it.numel, false))
					view := must(it.grad.View([]int64{-1}, false))
					view.Copy_(part)
					drop(part, view)
					off += it.numel
				}
			}
			drop(buf)
			for _, it := range bucket {
				drop(it.grad)
			}
			bucket, bytes = bucket[:0], 0
		}
		var dtype gotch.DType
		for _, p := range m.params {
			gr := must(p.t.Grad(false))
			n := int64(1)
			for _, d := range p.shape {
				n *= d
			}
			size := n * int64(gr.DType().Size())
			if len(bucket) > 0 && (gr.DType() != dtype || bytes+size > g.bucketBytes) {
				flush()
			}
			dtype = gr.DType()
			bucket = append(bucket, item{gr, n})
			bytes += size
		}
		flush()
	})
	return err
}

// defineGrads gives every parameter without a gradient a zero one (a
// backward pass of Σ 0·p), so a rank whose rows reached no parameter yet
// still joins the gradient collectives with the same shapes.
func (m *Model) defineGrads() (err error) {
	defer guard(&err, "defining gradients")
	var missing []*ts.Tensor
	for _, p := range m.params {
		gr := must(p.t.Grad(false))
		if !gr.MustDefined() {
			missing = append(missing, p.t)
		}
		drop(gr)
	}
	if len(missing) == 0 {
		return nil
	}
	var total *ts.Tensor
	for _, t := range missing {
		z := mulScalar(t, 0, false)
		s := must(z.Sum(z.DType(), true))
		if total == nil {
			total = s
		} else {
			total = must(total.Add(s, true))
			drop(s)
		}
	}
	must0(total.Backward())
	drop(total)
	return nil
}

// CheckProcessGroup forms a one-rank group of the backend on a free
// loopback port and runs each collective the trainer uses on a tensor of
// the backend's device (NCCL: CUDA device index device), checking the
// results; it says how long that took, or which step failed. seedctl
// doctor runs it.
func CheckProcessGroup(backend string, device int, timeout time.Duration) (took time.Duration, err error) {
	start := time.Now()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("dist check: a loopback port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cfg := DefaultDistConfig()
	cfg.Port, cfg.Backend, cfg.Device, cfg.Timeout = port, backend, device, timeout
	g, err := NewProcessGroup(cfg)
	if err != nil {
		return 0, err
	}
	defer g.Close()
	defer guard(&err, "dist check")
	x := ts.MustOfSlice([]float32{1, 2, 3})
	if g.dev != gotch.CPU {
		c := must(x.To(g.dev, true))
		drop(x)
		x = c
	}
	defer drop(x)
	if err := g.AllReduceSum([]*ts.Tensor{x}); err != nil {
		return 0, err
	}
	if err := g.Broadcast([]*ts.Tensor{x}, 0); err != nil {
		return 0, err
	}
	if err := g.Barrier(); err != nil {
		return 0, err
	}
	back := must(x.To(gotch.CPU, false))
	defer drop(back)
	if v := back.Float64Values(); len(v) != 3 || v[0] != 1 || v[1] != 2 || v[2] != 3 {
		return 0, fmt.Errorf("dist check: one rank's all-reduce and broadcast of [1 2 3] gave %v", v)
	}
	return time.Since(start), nil
}
