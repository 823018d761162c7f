package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/seedctl/seedctl/inference"
	"github.com/seedctl/seedctl/inference/server/servertest"
	"github.com/seedctl/seedctl/learner"
	"github.com/seedctl/seedctl/orchestrator"
	"github.com/seedctl/seedctl/rollout"
	"github.com/seedctl/seedctl/skills"
	"github.com/seedctl/seedctl/trainer"
)

// TestMain lets tests run this binary as seedctl itself (a child process
// that can be killed for real).
func TestMain(m *testing.M) {
	if os.Getenv("SEEDCTL_TEST_AS_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	// Every process this test binary starts (learner ranks, killed runs,
	// learner-node) is seedctl: set once here, not per test, so the long
	// end-to-end tests can run in parallel (t.Setenv forbids it).
	os.Setenv("SEEDCTL_TEST_AS_MAIN", "1")
	// The learner port's secret for the tests with ranks of "other hosts"
	// (TestOtherHostsNeedTheSecret unsets it for itself).
	os.Setenv(learner.RankSecretEnv, "a test secret of the run and its ranks")
	os.Exit(m.Run())
}

func tinyDeps() orchestrator.Deps {
	cfg := orchestrator.Default()
	return orchestrator.Deps{NewLearner: learner.Local("cpu"), Log: zerolog.Nop(), OpenBackend: openBackendFor(cfg.Backend, cfg.RL.DType, 0, zerolog.Nop())}
}

// sameRecords compares what two runs wrote for iterations 1..n, leaving out
// wall-clock fields.
func sameRecords(t *testing.T, a, b string, n int) {
	t.Helper()
	for k := 1; k <= n; k++ {
		ta, err1 := rollout.ReadJSONL(filepath.Join(a, "trajectories", "iter-"+itoa(k)+".jsonl"))
		tb, err2 := rollout.ReadJSONL(filepath.Join(b, "trajectories", "iter-"+itoa(k)+".jsonl"))
		if err1 != nil || err2 != nil || len(ta) != len(tb) {
			t.Fatalf("iteration %d: %v, %v, %d vs %d trajectories", k, err1, err2, len(ta), len(tb))
		}
		for i := range ta {
			ta[i].Started, tb[i].Started, ta[i].Millis, tb[i].Millis = time.Time{}, time.Time{}, 0, 0
			// Sampling log-probs come from a continuously batching server:
			// the batch a request shares depends on timing, which moves
			// float32 results in the last bits. Everything discrete must be
			// identical; log-probs agree to 2e-3.
			for j := range ta[i].Steps {
				if j >= len(tb[i].Steps) {
					break
				}
				la, lb := ta[i].Steps[j].LogProbs, tb[i].Steps[j].LogProbs
				if len(la) == len(lb) {
					for q := range la {
						if math.Abs(la[q]-lb[q]) > 2e-3 {
							t.Errorf("iteration %d %s step %d token %d: log-prob %v vs %v", k, ta[i].ID, j, q, la[q], lb[q])
						}
					}
					lb = la
				}
				tb[i].Steps[j].LogProbs = lb
			}
			for _, tr := range []*rollout.Trajectory{ta[i], tb[i]} {
				for j := range tr.Steps {
					tr.Steps[j].GenMillis, tr.Steps[j].EnvMillis = 0, 0
				}
			}
			if !reflect.DeepEqual(ta[i], tb[i]) {
				ja, _ := json.Marshal(ta[i])
				jb, _ := json.Marshal(tb[i])
				at := 0
				for at < len(ja) && at < len(jb) && ja[at] == jb[at] {
					at++
				}
				t.Errorf("iteration %d trajectory %s differs between the interrupted and the uninterrupted run at byte %d: %q vs %q", k, ta[i].ID, at, ja[max(0, at-80):min(len(ja), at+40)], jb[max(0, at-80):min(len(jb), at+40)])
			}
		}
		sa, err1 := skills.ReadStore(filepath.Join(a, "skills", "iter-"+itoa(k)+".jsonl"))
		sb, err2 := skills.ReadStore(filepath.Join(b, "skills", "iter-"+itoa(k)+".jsonl"))
		if err1 != nil || err2 != nil || !reflect.DeepEqual(sa, sb) {
			t.Errorf("iteration %d skills differ (%v, %v)", k, err1, err2)
		}
	}
	probe := []int{5, 17, 3, 88, 41, 9, 60, 2}
	pa, err1 := servertest.LogProbs(filepath.Join(a, "checkpoints", "iter-"+itoa(n)), probe)
	pb, err2 := servertest.LogProbs(filepath.Join(b, "checkpoints", "iter-"+itoa(n)), probe)
	if err1 != nil || err2 != nil {
		t.Fatalf("scoring the final checkpoints: %v, %v", err1, err2)
	}
	for i := 1; i < len(probe); i++ {
		if math.Abs(pa[i]-pb[i]) > 2e-3 {
			t.Errorf("final weights differ: probe token %d log-prob %v vs %v", i, pa[i], pb[i])
		}
	}
	for _, d := range []string{a, b} {
		lines, err := orchestrator.ReadMetrics(filepath.Join(d, "metrics.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		seen := map[int]bool{}
		for _, l := range lines {
			if l.Kind == "iteration" {
				if seen[l.Iteration] {
					t.Errorf("%s: iteration %d appears twice in metrics.jsonl", d, l.Iteration)
				}
				seen[l.Iteration] = true
			}
		}
		if len(seen) != n {
			t.Errorf("%s: %d iterations in metrics.jsonl, want %d", d, len(seen), n)
		}
	}
}

// A run killed with SIGKILL in the middle of an iteration and resumed
// writes exactly what an uninterrupted run of the same seed writes; with
// --nproc 2 too (its learner rank, a child of the killed run, exits when
// its parent's pipe closes, and the resumed run starts new ranks).
func TestResumeAfterKillMatchesUninterruptedRun(t *testing.T) {
	t.Parallel() // an end-to-end run: mostly waiting on its processes and servers
	if testing.Short() {
		t.Skip("runs seedctl twice")
	}
	t.Run("one process", func(t *testing.T) { t.Parallel(); resumeAfterKill(t, 1, false) })
	for _, zero := range []bool{false, true} {
		t.Run(fmt.Sprintf("two ranks, ZeRO-1 %v", zero), func(t *testing.T) {
			t.Parallel()
			if !trainer.DistAvailable(trainer.BackendGloo) {
				t.Skip("this libtorch build has no Gloo process group")
			}
			resumeAfterKill(t, 2, zero)
		})
	}
}

// resumeAfterKill: with zero, each rank's optimizer shard is saved in the
// checkpoint (optimizer.rank-R-of-2.safetensors) and loaded on resume.
func resumeAfterKill(t *testing.T, nproc int, zero bool) {
	deps := tinyDeps()
	if nproc > 1 {
		deps.NewLearner = localRanks(nproc, zero, learner.DefaultDistTimeout)
	}
	cfg := tinyRunConfig(t, orchestrator.AlgoSEED)
	// Training is not bit-deterministic run to run (docs/architecture.md, known issues:
	// last-bit differences that Adam's normalisation amplifies to about the
	// learning rate). A small rate keeps those far below what could flip a
	// sampled token, so the comparison below can demand identical records.
	cfg.RL.LR, cfg.Stage1.LR = 1e-5, 1e-5
	cfg.Eval.SampledTemperature = 1
	ref, err := orchestrator.Start(context.Background(), cfg, deps)
	if err != nil {
		t.Fatal(err)
	}

	cfg.Name = "killed"
	cfgFile := filepath.Join(t.TempDir(), "run.json")
	b, _ := json.MarshalIndent(cfg, "", "  ")
	os.WriteFile(cfgFile, b, 0o644)
	dir := filepath.Join(cfg.RunsDir, cfg.Name)
	args := []string{"--log-level", "warn", "run", "--config", cfgFile, "--nproc", strconv.Itoa(nproc)}
	if zero {
		args = append(args, "--zero")
	}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "SEEDCTL_TEST_AS_MAIN=1")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Kill once iteration 2's rollouts are on disk (its update not yet
	// recorded as finished).
	trigger := filepath.Join(dir, "trajectories", "iter-2.jsonl")
	deadline := time.Now().Add(3 * time.Minute)
	for {
		if _, err := os.Stat(trigger); err == nil {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatal("the child run never reached iteration 2")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child did not die by SIGKILL: %v", err)
	}
	var st orchestrator.State
	sb, _ := os.ReadFile(filepath.Join(dir, "state.json"))
	json.Unmarshal(sb, &st)
	if st.Iteration != 1 || st.Done {
		t.Fatalf("state after the kill: iteration %d done %v, want 1 false", st.Iteration, st.Done)
	}
	if zero {
		for r := range nproc {
			f := filepath.Join(dir, "checkpoints", "iter-1", fmt.Sprintf("optimizer.rank-%d-of-%d.safetensors", r, nproc))
			if _, err := os.Stat(f); err != nil {
				t.Errorf("rank %d's optimizer shard: %v", r, err)
			}
		}
	}
	res, err := orchestrator.Resume(context.Background(), dir, deps)
	if err != nil {
		t.Fatal(err)
	}
	if res.State.Iteration != cfg.Iterations {
		t.Fatalf("resumed run ended at iteration %d", res.State.Iteration)
	}
	sameRecords(t, ref.Dir, dir, cfg.Iterations)
	// Every eval line once: the base's (iteration 0) kept across the kill.
	lines, err := orchestrator.ReadMetrics(filepath.Join(dir, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	evals := map[string]int{}
	for _, l := range lines {
		if l.Kind == "eval" || l.Kind == "eval_sampled" {
			evals[fmt.Sprintf("%s %s %d", l.Kind, l.Split, l.Iteration)]++
		}
	}
	for k, n := range evals {
		if n != 1 {
			t.Errorf("%s: %d lines after the resume, want 1", k, n)
		}
	}
	if len(evals) != 6 {
		t.Errorf("eval lines %v, want eval_seen, eval_unseen and sampled eval_seen at iterations 0 and %d", evals, cfg.Iterations)
	}
}

// failingBackend passes calls through until fail is set, then fails every
// generation as an unreachable server would after its retries.
type failingBackend struct {
	inference.Backend
	fail *bool
}

func (f failingBackend) Generate(ctx context.Context, reqs []inference.GenRequest) ([]inference.GenResult, error) {
	if *f.fail {
		return nil, errors.New("server unreachable after retries: connection refused")
	}
	return f.Backend.Generate(ctx, reqs)
}

// A server that fails mid-run stops the run cleanly with the last finished
// iteration saved; resuming finishes it.
func TestServerFailureStopsCleanlyAndResumes(t *testing.T) {
	t.Parallel() // an end-to-end run: mostly waiting on its processes and servers
	cfg := tinyRunConfig(t, orchestrator.AlgoGRPO)
	fail := false
	deps := tinyDeps()
	open := deps.OpenBackend
	deps.OpenBackend = func(ctx context.Context, dir string) (inference.Backend, error) {
		b, err := open(ctx, dir)
		return failingBackend{b, &fail}, err
	}
	deps.AfterPhase = func(k int, phase string) {
		if k == 2 && phase == "checkpoint" {
			fail = true // iteration 3's rollouts will fail
		}
	}
	_, err := orchestrator.Start(context.Background(), cfg, deps)
	if err == nil {
		t.Fatal("the run survived a dead server")
	}
	dir := filepath.Join(cfg.RunsDir, cfg.Name)
	var st orchestrator.State
	sb, _ := os.ReadFile(filepath.Join(dir, "state.json"))
	json.Unmarshal(sb, &st)
	if st.Iteration != 2 || st.Done {
		t.Fatalf("state after the failure: iteration %d, done %v; error %v", st.Iteration, st.Done, err)
	}
	if st.Seconds <= 0 {
		t.Errorf("state after the failure counts %v s of work", st.Seconds)
	}
	fail = false
	deps.AfterPhase = nil
	// The pause before the resume is not work: the state's time grows by
	// at most the resumed process's own time.
	time.Sleep(time.Second)
	began := time.Now()
	res, err := orchestrator.Resume(context.Background(), dir, deps)
	if err != nil {
		t.Fatal(err)
	}
	if res.State.Iteration != 3 || !res.State.Done {
		t.Errorf("resumed: %+v", res.State)
	}
	if grew := res.State.Seconds - st.Seconds; grew <= 0 || grew > time.Since(began).Seconds() {
		t.Errorf("resume added %.2f s of work in %.2f s of wall time", grew, time.Since(began).Seconds())
	}
}
