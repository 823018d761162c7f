package rollout

import (
	"fmt"
	"regexp"
	"strings"
)

// Prompt styles (Config.PromptStyle).
const (
	// PromptSeedctl: seedctl's own prompts (the environment's template).
	PromptSeedctl = "seedctl"
	// PromptVerlAgent: the public SEED code's verl-agent prompts in window
	// mode — an intro naming the environment with the task line, how many
	// steps were taken and the last N observations with their actions,
	// the current step and observation, the admissible actions, then
	// "Now it's your turn…" asking for reasoning in <think> </think> and
	// the action in <action> </action>. The structure and the phrases the
	// skill placement keys on ("Your task is to:", "Now it's your turn")
	// are the public code's; the rest is in this project's words.
	PromptVerlAgent = "verl-agent"
)

// taskPatterns find the task in a first observation: the public code's
// task lines, and WebShop's "Instruction: [SEP] … [SEP]".
var taskPatterns = []*regexp.Regexp{
	regexp.MustCompile(`(?i)Your task is to:\s*(.+?)(?:\n|$)`),
	regexp.MustCompile(`(?i)Your task is:\s*(.+?)(?:\n|$)`),
	regexp.MustCompile(`(?i)Your current task is:\s*(.+?)(?:\n|$)`),
	regexp.MustCompile(`(?i)Your question:\s*(.+?)(?:\n|$)`),
	regexp.MustCompile(`(?i)Your goal is to\s*(.+?)(?:\n|$)`),
	regexp.MustCompile(`(?i)Instruction:\s*\[SEP\]\s*(.+?)\s*\[SEP\]`),
}

// TaskOf is the task a first observation states ("" when none is found).
func TaskOf(firstObs string) string {
	for _, re := range taskPatterns {
		if m := re.FindStringSubmatch(firstObs); m != nil {
			if t := strings.Join(strings.Fields(m[1]), " "); t != "" {
				return t
			}
		}
	}
	return ""
}

// VerlAgentText is a window-mode turn in the verl-agent style (see
// PromptVerlAgent): task i's first observation, the last window steps of
// past, the current observation and its admissible actions.
func VerlAgentText(tmpl Template, firstObs string, past []Step, window int, obs string, admissible []string) string {
	var b strings.Builder
	intro := tmpl.Intro
	if intro == "" {
		intro = "You are an expert agent acting in a text environment."
	}
	b.WriteString(intro)
	task := TaskOf(firstObs)
	if task != "" {
		b.WriteString(" Your task is to: " + strings.TrimSuffix(task, ".") + ".")
	}
	b.WriteString("\n")
	n := len(past)
	if n > 0 && window > 0 {
		from := max(0, n-window)
		fmt.Fprintf(&b, "Before this step you have taken %d step(s). The last %d observation(s) and the action you took after each:", n, n-from)
		for k := from; k < n; k++ {
			prev := firstObs
			if k > 0 {
				prev = past[k-1].Observation
			}
			fmt.Fprintf(&b, "\n[Observation %d: '%s', Action %d: '%s']", k+1, oneLine(prev), k+1, past[k].Action)
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "You are now at step %d, and your current observation is: %s\n", n+1, strings.TrimSpace(obs))
	if len(admissible) > 0 {
		b.WriteString("Your admissible actions now are: [" + strings.Join(quoteAll(admissible), ", ") + "].\n")
	}
	b.WriteString("\nNow it's your turn to take an action.\n")
	b.WriteString("First reason step by step about the current situation, inside <think> </think>. ")
	b.WriteString("Then choose one admissible action for this step and give it inside <action> </action>.")
	return b.String()
}

func quoteAll(xs []string) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = "'" + x + "'"
	}
	return out
}
