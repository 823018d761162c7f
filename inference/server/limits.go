package server

import (
	"fmt"
	"net/http"
	"strings"
)

// fieldLimit bounds one request field wherever it appears (matched by its
// key, at any depth): the elements of a list, the keys of an object, the
// bytes of a string or of the whole value.
type fieldLimit struct {
	items, keys, strBytes, valueBytes int
}

// Every list, object and string of a request body is bounded before it is
// decoded or any work is done: a field named here by its own limits, any
// other by defaultLimit. The prompt, input ids and messages keep their own
// checks (prompt counts, context length, maxMessages) and only the
// generous bounds below. A request past a limit gets 413 naming the field
// and the limit.
var (
	defaultLimit = fieldLimit{items: 4096, keys: 256, strBytes: 64 << 10}
	fieldLimits  = map[string]fieldLimit{
		// Token ids and text of prompts: bounded by the body (32 MiB), the
		// context and maxPrompts in parsePrompt; 2^21 ids is 16 contexts of
		// 131,072 tokens.
		"prompt":    {items: 1 << 21, keys: 256, strBytes: maxBodyBytes},
		"input_ids": {items: 1 << 21, keys: 256, strBytes: maxBodyBytes},
		"text":      {items: maxPromptsPerRequest, keys: 256, strBytes: maxBodyBytes},
		"messages":  {items: maxMessages, keys: 256, strBytes: maxBodyBytes},
		"content":   {items: maxMessages, keys: 256, strBytes: maxBodyBytes},
		// Stops are checked against every generated token: 64 strings of
		// at most 1 KiB keep that check's cost fixed.
		"stop":                 {items: 64, keys: 0, strBytes: 1 << 10},
		"stop_token_ids":       {items: 1024},
		"chat_template_kwargs": {items: 256, keys: 64, strBytes: 16 << 10, valueBytes: 64 << 10},
		"rid":                  {items: maxPromptsPerRequest, keys: 0, strBytes: 256},
		"logit_bias":           {keys: 1024, strBytes: 32},
		"model_path":           {strBytes: 4096},
		"lora_path":            {strBytes: 4096},
		"model":                {strBytes: 4096},
		"weight_version":       {strBytes: 256},
	}
)

// maxPromptsPerRequest matches the prompt count parsePrompt accepts.
const maxPromptsPerRequest = 4096

// maxDepth bounds the nesting of a body.
const maxDepth = 32

// checkFieldLimits scans a body (valid UTF-8; JSON validity is checked by
// the decoder after it) and refuses the first field past its limit. It
// allocates nothing per element and stops at the first violation.
func checkFieldLimits(b []byte) error {
	s := limitScanner{b: b}
	s.skipSpace()
	if err := s.value("", defaultLimit, 0); err != nil {
		return err
	}
	return nil
}

type limitScanner struct {
	b []byte
	i int
}

// tooBig is a 413 naming the field and its limit.
func tooBig(field, format string, args ...any) *badRequest {
	if field == "" {
		field = "(body)"
	}
	return &badRequest{status: http.StatusRequestEntityTooLarge, param: field, msg: fmt.Sprintf("field %s: ", field) + fmt.Sprintf(format, args...)}
}

func (s *limitScanner) skipSpace() {
	for s.i < len(s.b) && (s.b[s.i] == ' ' || s.b[s.i] == '\n' || s.b[s.i] == '\r' || s.b[s.i] == '\t') {
		s.i++
	}
}

// value scans one value of field (its limits lim) at nesting depth.
// Malformed JSON ends the scan without an error: the decoder reports it.
func (s *limitScanner) value(field string, lim fieldLimit, depth int) error {
	if depth > maxDepth {
		return tooBig(field, "nested deeper than its limit of %d levels", maxDepth)
	}
	if s.i >= len(s.b) {
		return nil
	}
	start := s.i
	var err error
	switch s.b[s.i] {
	case '"':
		n := s.str()
		if lim.strBytes > 0 && n > lim.strBytes {
			return tooBig(field, "a string of %d bytes, more than its limit of %d", n, lim.strBytes)
		}
	case '[':
		err = s.list(field, lim, depth)
	case '{':
		err = s.object(field, lim, depth)
	default:
		for s.i < len(s.b) && !strings.ContainsRune(",]} \n\r\t", rune(s.b[s.i])) {
			s.i++
		}
	}
	if err != nil {
		return err
	}
	if lim.valueBytes > 0 && s.i-start > lim.valueBytes {
		return tooBig(field, "%d bytes, more than its limit of %d", s.i-start, lim.valueBytes)
	}
	return nil
}

// str skips a string and returns its length in bytes (escapes counted
// as written).
func (s *limitScanner) str() int {
	start := s.i
	s.i++
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case '\\':
			s.i += 2
			continue
		case '"':
			s.i++
			return s.i - start - 2
		}
		s.i++
	}
	return s.i - start
}

func (s *limitScanner) list(field string, lim fieldLimit, depth int) error {
	s.i++ // [
	n, items := 0, lim.items
	if items == 0 {
		items = defaultLimit.items
	}
	for {
		s.skipSpace()
		if s.i >= len(s.b) {
			return nil
		}
		if s.b[s.i] == ']' {
			s.i++
			return nil
		}
		n++
		if n > items {
			return tooBig(field, "more than its limit of %d items", items)
		}
		// Elements of a list keep the list's limits (a list of strings).
		if err := s.value(field, lim, depth+1); err != nil {
			return err
		}
		s.skipSpace()
		if s.i < len(s.b) && s.b[s.i] == ',' {
			s.i++
		} else if s.i < len(s.b) && s.b[s.i] != ']' {
			return nil // malformed: the decoder says so
		}
	}
}

func (s *limitScanner) object(field string, lim fieldLimit, depth int) error {
	s.i++ // {
	n := 0
	keys := lim.keys
	if keys == 0 {
		keys = defaultLimit.keys
	}
	for {
		s.skipSpace()
		if s.i >= len(s.b) {
			return nil
		}
		if s.b[s.i] == '}' {
			s.i++
			return nil
		}
		if s.b[s.i] != '"' {
			return nil // malformed
		}
		ks := s.i + 1
		kn := s.str()
		if kn > defaultLimit.strBytes {
			return tooBig(field, "a key of %d bytes, more than its limit of %d", kn, defaultLimit.strBytes)
		}
		key := string(s.b[ks : ks+max(kn, 0)])
		n++
		if n > keys {
			return tooBig(field, "more than its limit of %d keys", keys)
		}
		s.skipSpace()
		if s.i >= len(s.b) || s.b[s.i] != ':' {
			return nil
		}
		s.i++
		s.skipSpace()
		name, child := key, defaultLimit
		if field != "" {
			name = field + "." + key
		}
		if l, ok := fieldLimits[key]; ok {
			child = l
		} else if _, inherit := fieldLimits[lastKey(field)]; inherit && lim.valueBytes > 0 {
			child = lim // inside a bounded object (chat_template_kwargs)
		}
		if err := s.value(name, child, depth+1); err != nil {
			return err
		}
		s.skipSpace()
		if s.i < len(s.b) && s.b[s.i] == ',' {
			s.i++
		} else if s.i < len(s.b) && s.b[s.i] != '}' {
			return nil
		}
	}
}

// lastKey is the last dotted part of a field path.
func lastKey(field string) string {
	if i := strings.LastIndexByte(field, '.'); i >= 0 {
		return field[i+1:]
	}
	return field
}
