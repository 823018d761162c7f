package basemodel

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	"github.com/seedctl/seedctl/envadapters"
	"github.com/seedctl/seedctl/envadapters/household"
	"github.com/seedctl/seedctl/rollout"
	"github.com/seedctl/seedctl/tokenizer"
	"github.com/seedctl/seedctl/trainer"
)

// Accuracy is the share of held-out demonstrated steps whose greedy reply
// is exactly the expert's, with and without hints in context. It is the
// fast inner-loop measure of a base model (seconds, against minutes for
// rollouts), measured on training tasks after the corpus's own.
type Accuracy struct {
	Plain       float64 `json:"plain"`
	PlainSteps  int     `json:"plain_steps"`
	Hinted      float64 `json:"hinted"`
	HintedSteps int     `json:"hinted_steps"`
	// ByVerb counts [right, steps] per first word of the expert's action,
	// plain and hinted steps separately ("go", "hinted go", …).
	ByVerb map[string][2]int `json:"by_verb"`
	// Misses are a few wrong replies, for reading.
	Misses []string `json:"misses,omitempty"`
}

// HeldOut generates n demonstration episodes on the training tasks that
// follow the corpus of cfg (never eval tasks, never corpus tasks).
func HeldOut(ctx context.Context, b envadapters.Builtin, cfg CorpusConfig, n int) ([]Episode, error) {
	cfg.Offset, cfg.Episodes, cfg.AnalysisShare, cfg.Seed, cfg.Orders = cfg.Offset+cfg.Episodes, n, 0, cfg.Seed+1000, 1
	return GenerateCorpus(ctx, b, cfg, nil)
}

// MeasureAccuracy decodes greedily at every non-random step of eps in the
// window prompt format and compares with the demonstrated reply.
func MeasureAccuracy(m *trainer.Model, p *rollout.Policy, tmpl rollout.Template, eps []Episode, mode string, window int) (Accuracy, error) {
	if mode != rollout.ModeWindow {
		return Accuracy{}, fmt.Errorf("measuring accuracy: only window-mode models (got %q)", mode)
	}
	a := Accuracy{ByVerb: map[string][2]int{}}
	var plainOK, hintedOK int
	for i, e := range eps {
		users := e.userTexts(tmpl, mode, window)
		for k, s := range e.Steps {
			if s.Random {
				continue
			}
			prompt, err := p.StartIDs(e.System, users[k])
			if err != nil {
				return Accuracy{}, fmt.Errorf("measuring accuracy on episode %d step %d: %w", i, k, err)
			}
			want, err := p.Tok.Encode(s.Response)
			if err != nil {
				return Accuracy{}, err
			}
			want = append(want, p.EOS)
			got, err := m.Greedy(prompt, len(want), []int{p.EOS}, true)
			if err != nil {
				return Accuracy{}, fmt.Errorf("measuring accuracy on episode %d step %d: %w", i, k, err)
			}
			ok := len(got) == len(want)
			for j := 0; ok && j < len(want); j++ {
				ok = got[j] == want[j]
			}
			if !ok && (householdTurns(tmpl).Style == household.PlacesAll || householdTurns(tmpl).Few() > 0) && e.EpisodeHint == "" && strings.HasPrefix(s.Action, "go to ") {
				// The plain demonstrations pick among the listed places at
				// random: any of them is a right search step.
				text, _ := p.Tok.Decode(got, tokenizer.DecodeOptions{SkipSpecial: true})
				ok = goesToListedPlace(tmpl, text, users[k])
			}
			verb, _, _ := strings.Cut(s.Action, " ")
			if e.EpisodeHint != "" {
				verb = "hinted " + verb
			}
			c := a.ByVerb[verb]
			c[1]++
			if ok {
				c[0]++
			} else if len(a.Misses) < 400 {
				text, _ := p.Tok.Decode(got, tokenizer.DecodeOptions{})
				a.Misses = append(a.Misses, fmt.Sprintf("%s step %d: want %q, got %q", e.Task.ID, k, s.Response, text))
			}
			a.ByVerb[verb] = c
			if e.EpisodeHint != "" {
				a.HintedSteps++
				if ok {
					hintedOK++
				}
			} else {
				a.PlainSteps++
				if ok {
					plainOK++
				}
			}
		}
	}
	if a.PlainSteps > 0 {
		a.Plain = float64(plainOK) / float64(a.PlainSteps)
	}
	if a.HintedSteps > 0 {
		a.Hinted = float64(hintedOK) / float64(a.HintedSteps)
	}
	return a, nil
}

// MeasureModel loads a bootstrapped model and measures its held-out step
// accuracy on n episodes of its recipe's corpus distribution.
func MeasureModel(ctx context.Context, dir string, n int) (Accuracy, error) {
	r, ok := ReadRecipe(dir)
	if !ok {
		return Accuracy{}, fmt.Errorf("measuring %s: no recipe.json (not a bootstrapped base model)", dir)
	}
	b, err := envadapters.Lookup(r.Env)
	if err != nil {
		return Accuracy{}, err
	}
	held, err := HeldOut(ctx, b, r.Corpus, n)
	if err != nil {
		return Accuracy{}, err
	}
	m, err := trainer.LoadCheckpoint(dir, trainer.ModelOptions{})
	if err != nil {
		return Accuracy{}, err
	}
	defer m.Close()
	p, err := rollout.LoadPolicy(dir, nil)
	if err != nil {
		return Accuracy{}, err
	}
	tmpl, err := r.Template()
	if err != nil {
		return Accuracy{}, fmt.Errorf("measuring %s: %w", dir, err)
	}
	return MeasureAccuracy(m, p, tmpl, held, r.Mode, r.Window)
}

// andMore is the count a short places line ends with.
var andMore = regexp.MustCompile(` and \d+ more$`)

// goesToListedPlace says whether reply's action goes to a place the turn's
// places-not-searched line names.
func goesToListedPlace(tmpl rollout.Template, reply, turn string) bool {
	a, ok := tmpl.Extract(reply, nil)
	if !ok {
		return false
	}
	place, ok := strings.CutPrefix(a, "go to ")
	if !ok {
		return false
	}
	_, line, found := strings.Cut(turn, "Places not searched yet: ")
	if !found {
		return false
	}
	line, _, _ = strings.Cut(line, "\n")
	line = andMore.ReplaceAllString(strings.TrimSuffix(line, "."), "")
	for _, p := range strings.Split(line, ", ") {
		if p == place {
			return true
		}
	}
	return false
}
