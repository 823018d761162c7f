package orchestrator

// One stage-2 iteration: rollout, analysis, rescoring, the training rows
// and the update.

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"time"

	"github.com/seedctl/seedctl/envadapters"
	"github.com/seedctl/seedctl/internal/procmem"
	"github.com/seedctl/seedctl/rollout"
	"github.com/seedctl/seedctl/skills"
)

// iterStats accumulates an iteration's metrics.
type iterStats map[string]float64

// iterate is one stage-2 iteration. Everything the next one needs is
// written before state.json records it as finished.
func (r *run) iterate(ctx context.Context, k int) error {
	t0 := time.Now()
	vals := iterStats{}
	tasks := r.tasksFor(k)
	runner, err := r.rolloutRunner(r.cfg.Seed*1_000_003+int64(k), r.cfg.Rollout.GroupSize, r.cfg.Rollout.Temperature)
	if err != nil {
		return err
	}
	// SEED's hindsight analysis starts on each group as it ends (analysisPipe).
	var pipe *analysisPipe
	if r.cfg.Distills() && r.cfg.RL.TeacherContext != TeacherContextPlain {
		an, err := r.iterationAnalyzer(k)
		if err != nil {
			return err
		}
		pipe = r.pipeAnalysis(ctx, an, k)
	}
	trajs, err := runner.RunNotify(ctx, tasks, k, r.progress(fmt.Sprintf("iteration %d/%d rollout", k, r.cfg.Iterations)), pipe.groupDone)
	if err != nil {
		pipe.abandon()
		return fmt.Errorf("rollout: %w", err)
	}
	met := rollout.Summarize(trajs, time.Since(t0))
	if err := rollout.WriteJSONL(r.dir.trajs(k), trajs); err != nil {
		return err
	}
	vals["rollout_s"] = time.Since(t0).Seconds()
	r.phase(k, "rollout")

	// The plain rows and their log-probs need no skills: they are scored
	// while SEED's analysis finishes (for GRPO, right away).
	t1 := time.Now()
	plainCtx, stopPlain := context.WithCancel(ctx)
	plainCh := r.startPlain(plainCtx, trajs)
	plainTaken := false
	defer func() {
		stopPlain()
		if !plainTaken {
			<-plainCh // the learner is not left busy behind an error
		}
	}()

	// Skills.
	var recs []skills.Record
	sks := map[string]*skills.Skill{}
	if pipe != nil {
		if recs, err = pipe.wait(trajs, fmt.Sprintf("iteration %d/%d", k, r.cfg.Iterations)); err != nil {
			return fmt.Errorf("analysis: %w", err)
		}
		if r.cfg.Algo == AlgoRandomSkill {
			list := make([]*skills.Skill, len(recs))
			for i := range recs {
				list[i] = recs[i].Skill
			}
			list = skills.Shuffle(list, uint64(r.cfg.Seed)*7919+uint64(k))
			for i := range recs {
				recs[i].Skill = list[i]
			}
		}
		if err := skills.WriteStore(r.dir.skills(k), recs); err != nil {
			return err
		}
		mode, _ := skills.ParseMode(r.cfg.SkillMode)
		for _, rec := range recs {
			if rec.Skill != nil && !rec.Skill.Empty() {
				sks[rec.TrajectoryID] = mode.Apply(rec.Skill)
			}
		}
		vals["skill_share"] = float64(len(sks)) / float64(max(1, len(trajs)))
		vals["skill_parse_ok"] = parseShare(recs)
		gen, prompt, err := r.analysisTokens(recs)
		if err != nil {
			return err
		}
		vals["analysis_tokens"], vals["analysis_prompt_tokens"] = float64(gen), float64(prompt)
	}
	vals["analysis_s"] = time.Since(t1).Seconds()
	r.phase(k, "analysis")

	// Rows, teacher contexts and rescoring. rescore_s is what this phase
	// adds after the analysis; plain_rescore_s the plain rows' scoring
	// wherever it ran.
	t2 := time.Now()
	plain := <-plainCh
	plainTaken = true
	if plain.err != nil {
		return fmt.Errorf("plain rows: %w", plain.err)
	}
	vals["plain_rescore_s"] = plain.set.took.Seconds()
	rows, err := r.buildRows(ctx, trajs, plain.set, sks, vals)
	if err != nil {
		return err
	}
	vals["rescore_s"] = time.Since(t2).Seconds()
	r.phase(k, "rescore")

	// Update.
	t3 := time.Now()
	if len(rows) > 0 {
		if err := r.releaseServer(ctx, "the update"); err != nil {
			return err
		}
		if err := r.update(ctx, k, rows, vals); err != nil {
			return err
		}
	}
	vals["update_s"] = time.Since(t3).Seconds()
	r.phase(k, "update")

	// Checkpoint and publish.
	t4 := time.Now()
	name := fmt.Sprintf("iter-%d", k)
	ck := r.dir.checkpoint(name)
	if err := r.learner.Save(ctx, ck); err != nil {
		return fmt.Errorf("saving checkpoint: %w", err)
	}
	if err := r.serve(ctx, ck); err != nil {
		return err
	}
	vals["publish_s"] = time.Since(t4).Seconds()
	r.phase(k, "checkpoint")

	vals["success"], vals["mean_return"], vals["mean_steps"], vals["invalid_rate"] = met.Success, met.MeanReturn, met.MeanSteps, met.InvalidRate
	vals["rejected_rate"] = met.RejectedRate
	vals["score"], vals["tokens_generated"], vals["episodes"] = met.MeanScore, float64(met.TokensGenerated), float64(met.Episodes)
	vals["first_action_agreement"], vals["first_places"] = met.FirstActionAgreement, met.FirstPlaces
	vals["iteration_s"] = time.Since(t0).Seconds()
	// This process's resident set (the embedded server and the learner
	// live in it unless they run elsewhere): now, and its peak so far.
	if u, err := procmem.Read(); err == nil {
		vals["rss_gb"], vals["rss_peak_gb"] = float64(u.Resident)/1e9, float64(u.Peak)/1e9
	}
	lines := []MetricsLine{{Kind: "iteration", Iteration: k, Time: time.Now(), Values: vals, PerFamily: met.SuccessByFamily}}
	if err := appendMetrics(r.dir.metrics(), lines...); err != nil {
		return err
	}
	prev := r.st.Checkpoint
	r.st.Iteration, r.st.Checkpoint, r.st.DataCursor = k, filepath.Join("checkpoints", name), k*r.cfg.TasksPerIteration
	if err := r.recordFiles(); err != nil {
		return err
	}
	if err := r.saveState(); err != nil {
		return err
	}
	// The previous iteration's checkpoint is no longer needed (stage 1's
	// stays: it is the reference).
	// Never the folder just written, whatever the state said before.
	if filepath.Base(prev) != "stage1" && !filepath.IsAbs(prev) && prev != r.st.Reference && filepath.Clean(prev) != filepath.Clean(r.st.Checkpoint) {
		os.RemoveAll(r.dir.abs(prev))
	}
	ev := r.log.Info().Int("iteration", k).Str("algo", r.cfg.Algo)
	for _, key := range []string{"success", "mean_return", "invalid_rate", "skill_share", "loss", "grpo_loss", "opd_loss", "kl", "gate_mean", "positive_shift", "clip_frac", "grad_norm", "entropy", "iteration_s"} {
		ev = ev.Float64(key, vals[key])
	}
	ev.Msg("iteration finished")
	el := time.Since(r.loopStart)
	done := k - r.firstIter + 1
	eta := time.Duration(float64(el) / float64(done) * float64(r.cfg.Iterations-k))
	upd := fmt.Sprintf("loss %.4f on %.0f rows", vals["loss"], vals["rows"])
	switch {
	case vals["refused_steps"] > 0 && vals["optimizer_steps"] == 0:
		upd = fmt.Sprintf("update refused (%.0f non-finite steps)", vals["refused_steps"])
	case vals["optimizer_steps"] == 0:
		upd = "no update (no row with signal)"
	}
	r.printf("iteration %d/%d: rollout success %.1f%%, return %.2f, invalid %.1f%% | skills %.0f%%, gate %.2f, Δ>0 %.0f%% | %s | %s (rollout %.0fs, analysis %.0fs, rescore %.0fs, update %.0fs) ETA %s\n",
		k, r.cfg.Iterations, 100*met.Success, met.MeanReturn, 100*met.InvalidRate, 100*vals["skill_share"], vals["gate_mean"], 100*vals["positive_shift"], upd,
		time.Since(t0).Round(time.Second), vals["rollout_s"], vals["analysis_s"], vals["rescore_s"], vals["update_s"], eta.Round(time.Second))
	if ev := r.cfg.Eval.Every; ev > 0 && k%ev == 0 && k < r.cfg.Iterations {
		ep, err := r.evaluate(ctx, k)
		if err != nil {
			return err
		}
		r.lastEval = ep
		if p := r.cfg.Eval.PlateauPatience; p > 0 {
			lines, err := ReadMetrics(r.dir.metrics())
			if err != nil {
				return err
			}
			if why := plateaued(lines, p); why != "" {
				r.st.Stopped = why
				return r.saveState()
			}
		}
	}
	return nil
}

// plateaued says why training should stop (or ""): eval-seen success in
// the metrics has not beaten its best for patience evaluations in a row.
func plateaued(lines []MetricsLine, patience int) string {
	best, bestAt, since := -1.0, 0, 0
	for _, l := range lines {
		if l.Kind != "eval" || l.Split != string(envadapters.EvalSeen) {
			continue
		}
		if v := l.Values["success"]; v > best {
			best, bestAt, since = v, l.Iteration, 0
		} else {
			since++
		}
	}
	if since < patience {
		return ""
	}
	return fmt.Sprintf("eval-seen success has not beaten its best, %.1f%% after iteration %d, in %d evaluations", 100*best, bestAt, since)
}

// plainSet is what the training rows need that skills do not change: each
// trajectory's plain rows with their advantages and, for the rows sure to
// be trained, the current policy's and the reference's log-probs. SEED
// computes it while the hindsight analysis still decodes on the inference
// server (startPlain), so the trainer's forward passes run beside the
// server's instead of after them.
type plainSet struct {
	rows [][]Row // by trajectory of the rollout; nil for a broken environment's episode
	gs   GroupStats
	gap  float64 // the largest |ℓold(server) − ℓold(trainer)| of a scored trained token
	took time.Duration
}

// scoredEarly says whether startPlain scores a row: every row unless flat
// rows may be dropped (those are scored once it is known they stay).
func (r *run) scoredEarly(row *Row) bool {
	return r.cfg.RL.DropFlat == "" || !row.flat()
}

// startPlain builds and scores the plain rows of trajs in the background;
// the channel yields one result. The learner is busy until it does.
func (r *run) startPlain(ctx context.Context, trajs []*rollout.Trajectory) <-chan plainResult {
	ch := make(chan plainResult, 1)
	go func() {
		p, err := r.scorePlain(ctx, trajs)
		ch <- plainResult{p, err}
	}()
	return ch
}

type plainResult struct {
	set *plainSet
	err error
}

func (r *run) scorePlain(ctx context.Context, trajs []*rollout.Trajectory) (*plainSet, error) {
	t0 := time.Now()
	adv, gs := StepAdvantages(trajs, r.cfg.advantageParams())
	p := &plainSet{rows: make([][]Row, len(trajs)), gs: gs}
	var early []*Row
	for i, t := range trajs {
		if t.EnvError != "" {
			continue // a broken environment's episode is not evidence
		}
		tr, err := plainRows(t, adv[t.ID])
		if err != nil {
			return nil, err
		}
		p.rows[i] = tr
		for k := range tr {
			if r.scoredEarly(&tr[k]) {
				early = append(early, &tr[k])
			}
		}
	}
	gap, err := r.scoreRows(ctx, early)
	if err != nil {
		return nil, err
	}
	p.gap, p.took = gap, time.Since(t0)
	return p, nil
}

// scoreRows fills rows' sampling log-probs as the trainer computes them
// (unless the server's are kept) and the reference's (with a KL term),
// and returns the largest gap between the server's and the trainer's
// log-prob of a trained token.
func (r *run) scoreRows(ctx context.Context, rows []*Row) (float64, error) {
	if len(rows) == 0 {
		return 0, nil
	}
	seqs := make([][]int, len(rows))
	for i, row := range rows {
		seqs[i] = row.IDs
	}
	gap := 0.0
	if !r.cfg.RL.ServerOldLogP {
		cur, err := r.learner.Rescore(ctx, seqs)
		if err != nil {
			return 0, fmt.Errorf("recomputing sampling log-probs: %w", err)
		}
		for i, row := range rows {
			for k, tr := range row.Train {
				if tr {
					gap = math.Max(gap, math.Abs(float64(cur[i][k]-row.OldLogP[k])))
				}
			}
			row.OldLogP = cur[i]
		}
	}
	if r.cfg.RL.KLCoef > 0 {
		ref, err := r.learner.RescoreRef(ctx, seqs)
		if err != nil {
			return 0, fmt.Errorf("reference rescoring: %w", err)
		}
		for i, row := range rows {
			row.RefLogP = ref[i]
		}
	}
	return gap, nil
}

// buildRows makes the training rows from the plain set: teacher log-probs
// on distilled tokens, flat rows dropped where configured, and the
// log-probs of the rows startPlain left unscored.
func (r *run) buildRows(ctx context.Context, trajs []*rollout.Trajectory, p *plainSet, sks map[string]*skills.Skill, vals iterStats) ([]Row, error) {
	vals["flat_group_share"], vals["flat_failing_share"], vals["flat_winning_share"] = p.gs.Flat, p.gs.FlatFailing, p.gs.FlatWinning
	if r.cfg.RL.StepGroupWeight > 0 {
		vals["step_grouped_share"], vals["step_group_size"] = p.gs.StepGrouped, p.gs.StepGroupSize
	}
	mode, _ := skills.ParseMode(r.cfg.SkillMode)
	tmpl, err := rollout.TemplateFor(r.env.Name).WithPlacesLine(r.cfg.Rollout.PlacesLine)
	tmpl.SkillSections = r.cfg.Rollout.SkillFormat == rollout.SkillFormatSections
	if err != nil {
		return nil, fmt.Errorf("building rows: %w", err)
	}
	var rows []Row
	type pending struct {
		row  int
		pair skills.SeqPair
		base *skills.SeqPair // the contrastive baseline's pair, or nil
	}
	var teacherSeqs, baseSeqs [][]int
	var pend []pending
	fallbacks, unpaired := 0, 0
	contrast := r.cfg.RL.DistillBaseline == DistillBaselineShuffled
	var donors []int
	if contrast && len(trajs) > 0 {
		task, has := make([]string, len(trajs)), make([]bool, len(trajs))
		for i, t := range trajs {
			task[i], has[i] = t.Task.ID, sks[t.ID] != nil && t.EnvError == ""
		}
		donors = skills.Donors(task, has, uint64(r.cfg.Seed)*7919+uint64(trajs[0].Iteration)+1)
	}
	for i, t := range trajs {
		if t.EnvError != "" {
			continue // no rows (scorePlain)
		}
		tr := p.rows[i]
		if r.cfg.RL.TeacherContext == TeacherContextPlain && r.cfg.Distills() {
			// Standard on-policy distillation: the teacher model reads
			// the plain context and scores every trained token.
			for j := range tr {
				row := &tr[j]
				row.Distill = slices.Clone(row.Train)
				n := len(row.IDs)
				pend = append(pend, pending{row: len(rows) + j, pair: skills.SeqPair{Plain: row.IDs, Teacher: row.IDs, Spans: []skills.Span{{PlainStart: 0, TeacherStart: 0, Len: n, Distill: true}}}})
				teacherSeqs = append(teacherSeqs, row.IDs)
			}
			rows = append(rows, tr...)
			continue
		}
		sk := sks[t.ID]
		var base *skills.TeacherContext
		if sk != nil && contrast {
			var donor *skills.Skill
			if donors[i] >= 0 {
				donor = sks[trajs[donors[i]].ID]
			}
			if bs := skills.Transplant(sk, donor); bs == nil {
				unpaired++
				sk = nil // no contrast, no distillation
			} else if base, err = skills.BuildTeacher(t, bs, mode, tmpl, r.policy); err != nil {
				return nil, fmt.Errorf("contrastive baseline of %s (skill of %s): %w", t.ID, trajs[donors[i]].ID, err)
			}
		}
		if sk != nil {
			tc, err := skills.BuildTeacher(t, sk, mode, tmpl, r.policy)
			if err != nil {
				return nil, fmt.Errorf("teacher context of %s: %w", t.ID, err)
			}
			fallbacks += tc.Fallbacks
			seqs, err := attachTeacher(tr, tc)
			if err != nil {
				return nil, err
			}
			if base != nil {
				if err := sameSpans(tc, base); err != nil {
					return nil, err
				}
			}
			for i, s := range seqs {
				if s != nil {
					pd := pending{row: len(rows) + i, pair: tc.Pairs[i]}
					if base != nil {
						pd.base = &base.Pairs[i]
						baseSeqs = append(baseSeqs, base.Pairs[i].Teacher)
					}
					pend = append(pend, pd)
					teacherSeqs = append(teacherSeqs, s)
				}
			}
		}
		rows = append(rows, tr...)
	}
	if contrast {
		vals["contrast_unpaired"] = float64(unpaired)
	}
	if len(teacherSeqs) > 0 {
		all := append(teacherSeqs, baseSeqs...)
		var want [][]bool
		if r.cfg.RL.DistillForm == DistillFull {
			// The teacher's distribution at every distilled token (the
			// baseline's log-probs stay sampled-token only).
			want = make([][]bool, len(all))
			for i, p := range pend {
				want[i] = teacherPositions(&rows[p.row], p.pair)
			}
			for i := len(pend); i < len(all); i++ {
				want[i] = make([]bool, len(all[i]))
			}
		}
		lps, dists, err := r.learner.RescoreTeacher(ctx, all, want, r.cfg.RL.DistillTopK)
		if err != nil {
			return nil, fmt.Errorf("teacher rescoring: %w", err)
		}
		nb := 0
		for i, p := range pend {
			fillTeacher(&rows[p.row], p.pair, lps[i])
			if dists != nil {
				rows[p.row].TeacherDist = scatterDists(len(rows[p.row].IDs), p.pair, dists[i])
			}
			if p.base != nil {
				rows[p.row].BaselineLogP = scatterSpans(len(rows[p.row].IDs), *p.base, lps[len(teacherSeqs)+nb])
				nb++
			}
		}
	}
	if r.cfg.RL.DropFlat != "" {
		n := len(rows)
		rows = dropFlat(rows, r.cfg.RL.DropFlat == DropNoSignal)
		vals["flat_rows_dropped"] = float64(n - len(rows))
	}
	vals["adv_token_mean"], vals["zero_adv_row_share"], vals["adv_abs_mean"] = advantageFigures(rows)
	if len(rows) == 0 {
		return nil, nil
	}
	// Rows kept for a distilled token though flat were not scored early.
	var late []*Row
	for i := range rows {
		if !r.scoredEarly(&rows[i]) {
			late = append(late, &rows[i])
		}
	}
	gap, err := r.scoreRows(ctx, late)
	if err != nil {
		return nil, err
	}
	if !r.cfg.RL.ServerOldLogP {
		vals["old_logp_max_gap"] = max(p.gap, gap)
	}
	vals["rows"] = float64(len(rows))
	vals["teacher_sequences"] = float64(len(teacherSeqs))
	// Turns whose skill went before the action request or to the turn's
	// end because the turn had no task line (or no request).
	vals["skill_fallback_placements"] = float64(fallbacks)
	return rows, nil
}

// miniBatches cuts the iteration's rows into mini-batches (indexes into
// rows): MiniBatchRows rows each, in order or in a seeded order with
// Shuffle, one pass; or, with MiniBatchRows 0, MiniBatches interleaved
// parts of a seeded shuffle.
func (c Config) miniBatches(n, k int) [][]int {
	rng := rand.New(rand.NewPCG(uint64(c.Seed), uint64(k)))
	var out [][]int
	if c.RL.MiniBatchRows == 0 {
		order := rng.Perm(n)
		nb := min(c.RL.MiniBatches, n)
		for b := 0; b < nb; b++ {
			var mb []int
			for i := b; i < n; i += nb {
				mb = append(mb, order[i])
			}
			out = append(out, mb)
		}
		return out
	}
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	if c.RL.Shuffle {
		order = rng.Perm(n)
	}
	for lo := 0; lo < n; lo += c.RL.MiniBatchRows {
		out = append(out, order[lo:min(lo+c.RL.MiniBatchRows, n)])
	}
	return out
}

// update runs the iteration's optimizer steps, one per mini-batch,
// averaging their metrics into vals.
func (r *run) update(ctx context.Context, k int, rows []Row, vals iterStats) error {
	mbs := r.cfg.miniBatches(len(rows), k)
	sum, count := map[string]float64{}, map[string]int{}
	steps := 0
	defer func() { r.st.MiniBatchesDone += len(mbs) }()
	for b, idx := range mbs {
		batch := make([]Row, len(idx))
		for i, j := range idx {
			batch[i] = rows[j]
		}
		if !anyTrained(batch) {
			continue
		}
		lr := r.cfg.StepLR(k, b, len(mbs), r.st.MiniBatchesDone+b)
		st, err := r.learner.Step(ctx, batch, lr)
		if IsRefusal(err) {
			r.st.Refusals++
			r.log.Warn().Int("iteration", k).Int("mini_batch", b).Int("in_a_row", r.st.Refusals).Err(err).Msg("step refused (non-finite loss or gradient)")
			vals["refused_steps"]++
			if r.st.Refusals >= r.cfg.RL.MaxRefusals {
				return fmt.Errorf("%d refused steps in a row (last: iteration %d mini-batch %d): %w", r.st.Refusals, k, b, err)
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("update mini-batch %d: %w", b, err)
		}
		r.st.Refusals = 0
		steps++
		sum["lr"] += lr
		count["lr"]++
		for name, v := range st {
			sum[name] += v
			count[name]++
		}
	}
	keys := make([]string, 0, len(sum))
	for name := range sum {
		keys = append(keys, name)
	}
	sort.Strings(keys)
	// Each figure is the mean over the steps that reported it (some, like
	// the decision shift by advantage sign, are absent from a step without
	// such tokens).
	for _, name := range keys {
		vals[name] = sum[name] / float64(max(1, count[name]))
	}
	vals["optimizer_steps"] = float64(steps)
	vals["mini_batches"] = float64(len(mbs))
	return nil
}

// advantage is row position k's advantage.
func (row *Row) advantage(k int) float64 {
	if row.Advantages != nil {
		return float64(row.Advantages[k])
	}
	return row.Advantage
}

// flat says whether every trained token of the row has advantage 0.
func (row *Row) flat() bool {
	for k, tr := range row.Train {
		if tr && row.advantage(k) != 0 {
			return false
		}
	}
	return true
}

// advantageFigures are the token-weighted mean advantage over trained
// tokens (negative: the update pushes sampled tokens down on the whole),
// the share of rows with no advantage anywhere, and the token-weighted
// mean |A| (the size of GRPO's per-token signal, against which λ·gate
// weighs the distillation's).
func advantageFigures(rows []Row) (tokenMean, zeroRows, absMean float64) {
	sum, abs, n, zero := 0.0, 0.0, 0, 0
	for i := range rows {
		row := &rows[i]
		for k, tr := range row.Train {
			if tr {
				a := row.advantage(k)
				sum += a
				abs += math.Abs(a)
				n++
			}
		}
		if row.flat() {
			zero++
		}
	}
	if n > 0 {
		tokenMean, absMean = sum/float64(n), abs/float64(n)
	}
	if len(rows) > 0 {
		zeroRows = float64(zero) / float64(len(rows))
	}
	return tokenMean, zeroRows, absMean
}

// dropFlat keeps the rows with a nonzero advantage somewhere (in place),
// whatever the method, so GRPO and SEED lose the same rows; with
// keepDistilled, rows with a distilled token are kept too (the legacy
// update's asymmetric rule).
func dropFlat(rows []Row, keepDistilled bool) []Row {
	kept := rows[:0]
	for i := range rows {
		if !rows[i].flat() || (keepDistilled && slices.Contains(rows[i].Distill, true)) {
			kept = append(kept, rows[i])
		}
	}
	return kept
}

func anyTrained(rows []Row) bool {
	for _, r := range rows {
		for _, t := range r.Train {
			if t {
				return true
			}
		}
	}
	return false
}
