package main

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/seedctl/seedctl/trainer"
)

// stepbenchResult is `model stepbench --json`'s output: the measurement,
// the plan's prediction, and the model's config.json (for a peer that
// builds the same shape, scripts/gpu/eager_step.py).
type stepbenchResult struct {
	Model         string               `json:"model"`
	Params        int64                `json:"params"`
	DType         string               `json:"dtype"`
	Device        string               `json:"device"`
	Tokens        int                  `json:"tokens"`
	Row           int                  `json:"row"`
	Recompute     bool                 `json:"recompute"`
	Attention     string               `json:"attention"`
	Seconds       []float64            `json:"step_seconds"`
	Backward      []float64            `json:"backward_seconds"`
	Update        []float64            `json:"update_seconds"`
	AdamW         string               `json:"adamw"`
	TokensPerS    float64              `json:"tokens_per_s"`
	FLOPsPerToken float64              `json:"flops_per_token"`
	TFLOPs        float64              `json:"model_tflops_per_s"`
	PeakTFLOPs    float64              `json:"peak_tflops,omitempty"`
	MFU           float64              `json:"mfu,omitempty"`
	PlanPeak      int64                `json:"plan_peak_bytes"`
	PlanResident  int64                `json:"plan_resident_bytes"`
	Config        *trainer.ModelConfig `json:"config"`
}

func stepbenchCommand() *cli.Command {
	return &cli.Command{
		Name:  "stepbench",
		Usage: "time the trainer's step (NLL forward and backward over random rows, AdamW update) at a released model's shape or a checkpoint, on CPU or CUDA, with tokens/s, MFU and the memory plan (e.g. seedctl model stepbench --size qwen2.5-0.5b --device cuda --peak-tflops 989)",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "size", Usage: "a released shape with random weights, built in memory: " + strings.Join(trainer.ShapeNames(), ", ")},
			&cli.StringFlag{Name: "model", Usage: "checkpoint folder (instead of --size)"},
			&cli.StringFlag{Name: "device", Value: "cpu", Usage: "cpu, cuda or cuda:N"},
			&cli.StringFlag{Name: "dtype", Value: "bfloat16", Usage: "float32 or bfloat16"},
			&cli.IntFlag{Name: "tokens", Value: 4096, Usage: "tokens per step"},
			&cli.IntFlag{Name: "row", Usage: "tokens per row (default: --tokens, one row)"},
			&cli.IntFlag{Name: "steps", Value: 3, Usage: "timed steps after one warm-up step (the median is reported)"},
			&cli.StringFlag{Name: "recompute", Value: "off", Usage: "on or off: activation recomputation"},
			&cli.Float64Flag{Name: "peak-tflops", Usage: "the device's peak TFLOP/s at --dtype, for MFU (H100/H200 SXM dense bf16: 989)"},
			&cli.StringFlag{Name: "adamw", Usage: "the AdamW update's kernel: " + strings.Join(trainer.AdamWKernels, ", ") + " (default: fused where this libtorch has it for the device, else native; go is the per-parameter Go loop, for comparison)"},
			&cli.StringFlag{Name: "profile", Usage: "after the timed steps, run one more under libtorch's profiler and write its Chrome trace (JSON) to this file (needs a libtorch with Kineto: PyPI's torch, not Debian's)"},
			&cli.BoolFlag{Name: "json", Usage: "print the result as JSON"},
		},
		Action: func(c *cli.Context) error {
			mo := trainer.ModelOptions{DType: c.String("dtype"), Device: c.String("device")}
			if err := mo.Validate(); err != nil {
				return cli.Exit("model stepbench: --dtype/--device: "+err.Error(), 2)
			}
			if r := c.String("recompute"); r != "on" && r != "off" {
				return cli.Exit(fmt.Sprintf("model stepbench: --recompute %q: want on or off", r), 2)
			}
			row := c.Int("row")
			if row == 0 {
				row = c.Int("tokens")
			}
			var m *trainer.Model
			var err error
			name := c.String("model")
			switch {
			case c.IsSet("size") == c.IsSet("model"):
				return cli.Exit("model stepbench: give one of --size (a released shape: "+strings.Join(trainer.ShapeNames(), ", ")+") or --model DIR", 2)
			case c.IsSet("size"):
				name = c.String("size")
				cfg, ok := trainer.KnownShape(name)
				if !ok {
					return cli.Exit(fmt.Sprintf("model stepbench: --size %q: want one of %s", name, strings.Join(trainer.ShapeNames(), ", ")), 2)
				}
				cfg.MaxPositionEmbeddings = max(cfg.MaxPositionEmbeddings, row)
				cfg.InitializerRange = 0.02
				m, err = trainer.InitRandom(cfg, mo, 1)
			default:
				m, err = trainer.LoadCheckpoint(name, mo)
			}
			if err != nil {
				return cli.Exit("model stepbench: "+err.Error(), 1)
			}
			defer m.Close()
			m.SetRecompute(c.String("recompute") == "on")
			opt, err := m.NewAdamW(1e-6, 0)
			if err != nil {
				return cli.Exit("model stepbench: "+err.Error(), 1)
			}
			if k := c.String("adamw"); k != "" {
				if err := opt.SetKernel(k); err != nil {
					return cli.Exit("model stepbench: --adamw: "+err.Error(), 2)
				}
			}
			sb, err := m.BenchStepProfiled(opt, c.Int("tokens"), row, c.Int("steps"), 1, c.String("profile"))
			if err != nil {
				return cli.Exit("model stepbench: "+err.Error(), 1)
			}
			res := stepbenchResult{
				Model: name, Params: sb.Plan.Params, DType: m.DType(), Device: c.String("device"),
				Tokens: sb.Tokens, Row: sb.Row, Recompute: sb.Recompute, Attention: sb.Attention,
				Seconds: sb.Seconds, Backward: sb.BackwardSeconds, Update: sb.UpdateSeconds, AdamW: sb.AdamW, TokensPerS: sb.TokensPerS, FLOPsPerToken: sb.FLOPsPerToken,
				TFLOPs:   sb.TokensPerS * sb.FLOPsPerToken / 1e12,
				PlanPeak: sb.Plan.Peak(), PlanResident: sb.Plan.Resident(), Config: m.Config(),
			}
			if p := c.Float64("peak-tflops"); p > 0 {
				res.PeakTFLOPs, res.MFU = p, res.TFLOPs/p
			}
			w := c.App.Writer
			if c.Bool("json") {
				enc := json.NewEncoder(w)
				return enc.Encode(res)
			}
			mfu := ""
			if res.MFU > 0 {
				mfu = fmt.Sprintf(", MFU %.1f%% of %g TFLOP/s", 100*res.MFU, res.PeakTFLOPs)
			}
			fmt.Fprintf(w, "%s (%s parameters), %s on %s, %d tokens in rows of %d, recompute %v, attention %s:\n",
				name, humanCount(res.Params), res.DType, res.Device, res.Tokens, res.Row, onOff(res.Recompute), res.Attention)
			fmt.Fprintf(w, "  %.0f tokens/s (median step %.3f s of %d), %.2f model TFLOP/s%s\n",
				res.TokensPerS, float64(res.Tokens)/res.TokensPerS, len(res.Seconds), res.TFLOPs, mfu)
			fmt.Fprintf(w, "  median forward+backward %.3f s, update %.3f s (AdamW kernel %s)\n",
				median(res.Backward), median(res.Update), res.AdamW)
			fmt.Fprintf(w, "  memory plan: resident %s, peak %s (trainer only)\n", trainer.GiB(res.PlanResident), trainer.GiB(res.PlanPeak))
			if math.IsInf(res.TokensPerS, 0) {
				return cli.Exit("model stepbench: a step took no time", 1)
			}
			return nil
		},
	}
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// median is the middle value of xs (0 for none).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	return s[len(s)/2]
}
