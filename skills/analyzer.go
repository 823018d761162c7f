package skills

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/seedctl/seedctl/inference"
	"github.com/seedctl/seedctl/rollout"
	"github.com/seedctl/seedctl/tokenizer"
)

// Request is one trajectory to analyze with its candidate critical steps.
type Request struct {
	Traj       *rollout.Trajectory
	Candidates []int
	// ChooseSteps lets the analyzer pick the critical steps itself
	// (critical_steps "llm"); Candidates then lists every step it may
	// pick, and the record's critical steps are the ones it chose.
	ChooseSteps bool
	// EpisodeOnly asks for the episode summary and skill alone (skill
	// mode episode_only, as the public code does: no critical steps), and
	// an answer without a usable episode skill gets the repair round too.
	EpisodeOnly bool
}

// Analyzer writes skills for trajectories.
type Analyzer interface {
	Name() string
	Analyze(ctx context.Context, reqs []Request) ([]Record, error)
}

// asker answers prompts, in order.
type asker func(ctx context.Context, prompts []string) ([]string, error)

// analyzeWith runs the shared flow: analysis prompts, parsing, one repair
// round for answers without a usable episode skill (unless noRepair),
// then what parsed: an answer whose episode skill is missing keeps its
// step skills.
func analyzeWith(ctx context.Context, name string, k, minWords int, reqs []Request, ask asker, noRepair bool) ([]Record, error) {
	prompts := make([]string, len(reqs))
	for i, r := range reqs {
		prompts[i] = PromptFor(r, k)
	}
	answers, err := ask(ctx, prompts)
	if err != nil {
		return nil, fmt.Errorf("%s analyzer: %w", name, err)
	}
	recs := make([]Record, len(reqs))
	var repairIdx []int
	var repairPrompts []string
	for i, r := range reqs {
		recs[i] = Record{TrajectoryID: r.Traj.ID, TaskID: r.Traj.Task.ID, Iteration: r.Traj.Iteration, Analyzer: name,
			Won: r.Traj.Won, CriticalSteps: r.Candidates, Prompt: prompts[i], Raw: answers[i]}
		sk, perr := parseFor(r, answers[i], k, minWords)
		recs[i].Skill = sk
		if perr != nil {
			repairIdx = append(repairIdx, i)
			repairPrompts = append(repairPrompts, RepairPromptFor(r, prompts[i], answers[i], perr))
			recs[i].ParseError = perr.Error()
		}
	}
	if len(repairIdx) > 0 && !noRepair {
		fixed, err := ask(ctx, repairPrompts)
		if err != nil {
			return nil, fmt.Errorf("%s analyzer: repair round: %w", name, err)
		}
		for j, i := range repairIdx {
			recs[i].Repaired, recs[i].RepairRaw = true, fixed[j]
			sk, perr := parseFor(reqs[i], fixed[j], k, minWords)
			if perr != nil {
				recs[i].ParseError = "after repair: " + perr.Error()
				if recs[i].Skill.Empty() && !sk.Empty() {
					recs[i].Skill = sk
				}
				continue
			}
			recs[i].Skill, recs[i].ParseError = sk, ""
		}
	}
	for i := range recs {
		if recs[i].Skill.Empty() {
			recs[i].Skill = nil // nothing usable
		}
		if reqs[i].ChooseSteps {
			recs[i].CriticalSteps = nil
			if recs[i].Skill != nil {
				recs[i].CriticalSteps = sortedSteps(recs[i].Skill.StepSkills)
			}
		}
	}
	return recs, nil
}

// errNoEpisodeSkill: an answer without a usable episode skill (missing,
// or under the minimum words); the public code retries those.
var errNoEpisodeSkill = errors.New("episode_skill is missing or too short")

func noEpisodeSkill(minWords int) error {
	if minWords <= 0 {
		minWords = MinSkillWords
	}
	return fmt.Errorf("%w: missing or shorter than %d words", errNoEpisodeSkill, minWords)
}

// parseFor parses an answer to r's prompt. The skill comes back with the
// error where the answer decoded but had no usable episode skill.
func parseFor(r Request, answer string, k, minWords int) (*Skill, error) {
	opt := ParseOptions{Candidates: r.Candidates, MaxStep: k, MinWords: minWords}
	if r.EpisodeOnly {
		opt = ParseOptions{MinWords: minWords}
	}
	sk, err := Parse(answer, opt)
	if err != nil {
		return nil, err
	}
	if sk.EpisodeSkill == "" {
		return sk, noEpisodeSkill(minWords)
	}
	return sk, nil
}

// SelfAnalyzer asks a policy snapshot through its backend: the current one
// (SEED's self-analysis), or, for the frozen-analyzer baseline, a fixed
// checkpoint served by its own backend (Label "frozen").
type SelfAnalyzer struct {
	Policy      *rollout.Policy
	MaxTokens   int
	Temperature float64
	K           int
	Snapshot    string
	Label       string // "self" when empty
	// MinWords: shorter skill texts count as no skill (0: MinSkillWords).
	MinWords int
	// NoRepair skips the repair round: an answer that does not parse is no
	// skill at once. For policies that cannot repair (the tiny household
	// model repaired none of 583 answers in the v11 bench) the round wrote
	// more tokens than the analysis itself.
	NoRepair bool
}

func (a *SelfAnalyzer) Name() string {
	if a.Label != "" {
		return a.Label
	}
	return "self"
}

func (a *SelfAnalyzer) Analyze(ctx context.Context, reqs []Request) ([]Record, error) {
	ask := func(ctx context.Context, prompts []string) ([]string, error) {
		gen := make([]inference.GenRequest, len(prompts))
		for i, p := range prompts {
			ids, err := a.Policy.StartIDs("", p)
			if err != nil {
				return nil, err
			}
			gen[i] = inference.GenRequest{Prompt: ids, MaxTokens: a.MaxTokens, Temperature: a.Temperature, StopTokenIDs: []int{a.Policy.EOS}}
		}
		res, err := a.Policy.Backend.Generate(ctx, gen)
		if err != nil {
			return nil, err
		}
		out := make([]string, len(res))
		for i, r := range res {
			if out[i], err = a.Policy.Tok.Decode(r.IDs, tokenizer.DecodeOptions{SkipSpecial: true}); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	recs, err := analyzeWith(ctx, a.Name(), a.K, a.MinWords, reqs, ask, a.NoRepair)
	for i := range recs {
		recs[i].Snapshot = a.Snapshot
	}
	return recs, err
}

// ExternalAnalyzer asks a hosted OpenAI-compatible chat model.
type ExternalAnalyzer struct {
	Client      *inference.ChatClient
	Temperature float32
	MaxTokens   int
	K           int
	Model       string
	// MinWords: shorter skill texts count as no skill (0: MinSkillWords).
	MinWords int
	// NoRepair skips the repair round (to measure what it adds).
	NoRepair bool
}

func (a *ExternalAnalyzer) Name() string { return "external" }

func (a *ExternalAnalyzer) Analyze(ctx context.Context, reqs []Request) ([]Record, error) {
	ask := func(ctx context.Context, prompts []string) ([]string, error) {
		out := make([]string, len(prompts))
		errs := make(chan error, len(prompts))
		done := make(chan struct{}, len(prompts))
		for i, p := range prompts {
			go func(i int, p string) {
				s, err := a.Client.Complete(ctx, []inference.ChatMessage{{Role: "user", Content: p}}, inference.ChatOptions{Temperature: a.Temperature, MaxTokens: a.MaxTokens})
				if err != nil {
					errs <- err
					return
				}
				out[i] = s
				done <- struct{}{}
			}(i, p)
		}
		for range prompts {
			select {
			case err := <-errs:
				return nil, err
			case <-done:
			}
		}
		return out, nil
	}
	recs, err := analyzeWith(ctx, a.Name(), a.K, a.MinWords, reqs, ask, a.NoRepair)
	for i := range recs {
		recs[i].Snapshot = a.Model
	}
	return recs, err
}

// skillJSON renders a skill as the analyzer answer shape.
func skillJSON(s *Skill) string {
	b, _ := json.Marshal(s)
	return string(b)
}
