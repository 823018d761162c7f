package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/rs/zerolog"
	"github.com/urfave/cli/v2"

	"github.com/seedctl/seedctl/trainer"
)

// Check outcomes. Only "fail" makes doctor exit non-zero.
const (
	statusOK   = "ok"
	statusWarn = "WARN"
	statusFail = "FAIL"
)

type checkResult struct {
	Name   string `json:"name"`
	Status string `json:"status"`
	Detail string `json:"detail"`
	Fix    string `json:"fix,omitempty"`
	// Value carries the measured figure, when a check measures one.
	Value float64 `json:"value,omitempty"`
}

// doctorProbe is what doctor needs from the machine; tests substitute a fake.
type doctorProbe interface {
	Runtime() (trainer.RuntimeInfo, error)
	Matmul(ctx context.Context, n int64, minTime time.Duration, cuda bool) (trainer.MatmulResult, error)
	LookPath(file string) (string, error)
	CommandOutput(ctx context.Context, name string, args ...string) (string, error)
	// Dist forms a one-rank process group of the backend and runs its
	// collectives; available is false when the build lacks the backend.
	Dist(backend string) (took time.Duration, available bool, err error)
}

type machineProbe struct{}

func (machineProbe) Runtime() (trainer.RuntimeInfo, error) { return trainer.Runtime() }
func (machineProbe) Matmul(ctx context.Context, n int64, d time.Duration, cuda bool) (trainer.MatmulResult, error) {
	return trainer.MeasureMatmul(ctx, n, d, cuda)
}
func (machineProbe) LookPath(file string) (string, error) { return exec.LookPath(file) }
func (machineProbe) Dist(backend string) (time.Duration, bool, error) {
	if !trainer.DistAvailable(backend) {
		return 0, false, nil
	}
	took, err := trainer.CheckProcessGroup(backend, 0, 30*time.Second)
	return took, true, err
}
func (machineProbe) CommandOutput(ctx context.Context, name string, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

type doctorOptions struct {
	MatmulSize int64
	MatmulTime time.Duration
	// MinCPUGFLOPS is the CPU matmul rate below which training is too slow to
	// be useful; the reference BLAS measures ~3 here, OpenBLAS ~100.
	MinCPUGFLOPS float64
}

func defaultDoctorOptions() doctorOptions {
	return doctorOptions{MatmulSize: 1024, MatmulTime: time.Second, MinCPUGFLOPS: 20}
}

func (o doctorOptions) Validate() error {
	if o.MatmulSize < 16 || o.MatmulSize > 16384 {
		return fmt.Errorf("--matmul-size %d: want 16..16384", o.MatmulSize)
	}
	if o.MatmulTime <= 0 {
		return fmt.Errorf("--matmul-time %s: want a positive duration", o.MatmulTime)
	}
	return nil
}

const setupFix = "run ./setup.sh from the seedctl checkout (installs libtorch-dev and libopenblas0-pthread, prepares gotch), then rebuild"

// runDoctor runs every check; later checks that depend on libtorch are
// skipped when libtorch could not be inspected.
func runDoctor(ctx context.Context, p doctorProbe, o doctorOptions, log zerolog.Logger) []checkResult {
	var out []checkResult
	add := func(r checkResult) {
		out = append(out, r)
		ev := log.Debug()
		switch r.Status {
		case statusWarn:
			ev = log.Warn()
		case statusFail:
			ev = log.Error()
		}
		ev.Str("check", r.Name).Str("status", r.Status).Str("fix", r.Fix).Msg(r.Detail)
	}

	info, err := p.Runtime()
	if err != nil {
		add(checkResult{Name: "libtorch", Status: statusFail, Detail: err.Error(), Fix: setupFix})
	} else {
		add(checkResult{Name: "libtorch", Status: statusOK,
			Detail: fmt.Sprintf("%s (from %s) at %s; attention: %s", info.LibtorchVersion, info.VersionSource, info.LibtorchPath, info.Attention)})
		dev := checkResult{Name: "device", Status: statusOK}
		if info.CUDAAvailable {
			dev.Detail = fmt.Sprintf("CUDA (%d device(s) visible to libtorch)", info.CUDADevices)
		} else if info.CUDABuild {
			dev.Detail = "CPU (a CUDA build of libtorch, but it sees no CUDA device: check nvidia-smi, the driver and CUDA_VISIBLE_DEVICES)"
		} else {
			dev.Detail = "CPU (libtorch sees no CUDA device; build against a CUDA libtorch for GPUs: LIBTORCH_USE_PYTORCH=1 ./setup.sh beside a CUDA torch, see docs/gpu.md)"
		}
		add(dev)

		blas := checkResult{Name: "blas", Status: statusOK, Detail: string(info.BLAS.Kind)}
		if info.BLAS.Path != "" {
			blas.Detail += " (" + info.BLAS.Path + ")"
		}
		if info.BLAS.Core != "" {
			blas.Detail += ", " + info.BLAS.Core + " kernels"
		}
		if info.BLAS.Detected != "" && info.BLAS.Forced != "" {
			blas.Detail += fmt.Sprintf(" (%s=%s set by seedctl at start: OpenBLAS had picked its %s kernels, not recognising this CPU)", trainer.BLASCoreEnv, info.BLAS.Forced, info.BLAS.Detected)
		}
		if info.BLAS.Misdetected() {
			blas.Status = statusWarn
			blas.Detail += fmt.Sprintf(", no AVX2: OpenBLAS did not recognise this CPU, which runs its %s kernels", info.BLAS.Best)
			blas.Fix = fmt.Sprintf("set %s=%s (seedctl does so itself at start unless %s=0): sgemm measured 3.4x faster on such a VM", trainer.BLASCoreEnv, info.BLAS.Best, trainer.BLASAutoEnv)
		}
		if info.BLAS.ForcedAVX2() {
			blas.Status = statusWarn
			blas.Detail += fmt.Sprintf(" because %s=%s is set, on a CPU with AVX-512", trainer.BLASCoreEnv, info.BLAS.Forced)
			blas.Fix = fmt.Sprintf("unset %s (OpenBLAS then picks its own kernels) or set it to SKYLAKEX: AVX-512 sgemm measured 2x, an SFT step 1.3x faster (go test ./trainer -bench BLASCore)", trainer.BLASCoreEnv)
		}
		if info.BLAS.Slow() {
			blas.Status = statusWarn
			blas.Detail = "!!! libtorch is using the REFERENCE BLAS (" + info.BLAS.Path + "): CPU training is ~35x slower than with OpenBLAS !!!"
			blas.Fix = "apt-get install libopenblas0-pthread (or: update-alternatives --config libblas.so.3-x86_64-linux-gnu and pick openblas)"
		}
		add(blas)

		mm, err := p.Matmul(ctx, o.MatmulSize, o.MatmulTime, info.CUDAAvailable)
		switch {
		case err != nil:
			add(checkResult{Name: "matmul", Status: statusFail, Detail: err.Error(), Fix: setupFix})
		default:
			r := checkResult{Name: "matmul", Status: statusOK, Value: mm.GFLOPS,
				Detail: fmt.Sprintf("%.1f GFLOP/s fp32 on %s (%d×%d, %d products in %s)",
					mm.GFLOPS, mm.Device, mm.N, mm.N, mm.Iters, mm.Elapsed.Round(time.Millisecond))}
			if !info.CUDAAvailable && mm.GFLOPS < o.MinCPUGFLOPS {
				r.Status = statusWarn
				r.Fix = fmt.Sprintf("below %.0f GFLOP/s: check the blas line above and that no other job holds the CPU", o.MinCPUGFLOPS)
			}
			add(r)
		}
		add(distCheck(p, info.CUDAAvailable))
	}

	if path, err := p.LookPath("just"); err != nil {
		// A warning, not a failure: seedctl's own commands run without it
		// (a GPU box that only runs seedctl, like the H200 the prepared
		// GPU check ran on, has no reason to install it).
		add(checkResult{Name: "just", Status: statusWarn, Detail: "not found on PATH (the README's just recipes need it; seedctl's own commands do not)",
			Fix: "npm install -g rust-just (./setup.sh does this)"})
	} else {
		v, err := p.CommandOutput(ctx, path, "--version")
		if err != nil {
			add(checkResult{Name: "just", Status: statusFail, Detail: fmt.Sprintf("%s --version failed: %v: %s", path, err, v),
				Fix: "reinstall: npm install -g rust-just"})
		} else {
			add(checkResult{Name: "just", Status: statusOK, Detail: v + " at " + path})
		}
	}
	return out
}

// distCheck is data parallelism's line: the process group of this
// machine's device (NCCL with a GPU, Gloo without) formed with one rank
// and exercised. Missing, it warns: one learner process needs none.
func distCheck(p doctorProbe, cuda bool) checkResult {
	backend, name := trainer.BackendGloo, "Gloo"
	if cuda {
		backend, name = trainer.BackendNCCL, "NCCL"
	}
	r := checkResult{Name: "dist", Status: statusOK}
	took, available, err := p.Dist(backend)
	switch {
	case !available:
		r.Status = statusWarn
		r.Detail = fmt.Sprintf("no %s process group in this build: run --nproc N (data parallelism) is unavailable; one learner process is not affected", name)
		if cuda {
			r.Fix = "rebuild with NCCL's and CUDA's headers beside the CUDA torch (scripts/fetch-cuda-headers.sh, then LIBTORCH_USE_PYTORCH=1 ./setup.sh; docs/gpu.md)"
		} else {
			r.Fix = "apt-get install libgloo-dev and rerun ./setup.sh (Debian's libtorch; PyPI's torch wheels ship no Gloo headers)"
		}
	case err != nil:
		r.Status = statusFail
		r.Detail = fmt.Sprintf("%s: a one-rank group failed: %v", name, err)
		r.Fix = "see the error; GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME pick the network interface, NCCL_DEBUG=INFO explains NCCL"
	default:
		r.Detail = fmt.Sprintf("%s: a one-rank group formed and ran all-reduce, broadcast and barrier in %s (run --nproc N can use it)", name, took.Round(time.Millisecond))
	}
	return r
}

func printChecks(w io.Writer, rs []checkResult) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", r.Status, r.Name, r.Detail)
		if r.Fix != "" {
			fmt.Fprintf(tw, "\t\tfix: %s\n", r.Fix)
		}
	}
	tw.Flush()
}

func failures(rs []checkResult) []string {
	var names []string
	for _, r := range rs {
		if r.Status == statusFail {
			names = append(names, r.Name)
		}
	}
	return names
}

func doctorCommand() *cli.Command {
	def := defaultDoctorOptions()
	return &cli.Command{
		Name:  "doctor",
		Usage: "check libtorch, the device, BLAS speed and tools; exits non-zero when something required is missing",
		Flags: []cli.Flag{
			&cli.Int64Flag{Name: "matmul-size", Value: def.MatmulSize, Usage: "side of the square fp32 matrices multiplied to measure GFLOP/s"},
			&cli.DurationFlag{Name: "matmul-time", Value: def.MatmulTime, Usage: "how long to measure the matmul rate"},
			&cli.BoolFlag{Name: "json", Usage: "print the checks as JSON on stdout"},
		},
		Action: func(c *cli.Context) error {
			o := def
			o.MatmulSize = c.Int64("matmul-size")
			o.MatmulTime = c.Duration("matmul-time")
			if err := o.Validate(); err != nil {
				return cli.Exit("doctor: "+err.Error(), 2)
			}
			rs := runDoctor(c.Context, machineProbe{}, o, logger(c))
			if c.Bool("json") {
				enc := json.NewEncoder(c.App.Writer)
				enc.SetIndent("", "  ")
				if err := enc.Encode(rs); err != nil {
					return fmt.Errorf("doctor: writing JSON: %w", err)
				}
			} else {
				printChecks(c.App.Writer, rs)
			}
			if f := failures(rs); len(f) > 0 {
				return cli.Exit(fmt.Sprintf("doctor: required checks failed: %s (see the fix lines)", strings.Join(f, ", ")), 1)
			}
			if errors.Is(c.Context.Err(), context.Canceled) {
				return cli.Exit("doctor: interrupted", 130)
			}
			return nil
		},
	}
}

// warnForcedAVX2 logs, for the commands that train on the CPU (device
// other than cuda), what doctor flags: OPENBLAS_CORETYPE holding an
// AVX-512 CPU to AVX2 kernels.
func warnForcedAVX2(log zerolog.Logger, device string) {
	if device == "cuda" {
		return
	}
	k := trainer.Kernels()
	if !k.ForcedAVX2() {
		return
	}
	log.Warn().Str(trainer.BLASCoreEnv, k.Forced).Str("kernels", k.Core).
		Msgf("OpenBLAS runs AVX2 kernels on a CPU with AVX-512 because %s is set; unset it for faster CPU training (seedctl doctor)", trainer.BLASCoreEnv)
}
