package orchestrator

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seedctl/seedctl/envadapters"
	_ "github.com/seedctl/seedctl/envadapters/household" // Validate asks built-ins to check their options
	"github.com/seedctl/seedctl/internal/tfevents"
	"github.com/seedctl/seedctl/rollout"
	"github.com/seedctl/seedctl/skills"
)

func validConfig() Config {
	c := Default()
	c.Model = "/models/x"
	return c
}

func TestConfigValidateNamesTheField(t *testing.T) {
	tests := []struct {
		edit func(*Config)
		want string
	}{
		{func(c *Config) { c.Algo = "ppo" }, "algo"},
		{func(c *Config) { c.Model = "" }, "model"},
		{func(c *Config) { c.Backend.Kind = "vllm" }, "base_url"},
		{func(c *Config) { c.Env.Kind = "agentgym" }, "agentgym"},
		{func(c *Config) { c.DataShare = 1.5 }, "data_share"},
		{func(c *Config) { c.Rollout.GroupSize = 1 }, "group_size"},
		{func(c *Config) { c.Rollout.Temperature = 0 }, "rollout.temperature"},
		{func(c *Config) { c.Rollout.Temperature, c.RL.ServerOldLogP = 0.7, true }, "server_old_logp"},
		{func(c *Config) { c.RL.ClipEps = 1 }, "clip_eps"},
		{func(c *Config) { c.RL.AdvNorm = "max" }, "adv_norm"},
		{func(c *Config) { c.RL.LRSchedule = "linear" }, "lr_schedule"},
		{func(c *Config) { c.RL.WarmupSteps = -1 }, "warmup_steps"},
		{func(c *Config) { c.RL.MinLRFrac = 1.5 }, "min_lr_frac"},
		{func(c *Config) { c.RL.TermGradsEvery = -1 }, "term_grads_every"},
		{func(c *Config) { c.Stage1.Analyzer.Kind = "external" }, "external analyzer"},
		{func(c *Config) { c.SkillMode = "all" }, "skill_mode"},
		{func(c *Config) { c.Rollout.Mode = "stream" }, "mode"},
		{func(c *Config) { c.Env.Options = map[string]string{"placement_prior": "1.5"} }, "placement_prior"},
		{func(c *Config) { c.Env.Options = map[string]string{"colour": "red"} }, "env.options"},
		{func(c *Config) { c.Env.Options = map[string]string{"max_steps": "30"} }, "env.max_steps"},
		{func(c *Config) { c.Backend.Endpoints = []string{"http://a:1"} }, "endpoints lists running vllm or sglang"},
		{func(c *Config) {
			c.Backend.Kind, c.Backend.BaseURL, c.Backend.Endpoints = "sglang", "http://a:1", []string{"http://b:1"}
		}, "not both"},
		{func(c *Config) { c.Backend.Kind, c.Backend.Endpoints = "sglang", []string{"http://a:1", "http://a:1"} }, "listed twice"},
		{func(c *Config) {
			c.Backend.Kind, c.Backend.Endpoints, c.Backend.ServedDir = "vllm", []string{"http://a:1", "http://b:1"}, "/s"
		}, "cannot share backend.served_dir"},
		{func(c *Config) {
			c.Backend.Kind, c.Backend.Endpoints, c.Backend.ServedDirs = "vllm", []string{"http://a:1", "http://b:1"}, []string{"/s0"}
		}, "needs 2 backend.served_dirs"},
		{func(c *Config) {
			c.Backend.Kind, c.Backend.Endpoints, c.Backend.ServedDirs = "vllm", []string{"http://a:1", "http://b:1"}, []string{"/s0", "/s0/"}
		}, "served_dirs[1]"},
		{func(c *Config) {
			c.Backend.Kind, c.Backend.BaseURL, c.Backend.ServedDirs = "sglang", "http://a:1", []string{"/s0"}
		}, "served_dirs goes with backend.endpoints"},
		{func(c *Config) {
			c.Backend.Kind, c.Backend.BaseURL, c.Backend.Launch, c.Backend.ServedDir = "vllm", "http://a:1", []string{"vllm"}, "/s"
		}, "goes without it"},
	}
	for _, tc := range tests {
		c := validConfig()
		tc.edit(&c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("want an error naming %q, got %v", tc.want, err)
		}
	}
	if err := validConfig().Validate(); err != nil {
		t.Errorf("default config: %v", err)
	}
	c := validConfig()
	c.Env.Options = map[string]string{"placement_prior": "0.8"}
	if err := c.Validate(); err != nil {
		t.Errorf("household with a placement prior: %v", err)
	}
	c = validConfig()
	c.Backend = BackendConfig{Kind: "vllm", Endpoints: []string{"http://gpu0:8000", "http://gpu1:8000"}, ServedDirs: []string{"/scratch/s0", "/scratch/s1"}}
	if err := c.Validate(); err != nil {
		t.Errorf("two vLLM endpoints, a served folder each: %v", err)
	}
	if got := c.Backend.URLs(); len(got) != 2 || got[1] != "http://gpu1:8000" {
		t.Errorf("URLs %v", got)
	}
	c = validConfig()
	// launch starts the server on a free port: no base_url (issue: config
	// check demanded one that launch ignored).
	c.Backend = BackendConfig{Kind: "vllm", Launch: []string{"vllm", "--max-model-len", "2048"}, ServedDir: "/scratch/served"}
	if err := c.Validate(); err != nil {
		t.Errorf("a launched vLLM without base_url: %v", err)
	}
	c = validConfig()
	c.Rollout.Temperature = 0.7
	if err := c.Validate(); err != nil {
		t.Errorf("sampling at 0.7: %v", err)
	}
	if spec := c.learnerSpec("p", "r"); spec.Temperature != 0.7 || spec.Policy != "p" || spec.Reference != "r" {
		t.Errorf("learner spec %+v: want the rollouts' temperature 0.7", spec)
	}
	c = validConfig()
	c.Algo, c.Stage1.Episodes = AlgoGRPO, 0 // GRPO has no stage 1
	if err := c.Validate(); err != nil {
		t.Errorf("grpo without stage 1: %v", err)
	}
}

func TestLoadRejectsUnknownFieldsAndNamesLines(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte("{\n \"algo\": \"seed\",\n \"rl\": {\"lamda\": 1}\n}"), 0o644)
	if _, err := Load(bad); err == nil || !strings.Contains(err.Error(), "lamda") {
		t.Errorf("misspelt field: %v", err)
	}
	broken := filepath.Join(dir, "broken.json")
	os.WriteFile(broken, []byte("{\n \"algo\": \"seed\",\n \"seed\": ,\n}"), 0o644)
	if _, err := Load(broken); err == nil || !strings.Contains(err.Error(), "line 3") {
		t.Errorf("syntax error: %v", err)
	}
	good := filepath.Join(dir, "good.json")
	os.WriteFile(good, []byte(`{"algo": "grpo", "retry_for": "45s"}`), 0o644)
	c, err := Load(good)
	if err != nil || c.Algo != AlgoGRPO || c.RL.Beta != 5 || c.RetryFor.String() != "45s" {
		t.Errorf("load over defaults: %+v, %v", c.RL, err)
	}
	// The embedded default's testbed setting is not inherited by files:
	// a GPU config or an older run's config.json gets the environment's
	// own defaults, and one that states them keeps them.
	if d := Default(); d.Env.Options["placement_prior"] != "0.8" || d.Rollout.PlacesOrder != rollout.PlacesOrderEpisode {
		t.Errorf("embedded default: env options %v, places order %q", d.Env.Options, d.Rollout.PlacesOrder)
	}
	if c.Env.Options != nil || c.Rollout.PlacesOrder != "" {
		t.Errorf("a file without env.options or rollout.places_order inherited %v, %q", c.Env.Options, c.Rollout.PlacesOrder)
	}
	// So is GiGPO's step-level advantage, the embedded default's deviation.
	if Default().RL.StepGroupWeight != 1 || c.RL.StepGroupWeight != 0 {
		t.Errorf("step_group_weight: embedded default %v (want 1), a file without it %v (want 0)", Default().RL.StepGroupWeight, c.RL.StepGroupWeight)
	}
	stated := filepath.Join(dir, "stated.json")
	os.WriteFile(stated, []byte(`{"env": {"name": "household", "options": {"placement_prior": "0.5"}}, "rollout": {"places_order": "episode"}, "rl": {"step_group_weight": 0.5}}`), 0o644)
	if c, err := Load(stated); err != nil || c.Env.Options["placement_prior"] != "0.5" || c.Rollout.PlacesOrder != rollout.PlacesOrderEpisode || c.Rollout.GroupSize != 8 || c.RL.StepGroupWeight != 0.5 {
		t.Errorf("a file stating them: %v, %q, group %d, step weight %v, %v", c.Env.Options, c.Rollout.PlacesOrder, c.Rollout.GroupSize, c.RL.StepGroupWeight, err)
	}
}

func (d Duration) String() string { b, _ := d.MarshalJSON(); return strings.Trim(string(b), `"`) }

func traj(id string, group int, ret float64) *rollout.Trajectory {
	return &rollout.Trajectory{ID: id, Group: group, Return: ret, Mode: rollout.ModeWindow}
}

// stepTraj is a trajectory of group g whose steps are valid except those
// listed, each with one sampled token.
func stepTraj(id string, g int, won bool, steps int, invalid ...int) *rollout.Trajectory {
	t := &rollout.Trajectory{ID: id, Group: g, Won: won, Mode: rollout.ModeWindow}
	for i := range steps {
		t.Steps = append(t.Steps, rollout.Step{Index: i, PromptIDs: []int{1}, ResponseIDs: []int{2}, Valid: !slices.Contains(invalid, i)})
	}
	if won {
		t.Steps[steps-1].EnvReward = 1
	}
	return t
}

// TestStepAdvantagesHandComputed checks GRPO's advantages against values
// worked out by hand from the published formulas: step rows (verl-agent),
// trajectory returns (the paper's notation), std and mean-only
// normalisation, the invalid-action penalty on the ×10 scale.
func TestStepAdvantagesHandComputed(t *testing.T) {
	// Group 0: a 2-step winner whose step 1 was invalid, a 3-step loser
	// whose step 0 was invalid.
	group := func() []*rollout.Trajectory {
		return []*rollout.Trajectory{stepTraj("w", 0, true, 2, 1), stepTraj("l", 0, false, 3, 0)}
	}
	ref := AdvantageParams{Mode: AdvStepRows, Norm: AdvNormStd, Outcome: OutcomeSuccess, Scale: 10, Penalty: 0.1, Eps: 1e-6}
	// Step rows: rewards 10, 9.9 | −0.1, 0, 0; mean 19.8/5 = 3.96;
	// deviations 6.04, 5.94, −4.06, −3.96, −3.96; unbiased variance
	// (36.4816 + 35.2836 + 16.4836 + 2·15.6816)/4 = 29.903.
	std := math.Sqrt(29.903)
	mean := AdvantageParams(ref)
	mean.Norm = AdvNormNone
	traj := ref
	traj.Mode = AdvTrajectory
	trajMean := traj
	trajMean.Norm = AdvNormNone
	cases := []struct {
		name string
		p    AdvantageParams
		w, l []float64
	}{
		{"step rows, std", ref, []float64{6.04 / std, 5.94 / std}, []float64{-4.06 / std, -3.96 / std, -3.96 / std}},
		{"step rows, mean only", mean, []float64{6.04, 5.94}, []float64{-4.06, -3.96, -3.96}},
		// Trajectory returns 10 − 0.1 = 9.9 and −0.1: mean 4.9, unbiased
		// std √50, so ±5/√50 = ±1/√2 on every step.
		{"trajectory, std", traj, []float64{1 / math.Sqrt2, 1 / math.Sqrt2}, []float64{-1 / math.Sqrt2, -1 / math.Sqrt2, -1 / math.Sqrt2}},
		{"trajectory, mean only", trajMean, []float64{5, 5}, []float64{-5, -5, -5}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			adv, gs := StepAdvantages(group(), c.p)
			for id, want := range map[string][]float64{"w": c.w, "l": c.l} {
				got := adv[id]
				if len(got) != len(want) {
					t.Fatalf("%s: %d advantages, want %d", id, len(got), len(want))
				}
				for i := range want {
					if math.Abs(got[i]-want[i]) > 1e-5 {
						t.Errorf("%s step %d: A = %.7f, want %.7f", id, i, got[i], want[i])
					}
				}
			}
			if gs.Groups != 1 || gs.Flat != 0 || gs.FlatFailing != 0 || gs.FlatWinning != 0 {
				t.Errorf("group stats %+v, want one mixed group", gs)
			}
		})
	}
	// The long loser weighs on the statistics: with step rows, one 2-step
	// winner among three 6-step losers gets a larger advantage per row than
	// the losers' rows get below zero, and the token-weighted mean is 0.
	g := []*rollout.Trajectory{stepTraj("w", 0, true, 2), stepTraj("a", 0, false, 6), stepTraj("b", 0, false, 6), stepTraj("c", 0, false, 6)}
	adv, _ := StepAdvantages(g, ref)
	sum := 0.0
	for _, a := range adv {
		for _, v := range a {
			sum += v
		}
	}
	if math.Abs(sum) > 1e-9 || adv["w"][0] <= -adv["a"][0] {
		t.Errorf("step rows: sum %v (want 0), winner %v vs loser %v", sum, adv["w"][0], adv["a"][0])
	}
	// WebShop's graded score: "env" trains on it, "success" only on a win.
	half := stepTraj("h", 0, false, 1)
	half.Steps[0].EnvReward = 0.5
	zero := stepTraj("z", 0, false, 1)
	envP := mean
	envP.Outcome = OutcomeEnv
	if adv, _ := StepAdvantages([]*rollout.Trajectory{half, zero}, envP); math.Abs(adv["h"][0]-2.5) > 1e-9 || math.Abs(adv["z"][0]+2.5) > 1e-9 {
		t.Errorf("env outcome: A = %v, %v, want 2.5, -2.5 (10·0.5 against 0)", adv["h"], adv["z"])
	}
	if adv, gs := StepAdvantages([]*rollout.Trajectory{half, zero}, mean); adv["h"][0] != 0 || gs.Flat != 1 || gs.FlatFailing != 1 {
		t.Errorf("success outcome: a half score is no win: A = %v, stats %+v", adv["h"], gs)
	}
}

// Flat groups: equal rewards give exactly 0 (not the rounding residue of
// r − mean), broken-environment episodes are left out, and the group
// shares are counted.
func TestStepAdvantagesFlatGroups(t *testing.T) {
	p := AdvantageParams{Mode: AdvStepRows, Norm: AdvNormStd, Outcome: OutcomeEnv, Scale: 0.1, Penalty: 0, Eps: 1e-6}
	var trajs []*rollout.Trajectory
	for i := range 3 {
		tr := stepTraj(fmt.Sprint("f", i), 0, false, 2)
		tr.Steps[1].EnvReward = 1 // 0.1 each: 0.1·3/3 ≠ 0.1 in floating point
		trajs = append(trajs, tr)
	}
	trajs = append(trajs, stepTraj("win1", 1, true, 2), stepTraj("win2", 1, true, 3))
	broken := stepTraj("broken", 1, false, 1)
	broken.EnvError = "connection reset"
	trajs = append(trajs, broken, stepTraj("mixed-w", 2, true, 1), stepTraj("mixed-l", 2, false, 1))
	adv, gs := StepAdvantages(trajs, p)
	for _, id := range []string{"f0", "f1", "f2", "win1", "win2"} {
		for i, a := range adv[id] {
			if a != 0 {
				t.Errorf("flat group: A[%s][%d] = %v, want exactly 0", id, i, a)
			}
		}
	}
	if _, ok := adv["broken"]; ok {
		t.Error("a broken-environment episode got advantages")
	}
	if gs.Groups != 3 || math.Abs(gs.Flat-2.0/3) > 1e-12 || math.Abs(gs.FlatFailing-1.0/3) > 1e-12 || math.Abs(gs.FlatWinning-1.0/3) > 1e-12 {
		t.Errorf("group stats %+v, want 3 groups, 2/3 flat, 1/3 failing, 1/3 winning", gs)
	}
}

func windowTraj() *rollout.Trajectory {
	t := traj("t", 0, 1)
	t.Steps = []rollout.Step{
		{PromptIDs: []int{1, 2, 3}, ResponseIDs: []int{7, 8}, LogProbs: []float64{-0.5, -0.25}},
		{PromptIDs: []int{1, 2, 4}, ResponseIDs: []int{9}, LogProbs: []float64{-1}},
	}
	return t
}

// dropFlat drops the same rows whatever the method: a distilled token does
// not keep a zero-advantage row (GRPO and SEED keep one normaliser).
func TestDropFlatIsTheSameForEveryMethod(t *testing.T) {
	tr := []bool{false, true}
	rows := []Row{
		{ID: "flat", Advantage: 0, Train: tr, Distill: []bool{false, false}},
		{ID: "adv", Advantage: -0.5, Train: tr},
		{ID: "distilled", Advantage: 0, Train: tr, Distill: []bool{false, true}},
		{ID: "flat-no-teacher", Advantage: 0, Train: tr},
		{ID: "chat-mixed", Train: []bool{false, true, true}, Advantages: []float32{0, 0, 0.3}},
		{ID: "chat-flat", Train: []bool{false, true, true}, Advantages: []float32{0, 0, 0}},
	}
	var ids []string
	for _, r := range dropFlat(slices.Clone(rows), false) {
		ids = append(ids, r.ID)
	}
	if strings.Join(ids, ",") != "adv,chat-mixed" {
		t.Fatalf("kept %v, want adv and chat-mixed", ids)
	}
	ids = nil
	for _, r := range dropFlat(rows, true) {
		ids = append(ids, r.ID)
	}
	if strings.Join(ids, ",") != "adv,distilled,chat-mixed" {
		t.Fatalf("legacy rule kept %v, want adv, distilled and chat-mixed", ids)
	}
	tm, zero, abs := advantageFigures([]Row{{Train: tr, Advantage: 1}, {Train: []bool{false, true, true}, Advantages: []float32{0, -1, -1}}})
	if math.Abs(tm+1.0/3) > 1e-9 || zero != 0 || math.Abs(abs-1) > 1e-9 {
		t.Errorf("token-weighted mean %v (want −1/3), zero-advantage rows %v (want 0), mean |A| %v (want 1)", tm, zero, abs)
	}
}

func TestPlainRowsWindowMode(t *testing.T) {
	rows, err := plainRows(windowTraj(), []float64{0.7, -0.2})
	if err != nil || len(rows) != 2 {
		t.Fatalf("%d rows, %v", len(rows), err)
	}
	r := rows[0]
	if !slices.Equal(r.IDs, []int{1, 2, 3, 7, 8}) || r.Train[2] || !r.Train[3] || !r.Train[4] || r.OldLogP[4] != -0.25 || r.Advantage != 0.7 {
		t.Errorf("row 0 %+v", r)
	}
	if rows[1].Advantage != -0.2 {
		t.Errorf("row 1 advantage %v, want its step's -0.2", rows[1].Advantage)
	}
	// Chat mode: one row, each step's tokens with that step's advantage.
	ct := windowTraj()
	ct.Mode = rollout.ModeChat
	rows, err = plainRows(ct, []float64{0.7, -0.2})
	if err != nil || len(rows) != 1 {
		t.Fatalf("chat: %d rows, %v", len(rows), err)
	}
	if got := fmt.Sprint(rows[0].Advantages); got != "[0 0 0 0.7 0.7 0 0 0 -0.2]" {
		t.Errorf("chat per-position advantages %s", got)
	}
}

func TestAttachTeacherAlignsAndRefusesMismatch(t *testing.T) {
	rows, _ := plainRows(windowTraj(), []float64{1, 1})
	tc := &skills.TeacherContext{TrajectoryID: "t", Pairs: []skills.SeqPair{
		{Plain: []int{1, 2, 3, 7, 8}, Teacher: []int{1, 50, 51, 2, 3, 7, 8}, Spans: []skills.Span{{Step: 0, PlainStart: 3, TeacherStart: 5, Len: 2, Distill: true}}},
		{Plain: []int{1, 2, 4, 9}, Teacher: []int{1, 2, 4, 9}, Spans: []skills.Span{{Step: 1, PlainStart: 3, TeacherStart: 3, Len: 1, Distill: false}}},
	}}
	seqs, err := attachTeacher(rows, tc)
	if err != nil {
		t.Fatal(err)
	}
	if seqs[0] == nil || seqs[1] != nil || rows[1].Distill != nil || !rows[0].Distill[3] || !rows[0].Distill[4] || rows[0].Distill[2] {
		t.Fatalf("teacher sequences %v, distill %v / %v", seqs, rows[0].Distill, rows[1].Distill)
	}
	fillTeacher(&rows[0], tc.Pairs[0], []float32{0, -9, -9, -9, -9, -0.1, -0.2})
	if rows[0].TeacherLogP[3] != -0.1 || rows[0].TeacherLogP[4] != -0.2 {
		t.Errorf("teacher log-probs %v", rows[0].TeacherLogP)
	}
	rows, _ = plainRows(windowTraj(), []float64{1, 1})
	tc.Pairs[1].Plain = []int{1, 2, 5, 9}
	if _, err := attachTeacher(rows, tc); !errors.Is(err, skills.ErrMisaligned) {
		t.Errorf("mismatched plain sequence: %v", err)
	}
}

func TestMetricsTornLineAndTrim(t *testing.T) {
	p := filepath.Join(t.TempDir(), "metrics.jsonl")
	if err := appendMetrics(p, MetricsLine{Kind: "iteration", Iteration: 1, Values: map[string]float64{"success": 0.5}},
		MetricsLine{Kind: "iteration", Iteration: 2, Values: map[string]float64{"success": 0.25}}); err != nil {
		t.Fatal(err)
	}
	f, _ := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"kind":"iteration","itera`) // killed mid-write
	f.Close()
	lines, err := ReadMetrics(p)
	if err != nil || len(lines) != 2 {
		t.Fatalf("%d lines, %v", len(lines), err)
	}
	if err := trimMetrics(p, func(l MetricsLine) bool { return l.Iteration <= 1 }); err != nil {
		t.Fatal(err)
	}
	if lines, _ := ReadMetrics(p); len(lines) != 1 || lines[0].Iteration != 1 {
		t.Errorf("after trim: %+v", lines)
	}
	// The TensorBoard events were rebuilt from the lines kept: iteration
	// 1's point, none of iteration 2's.
	files := tfevents.Files(filepath.Dir(p))
	if len(files) != 1 {
		t.Fatalf("event files after trim: %v", files)
	}
	evs, err := tfevents.Read(files[0])
	if err != nil {
		t.Fatal(err)
	}
	var steps []int64
	for _, e := range evs {
		if e.FileVersion == "" {
			steps = append(steps, e.Step)
		}
	}
	if len(steps) != 1 || steps[0] != 1 {
		t.Errorf("event steps after trim: %v, want [1]", steps)
	}
	os.WriteFile(p, []byte("garbage\n{\"kind\":\"eval\"}\n"), 0o644)
	if _, err := ReadMetrics(p); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("corrupt first line: %v", err)
	}
}

func TestTrainPoolNestsAcrossShares(t *testing.T) {
	src := fakeTasks{n: 100}
	small, err := trainPool(src, 0, 0.2, 3)
	if err != nil {
		t.Fatal(err)
	}
	big, _ := trainPool(src, 0, 0.6, 3)
	if len(small) != 20 || len(big) != 60 {
		t.Fatalf("pool sizes %d, %d", len(small), len(big))
	}
	for i := range small {
		if small[i].ID != big[i].ID {
			t.Fatal("the 20% pool is not a prefix of the 60% pool")
		}
	}
	// A training set smaller than the split: shares are of it, and it is
	// the same set whatever the share.
	set, _ := trainPool(src, 30, 1, 3)
	part, _ := trainPool(src, 30, 0.4, 3)
	if len(set) != 30 || len(part) != 12 {
		t.Fatalf("train_tasks 30: pool sizes %d and %d, want 30 and 12", len(set), len(part))
	}
	for i := range part {
		if part[i].ID != set[i].ID || set[i].ID != big[i].ID {
			t.Fatal("a share of a training set is not a prefix of it, or the set not a prefix of the split's shuffle")
		}
	}
	if _, err := trainPool(src, 30, 0.01, 3); err == nil {
		t.Error("a share keeping no task was accepted")
	}
}

func TestActingExamplesAreTheSampledTurns(t *testing.T) {
	tr := windowTraj()
	ex := actingExamples([]*rollout.Trajectory{tr, tr}, 3, 1, 100)
	if len(ex) != 3 {
		t.Fatalf("%d examples", len(ex))
	}
	for _, e := range ex {
		n := 0
		for _, l := range e.Loss {
			if l {
				n++
			}
		}
		if len(e.IDs) != len(e.Loss) || n == 0 || e.Loss[0] {
			t.Errorf("example %+v", e)
		}
	}
	if got := actingExamples([]*rollout.Trajectory{tr}, 10, 1, 4); len(got) != 1 {
		t.Errorf("max_len 4 keeps %d examples, want the one 4-token row", len(got))
	}
}

// The self-analyzer sends answers that do not parse back for repair only
// when the config asks (the GPU configs do; the embedded default does not).
func TestSelfAnalysisRepairFollowsConfig(t *testing.T) {
	for _, repair := range []bool{false, true} {
		c := Default()
		c.AnalysisRepair = repair
		an, err := (&run{cfg: c}).iterationAnalyzer(2)
		if err != nil {
			t.Fatal(err)
		}
		self, ok := an.(*skills.SelfAnalyzer)
		if !ok {
			t.Fatalf("SEED's iteration analyzer is %T", an)
		}
		if self.NoRepair == repair || self.Snapshot != "iter-1" {
			t.Errorf("analysis_repair %v: NoRepair %v, snapshot %q", repair, self.NoRepair, self.Snapshot)
		}
	}
	if Default().AnalysisRepair {
		t.Error("the embedded default repairs analyses its tiny model never repaired")
	}
}

// Every metrics line also lands in the run folder's TensorBoard event
// file, every value at its iteration under its tag; a second process (a
// resumed run) appends to the same file.
func TestMetricsAreTensorBoardScalars(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "metrics.jsonl")
	lines := []MetricsLine{
		{Kind: "stage1", Iteration: 0, Time: time.Unix(1700000000, 0), Values: map[string]float64{"sft_loss": 0.75}},
		{Kind: "eval", Iteration: 0, Split: "eval_seen", Time: time.Unix(1700000001, 0), Values: map[string]float64{"success": 0.16}, PerFamily: map[string]float64{"pick_and_place": 0.25}},
		{Kind: "iteration", Iteration: 1, Time: time.Unix(1700000002, 0), Values: map[string]float64{"success": 0.125, "loss": -0.031, "gate_mean": 0.48}},
	}
	if err := appendMetrics(p, lines[:2]...); err != nil {
		t.Fatal(err)
	}
	if err := appendMetrics(p, lines[2:]...); err != nil {
		t.Fatal(err)
	}
	files := tfevents.Files(dir)
	if len(files) != 1 {
		t.Fatalf("%d event files", len(files))
	}
	evs, err := tfevents.Read(files[0])
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 1+len(lines) {
		t.Fatalf("%d events for %d lines", len(evs), len(lines))
	}
	want := []map[string]float64{
		{"stage1/sft_loss": 0.75},
		{"eval_eval_seen/success": 0.16, "eval_eval_seen_family/pick_and_place": 0.25},
		{"train/success": 0.125, "train/loss": -0.031, "train/gate_mean": 0.48},
	}
	for i, w := range want {
		ev := evs[i+1]
		if ev.Step != int64(lines[i].Iteration) || len(ev.Values) != len(w) {
			t.Fatalf("event %d: step %d values %v, want %v", i, ev.Step, ev.Values, w)
		}
		for tag, v := range w {
			if ev.Values[tag] != float32(v) {
				t.Errorf("event %d %s = %v, want %v", i, tag, ev.Values[tag], float32(v))
			}
		}
	}
}

// TestWinString: one character per eval task in split order, '1' where a
// trajectory of the task won, whatever order the trajectories came in.
func TestWinString(t *testing.T) {
	task := func(i int) envadapters.Task { return envadapters.Task{ID: fmt.Sprintf("household/eval_seen/%d", i)} }
	tasks := []envadapters.Task{task(0), task(1), task(2), task(3)}
	trajs := []*rollout.Trajectory{{Task: task(2), Won: true}, {Task: task(0)}, {Task: task(1), Won: true}, {Task: task(1)}}
	if got := winString(tasks, trajs); got != "0110" {
		t.Errorf("winString = %q, want 0110 (task 3 played nothing)", got)
	}
}

// TestPlateaued: training stops once eval-seen success has gone patience
// evaluations without beating its best (ties do not count as progress),
// and says where the best was.
func TestPlateaued(t *testing.T) {
	eval := func(k int, v float64) MetricsLine {
		return MetricsLine{Kind: "eval", Iteration: k, Split: "eval_seen", Values: map[string]float64{"success": v}}
	}
	unseen := MetricsLine{Kind: "eval", Iteration: 8, Split: "eval_unseen", Values: map[string]float64{"success": 0.9}}
	lines := []MetricsLine{eval(0, 0.20), eval(4, 0.30), {Kind: "iteration", Iteration: 5}, eval(8, 0.30), unseen}
	if why := plateaued(lines, 2); why != "" {
		t.Errorf("one evaluation without progress, patience 2: %q", why)
	}
	lines = append(lines, eval(12, 0.25))
	why := plateaued(lines, 2)
	if !strings.Contains(why, "30.0% after iteration 4") || !strings.Contains(why, "in 2 evaluations") {
		t.Errorf("two evaluations without progress: %q", why)
	}
	if why := plateaued(append(lines, eval(16, 0.31)), 2); why != "" {
		t.Errorf("a new best resets the count: %q", why)
	}
}

// The rejected-action cost comes off after the normalisation: in a group
// where nobody won, rejected steps get exactly −cost and the others 0 (an
// invalid-step penalty in the reward would make them ±1-sized there), and
// in a mixed group each rejected step sits cost below its unrejected twin.
func TestStepAdvantagesRejectedCost(t *testing.T) {
	p := AdvantageParams{Mode: AdvStepRows, Norm: AdvNormStd, Outcome: OutcomeSuccess, Scale: 10, Penalty: 0.1, Eps: 1e-6}
	build := func() []*rollout.Trajectory {
		lose1, lose2 := stepTraj("l1", 0, false, 3), stepTraj("l2", 0, false, 2)
		lose1.Steps[1].Rejected = true
		win, lose := stepTraj("w", 1, true, 3), stepTraj("l", 1, false, 2)
		win.Steps[0].Rejected = true
		noRow := stepTraj("n", 1, false, 2)
		noRow.Steps[1].ResponseIDs, noRow.Steps[1].Rejected = nil, true
		return []*rollout.Trajectory{lose1, lose2, win, lose, noRow}
	}
	base, _ := StepAdvantages(build(), p)
	p.RejectedCost = 0.25
	got, gs := StepAdvantages(build(), p)
	want := map[string][]float64{
		"l1": {0, -0.25, 0}, "l2": {0, 0},
		"w": {base["w"][0] - 0.25, base["w"][1], base["w"][2]},
		"l": base["l"], "n": base["n"],
	}
	for id, w := range want {
		for i := range w {
			if math.Abs(got[id][i]-w[i]) > 1e-12 {
				t.Errorf("A[%s][%d] = %v, want %v", id, i, got[id][i], w[i])
			}
		}
	}
	if base["w"][0] <= 0 || base["w"][0] != base["w"][1] {
		t.Errorf("without the cost the winner's steps share one positive advantage, got %v", base["w"])
	}
	if gs.Flat != 0.5 || gs.FlatFailing != 0.5 {
		t.Errorf("group stats %+v: the cost must not change which groups are flat", gs)
	}
}

// TestStepAdvantagesStepGroups checks GiGPO's step-level term against
// values worked out by hand: steps acting from the same state (the last
// observation of an action the environment carried out) share a step
// group, their discounted returns are normalised within it, and the
// weighted result is added to the episode-level advantage.
func TestStepAdvantagesStepGroups(t *testing.T) {
	build := func() []*rollout.Trajectory {
		// Group 0 starts from "start". The winner goes to A, then wins;
		// the loser goes to A, has an action rejected (still at A), then
		// goes to B.
		w, l := stepTraj("w", 0, true, 2), stepTraj("l", 0, false, 3)
		w.FirstObservation, l.FirstObservation = "start", "start"
		w.Steps[0].Observation = "A"
		l.Steps[0].Observation = "A"
		l.Steps[1].Observation, l.Steps[1].Rejected = "Nothing happens.", true
		l.Steps[2].Observation = "B"
		// The environment's state lines: both arrive at A, the winner
		// carrying something (read only under StepKeyState).
		w.Steps[0].State, l.Steps[0].State = "carrying: x", "carrying: nothing"
		l.Steps[1].State, l.Steps[2].State = "carrying: nothing", "carrying: nothing"
		// Group 1: one trajectory, so every state is its own.
		solo := stepTraj("s", 1, false, 2)
		solo.FirstObservation, solo.Steps[0].Observation = "start", "A"
		return []*rollout.Trajectory{w, l, solo}
	}
	p := AdvantageParams{Mode: AdvStepRows, Norm: AdvNormNone, Outcome: OutcomeSuccess, Scale: 10, Eps: 1e-6, Gamma: 0.5}
	base, _ := StepAdvantages(build(), p)
	p.StepWeight = 0.5
	got, gs := StepAdvantages(build(), p)
	// Returns (γ 0.5): w 5, 10; l 0, 0, 0. Step groups: "start" {w0 5,
	// l0 0} → +2.5, −2.5; "A" {w1 10, l1 0, l2 0} (l2 acts from A: the
	// rejected action changed nothing) → +20/3, −10/3, −10/3.
	step := map[string][]float64{"w": {2.5, 20.0 / 3}, "l": {-2.5, -10.0 / 3, -10.0 / 3}, "s": {0, 0}}
	for id, d := range step {
		for i := range d {
			if want := base[id][i] + 0.5*d[i]; math.Abs(got[id][i]-want) > 1e-12 {
				t.Errorf("A[%s][%d] = %v, want episode %v + 0.5·%v", id, i, got[id][i], base[id][i], d[i])
			}
		}
	}
	if math.Abs(gs.StepGrouped-5.0/7) > 1e-12 || math.Abs(gs.StepGroupSize-13.0/5) > 1e-12 {
		t.Errorf("step groups: grouped share %v (want 5/7), mean size %v (want 13/5)", gs.StepGrouped, gs.StepGroupSize)
	}
	// The invalid-step penalty is a step reward, discounted like the outcome.
	pen := build()
	pen[0].Steps[0].Valid = false
	pen[0].Steps[0].Observation = "" // an invalid step changes no state either
	p.Penalty, p.StepWeight = 0.1, 1
	got, _ = StepAdvantages(pen, p)
	base, _ = StepAdvantages(pen, AdvantageParams{Mode: AdvStepRows, Norm: AdvNormNone, Outcome: OutcomeSuccess, Scale: 10, Penalty: 0.1, Eps: 1e-6})
	// w0's return is −0.1 + 0.5·10 = 4.9 and w1 now acts from "start":
	// "start" {w0 4.9, w1 10, l0 0}, mean 14.9/3.
	for i, want := range []float64{4.9 - 14.9/3, 10 - 14.9/3} {
		if d := got["w"][i] - base["w"][i]; math.Abs(d-want) > 1e-12 {
			t.Errorf("with the penalty, step term of w%d = %v, want %v", i, d, want)
		}
	}
	// Keyed by observation and state line, A splits: w1 acts from A
	// carrying x (alone), l1 and l2 from A carrying nothing {0, 0} (flat).
	// "start" has no state line and stays one group.
	p = AdvantageParams{Mode: AdvStepRows, Norm: AdvNormNone, Outcome: OutcomeSuccess, Scale: 10, Eps: 1e-6, Gamma: 0.5, StepWeight: 1, StepKey: StepKeyState}
	got, gs = StepAdvantages(build(), p)
	base, _ = StepAdvantages(build(), AdvantageParams{Mode: AdvStepRows, Norm: AdvNormNone, Outcome: OutcomeSuccess, Scale: 10, Eps: 1e-6})
	step = map[string][]float64{"w": {2.5, 0}, "l": {-2.5, 0, 0}, "s": {0, 0}}
	for id, d := range step {
		for i := range d {
			if want := base[id][i] + d[i]; math.Abs(got[id][i]-want) > 1e-12 {
				t.Errorf("state key: A[%s][%d] = %v, want episode %v + %v", id, i, got[id][i], base[id][i], d[i])
			}
		}
	}
	if math.Abs(gs.StepGrouped-4.0/7) > 1e-12 || math.Abs(gs.StepGroupSize-2) > 1e-12 {
		t.Errorf("state key step groups: grouped share %v (want 4/7), mean size %v (want 2)", gs.StepGrouped, gs.StepGroupSize)
	}
	// A charge on rejected actions enters the step-level returns only:
	// l1 (rejected) returns −0.1, l0 −0.05; "start" {w0 5, l0 −0.05} →
	// ±2.525; "A" {w1 10, l1 −0.1, l2 0}, mean 3.3 → 6.7, −3.4, −3.3.
	// The episode-level advantages are as without it.
	p = AdvantageParams{Mode: AdvStepRows, Norm: AdvNormNone, Outcome: OutcomeSuccess, Scale: 10, Eps: 1e-6, Gamma: 0.5, StepWeight: 1, StepRejectedCost: 0.1}
	got, _ = StepAdvantages(build(), p)
	base, _ = StepAdvantages(build(), AdvantageParams{Mode: AdvStepRows, Norm: AdvNormNone, Outcome: OutcomeSuccess, Scale: 10, Eps: 1e-6, StepRejectedCost: 0.1})
	step = map[string][]float64{"w": {2.525, 6.7}, "l": {-2.525, -3.4, -3.3}, "s": {0, 0}}
	for id, d := range step {
		for i := range d {
			if want := base[id][i] + d[i]; math.Abs(got[id][i]-want) > 1e-12 {
				t.Errorf("rejected cost: A[%s][%d] = %v, want episode %v + %v", id, i, got[id][i], base[id][i], d[i])
			}
		}
	}
	if plain, _ := StepAdvantages(build(), AdvantageParams{Mode: AdvStepRows, Norm: AdvNormNone, Outcome: OutcomeSuccess, Scale: 10, Eps: 1e-6}); fmt.Sprint(plain) != fmt.Sprint(base) {
		t.Errorf("the step-level charge moved episode-level advantages: %v, want %v", base, plain)
	}
}

// The recipe line names GiGPO's step-level term and its options as set.
func TestRecipeStepGroups(t *testing.T) {
	for _, tc := range []struct {
		name       string
		edit       func(*Config)
		want, none []string
	}{
		{"default", func(*Config) {}, []string{"+ 1 × GiGPO's step-level advantage", "act from the same state (GiGPO"}, []string{"state line", "step-level returns charge"}},
		{"state key", func(c *Config) { c.RL.StepGroupKey = StepKeyState }, []string{"act from the same observation and environment state line"}, nil},
		{"step charge", func(c *Config) { c.RL.StepRejectedCost = 0.1 }, []string{"step-level returns charge 0.1 for each action the environment rejected (ours)"}, nil},
		{"off", func(c *Config) { c.RL.StepGroupWeight, c.RL.StepRejectedCost = 0, 0.1 }, nil, []string{"GiGPO", "step-level returns charge"}},
	} {
		c := validConfig()
		tc.edit(&c)
		recipe := strings.Join(c.Recipe(), "\n")
		for _, w := range tc.want {
			if !strings.Contains(recipe, w) {
				t.Errorf("%s: recipe lacks %q:\n%s", tc.name, w, recipe)
			}
		}
		for _, n := range tc.none {
			if strings.Contains(recipe, n) {
				t.Errorf("%s: recipe has %q:\n%s", tc.name, n, recipe)
			}
		}
	}
}
