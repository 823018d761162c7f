package trainer

import (
	"context"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"

	"github.com/seedctl/seedctl/internal/loopback"
)

// needDist skips where this libtorch build has no Gloo process group
// (PyPI's torch wheels ship no Gloo headers) and fails on Debian's
// libtorch 1.13, where ./setup.sh installs what it needs.
func needDist(t *testing.T) {
	t.Helper()
	if DistAvailable(BackendGloo) {
		return
	}
	if info, err := Runtime(); err == nil && strings.HasPrefix(info.LibtorchVersion, "1.13") {
		t.Fatal("Debian's libtorch 1.13 but no Gloo process group: libgloo-dev missing when gotch was prepared? (./setup.sh)")
	}
	t.Skip("this libtorch build has no Gloo process group")
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// onRanks runs fn on world ranks of one group (goroutines of this process,
// each with its own process group, as separate processes would have) and
// returns their errors.
func onRanks(t *testing.T, world int, fn func(g *ProcessGroup) error) []error {
	t.Helper()
	return onRanksAt(t, "127.0.0.1", world, fn)
}

// onRanksAt is onRanks with the rendezvous at addr.
func onRanksAt(t *testing.T, addr string, world int, fn func(g *ProcessGroup) error) []error {
	t.Helper()
	return onRanksWith(t, addr, freePort(t), "", world, fn)
}

// onRanksWith is onRanks with the rendezvous at addr:port, or in the
// file store when it is not empty.
func onRanksWith(t *testing.T, addr string, port int, store string, world int, fn func(g *ProcessGroup) error) []error {
	t.Helper()
	defer debug.SetGCPercent(debug.SetGCPercent(100)) // the steps' GC switching interleaves across ranks
	errs := make([]error, world)
	var wg sync.WaitGroup
	for r := 0; r < world; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			cfg := DefaultDistConfig()
			cfg.Addr, cfg.Port, cfg.Rank, cfg.World, cfg.Timeout = addr, port, r, world, 60*time.Second
			cfg.Store = store
			g, err := NewProcessGroup(cfg)
			if err != nil {
				errs[r] = err
				return
			}
			defer g.Close()
			errs[r] = fn(g)
		}(r)
	}
	wg.Wait()
	return errs
}

func TestProcessGroupCollectives(t *testing.T) {
	needDist(t)
	const world = 3
	got := make([][]float64, world)
	errs := onRanks(t, world, func(g *ProcessGroup) error {
		r := float64(g.Rank())
		a := ts.MustOfSlice([]float32{1 + float32(r), 10 * float32(r)})
		b := ts.MustOfSlice([]float64{r})
		defer drop(a, b)
		if err := g.AllReduceSum([]*ts.Tensor{a, b}); err != nil {
			return err
		}
		c := ts.MustOfSlice([]float32{100 + float32(r)})
		defer drop(c)
		if err := g.Broadcast([]*ts.Tensor{c}, 2); err != nil {
			return err
		}
		mx, err := g.maxFloats([]float64{-r, r * r})
		if err != nil {
			return err
		}
		if err := g.Barrier(); err != nil {
			return err
		}
		av := a.Float64Values()
		got[g.Rank()] = []float64{av[0], av[1], b.Float64Values()[0], c.Float64Values()[0], mx[0], mx[1]}
		return nil
	})
	want := []float64{6, 30, 3, 102, 0, 4} // 1+2+3, 0+10+20, 0+1+2, rank 2's, max(0,−1,−2), max(0,1,4)
	for r := range world {
		if errs[r] != nil {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
		for i := range want {
			if got[r][i] != want[i] { // −0 == 0
				t.Errorf("rank %d: %v, want %v", r, got[r], want)
				break
			}
		}
	}
}

// sumOfTwo all-reduces rank+1 over a group of two and checks the sum.
func sumOfTwo(g *ProcessGroup) error {
	x := ts.MustOfSlice([]float32{float32(g.Rank() + 1)})
	defer drop(x)
	if err := g.AllReduceSum([]*ts.Tensor{x}); err != nil {
		return err
	}
	if v := x.Float64Values()[0]; v != 3 {
		return fmt.Errorf("sum %v, want 3", v)
	}
	return nil
}

// With the rendezvous at a host address (several hosts), each rank's Gloo
// device is its own host's (GLOO_SOCKET_IFNAME's interface, or what its
// name resolves to), not the master's address: the collectives work both
// ways. (Before, every rank bound the master's address, which on another
// host is not a local one; one host cannot show that failure, only that
// the new choices work.)
func TestProcessGroupAtAHostAddress(t *testing.T) {
	needDist(t)
	var addr, iface string
	ifs, _ := net.Interfaces()
	for _, in := range ifs {
		addrs, _ := in.Addrs()
		for _, a := range addrs {
			if ip, ok := a.(*net.IPNet); ok && ip.IP.To4() != nil && !ip.IP.IsLoopback() && in.Flags&net.FlagUp != 0 && addr == "" {
				addr, iface = ip.IP.String(), in.Name
			}
		}
	}
	if addr == "" {
		t.Skip("no IPv4 address besides loopback")
	}
	for _, ifname := range []string{"", iface} {
		t.Run("GLOO_SOCKET_IFNAME="+ifname, func(t *testing.T) {
			t.Setenv("GLOO_SOCKET_IFNAME", ifname)
			errs := onRanksAt(t, addr, 2, sumOfTwo)
			for r, err := range errs {
				if err != nil {
					t.Errorf("rank %d at %s: %v", r, addr, err)
				}
			}
		})
	}
}

func TestDistConfig(t *testing.T) {
	for _, c := range []struct {
		mod  func(*DistConfig)
		want string
	}{
		{func(c *DistConfig) { c.World = 0 }, "world size"},
		{func(c *DistConfig) { c.Rank = 2; c.World = 2 }, "rank 2"},
		{func(c *DistConfig) { c.Addr = "" }, "MASTER_ADDR"},
		{func(c *DistConfig) { c.Port = 70000 }, "MASTER_PORT"},
		{func(c *DistConfig) { c.Timeout = 0 }, "timeout"},
	} {
		cfg := DefaultDistConfig()
		c.mod(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want it to name %q", cfg, err, c.want)
		}
	}
	t.Setenv("WORLD_SIZE", "4")
	t.Setenv("RANK", "3")
	t.Setenv("MASTER_ADDR", "10.0.0.7")
	t.Setenv("MASTER_PORT", "29600")
	cfg, ok, err := DistConfigFromEnv()
	if err != nil || !ok || cfg.World != 4 || cfg.Rank != 3 || cfg.Addr != "10.0.0.7" || cfg.Port != 29600 {
		t.Errorf("from torchrun's variables: %+v %v %v", cfg, ok, err)
	}
	t.Setenv("RANK", "x")
	if _, _, err := DistConfigFromEnv(); err == nil || !strings.Contains(err.Error(), `RANK="x"`) {
		t.Errorf("RANK=x: %v", err)
	}
}

// paramValues copies every parameter to host memory.
func paramValues(m *Model) [][]float64 {
	out := make([][]float64, len(m.params))
	for i, p := range m.params {
		out[i] = p.t.Float64Values()
	}
	return out
}

// Data parallelism is exact: 2 and 4 ranks, each stepping on its share of
// the rows (with 4 ranks and 3 rows one rank has none), end 3 steps with
// the weights and statistics of one process stepping on the whole batch,
// and every rank holds the same weights, bit for bit. The ranks start from
// different weights; rank 0's are broadcast first.
func TestDataParallelRLStepEqualsSingleProcess(t *testing.T) {
	needDist(t)
	const steps = 3
	cfg := DefaultRLConfig()
	cfg.Lambda, cfg.KLCoef, cfg.MicroBatchTokens = 0.5, 0, 8
	single, _ := newTiny(t, ArchQwen2, 21)
	batch := withTeacher(rlBatch(t, single, []float64{0.7, -1.2, 0.5}), 0.4)
	init := paramValues(single)
	opt, _ := single.NewAdamW(1e-2, 0.01)
	var want []RLStats
	for range steps {
		st, err := single.RLStep(opt, batch, cfg)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, st)
	}
	ref := paramValues(single)
	for _, world := range []int{2, 4} {
		t.Run(fmt.Sprintf("%d ranks", world), func(t *testing.T) {
			vals := make([][][]float64, world)
			stats := make([][]RLStats, world)
			errs := onRanks(t, world, func(g *ProcessGroup) error {
				m, _ := newTiny(t, ArchQwen2, uint64(21+100*g.Rank())) // rank 0 alone starts from the reference weights
				if err := m.BroadcastParams(g, 0); err != nil {
					return err
				}
				shard := RankShare(batch, g.Rank(), world)
				o, _ := m.NewAdamW(1e-2, 0.01)
				for range steps {
					st, err := m.RLStepDist(o, g, shard, cfg)
					if err != nil {
						return err
					}
					stats[g.Rank()] = append(stats[g.Rank()], st)
				}
				vals[g.Rank()] = paramValues(m)
				return nil
			})
			for r, err := range errs {
				if err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
			}
			// The gradients agree to float32 rounding (summed in another
			// order); AdamW divides by √v, which turns rounding on a
			// near-zero gradient into a visible step on that element, so the
			// updates are compared as a whole: ‖Δdp − Δ‖ / ‖Δ‖.
			var diff2, upd2 float64
			for i := range ref {
				for j := range ref[i] {
					d, u := vals[0][i][j]-ref[i][j], ref[i][j]-init[i][j]
					diff2, upd2 = diff2+d*d, upd2+u*u
					for r := 1; r < world; r++ {
						if vals[r][i][j] != vals[0][i][j] {
							t.Fatalf("rank %d's parameter %d differs from rank 0's at %d: %v vs %v", r, i, j, vals[r][i][j], vals[0][i][j])
						}
					}
				}
			}
			if rel := math.Sqrt(diff2 / upd2); rel > 1e-3 {
				t.Errorf("after %d steps the update differs from one process's by %.2g of its norm", steps, rel)
			} else {
				t.Logf("after %d steps: update differs from one process's by %.2g of its norm; ranks identical", steps, rel)
			}
			for k, w := range want {
				for r := range world {
					s := stats[r][k]
					// Every step all-reduces at least each float32 gradient once.
					if s.CommStats == nil || s.CommStats.Bytes < 4*18752 || s.CommStats.Calls < 2 || s.CommStats.Seconds <= 0 {
						t.Errorf("step %d rank %d: collectives %+v, want at least the 18,752 gradients' bytes", k, r, s.CommStats)
					}
					if w.CommStats != nil {
						t.Errorf("one process reports collectives: %+v", w.CommStats)
					}
					if s.Tokens != w.Tokens || s.DistillTokens != w.DistillTokens || s.Sequences != w.Sequences ||
						math.Abs(s.Loss-w.Loss) > 1e-6 || math.Abs(s.GradNorm-w.GradNorm) > 1e-5*w.GradNorm ||
						math.Abs(s.GateMean-w.GateMean) > 1e-6 || math.Abs(s.ClipFrac-w.ClipFrac) > 1e-9 || math.Abs(s.Entropy-w.Entropy) > 1e-6 {
						t.Errorf("step %d rank %d: stats %+v, one process %+v", k, r, s, w)
					}
				}
			}
		})
	}
}

// After one backward pass the summed gradients are one process's on the
// whole batch to float32 rounding, on every rank.
func TestDataParallelGradientsEqualSingleProcess(t *testing.T) {
	needDist(t)
	cfg := DefaultRLConfig()
	cfg.Lambda, cfg.MicroBatchTokens = 0.5, 8
	single, _ := newTiny(t, ArchQwen2, 22)
	batch := withTeacher(rlBatch(t, single, []float64{0.7, -1.2, 0.5}), 0.4)
	if _, err := single.rlBackward(batch, cfg); err != nil {
		t.Fatal(err)
	}
	grads := func(m *Model) [][]float64 {
		out := make([][]float64, len(m.params))
		for i, p := range m.params {
			g := must(p.t.Grad(false))
			out[i] = g.Float64Values()
			drop(g)
		}
		return out
	}
	want := grads(single)
	const world = 2
	got := make([][][]float64, world)
	errs := onRanks(t, world, func(g *ProcessGroup) error {
		m, _ := newTiny(t, ArchQwen2, 22)
		shard := RankShare(batch, g.Rank(), world)
		if _, err := m.rlStep(nil, g, shard, cfg); err != nil {
			return err
		}
		got[g.Rank()] = grads(m)
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	for r := range world {
		for i := range want {
			for j := range want[i] {
				if d := math.Abs(got[r][i][j] - want[i][j]); d > 1e-6 {
					t.Fatalf("rank %d, parameter %s[%d]: gradient %v, one process %v", r, single.params[i].name, j, got[r][i][j], want[i][j])
				}
			}
		}
	}
}

// ZeRO-1: with the optimizer sharded, every rank keeps the moments of
// about 1/World of the elements, and the weights after 3 steps are the
// unsharded data-parallel run's bit for bit, on every rank; each rank's
// state file restores its shard.
func TestShardedAdamWEqualsUnsharded(t *testing.T) {
	needDist(t)
	cfg := DefaultRLConfig()
	cfg.Lambda, cfg.MicroBatchTokens = 0.5, 8
	ref, _ := newTiny(t, ArchQwen2, 23)
	batch := withTeacher(rlBatch(t, ref, []float64{0.7, -1.2, 0.5}), 0.4)
	total := int64(0)
	for _, p := range ref.params {
		n := int64(1)
		for _, d := range p.shape {
			n *= d
		}
		total += n
	}
	for _, world := range []int{2, 4} {
		t.Run(fmt.Sprintf("%d ranks", world), func(t *testing.T) {
			run := func(sharded bool) ([][][]float64, []int64) {
				vals := make([][][]float64, world)
				owned := make([]int64, world)
				errs := onRanks(t, world, func(g *ProcessGroup) error {
					m, _ := newTiny(t, ArchQwen2, 23)
					shard := RankShare(batch, g.Rank(), world)
					o, err := m.NewAdamW(1e-2, 0.01)
					if sharded {
						o, err = m.NewShardedAdamW(1e-2, 0.01, g)
					}
					if err != nil {
						return err
					}
					for range 3 {
						if _, err := m.RLStepDist(o, g, shard, cfg); err != nil {
							return err
						}
					}
					owned[g.Rank()] = o.ownedElements()
					if sharded {
						// Each rank's state file holds its shard, and loads back.
						dir := t.TempDir()
						if err := o.SaveState(dir); err != nil {
							return err
						}
						o2, err := m.NewShardedAdamW(1e-2, 0.01, g)
						if err != nil {
							return err
						}
						if err := o2.LoadState(dir); err != nil {
							return err
						}
						for i := range o.exp {
							if (o.exp[i] == nil) != (o2.exp[i] == nil) {
								return fmt.Errorf("rank %d: parameter %d owned by one optimizer, not the other", g.Rank(), i)
							}
							if o.exp[i] != nil && fmt.Sprint(o.expSq[i].Float64Values()) != fmt.Sprint(o2.expSq[i].Float64Values()) {
								return fmt.Errorf("rank %d: parameter %d's second moment did not load back", g.Rank(), i)
							}
						}
						if o2.Steps() != 3 {
							return fmt.Errorf("rank %d: loaded step %d, want 3", g.Rank(), o2.Steps())
						}
					}
					vals[g.Rank()] = paramValues(m)
					return nil
				})
				for r, err := range errs {
					if err != nil {
						t.Fatalf("rank %d: %v", r, err)
					}
				}
				return vals, owned
			}
			plain, _ := run(false)
			sharded, owned := run(true)
			for r := range world {
				for i := range plain[0] {
					for j := range plain[0][i] {
						if sharded[r][i][j] != plain[0][i][j] {
							t.Fatalf("rank %d, parameter %d[%d]: sharded %v, unsharded %v", r, i, j, sharded[r][i][j], plain[0][i][j])
						}
					}
				}
			}
			sum := int64(0)
			for r, n := range owned {
				sum += n
				if float64(n) > 1.5*float64(total)/float64(world) {
					t.Errorf("rank %d keeps moments of %d of %d elements, want about 1/%d", r, n, total, world)
				}
			}
			if sum != total {
				t.Errorf("the shards cover %d elements, the model has %d", sum, total)
			}
			t.Logf("moments per rank: %v of %d elements", owned, total)
		})
	}
	o, _ := ref.NewAdamW(1e-2, 0)
	o.owner = []int{0}
	if _, err := ref.RLStep(o, batch, cfg); err == nil || !strings.Contains(err.Error(), "RLStepDist") {
		t.Errorf("RLStep with a sharded optimizer: %v", err)
	}
}

// A rank that never joins makes the others fail after the timeout, naming
// the rendezvous, instead of hanging.
func TestProcessGroupTimesOut(t *testing.T) {
	needDist(t)
	cfg := DefaultDistConfig()
	cfg.Port, cfg.Rank, cfg.World, cfg.Timeout = freePort(t), 0, 2, 2*time.Second
	start := time.Now()
	g, err := NewProcessGroup(cfg)
	if err == nil {
		g.Close()
		t.Fatal("joined a group of 2 alone")
	}
	if time.Since(start) > 30*time.Second || !strings.Contains(err.Error(), "rank 0 of 2") {
		t.Errorf("after %v: %v", time.Since(start), err)
	}
}

// Data-parallel SFT: 2 ranks, each computing its share of every step's
// rows, end with one process's weights (to a small share of the update's
// norm, as for RL) and the same reported losses; ranks are bit-identical.
func TestDataParallelSFTEqualsSingleProcess(t *testing.T) {
	needDist(t)
	data := copyTask(40, 3)
	cfg := DefaultSFTConfig()
	cfg.Epochs, cfg.BatchTokens, cfg.MaxLen, cfg.LR = 1, 256, 64, 1e-3
	newModel := func(seed uint64) *Model {
		c := tinyConfig(ArchQwen2)
		m, err := InitRandom(c, ModelOptions{}, seed)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	single := newModel(5)
	init := paramValues(single)
	var losses []float64
	if err := TrainSFT(context.Background(), single, data, cfg, func(p SFTProgress) { losses = append(losses, p.Loss) }); err != nil {
		t.Fatal(err)
	}
	ref := paramValues(single)
	const world = 2
	vals := make([][][]float64, world)
	rankLosses := make([][]float64, world)
	errs := onRanks(t, world, func(g *ProcessGroup) error {
		m := newModel(uint64(5 + 10*g.Rank())) // rank 1 starts elsewhere: rank 0's weights are broadcast
		err := TrainSFTDist(context.Background(), m, data, cfg, g, func(p SFTProgress) {
			rankLosses[g.Rank()] = append(rankLosses[g.Rank()], p.Loss)
		})
		vals[g.Rank()] = paramValues(m)
		return err
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	if len(losses) < 2 {
		t.Fatalf("%d steps: the test needs several", len(losses))
	}
	var diff2, upd2 float64
	for i := range ref {
		for j := range ref[i] {
			d, u := vals[0][i][j]-ref[i][j], ref[i][j]-init[i][j]
			diff2, upd2 = diff2+d*d, upd2+u*u
			if vals[1][i][j] != vals[0][i][j] {
				t.Fatalf("rank 1's parameter %d differs from rank 0's at %d", i, j)
			}
		}
	}
	if rel := math.Sqrt(diff2 / upd2); rel > 1e-3 {
		t.Errorf("after %d SFT steps the update differs from one process's by %.2g of its norm", len(losses), rel)
	} else {
		t.Logf("%d SFT steps: update differs from one process's by %.2g of its norm", len(losses), rel)
	}
	for r := range world {
		if len(rankLosses[r]) != len(losses) {
			t.Fatalf("rank %d reported %d steps, one process %d", r, len(rankLosses[r]), len(losses))
		}
		for k := range losses {
			if math.Abs(rankLosses[r][k]-losses[k]) > 1e-5*math.Abs(losses[k]) {
				t.Errorf("rank %d step %d: loss %v, one process %v", r, k, rankLosses[r][k], losses[k])
			}
		}
	}
}

func TestDistBackends(t *testing.T) {
	for _, c := range []struct {
		device, backend string
		index           int
		cuda            bool
	}{
		{"cpu", BackendGloo, 0, false},
		{"", BackendGloo, 0, false},
		{"cuda", BackendNCCL, 0, true},
		{"cuda:5", BackendNCCL, 5, true},
		{"cuda:x", BackendNCCL, 0, false},
	} {
		if b := BackendFor(c.device); b != c.backend {
			t.Errorf("BackendFor(%q) = %s, want %s", c.device, b, c.backend)
		}
		if i, ok := CUDAIndex(c.device); i != c.index || ok != c.cuda {
			t.Errorf("CUDAIndex(%q) = %d, %v", c.device, i, ok)
		}
	}
	cfg := DefaultDistConfig()
	cfg.Backend = "mpi"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), `backend "mpi"`) {
		t.Errorf("an unknown backend: %v", err)
	}
	if DistAvailable("mpi") {
		t.Error("an unknown backend is available")
	}
	if DistAvailable(BackendNCCL) {
		return
	}
	cfg = DefaultDistConfig()
	cfg.Backend, cfg.Port = BackendNCCL, freePort(t)
	if _, err := NewProcessGroup(cfg); err == nil || !strings.Contains(err.Error(), "no NCCL process group") {
		t.Errorf("NCCL in a build without it: %v", err)
	}
}

// TestNCCLProcessGroup forms a one-rank NCCL group on the first GPU and
// runs every collective the trainer uses (two NCCL ranks need two GPUs;
// the data-parallel step's arithmetic is the Gloo tests'). Runs where the
// build has NCCL and libtorch sees a GPU: scripts/gpu/gpu-check.sh.
func TestNCCLProcessGroup(t *testing.T) {
	if !DistAvailable(BackendNCCL) || !gotch.CUDA.IsAvailable() {
		t.Skip("needs a build with NCCL and a GPU")
	}
	cfg := DefaultDistConfig()
	cfg.Backend, cfg.Port, cfg.Timeout = BackendNCCL, freePort(t), 30*time.Second
	g, err := NewProcessGroup(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	x := ts.MustOfSlice([]float32{1, 2, 3}).MustTo(gotch.CudaBuilder(0), true)
	defer x.MustDrop()
	if err := g.AllReduceSum([]*ts.Tensor{x}); err != nil {
		t.Fatal(err)
	}
	if err := g.Broadcast([]*ts.Tensor{x}, 0); err != nil {
		t.Fatal(err)
	}
	if got := x.MustTo(gotch.CPU, false).Float64Values(); got[0] != 1 || got[2] != 3 {
		t.Errorf("one rank's sum and broadcast changed the tensor: %v", got)
	}
	sum, err := g.SumFloats([]float64{1.5, -2})
	if err != nil || sum[0] != 1.5 || sum[1] != -2 {
		t.Errorf("SumFloats on one rank: %v, %v", sum, err)
	}
	if err := g.Barrier(); err != nil {
		t.Fatal(err)
	}
	if g.Comm().Calls != 3 {
		t.Errorf("collectives counted: %+v, want 3", g.Comm())
	}
}

// A one-host group meets in a file: while it is formed and working, this
// process listens on no address but loopback (before, rank 0's TCPStore
// listened on every interface, *:PORT, even with 127.0.0.1 as its
// address). A TCP rendezvous at 127.0.0.1 listens on loopback alone where
// libtorch can be given a bound socket (2.x).
func TestOneHostRendezvousListensOnLoopbackOnly(t *testing.T) {
	needDist(t)
	listening := func() []string {
		got, err := loopback.Listening(os.Getpid())
		if err != nil {
			t.Skipf("no /proc here: %v", err)
		}
		return got
	}
	before := map[string]bool{}
	for _, a := range listening() {
		before[a] = true
	}
	check := func(t *testing.T, port int, store string) {
		var mu sync.Mutex
		var seen []string
		errs := onRanksWith(t, "127.0.0.1", port, store, 2, func(g *ProcessGroup) error {
			if err := sumOfTwo(g); err != nil {
				return err
			}
			mu.Lock()
			seen = append(seen, listening()...)
			mu.Unlock()
			return g.Barrier()
		})
		for r, err := range errs {
			if err != nil {
				t.Fatalf("rank %d: %v", r, err)
			}
		}
		for _, a := range loopback.Exposed(seen) {
			if !before[a] {
				t.Errorf("the group listens on %s, not loopback", a)
			}
		}
	}
	t.Run("file store", func(t *testing.T) { check(t, 0, filepath.Join(t.TempDir(), "store")) })
	t.Run("tcp store at 127.0.0.1", func(t *testing.T) {
		if !RendezvousBindsAddr() {
			t.Skip("this libtorch's TCPStore listens on every interface (1.13 takes no bound socket): one-host runs use the file store")
		}
		check(t, freePort(t), "")
	})
}
