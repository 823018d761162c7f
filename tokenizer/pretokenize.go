package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/dlclark/regexp2"
	"golang.org/x/text/unicode/norm"
)

// GPT-2's pre-tokenizer pattern, used by a ByteLevel pre-tokenizer with
// use_regex=true.
const gpt2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`

// QwenPattern is the pre-tokenizer regex of Qwen2, Qwen2.5 and Qwen3 (one
// digit per piece, letters with one leading non-letter). The BPE trainer uses
// it so tiny models split text the way the real ones do.
const QwenPattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

// EntityPattern is QwenPattern with one more piece first: a word, one
// space and a number ("cabinet 10", " apple 2") stay together, so that
// TrainConfig.Entities can make chosen numbered names single tokens. Tiny
// models then copy such a name from their context as one token instead of
// binding a word to separately tokenized digits, which they fail to learn
// in a few minutes of training.
const EntityPattern = `[^\r\n\p{L}\p{N}]?\p{L}+ \p{N}+|` + QwenPattern

// splitBehavior is what a Split pre-tokenizer does with the pattern's matches.
type splitBehavior string

const (
	splitIsolated   splitBehavior = "Isolated"
	splitRemoved    splitBehavior = "Removed"
	splitMergedPrev splitBehavior = "MergedWithPrevious"
	splitMergedNext splitBehavior = "MergedWithNext"
	splitContiguous splitBehavior = "Contiguous"
)

// preStep turns pieces into finer pieces.
type preStep interface {
	split(pieces []string) ([]string, error)
}

type regexSplit struct {
	re       *regexp2.Regexp
	behavior splitBehavior
	invert   bool
}

type span struct {
	text  string
	match bool
}

// spans cuts s into the pattern's matches and the gaps between them, in order.
func (r *regexSplit) spans(s string) ([]span, error) {
	runes := []rune(s)
	var out []span
	last := 0
	m, err := r.re.FindRunesMatch(runes)
	for ; m != nil && err == nil; m, err = r.re.FindNextMatch(m) {
		if m.Length == 0 {
			continue
		}
		if m.Index > last {
			out = append(out, span{string(runes[last:m.Index]), false})
		}
		out = append(out, span{string(runes[m.Index : m.Index+m.Length]), true})
		last = m.Index + m.Length
	}
	if err != nil {
		return nil, fmt.Errorf("pre-tokenizer regex on %q: %w", truncate(s, 40), err)
	}
	if last < len(runes) {
		out = append(out, span{string(runes[last:]), false})
	}
	return out, nil
}

func (r *regexSplit) split(pieces []string) ([]string, error) {
	var out []string
	for _, p := range pieces {
		sp, err := r.spans(p)
		if err != nil {
			return nil, err
		}
		if r.invert {
			for i := range sp {
				sp[i].match = !sp[i].match
			}
		}
		switch r.behavior {
		case splitIsolated:
			for _, s := range sp {
				out = append(out, s.text)
			}
		case splitRemoved:
			for _, s := range sp {
				if !s.match {
					out = append(out, s.text)
				}
			}
		case splitMergedPrev:
			var cur strings.Builder
			for _, s := range sp {
				cur.WriteString(s.text)
				if s.match {
					out = append(out, cur.String())
					cur.Reset()
				}
			}
			if cur.Len() > 0 {
				out = append(out, cur.String())
			}
		case splitMergedNext:
			var cur strings.Builder
			for _, s := range sp {
				if s.match && cur.Len() > 0 {
					out = append(out, cur.String())
					cur.Reset()
				}
				cur.WriteString(s.text)
			}
			if cur.Len() > 0 {
				out = append(out, cur.String())
			}
		case splitContiguous:
			var cur strings.Builder
			prev := false
			for i, s := range sp {
				if i > 0 && s.match != prev {
					out = append(out, cur.String())
					cur.Reset()
				}
				cur.WriteString(s.text)
				prev = s.match
			}
			if cur.Len() > 0 {
				out = append(out, cur.String())
			}
		}
	}
	return out, nil
}

// byteLevelPre is the ByteLevel pre-tokenizer: optional GPT-2 split and an
// optional leading space. The byte mapping itself happens before BPE.
type byteLevelPre struct {
	addPrefixSpace bool
	regex          *regexSplit
}

func (b *byteLevelPre) split(pieces []string) ([]string, error) {
	if b.addPrefixSpace && len(pieces) > 0 && !strings.HasPrefix(pieces[0], " ") {
		pieces = append([]string{" " + pieces[0]}, pieces[1:]...)
	}
	if b.regex == nil {
		return pieces, nil
	}
	return b.regex.split(pieces)
}

type preTokenizerJSON struct {
	Type           string             `json:"type"`
	Pretokenizers  []preTokenizerJSON `json:"pretokenizers"`
	Pattern        *patternJSON       `json:"pattern"`
	Behavior       string             `json:"behavior"`
	Invert         bool               `json:"invert"`
	AddPrefixSpace bool               `json:"add_prefix_space"`
	UseRegex       *bool              `json:"use_regex"`
}

type patternJSON struct {
	Regex  *string `json:"Regex,omitempty"`
	String *string `json:"String,omitempty"`
}

func compileSplit(p *patternJSON, behavior string, invert bool) (*regexSplit, error) {
	if p == nil || (p.Regex == nil && p.String == nil) {
		return nil, fmt.Errorf("Split needs pattern.Regex or pattern.String")
	}
	expr := ""
	if p.Regex != nil {
		expr = *p.Regex
	} else {
		expr = regexp2.Escape(*p.String)
	}
	re, err := regexp2.Compile(expr, regexp2.None)
	if err != nil {
		return nil, fmt.Errorf("compiling Split pattern %q: %w", expr, err)
	}
	b := splitBehavior(behavior)
	switch b {
	case splitIsolated, splitRemoved, splitMergedPrev, splitMergedNext, splitContiguous:
	default:
		return nil, fmt.Errorf("Split behavior %q is not supported (want Isolated, Removed, MergedWithPrevious, MergedWithNext or Contiguous)", behavior)
	}
	return &regexSplit{re: re, behavior: b, invert: invert}, nil
}

// parsePreTokenizer flattens a pre_tokenizer into steps and reports whether
// a ByteLevel step is among them.
func parsePreTokenizer(raw json.RawMessage) (steps []preStep, byteLevel bool, err error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, false, nil
	}
	var pj preTokenizerJSON
	if err := json.Unmarshal(raw, &pj); err != nil {
		return nil, false, fmt.Errorf("pre_tokenizer: %w", err)
	}
	var walk func(p preTokenizerJSON, path string) error
	walk = func(p preTokenizerJSON, path string) error {
		switch p.Type {
		case "Sequence":
			for i, c := range p.Pretokenizers {
				if err := walk(c, fmt.Sprintf("%s.pretokenizers[%d]", path, i)); err != nil {
					return err
				}
			}
		case "Split":
			s, err := compileSplit(p.Pattern, p.Behavior, p.Invert)
			if err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			steps = append(steps, s)
		case "ByteLevel":
			byteLevel = true
			b := &byteLevelPre{addPrefixSpace: p.AddPrefixSpace}
			if p.UseRegex == nil || *p.UseRegex {
				b.regex = &regexSplit{re: regexp2.MustCompile(gpt2Pattern, regexp2.None), behavior: splitIsolated}
			}
			steps = append(steps, b)
		default:
			return fmt.Errorf("%s.type %q is not supported (want Sequence, Split or ByteLevel)", path, p.Type)
		}
		return nil
	}
	if err := walk(pj, "pre_tokenizer"); err != nil {
		return nil, false, err
	}
	return steps, byteLevel, nil
}

type normalizerJSON struct {
	Type        string           `json:"type"`
	Normalizers []normalizerJSON `json:"normalizers"`
}

// parseNormalizer supports the normalizers byte-level BPE models ship:
// none, NFC (Qwen), NFKC, and sequences of them.
func parseNormalizer(raw json.RawMessage) (func(string) string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var nj normalizerJSON
	if err := json.Unmarshal(raw, &nj); err != nil {
		return nil, fmt.Errorf("normalizer: %w", err)
	}
	var build func(n normalizerJSON, path string) ([]func(string) string, error)
	build = func(n normalizerJSON, path string) ([]func(string) string, error) {
		switch n.Type {
		case "NFC":
			return []func(string) string{norm.NFC.String}, nil
		case "NFKC":
			return []func(string) string{norm.NFKC.String}, nil
		case "NFD":
			return []func(string) string{norm.NFD.String}, nil
		case "NFKD":
			return []func(string) string{norm.NFKD.String}, nil
		case "Sequence":
			var fs []func(string) string
			for i, c := range n.Normalizers {
				f, err := build(c, fmt.Sprintf("%s.normalizers[%d]", path, i))
				if err != nil {
					return nil, err
				}
				fs = append(fs, f...)
			}
			return fs, nil
		default:
			return nil, fmt.Errorf("%s.type %q is not supported (want NFC, NFKC, NFD, NFKD or Sequence)", path, n.Type)
		}
	}
	fs, err := build(nj, "normalizer")
	if err != nil || len(fs) == 0 {
		return nil, err
	}
	return func(s string) string {
		for _, f := range fs {
			s = f(s)
		}
		return s
	}, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
