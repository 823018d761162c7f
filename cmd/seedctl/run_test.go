package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/seedctl/seedctl/basemodel"
	"github.com/seedctl/seedctl/benchmarks"
	"github.com/seedctl/seedctl/inference"
	"github.com/seedctl/seedctl/inference/server/servertest"
	"github.com/seedctl/seedctl/internal/loopback"
	"github.com/seedctl/seedctl/learner"
	"github.com/seedctl/seedctl/orchestrator"
	"github.com/seedctl/seedctl/rollout"
	"github.com/seedctl/seedctl/trainer"
)

// tinyRunConfig is a few-second SEED run on a random tiny checkpoint.
func tinyRunConfig(t *testing.T, algo string) orchestrator.Config {
	t.Helper()
	model := filepath.Join(t.TempDir(), "base")
	if err := servertest.WriteTinyCheckpoint(model, 3); err != nil {
		t.Fatal(err)
	}
	cfg := orchestrator.Default()
	cfg.Name, cfg.RunsDir, cfg.Model, cfg.Algo = "tiny-"+algo, t.TempDir(), model, algo
	cfg.Iterations, cfg.TasksPerIteration, cfg.Rollout.GroupSize = 3, 2, 3
	cfg.Env.MaxSteps, cfg.Rollout.MaxTokens, cfg.AnalysisTokens = 4, 8, 24
	cfg.Stage1.Episodes, cfg.Stage1.Epochs, cfg.Stage1.MaxLen, cfg.Stage1.BatchTokens, cfg.Stage1.MicroBatchTokens = 6, 1, 4096, 8192, 4096
	cfg.Eval.Episodes = 2
	cfg.RL.LR = 1e-3
	// A random model never wins and its skills do not parse, so every
	// group is flat but for invalid-action penalties; every row is kept
	// (the default), so each iteration exercises the update. Whether the
	// weights move would depend on a lucky sample; AdamW's decoupled weight
	// decay moves them every step, so publishing is always visible.
	cfg.RL.WeightDecay = 0.1
	return cfg
}

func TestRunEndToEndTinyModel(t *testing.T) {
	t.Parallel() // an end-to-end run: mostly waiting on its processes and servers
	cfg := tinyRunConfig(t, orchestrator.AlgoSEED)
	cfg.Eval.SampledTemperature = 1
	cfg.Stage1.HeldOut = 2 // one whole group of 3 of the 6
	var backend inference.Backend
	open := openBackendFor(cfg.Backend, cfg.RL.DType, 0, zerolog.Nop())
	probe := []int{5, 17, 3, 88, 41, 9}
	var served [][]float64
	deps := orchestrator.Deps{NewLearner: learner.Local("cpu"), Log: zerolog.Nop(),
		OpenBackend: func(ctx context.Context, dir string) (inference.Backend, error) {
			b, err := open(ctx, dir)
			backend = b
			return b, err
		},
		AfterPhase: func(k int, phase string) {
			if phase != "checkpoint" {
				return
			}
			lp, err := backend.Score(context.Background(), [][]int{probe})
			if err != nil {
				t.Errorf("scoring the probe after iteration %d: %v", k, err)
				return
			}
			served = append(served, lp[0])
		}}
	res, err := orchestrator.Start(context.Background(), cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	dir := res.Dir
	for k := 1; k <= cfg.Iterations; k++ {
		trajs, err := rollout.ReadJSONL(filepath.Join(dir, "trajectories", "iter-"+itoa(k)+".jsonl"))
		if err != nil || len(trajs) != cfg.TasksPerIteration*cfg.Rollout.GroupSize {
			t.Errorf("iteration %d: %d trajectories, %v", k, len(trajs), err)
		}
		if _, err := os.Stat(filepath.Join(dir, "skills", "iter-"+itoa(k)+".jsonl")); err != nil {
			t.Errorf("iteration %d skills: %v", k, err)
		}
	}
	for _, f := range []string{"config.json", "state.json", "metrics.jsonl", "skills/stage1.jsonl", "trajectories/stage1.jsonl",
		"checkpoints/stage1/model.safetensors", "checkpoints/iter-3/model.safetensors", "checkpoints/iter-3/optimizer.safetensors",
		"checkpoints/iter-3/tokenizer.json", "report/learning_curve.png", "report/return.png", "report/results.md", "report/index.html"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("missing %s: %v", f, err)
		}
	}
	lines, err := orchestrator.ReadMetrics(filepath.Join(dir, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	iters := 0
	for _, l := range lines {
		if l.Kind == "stage1" {
			// Measured on the held-out group before and after stage 1.
			v := l.Values
			if v["held_out"] != 3 {
				t.Errorf("stage 1 held out %v trajectories, want one group of 3", v["held_out"])
			}
			for _, w := range []string{"before", "after"} {
				if nll := v["held_out_nll_"+w]; !(nll > 0) || math.IsInf(nll, 0) {
					t.Errorf("held-out skill NLL %s stage 1: %v", w, nll)
				}
				for _, k := range []string{"held_out_parse_ok_", "held_out_skill_share_"} {
					if x, ok := v[k+w]; !ok || x < 0 || x > 1 {
						t.Errorf("%s%s: %v (recorded %v)", k, w, x, ok)
					}
				}
			}
			for _, f := range []string{"skills/stage1-held-out-before.jsonl", "skills/stage1-held-out-after.jsonl"} {
				if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
					t.Errorf("the held-out analyses: %v", err)
				}
			}
			if v["held_out_nll_before"] == v["held_out_nll_after"] {
				t.Errorf("the held-out NLL did not move in stage 1 (%v)", v["held_out_nll_after"])
			}
		}
		if l.Kind == "iteration" {
			iters++
			for _, key := range []string{"loss", "grpo_loss", "kl", "grad_norm", "entropy", "rollout_s", "update_s"} {
				if _, ok := l.Values[key]; !ok {
					t.Errorf("iteration %d metrics lack %s", l.Iteration, key)
				}
			}
			// The process holds the embedded server and the learner: a
			// tiny model still takes some hundred MB, never above the peak.
			if rss, peak := l.Values["rss_gb"], l.Values["rss_peak_gb"]; rss < 0.05 || peak < rss {
				t.Errorf("iteration %d resident set %v GB, peak %v GB", l.Iteration, rss, peak)
			}
			if a := l.Values["first_action_agreement"]; a < 1.0/float64(cfg.Rollout.GroupSize) || a > 1 {
				t.Errorf("iteration %d first-action agreement %v, want a share in [1/G, 1]", l.Iteration, a)
			}
			// The random model's answers are a few dozen tokens each: the
			// self-analysis cost is counted.
			if l.Values["analysis_tokens"] < 1 || l.Values["analysis_prompt_tokens"] <= l.Values["analysis_tokens"] {
				t.Errorf("iteration %d analysis tokens: %v written, %v read", l.Iteration, l.Values["analysis_tokens"], l.Values["analysis_prompt_tokens"])
			}
		}
	}
	if iters != cfg.Iterations {
		t.Errorf("%d iteration lines in metrics.jsonl, want %d", iters, cfg.Iterations)
	}
	if len(served) != cfg.Iterations {
		t.Fatalf("probed the served weights %d times", len(served))
	}
	for k := 1; k < len(served); k++ {
		same := true
		for i := 1; i < len(probe); i++ {
			same = same && served[k][i] == served[k-1][i]
		}
		if same {
			t.Errorf("served log-probs after iteration %d equal those after %d: weights were not published", k+1, k)
		}
	}
	var st orchestrator.State
	b, _ := os.ReadFile(filepath.Join(dir, "state.json"))
	json.Unmarshal(b, &st)
	if !st.Done || st.Iteration != 3 || !st.Stage1Done || st.BaseEval == nil || st.FinalEval == nil {
		t.Fatalf("state %+v", st)
	}
	// The base is named by its weights, in the state, on the base eval's
	// metrics lines and in the report.
	want, err := basemodel.WeightsHash(cfg.Model)
	if err != nil || st.BaseWeights != want {
		t.Errorf("state names base weights %q, want %q (%v)", st.BaseWeights, want, err)
	}
	sampled := map[int]int{}
	for _, l := range lines {
		if l.Kind == "eval" && l.Iteration == 0 && l.Base != want[:12] {
			t.Errorf("base eval line names base %q, want %q", l.Base, want[:12])
		}
		if l.Kind == "eval_sampled" {
			sampled[l.Iteration]++
			if l.Split != "eval_seen" || l.Values["temperature"] != 1 || l.Values["episodes"] != float64(cfg.Eval.Episodes) {
				t.Errorf("sampled eval line %+v", l)
			}
		}
	}
	if sampled[0] != 1 || sampled[cfg.Iterations] != 1 || len(sampled) != 2 {
		t.Errorf("sampled eval lines per iteration %v, want one at 0 and one at %d", sampled, cfg.Iterations)
	}
	if st.BaseEval.SampledTemperature != 1 || st.FinalEval.SampledTemperature != 1 {
		t.Errorf("eval points lack the sampled eval: base %+v final %+v", st.BaseEval, st.FinalEval)
	}
	if md, _ := os.ReadFile(filepath.Join(dir, "report", "results.md")); !strings.Contains(string(md), "weights sha256 "+want[:12]) || !strings.Contains(string(md), "Sampled at T=1") {
		t.Errorf("results.md does not name the base weights or the sampled eval:\n%s", md)
	}
	// seedctl report compares finished runs (here the run with itself).
	cmp := filepath.Join(t.TempDir(), "cmp")
	out, err := runApp(t, "report", "--out", cmp, dir, dir)
	if err != nil {
		t.Fatalf("report: %v\n%s", err, out)
	}
	md, err := os.ReadFile(filepath.Join(cmp, "compare.md"))
	if err != nil || strings.Count(string(md), "| "+filepath.Base(dir)+" | seed | 3 |") != 2 {
		t.Errorf("compare.md (%v):\n%s", err, md)
	}
}

func itoa(k int) string { b, _ := json.Marshal(k); return string(b) }

// stalePublisher acknowledges publishes and ignores them, as a vLLM that
// keeps its old weights after reload_weights does (vLLM #32718).
type stalePublisher struct{ inference.Backend }

func (stalePublisher) Publish(context.Context, string, string) error { return nil }

// TestRunStopsOnStaleWeights: after each publish the run compares the
// served log-probs of a probe with the trainer's; a server that kept the
// old weights stops the run at the first publish, naming why, instead of
// sampling the next iteration from the wrong policy.
func TestRunStopsOnStaleWeights(t *testing.T) {
	t.Parallel() // an end-to-end run: mostly waiting on its processes and servers
	cfg := tinyRunConfig(t, orchestrator.AlgoGRPO)
	open := openBackendFor(cfg.Backend, cfg.RL.DType, 0, zerolog.Nop())
	deps := orchestrator.Deps{NewLearner: learner.Local("cpu"), Log: zerolog.Nop(),
		OpenBackend: func(ctx context.Context, dir string) (inference.Backend, error) {
			b, err := open(ctx, dir)
			if err != nil {
				return nil, err
			}
			return stalePublisher{b}, nil
		}}
	_, err := orchestrator.Start(context.Background(), cfg, deps)
	if !errors.Is(err, inference.ErrStaleWeights) || !strings.Contains(err.Error(), "iter-1") {
		t.Fatalf("a server that kept its weights: %v", err)
	}
}

// TestRunBF16Trainer: a run whose trainer computes in bfloat16 trains,
// publishes bfloat16 checkpoints (as vLLM loads them) with float32 master
// weights in the optimizer state, and passes the publish verification.
func TestRunBF16Trainer(t *testing.T) {
	cfg := tinyRunConfig(t, orchestrator.AlgoGRPO)
	cfg.Iterations, cfg.RL.DType = 2, "bfloat16"
	res, err := orchestrator.Start(context.Background(), cfg, orchestrator.Deps{NewLearner: learner.Local("cpu"), Log: zerolog.Nop(),
		OpenBackend: openBackendFor(cfg.Backend, cfg.RL.DType, 0, zerolog.Nop())})
	if err != nil {
		t.Fatal(err)
	}
	ck := filepath.Join(res.Dir, "checkpoints", "iter-2")
	info, err := trainer.InspectCheckpoint(ck)
	if err != nil || info.DTypes["BF16"] != info.Params || info.Params == 0 {
		t.Fatalf("iter-2 checkpoint dtypes %v of %d parameters (%v), want all BF16", info.DTypes, info.Params, err)
	}
	st, err := os.ReadFile(filepath.Join(ck, trainer.OptimizerStateFile))
	if err != nil || !bytes.Contains(st, []byte(".master")) {
		t.Errorf("optimizer state without master weights (%v)", err)
	}
}

// The shipped GPU configs parse and validate (they cannot run here).
func TestShippedConfigsCheck(t *testing.T) {
	files, _ := filepath.Glob("../../configs/*.json")
	if len(files) < 3 {
		t.Fatalf("found %d configs", len(files))
	}
	var out bytes.Buffer
	app := newApp()
	app.Writer = &out
	if err := app.Run(append([]string{"seedctl", "config", "check"}, files...)); err != nil {
		t.Fatalf("config check: %v\n%s", err, out.String())
	}
	if strings.Count(out.String(), ": ok") != len(files) {
		t.Errorf("output:\n%s", out.String())
	}
	for _, want := range []string{"advantage step_rows", "rows per mini-batch", "dual-clip c 3", "entropy bonus", "skill mode", "stage 1:", "targets", "eval protocol:", "self-analysis:", "as the public parser reads them"} {
		if strings.Count(out.String(), want) != len(files) {
			t.Errorf("config check prints %q %d times for %d configs:\n%s", want, strings.Count(out.String(), want), len(files), out.String())
		}
	}
	// The Search-QA preset is the public search launcher's (search.sh and
	// the search SFT scripts), and says so for each value; no "paper" or
	// ALFWorld label is left on a value the launcher sets otherwise.
	var sq bytes.Buffer
	app = newApp()
	app.Writer = &sq
	if err := app.Run([]string{"seedctl", "config", "check", "../../configs/searchqa-qwen2.5-3b-sglang.json"}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"reward 10·outcome − 0.01 per invalid step (public search.sh)", "128 tasks per iteration (public search.sh), window 4 (public search.sh), at most 4 steps (public search.sh)",
		"512 rows per mini-batch (public search.sh)", "entropy bonus 0 (public search.sh)", "KL 0.001 (public search.sh)", "lr_warmup_steps_ratio 0.1",
		"stage 1 collection: T=0.4, window 4, at most 4 steps (public search SFT scripts); 1440 trajectories (public search SFT scripts), 3 epochs (public search SFT scripts), examples up to 12288 tokens (public search SFT scripts)",
		"sampled at T=0.4", "(public search.sh: T 0.4 sampled on its 512 validation questions)",
		"self-analysis: greedy, up to 4096 tokens (public launchers), no repair round (public launchers' policy_vllm), skills of any length (public launchers' policy_vllm)"} {
		if !strings.Contains(sq.String(), want) {
			t.Errorf("the Search-QA preset's check lacks %q:\n%s", want, sq.String())
		}
	}
	for _, bad := range []string{"(paper), lr", "KL 0.001 (paper)", "entropy bonus 0 (ours)"} {
		if strings.Contains(sq.String(), bad) {
			t.Errorf("the Search-QA preset's check says %q", bad)
		}
	}
	// Each preset states its recipe itself: nothing of the embedded
	// default's (its acting replay, its 256 rows) is inherited silently.
	explicit := map[string][]string{
		"":        {"skill_mode", "critical_steps", "analysis_repair", "analysis_max_tokens", "analysis_min_skill_words"},
		"stage1":  {"episodes", "epochs", "lr", "acting_replay", "targets"},
		"rollout": {"mode", "window", "group_size", "temperature", "invalid_penalty"},
		"rl":      {"lambda", "beta", "kl_coef", "clip_eps", "lr", "mini_batch_rows", "advantage", "reward_scale", "outcome", "adv_norm", "clip_ratio_c", "entropy_coef"},
		"eval":    {"episodes", "temperature", "seed"},
	}
	for _, f := range files {
		b, _ := os.ReadFile(f)
		var raw map[string]json.RawMessage
		if err := json.Unmarshal(b, &raw); err != nil {
			t.Fatal(err)
		}
		for block, keys := range explicit {
			obj := raw
			if block != "" {
				obj = nil
				if err := json.Unmarshal(raw[block], &obj); err != nil {
					t.Fatalf("%s: block %q: %v", f, block, err)
				}
			}
			for _, k := range keys {
				if _, ok := obj[k]; !ok {
					t.Errorf("%s does not state %s.%s (it would inherit the embedded default's)", f, block, k)
				}
			}
		}
	}
	// By the memory plan every preset fits an 80 and a 141 GiB card, its
	// colocated server included.
	out.Reset()
	app = newApp()
	app.Writer = &out
	if err := app.Run(append([]string{"seedctl", "config", "check", "--device-memory", "80,141"}, files...)); err != nil {
		t.Fatalf("config check --device-memory 80,141: %v\n%s", err, out.String())
	}
	if n := strings.Count(out.String(), ": fits"); n != 2*len(files) || strings.Contains(out.String(), "DOES NOT FIT") {
		t.Errorf("%d of %d device checks fit:\n%s", n, 2*len(files), out.String())
	}
	for _, want := range []string{"float32 master weights", "AdamW moments", "reference policy (KL)", "LM head logits", "    trainer peak"} {
		if strings.Count(out.String(), want) != len(files) {
			t.Errorf("the memory plan prints %q %d times for %d configs", want, strings.Count(out.String(), want), len(files))
		}
	}
	// The 3B preset with 64k-token rows and micro-batches and the server at
	// 0.45 of the card (as it was before the plan) does not fit 80 GiB;
	// the check fails and names the knobs.
	b, _ := os.ReadFile("../../configs/alfworld-qwen2.5-3b-vllm.json")
	old := strings.NewReplacer(`"0.3"`, `"0.45"`, `"8192"`, `"65536"`, `"micro_batch_tokens": 8192`, `"micro_batch_tokens": 65536`).Replace(string(b))
	big := filepath.Join(t.TempDir(), "big.json")
	os.WriteFile(big, []byte(old), 0o644)
	out.Reset()
	app = newApp()
	app.Writer = &out
	if err := app.Run([]string{"seedctl", "config", "check", "--device-memory", "80", big}); err == nil ||
		!strings.Contains(out.String(), "DOES NOT FIT") || !strings.Contains(out.String(), "lower rl.micro_batch_tokens") || !strings.Contains(out.String(), "--gpu-memory-utilization to at most 0.3") {
		t.Errorf("an oversized config passed or gave no fix (%v):\n%s", err, out.String())
	}
	bad := filepath.Join(t.TempDir(), "bad.json")
	os.WriteFile(bad, []byte(`{"algo": "seed", "rl": {"lr": 1e-6, "lamda": 0.1}}`), 0o644)
	out.Reset()
	app = newApp()
	app.Writer = &out
	if err := app.Run([]string{"seedctl", "config", "check", bad}); err == nil || !strings.Contains(out.String(), "lamda") {
		t.Errorf("a misspelt field passed: %v\n%s", err, out.String())
	}
}

// A reduced bench grid on the tiny model: a spent budget starts nothing,
// a full pass writes the tables, and a second pass reuses every run.
func TestBenchQuickGridResumes(t *testing.T) {
	t.Parallel() // an end-to-end run: mostly waiting on its processes and servers
	if testing.Short() {
		t.Skip("runs three tiny trainings")
	}
	base := tinyRunConfig(t, orchestrator.AlgoSEED)
	base.Iterations = 1
	spec := benchmarks.Quick(base)
	spec.Shares = []float64{0.5}
	// Two seeds: with the places line in an order per episode (the
	// default), each seed's eval prompts differ, and so does its base eval.
	spec.Seeds = []int64{1, 2}
	out := t.TempDir()
	spec.Budget = time.Nanosecond
	outs, err := benchmarks.Run(context.Background(), spec, out, tinyDeps(), io.Discard, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range outs {
		if o.Skipped == "" {
			t.Errorf("%s ran after the budget was spent", o.Name())
		}
	}
	spec.Budget, spec.ReportOnly = 0, true
	if outs, err = benchmarks.Run(context.Background(), spec, out, tinyDeps(), io.Discard, zerolog.Nop()); err != nil {
		t.Fatal(err)
	}
	for _, o := range outs {
		if o.Skipped != "not finished (report only)" {
			t.Errorf("%s with report only: skipped %q", o.Name(), o.Skipped)
		}
	}
	if _, err := os.Stat(filepath.Join(out, "results.md")); err != nil {
		t.Errorf("report only wrote no tables: %v", err)
	}
	spec.ReportOnly = false
	if outs, err = benchmarks.Run(context.Background(), spec, out, tinyDeps(), io.Discard, zerolog.Nop()); err != nil {
		t.Fatal(err)
	}
	if len(outs) != 6 {
		t.Fatalf("%d outcomes, want 6 (GRPO and SEED at 100%%, SEED at 50%%, two seeds)", len(outs))
	}
	md, err := os.ReadFile(filepath.Join(out, "results.md"))
	if err != nil || !strings.Contains(string(md), "## T2 sample efficiency") {
		t.Fatalf("results.md: %v\n%s", err, md)
	}
	// The base policy is evaluated once per seed (its eval prompts), by
	// the seed's first experiment; the others take its figures and its
	// iteration-0 metrics lines.
	state := func(name string) orchestrator.State {
		var st orchestrator.State
		b, err := os.ReadFile(filepath.Join(out, "runs", name, "state.json"))
		if err == nil {
			err = json.Unmarshal(b, &st)
		}
		if err != nil || st.BaseEval == nil {
			t.Fatalf("%s: state %v, base eval %v", name, err, st.BaseEval)
		}
		return st
	}
	for _, seed := range []string{"seed1", "seed2"} {
		first := filepath.Join(out, "runs", "grpo-share100-"+seed)
		if st := state("grpo-share100-" + seed); st.BaseEvalFrom != "" {
			t.Errorf("the first experiment of %s reused a base eval from %s", seed, st.BaseEvalFrom)
		}
		for _, name := range []string{"seed-share100-" + seed, "seed-share050-" + seed} {
			st := state(name)
			if st.BaseEvalFrom != first || !reflect.DeepEqual(*st.BaseEval, *state("grpo-share100-" + seed).BaseEval) {
				t.Errorf("%s: base eval from %q = %+v, want its seed's first experiment's", name, st.BaseEvalFrom, st.BaseEval)
			}
		}
	}
	for _, name := range []string{"seed-share100-seed1", "seed-share050-seed1"} {
		lines, err := orchestrator.ReadMetrics(filepath.Join(out, "runs", name, "metrics.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		splits := map[string]bool{}
		for _, l := range lines {
			if l.Kind == "eval" && l.Iteration == 0 {
				splits[l.Split] = true
			}
		}
		if len(splits) != 2 {
			t.Errorf("%s: iteration-0 eval lines for %v, want both splits", name, splits)
		}
	}
	// Shares are of the tasks a full-share run consumes, not of the whole
	// split (where every share above that would train on the same tasks).
	want := base.Iterations * base.TasksPerIteration
	if c, err := orchestrator.Load(filepath.Join(out, "runs", "seed-share050-seed1", "config.json")); err != nil || c.TrainTasks != want {
		t.Errorf("the 50%% run's training set: %d tasks (%v), want %d", c.TrainTasks, err, want)
	}
	if !strings.Contains(string(md), fmt.Sprintf("training set %d training tasks", want)) {
		t.Errorf("results.md does not name the training set:\n%s", md)
	}
	stamp := func() time.Time {
		fi, err := os.Stat(filepath.Join(out, "runs", "seed-share100-seed1", "state.json"))
		if err != nil {
			t.Fatal(err)
		}
		return fi.ModTime()
	}
	before := stamp()
	start := time.Now()
	if _, err := benchmarks.Run(context.Background(), spec, out, tinyDeps(), io.Discard, zerolog.Nop()); err != nil {
		t.Fatal(err)
	}
	if !stamp().Equal(before) || time.Since(start) > 20*time.Second {
		t.Error("a second pass re-ran finished experiments")
	}
}

// bench's grid flags: --report on a fresh folder runs nothing and lists
// exactly the selected experiments as unfinished; an unknown method is
// refused by name before anything starts.
func TestBenchGridFlags(t *testing.T) {
	cfg := tinyRunConfig(t, orchestrator.AlgoSEED)
	file := filepath.Join(t.TempDir(), "run.json")
	b, _ := json.Marshal(cfg)
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	if _, err := runApp(t, "bench", "--config", file, "--out", out, "--report", "--algos", "grpo", "--shares", "1", "--seeds", "1,2"); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(out, "results.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"grpo-share100-seed1: not finished", "grpo-share100-seed2: not finished", "seeds [1 2]"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("results.md lacks %q:\n%s", want, md)
		}
	}
	if strings.Contains(string(md), "seed-share") || strings.Contains(string(md), "share040") {
		t.Errorf("results.md lists experiments outside the selected grid:\n%s", md)
	}
	if _, err := runApp(t, "bench", "--config", file, "--out", t.TempDir(), "--report", "--algos", "ppo"); err == nil || !strings.Contains(err.Error(), "ppo") {
		t.Errorf("unknown method: %v", err)
	}
	// --env-opt reaches every experiment's config, checked by the env.
	if _, err := runApp(t, "bench", "--config", file, "--out", t.TempDir(), "--report", "--env-opt", "placement_prior=2"); err == nil || !strings.Contains(err.Error(), "placement_prior") {
		t.Errorf("out-of-range env option: %v", err)
	}
	prior := t.TempDir()
	if _, err := runApp(t, "bench", "--config", file, "--out", prior, "--report", "--algos", "grpo", "--shares", "1", "--seeds", "1", "--env-opt", "placement_prior=0.8"); err != nil {
		t.Fatal(err)
	}
	if md, _ := os.ReadFile(filepath.Join(prior, "results.md")); !strings.Contains(string(md), "`placement_prior=0.8`") {
		t.Errorf("results.md does not say which environment options the grid ran with:\n%s", md)
	}
}

// TestRunStopsAtPlateau: with eval.plateau_patience the run ends once
// eval-seen success stops improving (a random model stays at 0%), says
// why in state.json, and its final evaluation is the last periodic one.
func TestRunStopsAtPlateau(t *testing.T) {
	t.Parallel() // an end-to-end run: mostly waiting on its processes and servers
	cfg := tinyRunConfig(t, orchestrator.AlgoGRPO)
	cfg.Iterations, cfg.Eval.Every, cfg.Eval.PlateauPatience = 3, 1, 1
	res, err := orchestrator.Start(context.Background(), cfg, orchestrator.Deps{NewLearner: learner.Local("cpu"), Log: zerolog.Nop(),
		OpenBackend: openBackendFor(cfg.Backend, cfg.RL.DType, 0, zerolog.Nop())})
	if err != nil {
		t.Fatal(err)
	}
	st := res.State
	if st.Iteration != 1 || !strings.Contains(st.Stopped, "in 1 evaluations") || st.FinalEval == nil || st.FinalEval.Iteration != 1 || !st.Done {
		t.Errorf("state after a plateau: iteration %d, stopped %q, final eval %+v, done %v", st.Iteration, st.Stopped, st.FinalEval, st.Done)
	}
}

// localRanks is run --nproc n's learner factory (ranks on this host).
func localRanks(n int, zero bool, timeout time.Duration) orchestrator.LearnerFactory {
	return learner.Dist(learner.DistOptions{Device: "cpu", NProc: n, Zero: zero, Timeout: timeout}, zerolog.Nop())
}

// run --nproc 2: rank 0 in this process, rank 1 a child process (this test
// binary as seedctl learner-rank), data-parallel over c10d. Stage 1 and the
// first iteration see the same data as one process, so their losses and
// gradient norms agree to float rounding; the run finishes and saves.
func TestRunDataParallelMatchesOneProcess(t *testing.T) {
	t.Parallel() // an end-to-end run: mostly waiting on its processes and servers
	if !trainer.DistAvailable(trainer.BackendGloo) {
		if info, err := trainer.Runtime(); err == nil && strings.HasPrefix(info.LibtorchVersion, "1.13") {
			t.Fatal("Debian's libtorch but no Gloo process group (libgloo-dev missing when gotch was prepared?)")
		}
		t.Skip("this libtorch build has no Gloo process group")
	}
	run := func(name string, learners orchestrator.LearnerFactory) []orchestrator.MetricsLine {
		cfg := tinyRunConfig(t, orchestrator.AlgoSEED)
		cfg.Name, cfg.Iterations = name, 1
		deps := orchestrator.Deps{NewLearner: learners, Log: zerolog.Nop(), OpenBackend: openBackendFor(cfg.Backend, cfg.RL.DType, 0, zerolog.Nop())}
		res, err := orchestrator.Start(context.Background(), cfg, deps)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !res.State.Done {
			t.Fatalf("%s: not done", name)
		}
		lines, err := orchestrator.ReadMetrics(filepath.Join(res.Dir, "metrics.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		return lines
	}
	one := run("one", learner.Local("cpu"))
	two := run("two", localRanks(2, false, learner.DefaultDistTimeout))
	// The same with rank 1 on "another host": a learner-node process that
	// dials the run's ranks port, as on a second machine.
	port, err := loopback.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	var node *exec.Cmd
	listening := func(addr string) {
		node = exec.Command(os.Args[0], "learner-node", "--connect", addr, "--nproc", "1")
		node.Env = append(os.Environ(), "SEEDCTL_TEST_AS_MAIN=1")
		node.Stderr = os.Stderr
		if err := node.Start(); err != nil {
			t.Error(err)
		}
	}
	remote := run("remote", learner.Dist(learner.DistOptions{Device: "cpu", NProc: 1, World: 2, Listen: "127.0.0.1:0",
		MasterAddr: "127.0.0.1", MasterPort: port, Timeout: time.Minute, Listening: listening}, zerolog.Nop()))
	if node == nil {
		t.Fatal("the run never listened for the other host's rank")
	}
	if err := node.Wait(); err != nil {
		t.Errorf("learner-node: %v", err)
	}
	pick := func(lines []orchestrator.MetricsLine, kind string) map[string]float64 {
		for _, l := range lines {
			if l.Kind == kind {
				return l.Values
			}
		}
		t.Fatalf("no %s line", kind)
		return nil
	}
	for _, c := range []struct{ kind, key string }{
		{"stage1", "sft_final_loss"}, {"iteration", "loss"}, {"iteration", "grad_norm"}, {"iteration", "tokens"}, {"iteration", "rows"},
	} {
		a, b, r := pick(one, c.kind)[c.key], pick(two, c.kind)[c.key], pick(remote, c.kind)[c.key]
		if math.Abs(a-b) > 1e-4*math.Max(1, math.Abs(a)) || math.Abs(a-r) > 1e-4*math.Max(1, math.Abs(a)) {
			t.Errorf("%s %s: one process %v, two ranks %v, a rank dialled in %v", c.kind, c.key, a, b, r)
		}
		t.Logf("%s %s: one process %v, two ranks %v, a rank dialled in %v", c.kind, c.key, a, b, r)
	}
}

// A learner rank killed mid-run stops the run with an error naming the
// rank, within the collectives' timeout: no hang. The state stays at the
// last finished iteration (resume continues from there; kill -9 tests).
func TestRunStopsWhenARankDies(t *testing.T) {
	t.Parallel() // an end-to-end run: mostly waiting on its processes and servers
	if !trainer.DistAvailable(trainer.BackendGloo) {
		t.Skip("this libtorch build has no Gloo process group")
	}
	var worker *os.Process
	started := func(_ int, p *os.Process) { worker = p }
	cfg := tinyRunConfig(t, orchestrator.AlgoGRPO)
	cfg.Name, cfg.Iterations = "killed", 2
	deps := orchestrator.Deps{NewLearner: learner.Dist(learner.DistOptions{Device: "cpu", NProc: 2, Timeout: 15 * time.Second, Started: started}, zerolog.Nop()), Log: zerolog.Nop(), OpenBackend: openBackendFor(cfg.Backend, cfg.RL.DType, 0, zerolog.Nop()),
		AfterPhase: func(k int, phase string) {
			if k == 2 && phase == "rescore" && worker != nil {
				worker.Kill() // before iteration 2's update
			}
		}}
	start := time.Now()
	res, err := orchestrator.Start(context.Background(), cfg, deps)
	if err == nil {
		t.Fatalf("the run finished without its rank 1: %+v", res)
	}
	if !strings.Contains(err.Error(), "learner rank 1") && !strings.Contains(err.Error(), "rank 0") {
		t.Errorf("error does not name the rank: %v", err)
	}
	if d := time.Since(start); d > 3*time.Minute {
		t.Errorf("the run took %v to stop", d)
	}
	var st orchestrator.State
	b, _ := os.ReadFile(filepath.Join(cfg.RunsDir, cfg.Name, "state.json"))
	if json.Unmarshal(b, &st) != nil || st.Iteration != 1 {
		t.Errorf("state after the failure: iteration %d, want 1 (the last finished)", st.Iteration)
	}
	t.Logf("stopped after %v: %v", time.Since(start).Round(time.Second), err)
}

// Rescoring under --nproc 3 is spread over the ranks and gathered in order:
// the same log-probs as one learner's, for the policy and the reference.
func TestDistLearnerRescoresLikeOneLearner(t *testing.T) {
	if !trainer.DistAvailable(trainer.BackendGloo) {
		t.Skip("this libtorch build has no Gloo process group")
	}
	cfg := tinyRunConfig(t, orchestrator.AlgoSEED)
	cfg.RL.KLCoef = 0.01
	spec := orchestrator.LearnerSpec{Policy: cfg.Model, Reference: cfg.Model, RL: cfg.RL, Temperature: 1}
	one, err := learner.Local("cpu")(spec)
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp) // where the ranks' rendezvous folder goes
	before, _ := loopback.Listening(os.Getpid())
	three, err := localRanks(3, false, learner.DefaultDistTimeout)(spec)
	if err != nil {
		t.Fatal(err)
	}
	defer three.Close()
	// One host's ranks meet in a private file store: rank 0 (this
	// process) opens no rendezvous port on any interface (c10d's TCPStore
	// listened on *:PORT before, even at 127.0.0.1).
	if now, err := loopback.Listening(os.Getpid()); err == nil {
		for _, a := range loopback.Exposed(now) {
			if !slices.Contains(before, a) {
				t.Errorf("with --nproc 3 on one host rank 0 listens on %s", a)
			}
		}
	}
	if dirs, _ := filepath.Glob(filepath.Join(tmp, "seedctl-rendezvous-*")); len(dirs) != 1 {
		t.Errorf("rendezvous folders %v, want one", dirs)
	} else if fi, err := os.Stat(dirs[0]); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("rendezvous folder %s: %v, %v (want 0700)", dirs[0], fi.Mode(), err)
	}
	t.Cleanup(func() { // after the deferred Close
		if dirs, _ := filepath.Glob(filepath.Join(tmp, "seedctl-rendezvous-*")); len(dirs) != 0 {
			t.Errorf("rendezvous folders left after Close: %v", dirs)
		}
	})
	seqs := [][]int{{5, 17, 3, 88}, {7, 7, 12}, {11, 13, 15, 17, 19}, {2, 4}, {9, 8, 7, 6, 5, 4, 3}, {1, 2, 3}, {30, 31}}
	for _, ref := range []bool{false, true} {
		score := func(l orchestrator.Learner) [][]float32 {
			f := l.Rescore
			if ref {
				f = l.RescoreRef
			}
			lp, err := f(context.Background(), seqs)
			if err != nil {
				t.Fatal(err)
			}
			return lp
		}
		a, b := score(one), score(three)
		if len(a) != len(seqs) || len(b) != len(seqs) {
			t.Fatalf("reference %v: %d and %d rows for %d sequences", ref, len(a), len(b), len(seqs))
		}
		for i := range seqs {
			if len(a[i]) != len(seqs[i]) || len(b[i]) != len(seqs[i]) {
				t.Fatalf("reference %v, sequence %d: %d and %d log-probs for %d tokens", ref, i, len(a[i]), len(b[i]), len(seqs[i]))
			}
			for k := range a[i] {
				if math.Abs(float64(a[i][k]-b[i][k])) > 1e-5 {
					t.Errorf("reference %v, sequence %d token %d: one learner %v, three ranks %v", ref, i, k, a[i][k], b[i][k])
				}
			}
		}
	}
}

// callLog records, in order, what the run asked of the server and the
// trainer.
type callLog struct {
	mu    sync.Mutex
	calls []string
}

func (c *callLog) add(s string) {
	c.mu.Lock()
	c.calls = append(c.calls, s)
	c.mu.Unlock()
}

type loggedBackend struct {
	inference.Backend
	log *callLog
}

func (b loggedBackend) Generate(ctx context.Context, reqs []inference.GenRequest) ([]inference.GenResult, error) {
	b.log.add("generate")
	return b.Backend.Generate(ctx, reqs)
}

func (b loggedBackend) Release(ctx context.Context) error {
	b.log.add("release")
	return b.Backend.Release(ctx)
}

func (b loggedBackend) Publish(ctx context.Context, dir, version string) error {
	b.log.add("publish")
	return b.Backend.Publish(ctx, dir, version)
}

type loggedLearner struct {
	orchestrator.Learner
	log *callLog
}

func (l loggedLearner) Step(ctx context.Context, rows []orchestrator.Row, lr float64) (orchestrator.StepStats, error) {
	l.log.add("train")
	return l.Learner.Step(ctx, rows, lr)
}

func (l loggedLearner) SFT(ctx context.Context, data []orchestrator.SFTExample, opt orchestrator.SFTOptions, progress func(step, steps int, loss float64)) error {
	l.log.add("train")
	return l.Learner.SFT(ctx, data, opt, progress)
}

// TestRunReleasesTheServerToTrain: a server colocated with the trainer
// gives its memory back before stage 1's fine-tuning and before every
// update, and is never asked to generate until a publish has taken it
// back: between a release and the next publish the run only trains.
func TestRunReleasesTheServerToTrain(t *testing.T) {
	t.Parallel() // an end-to-end run: mostly waiting on its processes and servers
	cfg := tinyRunConfig(t, orchestrator.AlgoSEED)
	cfg.Iterations = 2
	log := &callLog{}
	open := openBackendFor(cfg.Backend, cfg.RL.DType, 0, zerolog.Nop())
	learners := learner.Local("cpu")
	deps := orchestrator.Deps{Log: zerolog.Nop(),
		NewLearner: func(spec orchestrator.LearnerSpec) (orchestrator.Learner, error) {
			l, err := learners(spec)
			if err != nil {
				return nil, err
			}
			return loggedLearner{l, log}, nil
		},
		OpenBackend: func(ctx context.Context, dir string) (inference.Backend, error) {
			b, err := open(ctx, dir)
			if err != nil {
				return nil, err
			}
			return loggedBackend{b, log}, nil
		}}
	if _, err := orchestrator.Start(context.Background(), cfg, deps); err != nil {
		t.Fatal(err)
	}
	asleep, trainings, releases := false, 0, 0
	for i, c := range log.calls {
		switch c {
		case "release":
			asleep = true
			releases++
		case "publish":
			asleep = false
		case "generate":
			if asleep {
				t.Fatalf("call %d: generation asked of a released server (%v)", i, log.calls)
			}
		case "train":
			if !asleep {
				t.Fatalf("call %d: training beside a server that holds its memory (%v)", i, log.calls)
			}
			trainings++
		}
	}
	// Stage 1, then at least one optimizer step in each of two iterations.
	if releases != 3 || trainings < 3 {
		t.Errorf("%d releases and %d training calls, want 3 and at least 3: %v", releases, trainings, log.calls)
	}
}
