package orchestrator

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	_ "github.com/seedctl/seedctl/envadapters/household" // Validate asks built-ins to check their options
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
		{func(c *Config) { c.Stage1.Analyzer.Kind = "external" }, "external analyzer"},
		{func(c *Config) { c.SkillMode = "all" }, "skill_mode"},
		{func(c *Config) { c.Rollout.Mode = "stream" }, "mode"},
		{func(c *Config) { c.Env.Options = map[string]string{"placement_prior": "1.5"} }, "placement_prior"},
		{func(c *Config) { c.Env.Options = map[string]string{"colour": "red"} }, "env.options"},
		{func(c *Config) { c.Env.Options = map[string]string{"max_steps": "30"} }, "env.max_steps"},
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
}

func (d Duration) String() string { b, _ := d.MarshalJSON(); return strings.Trim(string(b), `"`) }

func traj(id string, group int, ret float64) *rollout.Trajectory {
	return &rollout.Trajectory{ID: id, Group: group, Return: ret, Mode: rollout.ModeWindow}
}

func TestAdvantagesPerGroup(t *testing.T) {
	trajs := []*rollout.Trajectory{traj("a", 0, 1), traj("b", 0, 0), traj("c", 0, 0), traj("d", 0, 1), traj("e", 1, 0.5), traj("f", 1, 0.5)}
	adv := Advantages(trajs, 1e-6, AdvNormStd)
	// Group 0: mean 0.5, unbiased std sqrt(1/3).
	want := 0.5 / math.Sqrt(1.0/3)
	if math.Abs(adv["a"]-want) > 1e-5 || math.Abs(adv["b"]+want) > 1e-5 {
		t.Errorf("group 0 advantages %v %v, want ±%v", adv["a"], adv["b"], want)
	}
	if adv["e"] != 0 || adv["f"] != 0 {
		t.Errorf("equal returns must give 0, got %v %v", adv["e"], adv["f"])
	}
	// Equal returns whose mean does not round-trip (0.1·3/3 ≠ 0.1) are
	// still exactly 0.
	for id, a := range Advantages([]*rollout.Trajectory{traj("r1", 0, 0.1), traj("r2", 0, 0.1), traj("r3", 0, 0.1)}, 1e-6, AdvNormStd) {
		if a != 0 {
			t.Errorf("flat group: A[%s] = %v, want exactly 0", id, a)
		}
	}
	// Dr. GRPO: no division, so a group that differs only by a shaping
	// penalty keeps small advantages.
	shaped := []*rollout.Trajectory{traj("p", 0, -0.1), traj("q", 0, -0.3), traj("w", 1, 1), traj("x", 1, 0)}
	for norm, want := range map[string][4]float64{
		AdvNormStd:  {1 / math.Sqrt(2), -1 / math.Sqrt(2), 1 / math.Sqrt(2), -1 / math.Sqrt(2)},
		AdvNormNone: {0.1, -0.1, 0.5, -0.5},
	} {
		adv := Advantages(shaped, 1e-9, norm)
		for i, id := range []string{"p", "q", "w", "x"} {
			if math.Abs(adv[id]-want[i]) > 1e-6 {
				t.Errorf("%s: A[%s] = %v, want %v", norm, id, adv[id], want[i])
			}
		}
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

func TestDropFlatKeepsRowsWithSignal(t *testing.T) {
	rows := []Row{
		{ID: "flat", Advantage: 0, Distill: []bool{false, false}},
		{ID: "adv", Advantage: -0.5},
		{ID: "distilled", Advantage: 0, Distill: []bool{false, true}},
		{ID: "flat-no-teacher", Advantage: 0},
	}
	var ids []string
	for _, r := range dropFlat(rows) {
		ids = append(ids, r.ID)
	}
	if strings.Join(ids, ",") != "adv,distilled" {
		t.Fatalf("kept %v, want adv and distilled", ids)
	}
}

func TestPlainRowsWindowMode(t *testing.T) {
	rows, err := plainRows(windowTraj(), 0.7)
	if err != nil || len(rows) != 2 {
		t.Fatalf("%d rows, %v", len(rows), err)
	}
	r := rows[0]
	if !slices.Equal(r.IDs, []int{1, 2, 3, 7, 8}) || r.Train[2] || !r.Train[3] || !r.Train[4] || r.OldLogP[4] != -0.25 || r.Advantage != 0.7 {
		t.Errorf("row 0 %+v", r)
	}
}

func TestAttachTeacherAlignsAndRefusesMismatch(t *testing.T) {
	rows, _ := plainRows(windowTraj(), 1)
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
	rows, _ = plainRows(windowTraj(), 1)
	tc.Pairs[1].Plain = []int{1, 2, 5, 9}
	if _, err := attachTeacher(rows, tc); !errors.Is(err, skills.ErrMisaligned) {
		t.Errorf("mismatched plain sequence: %v", err)
	}
}

func TestMetricsTornLineAndTrim(t *testing.T) {
	p := filepath.Join(t.TempDir(), "metrics.jsonl")
	if err := appendMetrics(p, MetricsLine{Kind: "iteration", Iteration: 1}, MetricsLine{Kind: "iteration", Iteration: 2}); err != nil {
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
