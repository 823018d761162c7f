package skills

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The analysis answer is read as the public SEED code reads it
// (seed/analysis.py, _extract_json_object): the bodies of ``` fences first,
// then the whole answer; each as written and with trailing commas before
// } or ] removed; in each, every '{' where a JSON object can be decoded
// (control characters inside strings allowed); where none can, every
// balanced {...} read as a Python literal (single quotes, True/False/None,
// trailing commas). Of all the objects found, the first with an
// "episode_skill" key wins, else the first.

var (
	fenceRe         = regexp.MustCompile("(?s)```(?:json|JSON)?\\s*(.*?)```")
	trailingCommaRe = regexp.MustCompile(`,\s*([}\]])`)
)

// decodeAnswer finds the answer's JSON object, or ErrNoJSON where the
// answer has no '{' at all, or an error naming why no object decoded.
func decodeAnswer(text string) (map[string]any, error) {
	var candidates []string
	for _, m := range fenceRe.FindAllStringSubmatch(text, -1) {
		if s := strings.TrimSpace(m[1]); s != "" {
			candidates = append(candidates, s)
		}
	}
	candidates = append(candidates, strings.TrimSpace(text))
	var objects []map[string]any
	var lastErr error
	sawBrace := false
	for _, c := range candidates {
		if strings.Contains(c, "{") {
			sawBrace = true
		}
		variants := []string{c}
		if fixed := trailingCommaRe.ReplaceAllString(c, "$1"); fixed != c {
			variants = append(variants, fixed)
		}
		for _, v := range variants {
			objs, err := decodeObjects(v)
			objects = append(objects, objs...)
			if err != nil {
				lastErr = err
			}
		}
	}
	for _, o := range objects {
		if _, ok := o["episode_skill"]; ok {
			return o, nil
		}
	}
	if len(objects) > 0 {
		return objects[0], nil
	}
	if !sawBrace {
		return nil, ErrNoJSON
	}
	if lastErr == nil {
		lastErr = errors.New("no object")
	}
	return nil, fmt.Errorf("could not parse a JSON object in the answer: %w", lastErr)
}

// decodeObjects decodes a JSON object at every '{' of text; where none
// decodes, it reads every balanced {...} as a Python literal.
func decodeObjects(text string) ([]map[string]any, error) {
	text = escapeControlInStrings(text)
	var objs []map[string]any
	var lastErr error
	for i := 0; i < len(text); i++ {
		if text[i] != '{' {
			continue
		}
		dec := json.NewDecoder(strings.NewReader(text[i:]))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			lastErr = err
			continue
		}
		if m, ok := v.(map[string]any); ok {
			objs = append(objs, m)
		}
	}
	if len(objs) > 0 {
		return objs, lastErr
	}
	for _, s := range balancedObjects(text) {
		v, err := parsePyLiteral(s)
		if err != nil {
			lastErr = err
			continue
		}
		if m, ok := v.(map[string]any); ok {
			objs = append(objs, m)
		}
	}
	return objs, lastErr
}

// escapeControlInStrings escapes raw control characters inside
// double-quoted strings (Python's json with strict=False accepts them;
// Go's decoder does not).
func escapeControlInStrings(s string) string {
	if !strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 }) {
		return s
	}
	var b strings.Builder
	in, esc := false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case esc:
			esc = false
		case in && c == '\\':
			esc = true
		case c == '"':
			in = !in
		case in && c < 0x20:
			fmt.Fprintf(&b, `\u%04x`, c)
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// balancedObjects lists the top-level balanced {...} slices of text,
// skipping braces inside single- or double-quoted strings.
func balancedObjects(text string) []string {
	var out []string
	start, depth := -1, 0
	var quote byte
	esc := false
	for i := 0; i < len(text); i++ {
		c := text[i]
		if esc {
			esc = false
			continue
		}
		if quote != 0 {
			if c == '\\' {
				esc = true
			} else if c == quote {
				quote = 0
			}
			continue
		}
		switch c {
		case '\'', '"':
			quote = c
		case '{':
			if depth == 0 {
				start = i
			}
			depth++
		case '}':
			if depth > 0 {
				depth--
				if depth == 0 && start >= 0 {
					out = append(out, text[start:i+1])
					start = -1
				}
			}
		}
	}
	return out
}

// pyParser reads the subset of Python literals an analysis answer uses:
// dicts, lists, tuples, strings (single, double or triple quoted,
// adjacent ones joined), numbers, True, False and None.
type pyParser struct {
	s   string
	pos int
}

func parsePyLiteral(s string) (any, error) {
	p := &pyParser{s: s}
	v, err := p.value()
	if err != nil {
		return nil, err
	}
	p.space()
	if p.pos != len(p.s) {
		return nil, fmt.Errorf("python literal: unexpected %q at %d", p.s[p.pos], p.pos)
	}
	return v, nil
}

func (p *pyParser) space() {
	for p.pos < len(p.s) && strings.IndexByte(" \t\r\n", p.s[p.pos]) >= 0 {
		p.pos++
	}
}

func (p *pyParser) errf(format string, a ...any) error {
	return fmt.Errorf("python literal at %d: %s", p.pos, fmt.Sprintf(format, a...))
}

func (p *pyParser) value() (any, error) {
	p.space()
	if p.pos >= len(p.s) {
		return nil, p.errf("unexpected end")
	}
	switch c := p.s[p.pos]; {
	case c == '{':
		return p.dict()
	case c == '[' || c == '(':
		return p.seq()
	case c == '\'' || c == '"':
		return p.strings()
	case c == '-' || c == '+' || c == '.' || c >= '0' && c <= '9':
		return p.number()
	default:
		for word, v := range map[string]any{"True": true, "False": false, "None": nil} {
			if strings.HasPrefix(p.s[p.pos:], word) {
				p.pos += len(word)
				return v, nil
			}
		}
		return nil, p.errf("unexpected %q", c)
	}
}

func (p *pyParser) dict() (any, error) {
	p.pos++ // {
	m := map[string]any{}
	for {
		p.space()
		if p.pos < len(p.s) && p.s[p.pos] == '}' {
			p.pos++
			return m, nil
		}
		k, err := p.value()
		if err != nil {
			return nil, err
		}
		p.space()
		if p.pos >= len(p.s) || p.s[p.pos] != ':' {
			return nil, p.errf("want ':' after a dict key")
		}
		p.pos++
		v, err := p.value()
		if err != nil {
			return nil, err
		}
		switch k := k.(type) {
		case string:
			m[k] = v
		case json.Number:
			m[k.String()] = v
		default:
			return nil, p.errf("dict key %v is not a string or number", k)
		}
		p.space()
		if p.pos < len(p.s) && p.s[p.pos] == ',' {
			p.pos++
			continue
		}
		if p.pos < len(p.s) && p.s[p.pos] == '}' {
			continue
		}
		return nil, p.errf("want ',' or '}' in a dict")
	}
}

func (p *pyParser) seq() (any, error) {
	closer := byte(']')
	if p.s[p.pos] == '(' {
		closer = ')'
	}
	p.pos++
	var out []any
	for {
		p.space()
		if p.pos < len(p.s) && p.s[p.pos] == closer {
			p.pos++
			return out, nil
		}
		v, err := p.value()
		if err != nil {
			return nil, err
		}
		out = append(out, v)
		p.space()
		if p.pos < len(p.s) && p.s[p.pos] == ',' {
			p.pos++
			continue
		}
		if p.pos < len(p.s) && p.s[p.pos] == closer {
			continue
		}
		return nil, p.errf("want ',' or %q", closer)
	}
}

// strings reads one or more adjacent string literals, joined.
func (p *pyParser) strings() (any, error) {
	var b strings.Builder
	for {
		s, err := p.str()
		if err != nil {
			return nil, err
		}
		b.WriteString(s)
		p.space()
		if p.pos >= len(p.s) || (p.s[p.pos] != '\'' && p.s[p.pos] != '"') {
			return b.String(), nil
		}
	}
}

func (p *pyParser) str() (string, error) {
	q := p.s[p.pos : p.pos+1]
	if strings.HasPrefix(p.s[p.pos:], q+q+q) {
		q = q + q + q
	}
	p.pos += len(q)
	var b strings.Builder
	for p.pos < len(p.s) {
		if strings.HasPrefix(p.s[p.pos:], q) {
			p.pos += len(q)
			return b.String(), nil
		}
		c := p.s[p.pos]
		if len(q) == 1 && c == '\n' {
			return "", p.errf("newline in a string")
		}
		if c != '\\' {
			r, n := utf8.DecodeRuneInString(p.s[p.pos:])
			b.WriteRune(r)
			p.pos += n
			continue
		}
		if p.pos+1 >= len(p.s) {
			break
		}
		e := p.s[p.pos+1]
		p.pos += 2
		switch e {
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		case 'r':
			b.WriteByte('\r')
		case '\\', '\'', '"':
			b.WriteByte(e)
		case '\n':
		case 'x', 'u', 'U':
			n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[e]
			if p.pos+n > len(p.s) {
				return "", p.errf("short \\%c escape", e)
			}
			v, err := strconv.ParseUint(p.s[p.pos:p.pos+n], 16, 32)
			if err != nil {
				return "", p.errf("bad \\%c escape", e)
			}
			b.WriteRune(rune(v))
			p.pos += n
		default: // Python keeps unknown escapes as written
			b.WriteByte('\\')
			b.WriteByte(e)
		}
	}
	return "", p.errf("unterminated string")
}

func (p *pyParser) number() (any, error) {
	start := p.pos
	if c := p.s[p.pos]; c == '-' || c == '+' {
		p.pos++
	}
	for p.pos < len(p.s) && strings.IndexByte("0123456789._eE+-", p.s[p.pos]) >= 0 {
		if c := p.s[p.pos]; (c == '+' || c == '-') && !(p.s[p.pos-1] == 'e' || p.s[p.pos-1] == 'E') {
			break
		}
		p.pos++
	}
	text := strings.ReplaceAll(p.s[start:p.pos], "_", "")
	text = strings.TrimPrefix(text, "+")
	if _, err := strconv.ParseFloat(text, 64); err != nil {
		return nil, p.errf("bad number %q", p.s[start:p.pos])
	}
	return json.Number(text), nil
}

// textOf is a decoded value as skill text: strings as they are, numbers
// and booleans as Python's str() writes them, null as no text, anything
// else as JSON.
func textOf(v any) string {
	switch v := v.(type) {
	case nil:
		return ""
	case string:
		return v
	case json.Number:
		return v.String()
	case bool:
		if v {
			return "True"
		}
		return "False"
	default:
		b, _ := json.Marshal(v)
		return string(b)
	}
}

var trivialSkillRe = regexp.MustCompile(`^[\s.。…,_-]+$`)

// nontrivial is the public code's test for a usable skill text: not
// empty, not only dots, commas, dashes or underscores, at least minWords
// words.
func nontrivial(s string, minWords int) bool {
	s = strings.TrimSpace(s)
	if s == "" || s == "..." || s == "…" || trivialSkillRe.MatchString(s) {
		return false
	}
	return len(strings.Fields(s)) >= minWords
}
