package skills

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/seedctl/seedctl/rollout"
)

// MinSkillWords: shorter skill texts count as no skill.
const MinSkillWords = 5

// DefaultMaxStepSkills is K, the most step skills per trajectory.
const DefaultMaxStepSkills = 5

// maxObsChars keeps long observations from flooding the analysis prompt.
const maxObsChars = 400

func clip(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) <= n {
		return s
	}
	return s[:n] + " …"
}

// AnalysisPrompt asks for the hindsight skill of a trajectory: the task, the
// outcome, the numbered steps, the candidate critical steps and the exact
// JSON shape. Success asks for a workflow, failure for an avoidance rule.
func AnalysisPrompt(t *rollout.Trajectory, candidates []int, k int) string {
	return analysisPrompt(t, candidates, k, false)
}

// AnalysisPromptChoosing is AnalysisPrompt for the LLM critical-step
// selector (critical_steps "llm"): instead of candidates from the group's
// return variance, the analyzer picks the steps where the outcome was
// decided, at most k, and keys its step skills by them.
func AnalysisPromptChoosing(t *rollout.Trajectory, k int) string {
	return analysisPrompt(t, nil, k, true)
}

// PromptFor is the analysis prompt of one request.
func PromptFor(r Request, k int) string {
	if r.EpisodeOnly {
		return EpisodeOnlyPrompt(r.Traj)
	}
	if r.ChooseSteps {
		return AnalysisPromptChoosing(r.Traj, k)
	}
	return AnalysisPrompt(r.Traj, r.Candidates, k)
}

func analysisPrompt(t *rollout.Trajectory, candidates []int, k int, choose bool) string {
	var b strings.Builder
	b.WriteString("You are reviewing one finished episode of an agent, to write a reusable lesson from it.\n\n")
	fmt.Fprintf(&b, "Task: %s\n", t.Task.Goal)
	outcome := "FAILURE (the task was not completed)"
	if t.Won {
		outcome = "SUCCESS (the task was completed)"
	}
	fmt.Fprintf(&b, "Outcome: %s, return %.2f, %d steps.\n\n", outcome, t.Return, len(t.Steps))
	fmt.Fprintf(&b, "Initial observation: %s\n\nSteps:\n", clip(t.FirstObservation, 2*maxObsChars))
	for i, s := range t.Steps {
		act := s.Action
		if act == "" {
			act = "(no valid action: " + clip(s.Text, 80) + ")"
		}
		fmt.Fprintf(&b, "%d. action: %s\n   result: %s\n", i, act, clip(s.Observation, maxObsChars))
	}
	b.WriteString("\n")
	if choose {
		fmt.Fprintf(&b, "Choose the critical steps yourself: at most %d step numbers (0-based) where the outcome was decided, such as the wrong turn in a failure or the key action in a success. Write step skills only for those steps.\n", k)
	} else if len(candidates) > 0 {
		strs := make([]string, len(candidates))
		for i, c := range candidates {
			strs[i] = strconv.Itoa(c)
		}
		fmt.Fprintf(&b, "Candidate critical steps (0-based): %s. Write step skills only for these, at most %d.\n", strings.Join(strs, ", "), k)
	} else {
		b.WriteString("There are no candidate critical steps: leave step_skills empty.\n")
	}
	if t.Won {
		b.WriteString("Because the episode succeeded, episode_skill must be a workflow: the decision rule and the order of actions that worked, written so it applies to similar tasks.\n")
	} else {
		b.WriteString("Because the episode failed, episode_skill must be an avoidance rule: the core mistake and the warning signs that it is happening again.\n")
	}
	b.WriteString("Each step skill is one short imperative sentence of advice for that step.\n\n")
	b.WriteString("Answer with exactly this JSON object and nothing else:\n")
	b.WriteString(`{"episode_summary": "<one sentence on what happened>", "episode_skill": "<the workflow or avoidance rule>", "step_skills": {"<step number>": "<advice for that step>"}}`)
	return b.String()
}

// EpisodeOnlyPrompt is the public code's episode_only analysis prompt
// (seed/analysis.py), in this project's words: two fields, the episode
// summary and the episode skill (a workflow after a success, avoidance
// rules after a failure), the exact JSON shape, then the episode: task,
// outcome and the numbered steps. No critical steps are asked for.
func EpisodeOnlyPrompt(t *rollout.Trajectory) string {
	var b strings.Builder
	b.WriteString("Analyze the agent episode below and answer with ONLY valid JSON.\n\n")
	b.WriteString("Fill in two fields:\n1. episode_summary: a concise summary of the episode.\n")
	if t.Won {
		b.WriteString("2. episode_skill: distill the successful trajectory into a workflow: the core decision rule and the order of actions that made it work.\n")
	} else {
		b.WriteString("2. episode_skill: distill the failed trajectory into avoidance rules: the core mistake and the warning signs the agent should avoid.\n")
	}
	b.WriteString("\nConstraints:\n- Write episode_skill as one short skill the policy can act on, not as a retrospective account of the trajectory.\n")
	b.WriteString("- Answer with only these top-level fields: episode_summary, episode_skill.\n\n")
	b.WriteString("Format:\n" + episodeOnlyShape + "\n\n")
	outcome := "failure"
	if t.Won {
		outcome = "success"
	}
	fmt.Fprintf(&b, "Episode:\n- Task: %s\n- Outcome: %s\n- Initial observation: %s\n- Steps:\n", t.Task.Goal, outcome, clip(t.FirstObservation, 2*maxObsChars))
	for i, s := range t.Steps {
		act := s.Action
		if act == "" {
			act = "(no valid action: " + clip(s.Text, 80) + ")"
		}
		fmt.Fprintf(&b, "%d. action: %s\n   result: %s\n", i, act, clip(s.Observation, maxObsChars))
	}
	return b.String()
}

const episodeOnlyShape = `{"episode_summary": "string", "episode_skill": "string"}`

// RepairPromptFor is the one retry of a request whose answer did not
// parse: for episode-only requests the public code's retry (the original
// prompt, the error, the previous answer, the exact shape again); else
// RepairPrompt.
func RepairPromptFor(r Request, prompt, bad string, perr error) string {
	if !r.EpisodeOnly {
		return RepairPrompt(bad, perr)
	}
	return fmt.Sprintf("%s\n\nThe previous answer could not be used as the required JSON object.\nError: %v\n\nPrevious answer:\n%s\n\nReturn ONLY one valid JSON object of exactly this shape:\n%s",
		prompt, perr, clip(bad, 2000), episodeOnlyShape)
}

// RepairPrompt is sent once when an answer does not parse.
func RepairPrompt(bad string, perr error) string {
	return fmt.Sprintf("Your previous answer could not be used: %v.\nPrevious answer:\n%s\n\nReply again with only this JSON object, with string values and step numbers as keys:\n"+
		`{"episode_summary": "...", "episode_skill": "...", "step_skills": {"3": "..."}}`, perr, clip(bad, 2000))
}

// ErrNoJSON means no JSON object was found in an answer.
var ErrNoJSON = errors.New("no JSON object in the answer")

// ParseOptions bound what a parsed skill may contain.
type ParseOptions struct {
	Candidates []int // steps allowed step skills
	MaxStep    int   // K
	// MinWords: skill texts with fewer words count as no skill (0:
	// MinSkillWords, the public code's test on its hosted-analyzer path;
	// 1 keeps any non-empty text, as its policy_vllm self-analysis does).
	MinWords int
}

// Parse reads an analyzer's answer as the public code does (lenient.go):
// code fences, trailing commas, raw control characters in strings and
// Python-literal dicts are accepted; a missing or non-string field is no
// text, a step_skills that is not an object is no step skills, keys that
// are not step numbers are skipped. The only error is an answer with no
// object in it. Texts under MinWords words and step skills for steps
// that are not candidates are dropped; at most MaxStep step skills are
// kept, by the candidates' rank.
func Parse(answer string, opt ParseOptions) (*Skill, error) {
	obj, err := decodeAnswer(answer)
	if err != nil {
		return nil, err
	}
	minWords := opt.MinWords
	if minWords <= 0 {
		minWords = MinSkillWords
	}
	sk := &Skill{StepSkills: map[int]string{}}
	sk.EpisodeSummary = strings.TrimSpace(textOf(obj["episode_summary"]))
	sk.EpisodeSkill = strings.TrimSpace(textOf(obj["episode_skill"]))
	if !nontrivial(sk.EpisodeSkill, minWords) {
		sk.EpisodeSkill = ""
	}
	steps, _ := obj["step_skills"].(map[string]any)
	allowed := map[int]bool{}
	for _, c := range opt.Candidates {
		allowed[c] = true
	}
	for key, val := range steps {
		n, err := strconv.Atoi(strings.TrimSpace(key))
		if err != nil {
			continue
		}
		if s := strings.TrimSpace(textOf(val)); allowed[n] && nontrivial(s, minWords) {
			sk.StepSkills[n] = s
		}
	}
	if opt.MaxStep > 0 && len(sk.StepSkills) > opt.MaxStep {
		keep := map[int]string{}
		for _, c := range opt.Candidates { // candidates come ranked
			if v, ok := sk.StepSkills[c]; ok && len(keep) < opt.MaxStep {
				keep[c] = v
			}
		}
		sk.StepSkills = keep
	}
	return sk, nil
}
