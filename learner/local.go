package learner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/seedctl/seedctl/orchestrator"
	"github.com/seedctl/seedctl/trainer"
)

// gotchLearner is the orchestrator's Learner over the trainer.
type gotchLearner struct {
	m, ref *trainer.Model
	// teacher is the distillation teacher (spec.Teacher), loaded on the
	// first RescoreTeacher: with data parallelism only rank 0 scores it.
	teacher    *trainer.Model
	teacherDir string
	modelOpts  trainer.ModelOptions
	opt        *trainer.Optimizer
	rl         trainer.RLConfig
	tokFrom    string
	maxTok     int
	wd         float64
	temp       float64 // sampling temperature every log-prob is taken at
	// g is the data-parallel group when the learner is one of several
	// ranks (run --nproc): steps take this rank's share of the rows.
	g *trainer.ProcessGroup
}

func Local(device string) orchestrator.LearnerFactory {
	return func(spec orchestrator.LearnerSpec) (orchestrator.Learner, error) {
		l, err := loadLearner(device, spec, nil, false)
		if err != nil {
			// Not a typed nil inside the interface: the run's cleanup
			// would call Close on it and panic, hiding err.
			return nil, err
		}
		return l, nil
	}
}

// loadLearner loads a spec's policy (and reference) with its optimizer;
// with a group the learner is one of its ranks, and zero shards the
// optimizer across them (ZeRO-1).
func loadLearner(device string, spec orchestrator.LearnerSpec, g *trainer.ProcessGroup, zero bool) (*gotchLearner, error) {
	mo := trainer.ModelOptions{Device: device, DType: spec.RL.DType}
	m, err := trainer.LoadCheckpoint(spec.Policy, mo)
	if err != nil {
		return nil, fmt.Errorf("loading the policy: %w", err)
	}
	rec, err := m.RecomputeFor(spec.RL.Recompute)
	if err != nil {
		m.Close()
		return nil, err
	}
	m.SetRecompute(rec)
	l := &gotchLearner{m: m, tokFrom: spec.Policy, maxTok: max(spec.RL.MicroBatchTokens, 2), wd: spec.RL.WeightDecay, temp: spec.Temperature}
	l.rl = trainer.RLConfig{ClipEps: spec.RL.ClipEps, Lambda: spec.RL.Lambda, Beta: spec.RL.Beta, KLCoef: spec.RL.KLCoef, KLClamp: spec.RL.KLClamp, Agg: spec.RL.Agg, MicroBatchRows: spec.RL.MicroBatchRows, MicroBatchTokens: spec.RL.MicroBatchTokens, ClipNorm: spec.RL.ClipNorm, Temperature: spec.Temperature,
		ClipRatioC: spec.RL.ClipRatioC, EntropyCoef: spec.RL.EntropyCoef, TermGradsEvery: spec.RL.TermGradsEvery,
		DistillForm: spec.RL.DistillForm, DeltaClip: spec.RL.DeltaClip, PGCoef: spec.RL.PGCoef}
	l.teacherDir, l.modelOpts = spec.Teacher, mo
	switch b := spec.RL.JSDBeta; {
	case b == 0:
		l.rl.JSDBeta = trainer.JSDForward // TRL's beta 0
	case b < 1:
		l.rl.JSDBeta = b
	} // 1 (and a spec without the key): the reverse KL, the trainer's zero value
	l.g = g
	if zero && g != nil {
		l.opt, err = m.NewShardedAdamW(spec.RL.LR, spec.RL.WeightDecay, g)
	} else {
		l.opt, err = m.NewAdamW(spec.RL.LR, spec.RL.WeightDecay)
	}
	if err != nil {
		m.Close()
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(spec.Policy, l.opt.StateFile())); err == nil {
		if err := l.opt.LoadState(spec.Policy); err != nil {
			m.Close()
			return nil, err
		}
		// The learning rate comes with every Step (the run's schedule).
	}
	if spec.RL.KLCoef > 0 {
		if l.ref, err = trainer.LoadCheckpoint(spec.Reference, mo); err != nil {
			m.Close()
			return nil, fmt.Errorf("loading the reference policy: %w", err)
		}
	}
	return l, nil
}

// Every call below ends with trainer.ReleaseFreeMemory: the tensors it
// let go are freed and glibc's free pages leave the resident set, which
// otherwise grows from one iteration to the next (the process holds the
// embedded server too). The orchestrator never calls a learner from two
// goroutines at once.

func (l *gotchLearner) Rescore(ctx context.Context, seqs [][]int) ([][]float32, error) {
	defer trainer.ReleaseFreeMemory()
	return l.m.RescoreAt(seqs, l.maxTok, l.temp)
}

func (l *gotchLearner) RescoreRef(ctx context.Context, seqs [][]int) ([][]float32, error) {
	defer trainer.ReleaseFreeMemory()
	if l.ref == nil {
		return nil, errors.New("no reference policy loaded (kl_coef is 0)")
	}
	return l.ref.RescoreAt(seqs, l.maxTok, l.temp)
}

func (l *gotchLearner) RescoreTeacher(ctx context.Context, seqs [][]int, want [][]bool, topK int) ([][]float32, [][]*orchestrator.TokenDist, error) {
	defer trainer.ReleaseFreeMemory()
	m := l.m
	if l.teacherDir != "" {
		if l.teacher == nil {
			t, err := trainer.LoadCheckpoint(l.teacherDir, l.modelOpts)
			if err != nil {
				return nil, nil, fmt.Errorf("loading the teacher model: %w", err)
			}
			if t.Config().VocabSize != l.m.Config().VocabSize {
				t.Close()
				return nil, nil, fmt.Errorf("teacher model %s has a vocabulary of %d, the policy %d: distillation needs the same tokenizer", l.teacherDir, t.Config().VocabSize, l.m.Config().VocabSize)
			}
			l.teacher = t
		}
		m = l.teacher
	}
	if want == nil {
		lps, err := m.RescoreAt(seqs, l.maxTok, l.temp)
		return lps, nil, err
	}
	lps, ds, err := m.RescoreDistAt(seqs, want, l.maxTok, l.temp, topK)
	if err != nil {
		return nil, nil, err
	}
	out := make([][]*orchestrator.TokenDist, len(ds))
	for i, row := range ds {
		out[i] = make([]*orchestrator.TokenDist, len(row))
		for k, d := range row {
			if d != nil {
				out[i][k] = &orchestrator.TokenDist{IDs: d.IDs, LogP: d.LogP}
			}
		}
	}
	return lps, out, nil
}

func (l *gotchLearner) Step(ctx context.Context, rows []orchestrator.Row, lr float64) (orchestrator.StepStats, error) {
	defer trainer.ReleaseFreeMemory()
	l.opt.SetLR(lr)
	batch := make([]trainer.RLSequence, len(rows))
	for i, r := range rows {
		batch[i] = trainer.RLSequence{ID: r.ID, IDs: r.IDs, Train: r.Train, Advantage: r.Advantage, Advantages: r.Advantages, OldLogP: r.OldLogP, RefLogP: r.RefLogP, TeacherLogP: r.TeacherLogP, Distill: r.Distill, BaselineLogP: r.BaselineLogP}
		if r.TeacherDist != nil {
			batch[i].TeacherDist = make([]*trainer.TokenDist, len(r.TeacherDist))
			for k, d := range r.TeacherDist {
				if d != nil {
					batch[i].TeacherDist[k] = &trainer.TokenDist{IDs: d.IDs, LogP: d.LogP}
				}
			}
		}
	}
	var st trainer.RLStats
	var err error
	if l.g != nil {
		st, err = l.m.RLStepDist(l.opt, l.g, trainer.RankShare(batch, l.g.Rank(), l.g.World()), l.rl)
	} else {
		st, err = l.m.RLStep(l.opt, batch, l.rl)
	}
	if errors.Is(err, trainer.ErrNonFinite) {
		return nil, &orchestrator.RefusedError{Err: err}
	}
	if err != nil {
		return nil, err
	}
	b, _ := json.Marshal(st)
	out := orchestrator.StepStats{}
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, err
	}
	for i, v := range st.GateBins {
		out[trainer.GateBinNames[i]] = v
	}
	out["elapsed_s"] = st.Elapsed.Seconds()
	delete(out, "elapsed_ns")
	return out, nil
}

func (l *gotchLearner) SFT(ctx context.Context, data []orchestrator.SFTExample, o orchestrator.SFTOptions, progress func(step, steps int, loss float64)) error {
	defer trainer.ReleaseFreeMemory()
	ex := make([]trainer.SFTExample, len(data))
	for i, d := range data {
		ex[i] = trainer.SFTExample{IDs: d.IDs, Loss: d.Loss}
	}
	cfg := trainer.DefaultSFTConfig()
	cfg.Epochs, cfg.LR, cfg.BatchTokens, cfg.MicroBatchTokens, cfg.MaxLen, cfg.Seed = o.Epochs, o.LR, o.BatchTokens, o.MicroBatchTokens, o.MaxLen, o.Seed
	if o.Beta2 > 0 { // options from the orchestrator's stage1.optimizer; zero values keep the defaults
		cfg.Beta2, cfg.WarmupFrac, cfg.MinLRFrac = o.Beta2, o.WarmupFrac, o.MinLRFrac
	}
	cfg.BatchSequences, cfg.SequenceMean = o.BatchSequences, o.SequenceMean
	cfg.Pack = true
	return trainer.TrainSFTDist(ctx, l.m, ex, cfg, l.g, func(p trainer.SFTProgress) {
		if progress != nil {
			progress(p.Step, p.Steps, p.Loss)
		}
	})
}

func (l *gotchLearner) Save(ctx context.Context, dir string) error {
	return l.save(dir, nil)
}

// save writes the checkpoint; also, when set, runs in its folder before it
// is renamed into place (the other ranks' optimizer shards).
func (l *gotchLearner) save(dir string, also func(tmp string) error) error {
	err := l.m.Save(dir, trainer.SaveOptions{TokenizerFrom: l.tokFrom, WriteExtra: func(tmp string) error {
		for _, f := range []string{"recipe.json"} {
			if b, err := os.ReadFile(filepath.Join(l.tokFrom, f)); err == nil {
				if err := os.WriteFile(filepath.Join(tmp, f), b, 0o644); err != nil {
					return err
				}
			}
		}
		if also != nil {
			if err := also(tmp); err != nil {
				return err
			}
		}
		return l.opt.SaveState(tmp)
	}})
	if err != nil {
		return fmt.Errorf("saving checkpoint %s: %w", dir, err)
	}
	l.tokFrom = dir
	return nil
}

func (l *gotchLearner) Close() {
	l.g.Close()
	l.m.Close()
	if l.ref != nil {
		l.ref.Close()
	}
	if l.teacher != nil {
		l.teacher.Close()
	}
}
