// Package tokenizer reads Hugging Face byte-level BPE tokenizers (Qwen2,
// Qwen2.5, Qwen3, Llama 3 style tokenizer.json), encodes and decodes text
// exactly as the reference implementation does, renders chat templates from
// tokenizer_config.json, and trains small BPE vocabularies for tiny models.
package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
)

// ErrUnsupported marks a tokenizer.json feature this package does not implement.
var ErrUnsupported = errors.New("unsupported tokenizer feature")

// AddedToken is a token matched verbatim in the input before any other
// processing (special tokens such as <|im_start|>, and plain added ones).
type AddedToken struct {
	ID         int    `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

// Tokenizer is a loaded byte-level BPE tokenizer. It is safe for concurrent use.
type Tokenizer struct {
	vocab        map[string]int
	idToToken    []string // "" for ids no token has
	ranks        map[pair]int
	merges       []pair
	ignoreMerges bool
	added        []AddedToken
	addedByID    map[int]AddedToken
	addedByFirst map[byte][]AddedToken // candidates by first byte, longest first
	normalize    func(string) string
	pre          []preStep
	byteLevel    bool
	raw          fileJSON // what was loaded, for Save

	mu    sync.RWMutex
	cache map[string][]int

	maxBytesOnce sync.Once
	maxBytes     int
}

// MaxTokenBytes is the most bytes one token decodes to (the longest
// vocabulary entry or added token): a text of n bytes is at least
// n / MaxTokenBytes tokens (before normalisation), which lets a server
// refuse a text too long for its context without encoding it.
func (t *Tokenizer) MaxTokenBytes() int {
	t.maxBytesOnce.Do(func() {
		m := 1
		for id, tok := range t.idToToken {
			if a, ok := t.addedByID[id]; ok {
				m = max(m, len(a.Content))
				continue
			}
			if tok == "" {
				continue
			}
			if t.byteLevel {
				m = max(m, len(appendByteLevelDecoded(nil, tok)))
			} else {
				m = max(m, len(tok))
			}
		}
		for _, a := range t.added {
			m = max(m, len(a.Content))
		}
		t.maxBytes = m
	})
	return t.maxBytes
}

type pair struct{ a, b string }

const cacheLimit = 1 << 16

type modelJSON struct {
	Type                    string          `json:"type"`
	Dropout                 *float64        `json:"dropout"`
	UnkToken                *string         `json:"unk_token"`
	ContinuingSubwordPrefix *string         `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string         `json:"end_of_word_suffix"`
	FuseUnk                 bool            `json:"fuse_unk"`
	ByteFallback            bool            `json:"byte_fallback"`
	IgnoreMerges            bool            `json:"ignore_merges"`
	Vocab                   map[string]int  `json:"vocab"`
	Merges                  json.RawMessage `json:"merges"`
}

type fileJSON struct {
	Version       string          `json:"version"`
	Truncation    json.RawMessage `json:"truncation"`
	Padding       json.RawMessage `json:"padding"`
	AddedTokens   []AddedToken    `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Decoder       json.RawMessage `json:"decoder"`
	Model         modelJSON       `json:"model"`
}

// LoadFile reads a tokenizer.json.
func LoadFile(path string) (*Tokenizer, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("loading tokenizer: %w", err)
	}
	t, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("loading tokenizer %s: %w", path, err)
	}
	return t, nil
}

// Parse builds a tokenizer from the bytes of a tokenizer.json.
func Parse(b []byte) (*Tokenizer, error) {
	var f fileJSON
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("parsing tokenizer.json: %w", err)
	}
	m := f.Model
	if m.Type != "BPE" && !(m.Type == "" && m.Vocab != nil) {
		return nil, fmt.Errorf("model.type %q: only BPE is supported: %w", m.Type, ErrUnsupported)
	}
	if m.Dropout != nil && *m.Dropout > 0 {
		return nil, fmt.Errorf("model.dropout %v: BPE dropout is not supported: %w", *m.Dropout, ErrUnsupported)
	}
	if m.ByteFallback {
		return nil, fmt.Errorf("model.byte_fallback: sentencepiece-style byte fallback is not supported: %w", ErrUnsupported)
	}
	if (m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "") || (m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "") {
		return nil, fmt.Errorf("model: continuing_subword_prefix/end_of_word_suffix are not supported: %w", ErrUnsupported)
	}
	if len(m.Vocab) == 0 {
		return nil, errors.New("model.vocab is empty")
	}
	t := &Tokenizer{
		vocab:        m.Vocab,
		ranks:        map[pair]int{},
		ignoreMerges: m.IgnoreMerges,
		addedByID:    map[int]AddedToken{},
		addedByFirst: map[byte][]AddedToken{},
		cache:        map[string][]int{},
		raw:          f,
	}
	merges, err := parseMerges(m.Merges)
	if err != nil {
		return nil, err
	}
	t.merges = merges
	for i, p := range merges {
		if _, dup := t.ranks[p]; !dup {
			t.ranks[p] = i
		}
	}
	maxID := -1
	for _, id := range m.Vocab {
		if id < 0 {
			return nil, fmt.Errorf("model.vocab: negative id %d", id)
		}
		maxID = max(maxID, id)
	}
	for _, a := range f.AddedTokens {
		if a.Content == "" {
			return nil, fmt.Errorf("added_tokens: token %d has empty content", a.ID)
		}
		maxID = max(maxID, a.ID)
	}
	t.idToToken = make([]string, maxID+1)
	for tok, id := range m.Vocab {
		t.idToToken[id] = tok
	}
	for _, a := range f.AddedTokens {
		t.added = append(t.added, a)
		t.addedByID[a.ID] = a
		t.idToToken[a.ID] = a.Content
		t.addedByFirst[a.Content[0]] = append(t.addedByFirst[a.Content[0]], a)
	}
	for k := range t.addedByFirst {
		c := t.addedByFirst[k]
		sort.SliceStable(c, func(i, j int) bool { return len(c[i].Content) > len(c[j].Content) })
	}
	if t.normalize, err = parseNormalizer(f.Normalizer); err != nil {
		return nil, err
	}
	if t.pre, t.byteLevel, err = parsePreTokenizer(f.PreTokenizer); err != nil {
		return nil, err
	}
	if !t.byteLevel {
		return nil, fmt.Errorf("pre_tokenizer: no ByteLevel step; only byte-level BPE is supported: %w", ErrUnsupported)
	}
	if err := checkDecoder(f.Decoder); err != nil {
		return nil, err
	}
	return t, nil
}

func parseMerges(raw json.RawMessage) ([]pair, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	// Two layouts exist: ["a b", ...] (older) and [["a","b"], ...] (newer).
	var asPairs [][]string
	if err := json.Unmarshal(raw, &asPairs); err == nil {
		out := make([]pair, len(asPairs))
		for i, p := range asPairs {
			if len(p) != 2 {
				return nil, fmt.Errorf("model.merges[%d]: want 2 parts, got %d", i, len(p))
			}
			out[i] = pair{p[0], p[1]}
		}
		return out, nil
	}
	var asStrings []string
	if err := json.Unmarshal(raw, &asStrings); err != nil {
		return nil, fmt.Errorf("model.merges: want [\"a b\", ...] or [[\"a\",\"b\"], ...]: %w", err)
	}
	out := make([]pair, len(asStrings))
	for i, s := range asStrings {
		a, b, ok := strings.Cut(s, " ")
		if !ok || a == "" || b == "" {
			return nil, fmt.Errorf("model.merges[%d] %q: want two parts separated by one space", i, s)
		}
		out[i] = pair{a, b}
	}
	return out, nil
}

func checkDecoder(raw json.RawMessage) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var d struct {
		Type     string            `json:"type"`
		Decoders []json.RawMessage `json:"decoders"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		return fmt.Errorf("decoder: %w", err)
	}
	switch d.Type {
	case "ByteLevel":
		return nil
	case "Sequence":
		for _, c := range d.Decoders {
			if err := checkDecoder(c); err != nil {
				return err
			}
		}
		return nil
	default:
		return fmt.Errorf("decoder.type %q: only ByteLevel is supported: %w", d.Type, ErrUnsupported)
	}
}

// VocabSize is one more than the largest token id (vocabulary plus added tokens).
func (t *Tokenizer) VocabSize() int { return len(t.idToToken) }

// TokenID returns the id of a vocabulary or added token, given as its text
// (for added tokens) or byte-level form (for vocabulary tokens).
func (t *Tokenizer) TokenID(tok string) (int, bool) {
	for _, a := range t.added {
		if a.Content == tok {
			return a.ID, true
		}
	}
	id, ok := t.vocab[tok]
	return id, ok
}

// IsSpecial reports whether id is a special added token.
func (t *Tokenizer) IsSpecial(id int) bool {
	a, ok := t.addedByID[id]
	return ok && a.Special
}

// AddedTokens returns the added tokens in file order.
func (t *Tokenizer) AddedTokens() []AddedToken { return append([]AddedToken(nil), t.added...) }

// Encode turns text into token ids. Added tokens in the text (special ones
// included, as Hugging Face does by default) become their ids; everything
// else is normalized, pre-tokenized and BPE-merged. No BOS/EOS is added.
func (t *Tokenizer) Encode(text string) ([]int, error) {
	var ids []int
	for _, seg := range t.splitAdded(text) {
		if seg.added != nil {
			ids = append(ids, seg.added.ID)
			continue
		}
		s := seg.text
		if t.normalize != nil {
			s = t.normalize(s)
		}
		pieces := []string{s}
		for _, st := range t.pre {
			var err error
			if pieces, err = st.split(pieces); err != nil {
				return nil, err
			}
		}
		for _, p := range pieces {
			if p == "" {
				continue
			}
			pids, err := t.encodePiece(p)
			if err != nil {
				return nil, err
			}
			ids = append(ids, pids...)
		}
	}
	return ids, nil
}

type segment struct {
	text  string
	added *AddedToken
}

// splitAdded cuts text at added tokens, leftmost first and longest at each
// position, honouring lstrip/rstrip (which swallow neighbouring whitespace)
// and single_word (which needs word boundaries on both sides).
func (t *Tokenizer) splitAdded(text string) []segment {
	if len(t.added) == 0 {
		return []segment{{text: text}}
	}
	var out []segment
	start := 0 // start of the pending plain text
	for i := 0; i < len(text); {
		var hit *AddedToken
		for k, a := range t.addedByFirst[text[i]] {
			if strings.HasPrefix(text[i:], a.Content) && (!a.SingleWord || wordBoundaries(text, i, i+len(a.Content))) {
				hit = &t.addedByFirst[text[i]][k]
				break
			}
		}
		if hit == nil {
			_, w := utf8.DecodeRuneInString(text[i:])
			i += w
			continue
		}
		plainEnd, next := i, i+len(hit.Content)
		if hit.LStrip {
			plainEnd = len(strings.TrimRightFunc(text[start:i], unicode.IsSpace)) + start
		}
		if hit.RStrip {
			next = len(text) - len(strings.TrimLeftFunc(text[next:], unicode.IsSpace))
		}
		if plainEnd > start {
			out = append(out, segment{text: text[start:plainEnd]})
		}
		out = append(out, segment{added: hit})
		start, i = next, next
	}
	if start < len(text) {
		out = append(out, segment{text: text[start:]})
	}
	return out
}

func wordBoundaries(s string, from, to int) bool {
	isWord := func(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_' }
	if from > 0 {
		r, _ := utf8.DecodeLastRuneInString(s[:from])
		if isWord(r) {
			return false
		}
	}
	if to < len(s) {
		r, _ := utf8.DecodeRuneInString(s[to:])
		if isWord(r) {
			return false
		}
	}
	return true
}

// encodePiece BPE-encodes one pre-token.
func (t *Tokenizer) encodePiece(piece string) ([]int, error) {
	t.mu.RLock()
	ids, ok := t.cache[piece]
	t.mu.RUnlock()
	if ok {
		return ids, nil
	}
	word := byteLevelString(piece)
	var syms []string
	if id, ok := t.vocab[word]; ok && t.ignoreMerges {
		ids = []int{id}
	} else {
		syms = t.bpe(byteLevelSymbols(piece))
		ids = make([]int, len(syms))
		for i, s := range syms {
			id, ok := t.vocab[s]
			if !ok {
				return nil, fmt.Errorf("encoding %q: symbol %q is not in the vocabulary (the vocabulary lacks part of the byte alphabet)", truncate(piece, 40), s)
			}
			ids[i] = id
		}
	}
	t.mu.Lock()
	if len(t.cache) >= cacheLimit {
		clear(t.cache)
	}
	t.cache[piece] = ids
	t.mu.Unlock()
	return ids, nil
}

// bpe applies merges to symbols: repeatedly the pair with the lowest rank,
// leftmost first, until no ranked pair is left.
func (t *Tokenizer) bpe(syms []string) []string {
	for len(syms) > 1 {
		best, bestRank := -1, int(^uint(0)>>1)
		for i := 0; i+1 < len(syms); i++ {
			if r, ok := t.ranks[pair{syms[i], syms[i+1]}]; ok && r < bestRank {
				best, bestRank = i, r
			}
		}
		if best < 0 {
			break
		}
		a, b := syms[best], syms[best+1]
		merged := syms[:0:0]
		for i := 0; i < len(syms); i++ {
			if i+1 < len(syms) && syms[i] == a && syms[i+1] == b {
				merged = append(merged, a+b)
				i++
				continue
			}
			merged = append(merged, syms[i])
		}
		syms = merged
	}
	return syms
}

// DecodeOptions controls Decode.
type DecodeOptions struct {
	SkipSpecial bool // drop special added tokens, as skip_special_tokens=True
}

// Decode turns ids back into text. Invalid UTF-8 (a multi-byte character cut
// between tokens) becomes U+FFFD, as Hugging Face does.
func (t *Tokenizer) Decode(ids []int, opt DecodeOptions) (string, error) {
	b, err := t.DecodeBytes(ids, opt)
	if err != nil {
		return "", err
	}
	return strings.ToValidUTF8(string(b), "\uFFFD"), nil
}

// DecodeBytes is Decode without the UTF-8 repair, for streaming decoders that
// hold back an incomplete character.
func (t *Tokenizer) DecodeBytes(ids []int, opt DecodeOptions) ([]byte, error) {
	var out []byte
	for _, id := range ids {
		if id < 0 || id >= len(t.idToToken) || t.idToToken[id] == "" {
			return nil, fmt.Errorf("decoding: token id %d is outside the vocabulary (size %d)", id, len(t.idToToken))
		}
		if a, ok := t.addedByID[id]; ok {
			if !(a.Special && opt.SkipSpecial) {
				out = append(out, a.Content...)
			}
			continue
		}
		out = appendByteLevelDecoded(out, t.idToToken[id])
	}
	return out, nil
}

// Load reads tokenizer.json and, when present, tokenizer_config.json (special
// token names and the chat template) from a Hugging Face model folder.
func Load(dir string) (*Tokenizer, *Config, error) {
	t, err := LoadFile(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		return nil, nil, err
	}
	cfg := &Config{NamedTemplates: map[string]string{}}
	cfgPath := filepath.Join(dir, "tokenizer_config.json")
	if _, err := os.Stat(cfgPath); err == nil {
		if cfg, err = LoadConfig(cfgPath); err != nil {
			return nil, nil, err
		}
		if cfg.ChatTemplate != "" {
			cfg.ChatTemplateFile = "tokenizer_config.json"
		}
	}
	if err := readTemplateFiles(dir, cfg); err != nil {
		return nil, nil, err
	}
	return t, cfg, nil
}

// readTemplateFiles reads the chat templates transformers keeps beside
// tokenizer_config.json, which take precedence over its chat_template
// as they do in transformers: chat_template.jinja (transformers ≥ 4.47
// and 5 write the template there), else chat_template.json (a processor's
// {"chat_template": "…"}); and additional_chat_templates/NAME.jinja, the
// named ones.
func readTemplateFiles(dir string, cfg *Config) error {
	if b, err := os.ReadFile(filepath.Join(dir, "chat_template.jinja")); err == nil {
		cfg.ChatTemplate, cfg.ChatTemplateFile = string(b), "chat_template.jinja"
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("reading chat_template.jinja: %w", err)
	} else if b, err := os.ReadFile(filepath.Join(dir, "chat_template.json")); err == nil {
		var v struct {
			ChatTemplate *string `json:"chat_template"`
		}
		if err := json.Unmarshal(b, &v); err != nil || v.ChatTemplate == nil {
			return fmt.Errorf("chat_template.json: want {\"chat_template\": \"…\"} (%v)", err)
		}
		cfg.ChatTemplate, cfg.ChatTemplateFile = *v.ChatTemplate, "chat_template.json"
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("reading chat_template.json: %w", err)
	}
	extra := filepath.Join(dir, "additional_chat_templates")
	ents, err := os.ReadDir(extra)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading %s: %w", extra, err)
	}
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ".jinja")
		if !ok || e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(extra, e.Name()))
		if err != nil {
			return fmt.Errorf("reading %s: %w", e.Name(), err)
		}
		if cfg.NamedTemplates == nil {
			cfg.NamedTemplates = map[string]string{}
		}
		cfg.NamedTemplates[name] = string(b)
	}
	return nil
}
