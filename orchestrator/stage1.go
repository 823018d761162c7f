package orchestrator

// Stage 1: collecting trajectories, the stage-1 analyzer's skills, the
// SFT examples and their held-out measures.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"time"

	"github.com/seedctl/seedctl/envadapters"
	"github.com/seedctl/seedctl/inference"
	"github.com/seedctl/seedctl/rollout"
	"github.com/seedctl/seedctl/skills"
)

// stage1 collects with the base policy, analyzes with the stage-1
// analyzer, fine-tunes the policy to write those skills and publishes it.
func (r *run) stage1(ctx context.Context) error {
	start := time.Now()
	g := r.cfg.Rollout.GroupSize
	nTasks := max(1, (r.cfg.Stage1.Episodes+g-1)/g)
	tasks := make([]envadapters.Task, nTasks)
	for j := range tasks {
		tasks[j] = r.pool[j%len(r.pool)]
	}
	rc := r.cfg.stage1RolloutConfig(r.cfg.Seed + 7_000_000)
	runner, err := rollout.NewRunner(rc, r.env.Name, r.env.Factory, r.policy, r.log)
	if err != nil {
		return err
	}
	trajs, err := runner.Run(ctx, tasks, 0, r.progress("stage 1 collect"))
	if err != nil {
		return fmt.Errorf("collecting: %w", err)
	}
	if err := rollout.WriteJSONL(r.dir.path("trajectories", "stage1.jsonl"), trajs); err != nil {
		return err
	}
	an, err := r.stage1Analyzer()
	if err != nil {
		return err
	}
	recs, err := r.analyze(ctx, an, trajs, "stage1", 0)
	if err != nil {
		return fmt.Errorf("analyzing: %w", err)
	}
	if err := skills.WriteStore(r.dir.path("skills", "stage1.jsonl"), recs); err != nil {
		return err
	}
	trainRecs, trainTrajs, held := splitHeldOut(recs, trajs, r.cfg.Stage1.HeldOut)
	data, err := r.sftExamples(trainRecs)
	if err != nil {
		return err
	}
	if len(data) == 0 {
		return errors.New("the analyzer wrote no usable skill for any stage-1 trajectory")
	}
	if n := int(r.cfg.Stage1.ActingReplay * float64(len(data))); n > 0 {
		acting := actingExamples(trainTrajs, n, r.cfg.Seed, r.cfg.Stage1.MaxLen)
		r.log.Info().Int("skill_examples", len(data)).Int("acting_examples", len(acting)).Msg("stage-1 data")
		data = append(data, acting...)
	}
	vals := map[string]float64{}
	var heldData []SFTExample
	if len(held.trajs) > 0 {
		if heldData, err = r.sftExamples(held.recs); err != nil {
			return err
		}
		// What the policy writes before stage 1 (the server holds it).
		if err := r.heldOutAnalysis(ctx, held.trajs, "before", vals); err != nil {
			return err
		}
	}
	if err := r.releaseServer(ctx, "stage-1 fine-tuning"); err != nil {
		return err
	}
	l, err := r.deps.NewLearner(r.cfg.learnerSpec(r.dir.abs(r.st.Checkpoint), r.dir.abs(r.st.Reference)))
	if err != nil {
		return err
	}
	defer l.Close()
	if len(heldData) > 0 {
		if vals["held_out_nll_before"], err = skillNLL(ctx, l, heldData); err != nil {
			return fmt.Errorf("held-out skill NLL before stage 1: %w", err)
		}
	}
	s1 := r.cfg.Stage1
	var lastLoss float64
	lastPrint := time.Time{}
	err = l.SFT(ctx, data, s1.sftOptions(r.cfg.Seed),
		func(step, steps int, loss float64) {
			lastLoss = loss
			if time.Since(lastPrint) > 2*time.Second || step == steps {
				lastPrint = time.Now()
				r.printf("stage 1 SFT: step %d/%d, loss %.3f\n", step, steps, loss)
			}
		})
	if err != nil {
		return fmt.Errorf("fine-tuning: %w", err)
	}
	ck := r.dir.checkpoint("stage1")
	if err := l.Save(ctx, ck); err != nil {
		return err
	}
	served := false
	if len(held.trajs) > 0 {
		if len(heldData) > 0 {
			if vals["held_out_nll_after"], err = skillNLL(ctx, l, heldData); err != nil {
				return fmt.Errorf("held-out skill NLL after stage 1: %w", err)
			}
		}
		if err := r.serve(ctx, ck); err != nil {
			return err
		}
		served = true
		if err := r.heldOutAnalysis(ctx, held.trajs, "after", vals); err != nil {
			return err
		}
		vals["held_out"] = float64(len(held.trajs))
		r.printf("stage 1 held-out (%d trajectories): skill NLL %.3f -> %.3f per token; own analyses parsed %.0f%% -> %.0f%%, with a skill %.0f%% -> %.0f%%\n",
			len(held.trajs), vals["held_out_nll_before"], vals["held_out_nll_after"], 100*vals["held_out_parse_ok_before"], 100*vals["held_out_parse_ok_after"],
			100*vals["held_out_skill_share_before"], 100*vals["held_out_skill_share_after"])
	}
	withSkill := 0
	for _, rec := range recs {
		if rec.Skill != nil {
			withSkill++
		}
	}
	maps.Copy(vals, map[string]float64{
		"episodes": float64(len(trajs)), "skills": float64(withSkill), "sft_examples": float64(len(data)), "sft_final_loss": lastLoss,
		"seconds": time.Since(start).Seconds(), "success": rollout.Summarize(trajs, 0).Success})
	if err := appendMetrics(r.dir.metrics(), MetricsLine{Kind: "stage1", Time: time.Now(), Values: vals}); err != nil {
		return err
	}
	rel, _ := filepath.Rel(string(r.dir), ck)
	r.st.Stage1Done, r.st.Checkpoint, r.st.Reference = true, rel, rel
	if err := r.recordFiles(); err != nil {
		return err
	}
	if err := r.saveState(); err != nil {
		return err
	}
	r.printf("stage 1: %d trajectories, %d skills, SFT on %d examples (final loss %.3f) in %s\n", len(trajs), withSkill, len(data), lastLoss, time.Since(start).Round(time.Second))
	if served {
		return nil
	}
	return r.serve(ctx, ck)
}

// heldOut is stage 1's held-out part: trajectories and their records.
type heldOut struct {
	recs  []skills.Record
	trajs []*rollout.Trajectory
}

// splitHeldOut keeps the last whole groups of trajs, at least n
// trajectories, out of stage 1's training (stage1.held_out): what is
// trained on, and what is held out. n 0 holds nothing out; at least one
// group is always trained on.
func splitHeldOut(recs []skills.Record, trajs []*rollout.Trajectory, n int) ([]skills.Record, []*rollout.Trajectory, heldOut) {
	if n <= 0 {
		return recs, trajs, heldOut{}
	}
	groups := skills.Groups(trajs)
	ids := map[string]bool{}
	var h heldOut
	for gi := len(groups) - 1; gi >= 1 && len(h.trajs) < n; gi-- {
		for _, t := range groups[gi] {
			ids[t.ID] = true
		}
		h.trajs = append(slices.Clone(groups[gi]), h.trajs...)
	}
	var keepRecs []skills.Record
	for _, rec := range recs {
		if ids[rec.TrajectoryID] {
			h.recs = append(h.recs, rec)
		} else {
			keepRecs = append(keepRecs, rec)
		}
	}
	var keep []*rollout.Trajectory
	for _, t := range trajs {
		if !ids[t.ID] {
			keep = append(keep, t)
		}
	}
	return keepRecs, keep, h
}

// heldOutAnalysis has the served policy analyze the held-out trajectories
// as stage 2 would (greedy, its own analyzer), keeps the analyses in
// skills/stage1-held-out-<when>.jsonl and records the share whose analysis
// parsed and the share that gave a skill, under held_out_parse_ok_<when>
// and held_out_skill_share_<when>.
func (r *run) heldOutAnalysis(ctx context.Context, trajs []*rollout.Trajectory, when string, vals map[string]float64) error {
	an := &skills.SelfAnalyzer{Policy: r.policy, MaxTokens: r.cfg.AnalysisTokens, Temperature: 0, K: r.cfg.MaxStepSkills, Snapshot: "stage1-" + when, NoRepair: !r.cfg.AnalysisRepair, MinWords: r.cfg.analysisMinWords()}
	recs, err := r.analyze(ctx, an, trajs, "stage 1 held-out ("+when+")", 0)
	if err != nil {
		return fmt.Errorf("stage-1 held-out analysis %s fine-tuning: %w", when, err)
	}
	if err := skills.WriteStore(r.dir.path("skills", "stage1-held-out-"+when+".jsonl"), recs); err != nil {
		return err
	}
	withSkill := 0
	for _, rec := range recs {
		if rec.Skill != nil && !rec.Skill.Empty() {
			withSkill++
		}
	}
	vals["held_out_parse_ok_"+when] = parseShare(recs)
	vals["held_out_skill_share_"+when] = float64(withSkill) / float64(max(1, len(trajs)))
	return nil
}

// parseShare is the share of analyses that were written and parsed.
func parseShare(recs []skills.Record) float64 {
	parsed := 0
	for _, rec := range recs {
		if rec.ParseError == "" && rec.Raw != "" {
			parsed++
		}
	}
	return float64(parsed) / float64(max(1, len(recs)))
}

// skillNLL is the mean NLL per trained token of examples under l's
// current weights.
func skillNLL(ctx context.Context, l Learner, examples []SFTExample) (float64, error) {
	seqs := make([][]int, len(examples))
	for i, ex := range examples {
		seqs[i] = ex.IDs
	}
	lps, err := l.Rescore(ctx, seqs)
	if err != nil {
		return 0, err
	}
	sum, n := 0.0, 0
	for i, ex := range examples {
		for k := 1; k < len(ex.IDs) && k < len(lps[i]); k++ {
			if ex.Loss[k] {
				sum -= float64(lps[i][k])
				n++
			}
		}
	}
	if n == 0 {
		return 0, errors.New("no trained tokens")
	}
	return sum / float64(n), nil
}

func (r *run) stage1Analyzer() (skills.Analyzer, error) {
	if r.deps.Analyzer != nil {
		return r.deps.Analyzer, nil
	}
	a := r.cfg.Stage1.Analyzer
	switch a.Kind {
	case "oracle":
		return &skills.OracleAnalyzer{K: r.cfg.MaxStepSkills}, nil
	case "external":
		cc := inference.DefaultChatConfig(a.BaseURL, a.Model)
		cc.APIKeyEnv = a.APIKeyEnv
		client, err := inference.NewChatClient(cc, r.log)
		if err != nil {
			return nil, fmt.Errorf("stage-1 analyzer: %w", err)
		}
		return &skills.ExternalAnalyzer{Client: client, K: r.cfg.MaxStepSkills, MaxTokens: max(a.MaxTokens, 256), Model: a.Model}, nil
	}
	return nil, fmt.Errorf("stage-1 analyzer kind %q", a.Kind)
}

// sftExamples turns analyzer records into stage-1 sequences: the analysis
// prompt exactly as self-analysis will send it, then the skill JSON and
// EOS (trained on).
func (r *run) sftExamples(recs []skills.Record) ([]SFTExample, error) {
	var out []SFTExample
	for _, rec := range recs {
		if rec.Skill == nil || rec.Prompt == "" {
			continue
		}
		prompt, err := r.policy.StartIDs("", rec.Prompt)
		if err != nil {
			return nil, fmt.Errorf("stage-1 prompt of %s: %w", rec.TrajectoryID, err)
		}
		var want any = rec.Skill
		if r.cfg.Stage1.Targets == TargetsEpisode {
			// The public code's stage-1 targets: no step skills.
			want = struct {
				EpisodeSummary string `json:"episode_summary"`
				EpisodeSkill   string `json:"episode_skill"`
			}{rec.Skill.EpisodeSummary, rec.Skill.EpisodeSkill}
		}
		js, err := json.Marshal(want)
		if err != nil {
			return nil, err
		}
		target, err := r.policy.Tok.Encode(string(js))
		if err != nil {
			return nil, err
		}
		ids := append(append(prompt, target...), r.policy.EOS)
		if len(ids) > r.cfg.Stage1.MaxLen {
			r.log.Warn().Str("trajectory", rec.TrajectoryID).Int("tokens", len(ids)).Int("max_len", r.cfg.Stage1.MaxLen).Msg("stage-1 example longer than max_len: skipped")
			continue
		}
		loss := make([]bool, len(ids))
		for i := len(prompt); i < len(ids); i++ {
			loss[i] = true
		}
		out = append(out, SFTExample{IDs: ids, Loss: loss})
	}
	return out, nil
}

// actingExamples samples n of the trajectories' turns as SFT examples:
// the prompt the policy saw and the reply it sampled (trained on), so
// stage 1 keeps the policy's acting distribution while it learns skills.
func actingExamples(trajs []*rollout.Trajectory, n int, seed int64, maxLen int) []SFTExample {
	var all []SFTExample
	for _, t := range trajs {
		rows, err := plainRows(t, nil)
		if err != nil {
			continue
		}
		for _, row := range rows {
			if len(row.IDs) <= maxLen {
				all = append(all, SFTExample{IDs: row.IDs, Loss: row.Train})
			}
		}
	}
	rng := rand.New(rand.NewPCG(uint64(seed), 0xac7))
	rng.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	return all[:min(n, len(all))]
}
