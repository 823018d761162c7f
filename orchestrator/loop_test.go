package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/rs/zerolog"

	"github.com/seedctl/seedctl/inference"
	"github.com/seedctl/seedctl/rollout/rollouttest"
)

// The in-memory loop harness: a fake learner whose "weights" are a count
// of the updates that made them, a scripted inference server that reads
// its prompts (it goes where the household's places line points, picks
// listed actions, and answers analysis prompts with skill JSON), the
// embedded household environment and a real tokenizer — the whole loop
// (base evaluation, stage 1, iterations, publishing, final evaluation,
// kill and resume) in seconds, without libtorch.

// fakeWeightsFile holds a fake checkpoint's version.
const fakeWeightsFile = "fake_weights.json"

// fakeLP is log p(tok) under the weights of a version: the fake learner
// and the fake server agree on it, so publishing the wrong version shows.
func fakeLP(version, tok int) float64 {
	return -(1 + 0.01*float64(version%7) + 0.1*float64(tok%7))
}

func readFakeVersion(dir string) (int, error) {
	b, err := os.ReadFile(filepath.Join(dir, fakeWeightsFile))
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil // the base checkpoint
	}
	if err != nil {
		return 0, err
	}
	var v struct{ Version int }
	if err := json.Unmarshal(b, &v); err != nil {
		return 0, fmt.Errorf("%s: %w", dir, err)
	}
	return v.Version, nil
}

// writeHarnessModel writes a checkpoint folder the loop can serve: a
// tokenizer with a chat template and no weights (rollouttest.WriteModel).
func writeHarnessModel(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "base")
	if err := rollouttest.WriteModel(dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

// fakeLearner trains nothing: each SFT and each RL step makes a new
// version, which Save writes beside the base's tokenizer files.
type fakeLearner struct {
	mu        sync.Mutex
	base      string // the folder the tokenizer files come from
	version   int
	ref       int
	steps     int
	rows      int
	sftRows   int
	distilled int // rows that carried teacher log-probs
	onSFT     func()
}

func (h *harness) newLearner(spec LearnerSpec) (Learner, error) {
	v, err := readFakeVersion(spec.Policy)
	if err != nil {
		return nil, err
	}
	ref, err := readFakeVersion(spec.Reference)
	if err != nil {
		return nil, err
	}
	l := &fakeLearner{base: h.model, version: v, ref: ref, onSFT: h.onSFT}
	h.mu.Lock()
	h.learners = append(h.learners, l)
	h.mu.Unlock()
	return l, nil
}

func scoreWith(version int, seqs [][]int) [][]float32 {
	out := make([][]float32, len(seqs))
	for i, s := range seqs {
		out[i] = make([]float32, len(s))
		for k := 1; k < len(s); k++ {
			out[i][k] = float32(fakeLP(version, s[k]))
		}
	}
	return out
}

func (l *fakeLearner) Rescore(ctx context.Context, seqs [][]int) ([][]float32, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return scoreWith(l.version, seqs), nil
}

func (l *fakeLearner) RescoreRef(ctx context.Context, seqs [][]int) ([][]float32, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return scoreWith(l.ref, seqs), nil
}

// RescoreTeacher: the teacher (the policy with a skill in its context)
// likes every token a little more; its distributions are one token's.
func (l *fakeLearner) RescoreTeacher(ctx context.Context, seqs [][]int, want [][]bool, _ int) ([][]float32, [][]*TokenDist, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	l.mu.Lock()
	lp := scoreWith(l.version, seqs)
	l.mu.Unlock()
	var dists [][]*TokenDist
	for i := range lp {
		for k := 1; k < len(lp[i]); k++ {
			lp[i][k] += 0.05
		}
		if want != nil {
			row := make([]*TokenDist, len(seqs[i]))
			for k := range row {
				if k < len(want[i]) && want[i][k] && k > 0 {
					row[k] = &TokenDist{IDs: []int32{int32(seqs[i][k])}, LogP: []float32{0}}
				}
			}
			dists = append(dists, row)
		}
	}
	return lp, dists, nil
}

func (l *fakeLearner) Step(ctx context.Context, rows []Row, lr float64) (StepStats, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if lr <= 0 || math.IsNaN(lr) {
		return nil, fmt.Errorf("learning rate %v", lr)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.version++
	l.steps++
	l.rows += len(rows)
	for _, r := range rows {
		if len(r.TeacherLogP) > 0 {
			l.distilled++
		}
	}
	return StepStats{"loss": 0.1, "grpo_loss": 0.1, "grad_norm": 1}, nil
}

func (l *fakeLearner) SFT(ctx context.Context, data []SFTExample, _ SFTOptions, progress func(step, steps int, loss float64)) error {
	if l.onSFT != nil {
		l.onSFT()
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(data) == 0 {
		return errors.New("no SFT examples")
	}
	l.mu.Lock()
	l.version++
	l.sftRows += len(data)
	l.mu.Unlock()
	for s := 1; s <= 2; s++ {
		if progress != nil {
			progress(s, 2, 1/float64(s))
		}
	}
	return nil
}

func (l *fakeLearner) Save(_ context.Context, dir string) error {
	tmp := dir + ".tmp"
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return err
	}
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json"} {
		b, err := os.ReadFile(filepath.Join(l.base, f))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(tmp, f), b, 0o644); err != nil {
			return err
		}
	}
	l.mu.Lock()
	b, _ := json.Marshal(map[string]int{"Version": l.version})
	l.mu.Unlock()
	if err := os.WriteFile(filepath.Join(tmp, fakeWeightsFile), b, 0o644); err != nil {
		return err
	}
	os.RemoveAll(dir)
	return os.Rename(tmp, dir)
}

func (l *fakeLearner) Close() {}

// fakeServer is the inference server: it serves the version of the last
// folder published and answers from the prompt's text.
type fakeServer struct {
	mu        sync.Mutex
	codec     *rollouttest.Codec
	version   int
	published []string
	calls     int
	analyses  int
}

var (
	placesLine  = regexp.MustCompile(`Places not searched yet: ([^,.\n]+?)(?:,| and |\.)`)
	listedLine  = regexp.MustCompile(`Admissible actions: ([^\n]*)`)
	analysisAsk = regexp.MustCompile(`"episode_skill"`)
)

func (h *harness) openBackend(_ context.Context, dir string) (inference.Backend, error) {
	codec, err := rollouttest.LoadCodec(dir)
	if err != nil {
		return nil, err
	}
	v, err := readFakeVersion(dir)
	if err != nil {
		return nil, err
	}
	s := &fakeServer{codec: codec, version: v, published: []string{filepath.Base(dir)}}
	h.mu.Lock()
	h.servers = append(h.servers, s)
	h.mu.Unlock()
	return s, nil
}

func (s *fakeServer) reply(prompt string, n int) string {
	// The reply to the last user turn only.
	if k := strings.LastIndex(prompt, "<|im_start|>user"); k >= 0 {
		prompt = prompt[k:]
	}
	switch {
	case analysisAsk.MatchString(prompt):
		if n%4 == 0 {
			return "I cannot tell." // no skill: the parse share is below 1
		}
		return `{"episode_summary": "the agent searched", "episode_skill": "Search the places in the listed order and take the object first.", "step_skills": {}}`
	case n%5 == 0:
		return "thinking out loud" // an invalid step
	}
	if m := placesLine.FindStringSubmatch(prompt); m != nil && n%2 == 0 {
		return "<action>go to " + strings.TrimSpace(m[1]) + "</action>"
	}
	if m := listedLine.FindStringSubmatch(prompt); m != nil {
		acts := strings.Split(m[1], "; ")
		return "<action>" + strings.TrimSpace(acts[n%len(acts)]) + "</action>"
	}
	return "<action>look</action>"
}

func (s *fakeServer) Generate(ctx context.Context, reqs []inference.GenRequest) ([]inference.GenResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, err // a real server's request fails too
	}
	out := make([]inference.GenResult, len(reqs))
	for i, r := range reqs {
		text, err := s.codec.Decode(r.Prompt)
		if err != nil {
			return nil, err
		}
		s.mu.Lock()
		s.calls++
		n, v := s.calls, s.version
		if analysisAsk.MatchString(text) {
			s.analyses++
		}
		s.mu.Unlock()
		ids, err := s.codec.Encode(s.reply(text, n))
		if err != nil {
			return nil, err
		}
		if r.MaxTokens > 0 && len(ids) > r.MaxTokens {
			ids = ids[:r.MaxTokens]
			out[i].FinishReason = "length"
		} else {
			ids = append(ids, s.codec.EOS)
			out[i].FinishReason = "stop"
		}
		lps := make([]float64, len(ids))
		for k, id := range ids {
			lps[k] = fakeLP(v, id)
		}
		out[i].IDs, out[i].LogProbs = ids, lps
	}
	return out, nil
}

func (s *fakeServer) Score(_ context.Context, seqs [][]int) ([][]float64, error) {
	s.mu.Lock()
	v := s.version
	s.mu.Unlock()
	out := make([][]float64, len(seqs))
	for i, seq := range seqs {
		out[i] = make([]float64, len(seq))
		out[i][0] = math.NaN()
		for k := 1; k < len(seq); k++ {
			out[i][k] = fakeLP(v, seq[k])
		}
	}
	return out, nil
}

func (s *fakeServer) Publish(_ context.Context, dir, version string) error {
	v, err := readFakeVersion(dir)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.version = v
	s.published = append(s.published, version)
	s.mu.Unlock()
	return nil
}

func (s *fakeServer) Release(context.Context) error { return nil }
func (s *fakeServer) Health(context.Context) error  { return nil }
func (s *fakeServer) Close() error                  { return nil }

// harness wires the fakes into Deps.
type harness struct {
	mu       sync.Mutex
	model    string
	learners []*fakeLearner
	servers  []*fakeServer
	phases   []string
	onSFT    func() // called as a learner's SFT starts
}

func newHarness(t testing.TB) *harness { return &harness{model: writeHarnessModel(t)} }

func (h *harness) deps() Deps {
	return Deps{NewLearner: h.newLearner, OpenBackend: h.openBackend, Log: zerolog.Nop(),
		AfterPhase: func(k int, phase string) {
			h.mu.Lock()
			h.phases = append(h.phases, fmt.Sprintf("%d:%s", k, phase))
			h.mu.Unlock()
		}}
}

// config is a small SEED run on the household: 2 iterations of 2 tasks ×
// 3 samples, stage 1 on 6 episodes, 4 eval episodes per split.
func (h *harness) config(t testing.TB, algo string) Config {
	cfg := Default()
	cfg.Name, cfg.RunsDir, cfg.Model, cfg.Algo = "loop-"+algo, t.TempDir(), h.model, algo
	cfg.Iterations, cfg.TasksPerIteration, cfg.Rollout.GroupSize = 2, 2, 3
	cfg.Env.MaxSteps, cfg.Rollout.MaxTokens, cfg.AnalysisTokens = 5, 64, 256
	cfg.Stage1.Episodes, cfg.Eval.Episodes = 6, 4
	return cfg
}

// A whole SEED run through the loop: the base evaluation, stage 1 (the
// oracle labels, the fake learner fine-tunes), two iterations (rollout,
// self-analysis on the served policy, rescoring, an update, a published
// checkpoint each), the final evaluation and the report; then the same
// run killed after its first update and resumed ends with the same
// history.
func TestLoopRunsAndResumes(t *testing.T) {
	h := newHarness(t)
	cfg := h.config(t, AlgoSEED)
	res, err := Start(context.Background(), cfg, h.deps())
	if err != nil {
		t.Fatal(err)
	}
	st := res.State
	if !st.Done || st.Iteration != 2 || !st.Stage1Done || res.Base == nil || res.Final == nil || res.Final.Iteration != 2 {
		t.Fatalf("state: done %v, iteration %d, stage 1 %v, base %v, final %v", st.Done, st.Iteration, st.Stage1Done, res.Base, res.Final)
	}
	l := h.learners[len(h.learners)-1]
	if l.steps == 0 || l.rows == 0 || l.distilled == 0 {
		t.Errorf("the learner took %d steps on %d rows, %d distilled", l.steps, l.rows, l.distilled)
	}
	if len(h.learners) < 2 || h.learners[0].sftRows == 0 {
		t.Errorf("stage 1 did not fine-tune (%d learners)", len(h.learners))
	}
	srv := h.servers[0]
	if srv.analyses == 0 {
		t.Error("stage 2 never asked the served policy for an analysis")
	}
	// Every iteration's checkpoint was published and served: the last
	// served version is the learner's.
	if got := srv.published[len(srv.published)-1]; got != "iter-2" || srv.version != l.version {
		t.Errorf("published %v (serving version %d, learner at %d)", srv.published, srv.version, l.version)
	}
	lines, err := ReadMetrics(filepath.Join(res.Dir, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, ln := range lines {
		kinds[ln.Kind]++
		if ln.Kind == "iteration" {
			for _, key := range []string{"success", "skill_parse_ok", "loss", "rows", "teacher_sequences"} {
				if _, ok := ln.Values[key]; !ok {
					t.Errorf("iteration %d's metrics lack %q: %v", ln.Iteration, key, ln.Values)
				}
			}
			if p := ln.Values["skill_parse_ok"]; p <= 0 || p >= 1 {
				t.Errorf("iteration %d: parse share %v; the server answers some analyses without JSON", ln.Iteration, p)
			}
		}
	}
	if kinds["iteration"] != 2 || kinds["stage1"] != 1 || kinds["eval"] < 2 {
		t.Errorf("metrics kinds %v", kinds)
	}
	for _, f := range []string{"report/results.md", "checkpoints/iter-2/" + fakeWeightsFile, "skills/iter-1.jsonl", "trajectories/iter-2.jsonl"} {
		if _, err := os.Stat(filepath.Join(res.Dir, f)); err != nil {
			t.Errorf("the run folder lacks %s: %v", f, err)
		}
	}

	// Killed in iteration 2 (after its rollout, before its analysis),
	// resumed.
	h2 := newHarness(t)
	h2.model = h.model
	cfg2 := h2.config(t, AlgoSEED)
	ctx, cancel := context.WithCancel(context.Background())
	deps := h2.deps()
	deps.AfterPhase = func(k int, phase string) {
		if k == 2 && phase == "rollout" {
			cancel()
		}
	}
	if _, err := Start(ctx, cfg2, deps); err == nil {
		t.Fatal("the killed run finished")
	}
	dir := filepath.Join(cfg2.RunsDir, cfg2.Name)
	mid, err := readState(runDir(dir))
	if err != nil || mid.Iteration != 1 || mid.Done || mid.Checkpoint != "checkpoints/iter-1" {
		t.Fatalf("after the kill: iteration %d, done %v, checkpoint %q, %v", mid.Iteration, mid.Done, mid.Checkpoint, err)
	}
	res2, err := Resume(context.Background(), dir, h2.deps())
	if err != nil {
		t.Fatal(err)
	}
	if !res2.State.Done || res2.State.Iteration != 2 {
		t.Fatalf("resumed: iteration %d, done %v", res2.State.Iteration, res2.State.Done)
	}
	again, _ := ReadMetrics(filepath.Join(dir, "metrics.jsonl"))
	var iters []int
	for _, ln := range again {
		if ln.Kind == "iteration" {
			iters = append(iters, ln.Iteration)
		}
	}
	if fmt.Sprint(iters) != "[1 2]" {
		t.Errorf("the resumed history has iterations %v", iters)
	}
}

// Every algorithm and distillation form through the loop: each run ends,
// trains on rows, and distils exactly when its algorithm has a teacher;
// the full form's rows carry the teacher's distributions.
func TestLoopAlgorithms(t *testing.T) {
	tests := []struct {
		name   string
		set    func(*Config)
		distil bool
		// stage1Keys must be in the stage-1 metrics line.
		stage1Keys []string
	}{
		{"grpo", func(c *Config) { c.Algo = AlgoGRPO }, false, nil},
		{"seed-no-sft", func(c *Config) { c.Algo = AlgoSEEDNoSFT }, true, nil},
		{"random-skill", func(c *Config) { c.Algo = AlgoRandomSkill }, true, nil},
		{"static-skill", func(c *Config) { c.Algo = AlgoStaticSkill }, true, nil},
		{"privileged-skill signed", func(c *Config) { c.Algo, c.RL.DistillForm = AlgoPrivilegedSkill, "signed" }, true, nil},
		{"oracle-other-skill full", func(c *Config) { c.Algo, c.RL.DistillForm, c.RL.Lambda = AlgoTransferSkill, DistillFull, 0.1 }, true, nil},
		{"seed contrastive", func(c *Config) {
			c.Algo, c.RL.DistillForm, c.RL.DistillBaseline = AlgoSEED, "signed", DistillBaselineShuffled
		}, true, nil},
		{"seed, stage 1 held out, public optimizer", func(c *Config) {
			c.Stage1.HeldOut, c.Stage1.Optimizer = 3, Stage1OptimizerPublic
		}, true, []string{"held_out_nll_before", "held_out_nll_after", "held_out_parse_ok_after"}},
		{"seed episode_only, llm steps, eval every iteration", func(c *Config) {
			c.SkillMode, c.CriticalSteps, c.Eval.Every = "episode_only", CriticalLLM, 1
		}, true, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			cfg := h.config(t, AlgoSEED)
			tt.set(&cfg)
			if err := cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			res, err := Start(context.Background(), cfg, h.deps())
			if err != nil {
				t.Fatal(err)
			}
			if !res.State.Done || res.State.Iteration != 2 {
				t.Fatalf("iteration %d, done %v", res.State.Iteration, res.State.Done)
			}
			l := h.learners[len(h.learners)-1]
			if l.rows == 0 || (l.distilled > 0) != tt.distil {
				t.Errorf("%d rows trained, %d distilled (want distillation %v)", l.rows, l.distilled, tt.distil)
			}
			if (len(h.learners) > 1) != cfg.UsesSFT() {
				t.Errorf("%d learners: stage 1 ran %v, want %v", len(h.learners), len(h.learners) > 1, cfg.UsesSFT())
			}
			lines, _ := ReadMetrics(filepath.Join(res.Dir, "metrics.jsonl"))
			for _, ln := range lines {
				if ln.Kind != "stage1" {
					continue
				}
				for _, k := range tt.stage1Keys {
					if _, ok := ln.Values[k]; !ok {
						t.Errorf("the stage-1 metrics lack %q: %v", k, ln.Values)
					}
				}
			}
		})
	}
}

// Killed in stage 1's fine-tuning, the run resumes into stage 1 again
// (nothing of it was kept) and ends as an uninterrupted run does.
func TestLoopResumesAKilledStage1(t *testing.T) {
	h := newHarness(t)
	cfg := h.config(t, AlgoSEED)
	ctx, cancel := context.WithCancel(context.Background())
	h.onSFT = cancel
	if _, err := Start(ctx, cfg, h.deps()); err == nil {
		t.Fatal("the run killed in stage 1 finished")
	}
	dir := filepath.Join(cfg.RunsDir, cfg.Name)
	mid, err := readState(runDir(dir))
	if err != nil || mid.Stage1Done || mid.Iteration != 0 || mid.BaseEval == nil {
		t.Fatalf("after the kill: stage 1 done %v, iteration %d, base eval %v, %v", mid.Stage1Done, mid.Iteration, mid.BaseEval != nil, err)
	}
	h.onSFT = nil
	res, err := Resume(context.Background(), dir, h.deps())
	if err != nil {
		t.Fatal(err)
	}
	if !res.State.Done || !res.State.Stage1Done || res.State.Iteration != 2 {
		t.Fatalf("resumed: done %v, stage 1 %v, iteration %d", res.State.Done, res.State.Stage1Done, res.State.Iteration)
	}
	lines, _ := ReadMetrics(filepath.Join(dir, "metrics.jsonl"))
	kinds := map[string]int{}
	for _, l := range lines {
		kinds[l.Kind]++
	}
	if kinds["stage1"] != 1 || kinds["iteration"] != 2 {
		t.Errorf("metrics after the resume: %v (one stage-1 line, two iterations)", kinds)
	}
}

// With an evaluation every iteration and a patience of 1, a run whose
// eval-seen success does not beat its best stops early, says why, and
// takes its last evaluation as the final one.
func TestLoopStopsAtAPlateau(t *testing.T) {
	h := newHarness(t)
	cfg := h.config(t, AlgoGRPO)
	cfg.Iterations, cfg.Eval.Every, cfg.Eval.PlateauPatience = 6, 1, 1
	res, err := Start(context.Background(), cfg, h.deps())
	if err != nil {
		t.Fatal(err)
	}
	st := res.State
	if !st.Done || st.Stopped == "" || st.Iteration >= 6 || st.FinalEval == nil || st.FinalEval.Iteration != st.Iteration {
		t.Fatalf("done %v, stopped %q after %d of 6, final eval %+v", st.Done, st.Stopped, st.Iteration, st.FinalEval)
	}
}
