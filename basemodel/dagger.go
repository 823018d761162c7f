package basemodel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/seedctl/seedctl/envadapters"
	"github.com/seedctl/seedctl/envadapters/household"
	"github.com/seedctl/seedctl/rollout"
	"github.com/seedctl/seedctl/tokenizer"
	"github.com/seedctl/seedctl/trainer"
)

// DAggerConfig refines a pre-trained base model on its own states (DAgger:
// the policy plays training tasks, the searching expert says at every step
// what it would have done, and the model is trained on those labels). A
// model trained only on the expert's states never sees the states its own
// mistakes lead to: after "take plate 1" with no plate in sight it has no
// example of going on, and greedy decoding repeats the mistake.
type DAggerConfig struct {
	// Rounds of play-and-train (0: no refinement).
	Rounds int `json:"rounds,omitempty"`
	// Episodes played per round, on training tasks after the corpus's and
	// the held-out demonstrations'.
	Episodes int `json:"episodes,omitempty"`
	// Epochs over each round's examples, at peak learning rate LR.
	Epochs float64 `json:"epochs,omitempty"`
	LR     float64 `json:"lr,omitempty"`
	// KeepAgreeing is the share of steps where the policy already acted as
	// the expert would that are trained on too (the others stay context).
	KeepAgreeing float64 `json:"keep_agreeing,omitempty"`
	// Replay mixes in this many corpus examples per relabelled one, so the
	// refinement does not wash out what only the corpus teaches (hints,
	// skill writing).
	Replay float64 `json:"replay,omitempty"`
	// MaxSteps ends a played episode; StopAfterRepeats ends it after that
	// many "Nothing happens." in a row (further copies teach nothing new).
	MaxSteps         int `json:"max_steps,omitempty"`
	StopAfterRepeats int `json:"stop_after_repeats,omitempty"`
}

// Validate names the first bad field of an enabled refinement.
func (c DAggerConfig) Validate() error {
	if c.Rounds == 0 {
		return nil
	}
	switch {
	case c.Rounds < 0:
		return fmt.Errorf("dagger: rounds %d must be positive (or 0: no refinement)", c.Rounds)
	case c.Episodes < 1:
		return fmt.Errorf("dagger: episodes %d must be positive", c.Episodes)
	case !(c.Epochs > 0) || !(c.LR > 0):
		return fmt.Errorf("dagger: epochs %v and lr %v must be positive", c.Epochs, c.LR)
	case c.KeepAgreeing < 0 || c.KeepAgreeing > 1:
		return fmt.Errorf("dagger: keep_agreeing %v must be in [0, 1]", c.KeepAgreeing)
	case c.Replay < 0 || math.IsNaN(c.Replay):
		return fmt.Errorf("dagger: replay %v must be >= 0", c.Replay)
	case c.MaxSteps < 1 || c.StopAfterRepeats < 1:
		return fmt.Errorf("dagger: max_steps %d and stop_after_repeats %d must be positive", c.MaxSteps, c.StopAfterRepeats)
	}
	return nil
}

// DefaultDAgger is the measured refinement setting (docs/experiments.md, "Tiny base
// policies").
func DefaultDAgger() DAggerConfig {
	return DAggerConfig{Rounds: 2, Episodes: 150, Epochs: 1, LR: 1e-3, KeepAgreeing: 0.25, Replay: 1, MaxSteps: 30, StopAfterRepeats: 3}
}

// DAggerRound is what one refinement round measured.
type DAggerRound struct {
	Episodes int `json:"episodes"`
	// Won is how many played episodes the policy (greedy, before this
	// round's training) won; Agree the share of its steps that matched
	// the expert's label.
	Won      int     `json:"won"`
	Steps    int     `json:"steps"`
	Agree    float64 `json:"agree"`
	Examples int     `json:"examples"`
	Replayed int     `json:"replayed"`
	Loss     float64 `json:"final_loss"`
	Seconds  float64 `json:"seconds"`
}

// daggerOffset is where refinement tasks start in the training split, past
// the corpus and the held-out demonstrations (HeldOut uses the tasks right
// after the corpus).
func daggerOffset(c CorpusConfig, round, episodes int) int {
	return c.Offset + c.Episodes + 1000 + round*episodes
}

// refine runs r.DAgger's rounds on m in place.
func refine(ctx context.Context, r Recipe, m *trainer.Model, pc *prepared, log zerolog.Logger, progress Progress) ([]DAggerRound, error) {
	dc := r.DAgger
	if err := dc.Validate(); err != nil {
		return nil, err
	}
	if r.Env != household.Name || r.Mode != rollout.ModeWindow {
		return nil, fmt.Errorf("dagger: refinement needs the household searching expert and window prompts (recipe: %s, %s)", r.Env, r.Mode)
	}
	if n := daggerOffset(r.Corpus, dc.Rounds, dc.Episodes); n > pc.b.SplitSize(envadapters.Train) {
		return nil, fmt.Errorf("dagger: %d rounds of %d episodes need %d training tasks, the split has %d", dc.Rounds, dc.Episodes, n, pc.b.SplitSize(envadapters.Train))
	}
	rng := rand.New(rand.NewPCG(r.Seed, 211))
	var out []DAggerRound
	for round := range dc.Rounds {
		t0 := time.Now()
		eps, st, err := playRelabelled(ctx, r, m, pc, round, rng, func(d, t int) {
			progress(fmt.Sprintf("dagger %d/%d: play", round+1, dc.Rounds), d, t, "")
		})
		if err != nil {
			return nil, fmt.Errorf("dagger round %d: %w", round+1, err)
		}
		// Relabelled examples train the action only: their prompts hold the
		// policy's own mistakes, which are not to be imitated.
		rel, _, err := EncodeRepeated(eps, pc.policy, pc.tmpl, r.Mode, r.Window, max(1, r.RareRepeat), r.RepeatAsWeight)
		if err != nil {
			return nil, fmt.Errorf("dagger round %d: %w", round+1, err)
		}
		rel = fitting(rel, r.SFT.MaxLen, log)
		st.Examples = len(rel)
		mix := append([]trainer.SFTExample(nil), rel...)
		for _, k := range rng.Perm(len(pc.examples))[:min(len(pc.examples), int(dc.Replay*float64(len(rel))))] {
			mix = append(mix, pc.examples[k])
			st.Replayed++
		}
		sft := r.SFT
		sft.Epochs, sft.LR, sft.Seed = dc.Epochs, dc.LR, r.SFT.Seed+uint64(round+1)
		err = trainer.TrainSFT(ctx, m, mix, sft, func(p trainer.SFTProgress) {
			st.Loss = p.Loss
			progress(fmt.Sprintf("dagger %d/%d: train", round+1, dc.Rounds), p.Step, p.Steps, fmt.Sprintf("loss %.3f", p.Loss))
		})
		if err != nil {
			return nil, fmt.Errorf("dagger round %d: training: %w", round+1, err)
		}
		st.Seconds = time.Since(t0).Seconds()
		log.Info().Int("round", round+1).Int("won", st.Won).Int("episodes", st.Episodes).Float64("agree", st.Agree).
			Int("examples", st.Examples).Float64("loss", st.Loss).Msg("dagger round done")
		out = append(out, st)
	}
	return out, nil
}

// playRelabelled plays one round's episodes with the model (greedy, plain
// prompts) and records, at every step, the searching expert's action as
// the target. Steps the model got right are kept as targets with
// probability KeepAgreeing; the rest are context only.
func playRelabelled(ctx context.Context, r Recipe, m *trainer.Model, pc *prepared, round int, rng *rand.Rand, progress func(done, total int)) ([]Episode, DAggerRound, error) {
	dc := r.DAgger
	off := daggerOffset(r.Corpus, round, dc.Episodes)
	tasks, err := pc.b.Tasks(envadapters.Train, off+dc.Episodes)
	if err != nil {
		return nil, DAggerRound{}, err
	}
	tasks = tasks[off:]
	st := DAggerRound{Episodes: len(tasks)}
	agree := 0
	var eps []Episode
	for i, task := range tasks {
		if err := ctx.Err(); err != nil {
			return nil, st, err
		}
		ep, won, ag, err := playOne(ctx, r, m, pc, task, r.Seed+uint64(off+i), rng)
		if err != nil {
			return nil, st, fmt.Errorf("playing %s: %w", task.ID, err)
		}
		if won {
			st.Won++
		}
		st.Steps += len(ep.Steps)
		agree += ag
		eps = append(eps, ep)
		progress(i+1, len(tasks))
	}
	if st.Steps > 0 {
		st.Agree = float64(agree) / float64(st.Steps)
	}
	return eps, st, nil
}

func playOne(ctx context.Context, r Recipe, m *trainer.Model, pc *prepared, task envadapters.Task, seed uint64, rng *rand.Rand) (Episode, bool, int, error) {
	dc := r.DAgger
	env, err := pc.b.New(envadapters.Options{"max_steps": fmt.Sprint(dc.MaxSteps)})
	if err != nil {
		return Episode{}, false, 0, err
	}
	defer env.Close()
	obs, err := env.Reset(ctx, task)
	if err != nil {
		return Episode{}, false, 0, err
	}
	x, err := searchExpert(env, pc.tmpl, obs.Observation, seed, 0, r.Corpus.SearchFollow)
	if err != nil {
		return Episode{}, false, 0, err
	}
	ep := Episode{Task: task, System: pc.tmpl.System, FirstObs: obs.Observation}
	agree, repeats := 0, 0
	var past []rollout.Step
	for !obs.Done && repeats < dc.StopAfterRepeats {
		label, err := x.Act() // also lets the expert see where the policy stands
		if err != nil {
			return Episode{}, false, 0, err
		}
		ep.Steps = append(ep.Steps, DemoStep{Obs: obs.Observation, Admissible: obs.Admissible})
		prompt, err := pc.policy.StartIDs(ep.System, ep.userText(pc.tmpl, r.Mode, r.Window, len(ep.Steps)-1, past))
		if err != nil {
			return Episode{}, false, 0, err
		}
		ids, err := m.Greedy(prompt, 48, []int{pc.policy.EOS}, true)
		if err != nil {
			return Episode{}, false, 0, err
		}
		text, err := pc.policy.Tok.Decode(ids, tokenizer.DecodeOptions{SkipSpecial: true})
		if err != nil {
			return Episode{}, false, 0, err
		}
		action, ok := pc.tmpl.Extract(text, obs.Admissible)
		if !ok {
			action = strings.TrimSpace(text)
		}
		s := &ep.Steps[len(ep.Steps)-1]
		s.Action, s.Target, s.Response = action, label, responseText(r.Env, label)
		if action == label {
			agree++
			s.Random = rng.Float64() >= dc.KeepAgreeing
		}
		if obs, err = env.Step(ctx, action); err != nil {
			return Episode{}, false, 0, err
		}
		s.After = obs.Observation
		past = append(past, rollout.Step{Action: action, Observation: obs.Observation})
		if strings.HasPrefix(obs.Observation, "Nothing happens") {
			repeats++
		} else {
			repeats = 0
		}
	}
	ep.Won = obs.Won
	return ep, obs.Won, agree, nil
}

// Refine loads the base model in dir, runs the refinement dc on it and
// saves the result in out, with the recipe's DAgger set to dc (the same
// weights a build of that recipe gives, without pre-training again).
func Refine(ctx context.Context, dir, out string, dc DAggerConfig, log zerolog.Logger, progress Progress) error {
	if progress == nil {
		progress = func(string, int, int, string) {}
	}
	r, ok := ReadRecipe(dir)
	if !ok {
		return fmt.Errorf("refining %s: no recipe.json (not a bootstrapped base model)", dir)
	}
	if r.DAgger.Rounds > 0 {
		return fmt.Errorf("refining %s: it is already refined (%d rounds); refine its base instead", dir, r.DAgger.Rounds)
	}
	if dc.Rounds < 1 {
		return errors.New("refining: rounds must be positive")
	}
	var base BuildReport
	if b, err := os.ReadFile(filepath.Join(dir, "build.json")); err == nil {
		if err := json.Unmarshal(b, &base); err != nil {
			return fmt.Errorf("refining %s: build.json: %w", dir, err)
		}
	}
	tok, tcfg, err := tokenizer.Load(dir)
	if err != nil {
		return fmt.Errorf("refining %s: %w", dir, err)
	}
	start := time.Now()
	r.DAgger = dc
	pc, err := prepare(ctx, r, tok, tcfg, log, progress)
	if err != nil {
		return err
	}
	m, err := trainer.LoadCheckpoint(dir, trainer.ModelOptions{})
	if err != nil {
		return fmt.Errorf("refining %s: %w", dir, err)
	}
	defer m.Close()
	report := base
	t := time.Now()
	if report.DAgger, err = refine(ctx, r, m, pc, log, progress); err != nil {
		return err
	}
	report.TrainSeconds += time.Since(t).Seconds()
	// The refined model's build time is its base's plus the refinement.
	return finish(ctx, r, m, pc, report, start.Add(-time.Duration(base.Seconds*float64(time.Second))), out, log, progress)
}
