package trainer

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"unsafe"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/libtch/seedops"
	"github.com/sugarme/gotch/ts"
)

// OptimizerStateFile is the name SaveState writes in a checkpoint folder.
const OptimizerStateFile = "optimizer.safetensors"

// Optimizer is AdamW over a model's parameters (decoupled weight decay, bias
// correction, the same update as torch.optim.AdamW), with gradient-norm
// clipping, a refusal of non-finite steps, and state that can be saved and
// restored so a resumed run continues exactly.
type Optimizer struct {
	m                 *Model
	lr, wd            float64
	beta1, beta2, eps float64
	step              int64
	exp, expSq        []*ts.Tensor // first and second moments, per parameter (float32)
	// master holds float32 copies of the weights when the model computes
	// in a lower precision (bfloat16): the update is applied to them and
	// the model's weights are their rounding. Without them an update below
	// bfloat16's resolution (a weight of 1 moves in steps of 2^-7, while
	// lr·update is ~1e-6 at the paper's learning rate) would be lost.
	// nil for float32 models.
	master []*ts.Tensor
	// With ZeRO-1 sharding (NewShardedAdamW), owner[i] is the rank that
	// keeps parameter i's moments and master weights and updates it; the
	// others hold nil there and receive the updated weights from it.
	group *ProcessGroup
	owner []int
	// kernel is how the update runs (AdamWFused, AdamWNative or AdamWGo).
	kernel string
}

// How an AdamW update runs. All three compute torch.optim.AdamW's update
// (they agree to float32 rounding; adamw_test.go checks it).
const (
	// AdamWFused is libtorch's fused AdamW kernel (_fused_adamw_: CUDA
	// from libtorch 2.0, CPU from 2.4) over chunks of parameters, called
	// once from Go with the gradient norm; the default where it exists.
	AdamWFused = "fused"
	// AdamWNative is the same update as a C++ loop of in-place ops per
	// parameter, called once from Go: the default elsewhere (Debian's
	// libtorch 1.13).
	AdamWNative = "native"
	// AdamWGo issues every op of every parameter from Go (~20 gotch
	// calls per parameter, and the gradient norm read back once per
	// parameter). It was the only update before the other two; kept as
	// their reference and for benchmarks (seedctl model stepbench --adamw go).
	AdamWGo = "go"
)

// AdamWKernels lists the update kernels (SetKernel's names).
var AdamWKernels = []string{AdamWFused, AdamWNative, AdamWGo}

// DefaultAdamWKernel is the kernel a new optimizer uses on the device:
// fused where this libtorch has it, else native.
func DefaultAdamWKernel(dev gotch.Device) string {
	if seedops.FusedAvailable(dev.IsCuda()) {
		return AdamWFused
	}
	return AdamWNative
}

// SetKernel chooses how the update runs (one of AdamWKernels).
func (o *Optimizer) SetKernel(k string) error {
	switch k {
	case AdamWNative, AdamWGo:
	case AdamWFused:
		if !seedops.FusedAvailable(o.m.device.IsCuda()) {
			dev := "CPU"
			if o.m.device.IsCuda() {
				dev = "CUDA"
			}
			return fmt.Errorf("AdamW kernel %q: this libtorch has no fused AdamW kernel for %s tensors (libtorch 2.0 has it for CUDA, 2.4 for CPU); use %q", k, dev, AdamWNative)
		}
	default:
		return fmt.Errorf("AdamW kernel %q: want one of %v", k, AdamWKernels)
	}
	o.kernel = k
	return nil
}

// Kernel is how the update runs (AdamWFused, AdamWNative or AdamWGo).
func (o *Optimizer) Kernel() string { return o.kernel }

// NewAdamW builds an AdamW optimizer for m (β = 0.9, 0.999, ε = 1e-8).
func (m *Model) NewAdamW(lr, weightDecay float64) (*Optimizer, error) {
	if lr < 0 || weightDecay < 0 || math.IsNaN(lr) || math.IsNaN(weightDecay) {
		return nil, fmt.Errorf("building AdamW: lr %v and weight decay %v must be >= 0", lr, weightDecay)
	}
	o := &Optimizer{m: m, lr: lr, wd: weightDecay, beta1: 0.9, beta2: 0.999, eps: 1e-8, kernel: DefaultAdamWKernel(m.device)}
	var err error
	func() {
		defer guard(&err, "building AdamW")
		if m.dtype != gotch.Float {
			withoutGrad(func() {
				for _, p := range m.params {
					o.master = append(o.master, must(p.t.Totype(gotch.Float, false)))
				}
			})
		}
		for i, p := range m.params {
			w := p.t
			if o.master != nil {
				w = o.master[i]
			}
			o.exp = append(o.exp, must(w.ZerosLike(false)))
			o.expSq = append(o.expSq, must(w.ZerosLike(false)))
		}
	}()
	return o, err
}

// NewShardedAdamW is AdamW with ZeRO stage 1 over g: each parameter is
// owned by one rank (parameters dealt largest first to the rank with the
// fewest elements so far), which alone keeps its moments (and float32
// master weights) and updates it; after each step every parameter is
// broadcast from its owner. Each rank's optimizer memory is about 1/World
// of AdamW's; the update is AdamW's, on the gradients summed across the
// group. Gradients are all-reduced whole (Gloo in libtorch 1.13 has no
// reduce-scatter), so every rank can still compute the global norm.
func (m *Model) NewShardedAdamW(lr, weightDecay float64, g *ProcessGroup) (*Optimizer, error) {
	if g == nil {
		return nil, errors.New("building sharded AdamW: no process group")
	}
	o, err := m.NewAdamW(lr, weightDecay)
	if err != nil {
		return nil, err
	}
	o.group, o.owner = g, shardOwners(m.params, g.World())
	for i, r := range o.owner {
		if r == g.Rank() {
			continue
		}
		drop(o.exp[i], o.expSq[i])
		o.exp[i], o.expSq[i] = nil, nil
		if o.master != nil {
			drop(o.master[i])
			o.master[i] = nil
		}
	}
	return o, nil
}

// shardOwners deals parameters to ranks: largest first, each to the rank
// holding the fewest elements so far (ties to the lowest rank).
func shardOwners(params []param, world int) []int {
	numel := func(p param) int64 {
		n := int64(1)
		for _, d := range p.shape {
			n *= d
		}
		return n
	}
	order := make([]int, len(params))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return numel(params[order[a]]) > numel(params[order[b]]) })
	load := make([]int64, world)
	owner := make([]int, len(params))
	for _, i := range order {
		r := 0
		for k := 1; k < world; k++ {
			if load[k] < load[r] {
				r = k
			}
		}
		owner[i] = r
		load[r] += numel(params[i])
	}
	return owner
}

// Sharded says whether the optimizer is ZeRO-1 sharded across ranks.
func (o *Optimizer) Sharded() bool { return o.owner != nil }

// ownedElements counts the parameter elements whose moments this rank
// keeps (all of them without sharding).
func (o *Optimizer) ownedElements() int64 {
	var n int64
	for i, p := range o.m.params {
		if o.exp[i] == nil {
			continue
		}
		k := int64(1)
		for _, d := range p.shape {
			k *= d
		}
		n += k
	}
	return n
}

// gatherWeights broadcasts each parameter from its owner, after a sharded
// step.
func (o *Optimizer) gatherWeights() (err error) {
	defer guard(&err, "sharded AdamW: gathering the weights")
	withoutGrad(func() {
		for i, p := range o.m.params {
			if err = o.group.Broadcast([]*ts.Tensor{p.t}, o.owner[i]); err != nil {
				return
			}
		}
	})
	return err
}

// MasterWeights says whether the optimizer keeps float32 master weights
// (the model computes in bfloat16).
func (o *Optimizer) MasterWeights() bool { return o.master != nil }

// SetLR changes the learning rate.
func (o *Optimizer) SetLR(lr float64) { o.lr = lr }

// Steps is the number of updates applied so far.
func (o *Optimizer) Steps() int64 { return o.step }

// adamStep applies one AdamW update from the parameters' gradients,
// multiplied first by gradScale (gradient clipping).
func (o *Optimizer) adamStep(gradScale float64) {
	if o.kernel == AdamWGo {
		if gradScale != 1 {
			o.scaleGrads(gradScale)
		}
		o.adamStepGo()
		return
	}
	o.step++
	params := make([]unsafe.Pointer, len(o.m.params))
	exp := make([]unsafe.Pointer, len(params))
	expSq := make([]unsafe.Pointer, len(params))
	var master []unsafe.Pointer
	if o.master != nil {
		master = make([]unsafe.Pointer, len(params))
	}
	var largest int64
	for i, p := range o.m.params {
		params[i] = p.t.Ctensor()
		if o.exp[i] == nil {
			continue // another rank owns it (sharded)
		}
		exp[i], expSq[i] = o.exp[i].Ctensor(), o.expSq[i].Ctensor()
		if master != nil {
			master[i] = o.master[i].Ctensor()
		}
		largest = max(largest, numel(p.shape))
	}
	err := seedops.Update(params, master, exp, expSq, seedops.AdamW{
		GradScale: gradScale, LR: o.lr, WeightDecay: o.wd, Beta1: o.beta1, Beta2: o.beta2, Eps: o.eps,
		Step: o.step, Fused: o.kernel == AdamWFused,
		// The float32 gradient copies the fused update holds at once stay
		// within the three parameter-sized temporaries the memory plan
		// gives the update (memplan.go).
		Chunk: 3 * largest,
	})
	runtime.KeepAlive(o.m.params)
	runtime.KeepAlive(o.master)
	runtime.KeepAlive(o.exp)
	runtime.KeepAlive(o.expSq)
	if err != nil {
		panic(torchError{fmt.Errorf("%w: %w", ErrTorch, err)})
	}
}

// scaleGrads multiplies every gradient by s in place.
func (o *Optimizer) scaleGrads(s float64) {
	withoutGrad(func() {
		for _, p := range o.m.params {
			g := must(p.t.Grad(false))
			if g.MustDefined() {
				sc := ts.FloatScalar(s)
				must0(g.MulScalar_(sc))
				runtime.KeepAlive(sc)
			}
			drop(g)
		}
	})
}

// adamStepGo is adamStep with every op issued from Go (AdamWGo).
func (o *Optimizer) adamStepGo() {
	o.step++
	bc1 := 1 - math.Pow(o.beta1, float64(o.step))
	bc2 := 1 - math.Pow(o.beta2, float64(o.step))
	withoutGrad(func() {
		for i, p := range o.m.params {
			if o.exp[i] == nil {
				continue // another rank owns it (sharded)
			}
			g := must(p.t.Grad(false))
			if !g.MustDefined() {
				drop(g)
				continue
			}
			w := p.t
			if o.master != nil {
				w = o.master[i]
				g32 := must(g.Totype(gotch.Float, false))
				drop(g)
				g = g32
			}
			if o.wd > 0 {
				s := ts.FloatScalar(1 - o.lr*o.wd)
				must0(w.MulScalar_(s))
				runtime.KeepAlive(s)
			}
			// At most two parameter-sized temporaries exist at once besides
			// the gradient (the memory plan counts the optimizer's peak so);
			// each is freed as soon as the next is made.
			m, v := o.exp[i], o.expSq[i]
			gs := mulScalar(g, 1-o.beta1, false)
			nm := must(mulScalar(m, o.beta1, false).Add(gs, true))
			drop(gs)
			m.Copy_(nm)
			drop(nm)
			g2 := mulScalar(must(g.Square(false)), 1-o.beta2, true)
			drop(g)
			nv := must(mulScalar(v, o.beta2, false).Add(g2, true))
			drop(g2)
			v.Copy_(nv)
			drop(nv)
			denom := addScalar(mulScalar(must(v.Sqrt(false)), 1/math.Sqrt(bc2), true), o.eps, true)
			upd := must(m.Div(denom, false))
			drop(denom)
			upd = mulScalar(upd, o.lr/bc1, true)
			must0(w.Sub_(upd))
			drop(upd)
			if o.master != nil {
				p.t.Copy_(w) // rounds to the model's dtype
			}
			runtime.KeepAlive(p.t)
			runtime.KeepAlive(w)
		}
	})
}

// masterSuffix names a parameter's float32 master weights in the state file.
const masterSuffix = ".master"

// loadInto copies float32 little-endian bytes of shape into dst.
func loadInto(dst *ts.Tensor, b []byte, shape []int64, dev gotch.Device) {
	src := must(tensorFromBytes(b, "F32", shape).To(dev, true))
	c := must(src.Totype(dst.DType(), true))
	withoutGrad(func() { dst.Copy_(c) })
	drop(c)
}

type optimizerMeta struct {
	Step  int64   `json:"step"`
	LR    float64 `json:"lr"`
	WD    float64 `json:"weight_decay"`
	Beta1 float64 `json:"beta1"`
	Beta2 float64 `json:"beta2"`
	Eps   float64 `json:"eps"`
}

// StateFile is the file SaveState writes in a checkpoint folder:
// optimizer.safetensors, or with sharding each rank's own
// optimizer.rank-R-of-N.safetensors.
func (o *Optimizer) StateFile() string { return o.stateFile() }

func (o *Optimizer) stateFile() string {
	if o.owner == nil {
		return OptimizerStateFile
	}
	return fmt.Sprintf("optimizer.rank-%d-of-%d.safetensors", o.group.Rank(), o.group.World())
}

// SaveState writes the moments and step count to dir/optimizer.safetensors
// (atomically), next to a checkpoint saved by Model.Save; a sharded
// optimizer writes its rank's parameters to its own file.
func (o *Optimizer) SaveState(dir string) (err error) {
	defer guard(&err, "saving optimizer state")
	var tensors []stTensor
	for i, p := range o.m.params {
		if o.exp[i] == nil {
			continue
		}
		for _, mom := range []struct {
			suffix string
			t      *ts.Tensor
		}{{".exp_avg", o.exp[i]}, {".exp_avg_sq", o.expSq[i]}} {
			tensors = append(tensors, stTensor{name: p.name + mom.suffix, dtype: "F32", shape: p.shape, data: tensorBytes(mom.t, "F32")})
		}
		if o.master != nil {
			tensors = append(tensors, stTensor{name: p.name + masterSuffix, dtype: "F32", shape: p.shape, data: tensorBytes(o.master[i], "F32")})
		}
	}
	mb, _ := json.Marshal(optimizerMeta{o.step, o.lr, o.wd, o.beta1, o.beta2, o.eps})
	meta := map[string]string{"optimizer": "adamw", "state": string(mb), "step": strconv.FormatInt(o.step, 10)}
	return writeShard(filepath.Join(dir, o.stateFile()), tensors, meta)
}

// LoadState restores what SaveState wrote in dir. A missing file is an
// error wrapping os.ErrNotExist.
func (o *Optimizer) LoadState(dir string) (err error) {
	path := filepath.Join(dir, o.stateFile())
	f, err := openSafetensors(path)
	if err != nil {
		return fmt.Errorf("loading optimizer state: %w", err)
	}
	defer f.Close()
	var meta optimizerMeta
	if err := json.Unmarshal([]byte(f.meta["state"]), &meta); err != nil || f.meta["optimizer"] != "adamw" {
		return fmt.Errorf("loading optimizer state: %s: not an AdamW state (%v): %w", path, err, ErrCheckpoint)
	}
	defer guard(&err, "loading optimizer state")
	for i, p := range o.m.params {
		if o.exp[i] == nil {
			continue
		}
		for _, mom := range []struct {
			suffix string
			t      *ts.Tensor
		}{{".exp_avg", o.exp[i]}, {".exp_avg_sq", o.expSq[i]}} {
			b, e, err := f.read(p.name + mom.suffix)
			if err != nil {
				return fmt.Errorf("loading optimizer state: %w", err)
			}
			if e.DType != "F32" || !equalShape(e.Shape, p.shape) {
				return fmt.Errorf("loading optimizer state: %s: %s%s is %s %v, want F32 %v: %w", path, p.name, mom.suffix, e.DType, e.Shape, p.shape, ErrCheckpoint)
			}
			loadInto(mom.t, b, p.shape, o.m.device)
		}
		if o.master == nil {
			continue
		}
		// A state saved by a float32 run has no master weights: the
		// checkpoint's weights (already loaded) stand in for them.
		if b, e, err := f.read(p.name + masterSuffix); err == nil {
			if e.DType != "F32" || !equalShape(e.Shape, p.shape) {
				return fmt.Errorf("loading optimizer state: %s: %s%s is %s %v, want F32 %v: %w", path, p.name, masterSuffix, e.DType, e.Shape, p.shape, ErrCheckpoint)
			}
			loadInto(o.master[i], b, p.shape, o.m.device)
			withoutGrad(func() { p.t.Copy_(o.master[i]) })
		}
	}
	if meta.Beta1 <= 0 || meta.Beta2 <= 0 {
		return errors.New("loading optimizer state: bad betas")
	}
	o.step, o.lr, o.wd, o.beta1, o.beta2, o.eps = meta.Step, meta.LR, meta.WD, meta.Beta1, meta.Beta2, meta.Eps
	return nil
}
