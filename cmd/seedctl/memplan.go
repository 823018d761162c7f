package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"github.com/seedctl/seedctl/orchestrator"
	"github.com/seedctl/seedctl/trainer"
)

// vllmAsleep is what a colocated vLLM/SGLang server keeps on the device
// while it sleeps during the update (its CUDA context and allocator
// pools; sleep level 1 moves the weights to host memory and drops the KV
// cache). An assumption, stated where the plan prints it.
const vllmAsleep = 2 << 30

// configShape is the model shape a config trains: its checkpoint's
// config.json, or a released shape its name matches.
func configShape(cfg orchestrator.Config) (*trainer.ModelConfig, string, error) {
	p := filepath.Join(cfg.Model, "config.json")
	if _, err := os.Stat(p); err == nil {
		mc, err := trainer.LoadModelConfig(p)
		return mc, p, err
	}
	if mc, ok := trainer.KnownShape(cfg.Model); ok {
		return mc, "released shape of " + filepath.Base(cfg.Model), nil
	}
	return nil, "", fmt.Errorf("model %s is not on this machine and its name matches no known shape (%v)", cfg.Model, trainer.ShapeNames())
}

// launchFlag reads a "--name value" pair from a server launch command.
func launchFlag(launch []string, name string) (string, bool) {
	for i := 0; i+1 < len(launch); i++ {
		if launch[i] == name {
			return launch[i+1], true
		}
	}
	return "", false
}

// configMemory is a config's trainer plan: the larger of its RL step and
// its stage-1 SFT step.
type configMemory struct {
	source    string
	rl, sft   trainer.MemoryPlan
	rlRow     int
	recompute bool
	vllmShare float64 // colocated server's share of the device while awake (0: not colocated)
}

func (m configMemory) peak() trainer.MemoryPlan {
	if m.sft.Peak() > m.rl.Peak() {
		return m.sft
	}
	return m.rl
}

func planConfig(cfg orchestrator.Config) (configMemory, error) {
	mc, src, err := configShape(cfg)
	if err != nil {
		return configMemory{}, err
	}
	out := configMemory{source: src}
	maxLen := 16384
	if v, ok := launchFlag(cfg.Backend.Launch, "--max-model-len"); ok {
		if n, err := strconv.Atoi(v); err == nil {
			maxLen = n
		}
	}
	var params int64
	if p, err := trainer.PlanMemory(trainer.MemoryInput{Model: mc, Tokens: 1}); err == nil {
		params = p.Params
	}
	switch cfg.RL.Recompute {
	case "on":
		out.recompute = true
	case "":
		out.recompute = params >= trainer.RecomputeAutoParams
	}
	out.rlRow = min(cfg.RL.MicroBatchTokens, maxLen)
	out.rl, err = trainer.PlanMemory(trainer.MemoryInput{Model: mc, DType: cfg.RL.DType, Tokens: cfg.RL.MicroBatchTokens, RowTokens: out.rlRow,
		Recompute: out.recompute, Reference: cfg.RL.KLCoef > 0, Entropy: cfg.RL.EntropyCoef > 0})
	if err != nil {
		return out, err
	}
	if cfg.UsesSFT() && cfg.Stage1.MicroBatchTokens > 0 {
		out.sft, err = trainer.PlanMemory(trainer.MemoryInput{Model: mc, DType: cfg.RL.DType, Tokens: cfg.Stage1.MicroBatchTokens,
			RowTokens: min(cfg.Stage1.MicroBatchTokens, cfg.Stage1.MaxLen), Recompute: out.recompute})
		if err != nil {
			return out, err
		}
	}
	if cfg.Backend.Colocated {
		out.vllmShare = 0.9 // vLLM's own default
		if v, ok := launchFlag(cfg.Backend.Launch, "--gpu-memory-utilization"); ok {
			if f, err := strconv.ParseFloat(v, 64); err == nil {
				out.vllmShare = f
			}
		} else if v, ok := launchFlag(cfg.Backend.Launch, "--mem-fraction-static"); ok { // SGLang
			if f, err := strconv.ParseFloat(v, 64); err == nil {
				out.vllmShare = f
			}
		}
	}
	return out, nil
}

// reportMemory prints a config's memory plan and, for each device size
// (GiB), whether it fits; it returns how many sizes it does not fit, each
// with the knob to turn.
func reportMemory(w io.Writer, cfg orchestrator.Config, devicesGiB []float64) int {
	m, err := planConfig(cfg)
	if err != nil {
		fmt.Fprintf(w, "  memory plan: not made: %v\n", err)
		return 0
	}
	dtype := cfg.RL.DType
	if dtype == "" {
		dtype = "float32"
	}
	rec := "off"
	if m.recompute {
		rec = "on"
	}
	fmt.Fprintf(w, "  memory plan (%s parameters, from %s; %s; RL micro-batch %d tokens in rows of up to %d; recompute %s):\n", humanCount(m.rl.Params), m.source, dtype, cfg.RL.MicroBatchTokens, m.rlRow, rec)
	printPlan(w, "    ", m.rl)
	if m.sft.Params > 0 {
		fmt.Fprintf(w, "  stage-1 SFT step (micro-batch %d tokens): trainer peak %s\n", cfg.Stage1.MicroBatchTokens, trainer.GiB(m.sft.Peak()))
	}
	bad := 0
	p := m.peak()
	for _, d := range devicesGiB {
		dev := int64(d * (1 << 30))
		update := p.Peak()
		line := fmt.Sprintf("  on a %.0f GiB device: update %s", d, trainer.GiB(update))
		if m.vllmShare > 0 {
			update += vllmAsleep
			line += fmt.Sprintf(" + the server asleep %s (assumed)", trainer.GiB(vllmAsleep))
		}
		var fixes []string
		if update > dev {
			fixes = append(fixes, fmt.Sprintf("the update needs %s: lower rl.micro_batch_tokens (the LM head's logits take %s and activations %s at %d tokens)%s%s",
				trainer.GiB(update), trainer.GiB(p.Logits), trainer.GiB(p.Activations), cfg.RL.MicroBatchTokens, recomputeHint(m), dtypeHint(dtype)))
		}
		if m.vllmShare > 0 {
			// Between steps the trainer keeps its RL state (with the
			// reference copy), whichever step peaks higher.
			res := max(m.rl.Resident(), m.sft.Resident())
			roll := res + int64(m.vllmShare*float64(dev))
			line += fmt.Sprintf("; rollout: trainer resident %s + server %.2f × %.0f GiB = %s", trainer.GiB(res), m.vllmShare, d, trainer.GiB(roll))
			if roll > dev {
				most := float64(dev-res) / float64(dev)
				fixes = append(fixes, fmt.Sprintf("during rollouts the trainer keeps %s resident beside the server: lower the server's --gpu-memory-utilization to at most %.2f%s",
					trainer.GiB(res), most, dtypeHint(dtype)))
			}
		}
		if len(fixes) == 0 {
			fmt.Fprintf(w, "%s: fits\n", line)
			continue
		}
		bad++
		fmt.Fprintf(w, "%s: DOES NOT FIT\n", line)
		for _, f := range fixes {
			fmt.Fprintf(w, "    fix: %s\n", f)
		}
	}
	return bad
}

func recomputeHint(m configMemory) string {
	if m.recompute {
		return ""
	}
	return ", or set rl.recompute to on"
}

func dtypeHint(dtype string) string {
	if dtype == "bfloat16" {
		return ""
	}
	return ", or set rl.dtype to bfloat16"
}
