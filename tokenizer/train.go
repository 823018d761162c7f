package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/dlclark/regexp2"

	"github.com/seedctl/seedctl/internal/atomicfile"
)

// TrainConfig configures TrainBPE.
type TrainConfig struct {
	// VocabSize is the size of the learned vocabulary: the 256 byte symbols
	// plus merges. Special tokens get ids after it.
	VocabSize int
	// MinFrequency: pairs seen fewer times are never merged.
	MinFrequency int
	// SpecialTokens become special added tokens, in order, after the vocabulary.
	SpecialTokens []string
	// Pattern is the pre-tokenizer regex; QwenPattern by default.
	Pattern string
	// Entities are "word number" names ("cabinet 4") that each become one
	// token, on top of VocabSize. Pieces of the form "word number" are
	// learned as the word and " number" apart, so no merge crosses the
	// space; each entity then gets one final merge of its two halves (with
	// and without a leading space). Other numbered names ("apple 1") stay
	// two tokens, the word shared with the text that names the type. Use
	// with EntityPattern, which keeps "word number" in one piece.
	Entities []string
}

// DefaultTrainConfig suits the tiny models: a few thousand tokens and the
// Qwen chat special tokens.
func DefaultTrainConfig() TrainConfig {
	return TrainConfig{
		VocabSize:     2048,
		MinFrequency:  2,
		SpecialTokens: []string{"<|endoftext|>", "<|im_start|>", "<|im_end|>"},
		Pattern:       QwenPattern,
	}
}

// Validate reports the first bad field.
func (c TrainConfig) Validate() error {
	if c.VocabSize < 256 {
		return fmt.Errorf("tokenizer train config: VocabSize %d must be at least 256 (the byte alphabet)", c.VocabSize)
	}
	if c.MinFrequency < 1 {
		return fmt.Errorf("tokenizer train config: MinFrequency %d must be at least 1", c.MinFrequency)
	}
	seen := map[string]bool{}
	for _, s := range c.SpecialTokens {
		if s == "" || seen[s] {
			return fmt.Errorf("tokenizer train config: special token %q is empty or repeated", s)
		}
		seen[s] = true
	}
	if c.Pattern != "" {
		if _, err := regexp2.Compile(c.Pattern, regexp2.None); err != nil {
			return fmt.Errorf("tokenizer train config: Pattern: %w", err)
		}
	}
	return nil
}

// ErrEmptyCorpus means there was no text to learn from.
var ErrEmptyCorpus = errors.New("empty training corpus")

// TrainBPE learns a byte-level BPE vocabulary from texts and returns the
// tokenizer, built from the tokenizer.json it writes (so what is returned is
// exactly what loads back). Training is deterministic: ties between equally
// frequent pairs go to the lexicographically smallest pair.
func TrainBPE(texts []string, cfg TrainConfig) (*Tokenizer, error) {
	if cfg.Pattern == "" {
		cfg.Pattern = QwenPattern
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	split, err := compileSplit(&patternJSON{Regex: &cfg.Pattern}, string(splitIsolated), false)
	if err != nil {
		return nil, err
	}

	// Word frequencies, with special tokens cut out so no merge spans them.
	counts := map[string]int{}
	numbers := map[string]bool{} // " number" halves of "word number" pieces
	for _, text := range texts {
		for _, part := range splitOnAny(text, cfg.SpecialTokens) {
			pieces, err := split.split([]string{part})
			if err != nil {
				return nil, err
			}
			for _, p := range pieces {
				if p == "" {
					continue
				}
				if len(cfg.Entities) > 0 {
					if m := entityPiece.FindStringSubmatch(p); m != nil {
						counts[byteLevelString(m[1])]++
						counts[byteLevelString(m[2])]++
						numbers[m[2]] = true
						continue
					}
				}
				counts[byteLevelString(p)]++
			}
		}
	}
	if len(counts) == 0 {
		return nil, ErrEmptyCorpus
	}

	symbols := make([]string, 0, cfg.VocabSize)
	symID := map[string]int{}
	for b := 0; b < 256; b++ {
		s := string(byteToRune[b])
		symID[s] = len(symbols)
		symbols = append(symbols, s)
	}

	type word struct {
		syms  []int
		count int
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	words := make([]word, len(keys))
	type pr struct{ a, b int }
	pairCount := map[pr]int{}
	where := map[pr]map[int]bool{}
	addPairs := func(wi int, sign int) {
		w := words[wi]
		for i := 0; i+1 < len(w.syms); i++ {
			p := pr{w.syms[i], w.syms[i+1]}
			pairCount[p] += sign * w.count
			if sign > 0 {
				if where[p] == nil {
					where[p] = map[int]bool{}
				}
				where[p][wi] = true
			}
		}
	}
	for i, k := range keys {
		syms := make([]int, 0, len(k))
		for _, r := range k {
			syms = append(syms, symID[string(r)])
		}
		words[i] = word{syms: syms, count: counts[k]}
		addPairs(i, +1)
	}

	var merges [][2]string
	for len(symbols) < cfg.VocabSize {
		best, bestN := pr{-1, -1}, 0
		for p, n := range pairCount {
			if n > bestN || (n == bestN && n > 0 && pairLess(symbols, p.a, p.b, best.a, best.b)) {
				best, bestN = p, n
			}
		}
		if bestN < cfg.MinFrequency || best.a < 0 {
			break
		}
		merged := symbols[best.a] + symbols[best.b]
		newID, exists := symID[merged]
		if !exists {
			newID = len(symbols)
			symID[merged] = newID
			symbols = append(symbols, merged)
		}
		merges = append(merges, [2]string{symbols[best.a], symbols[best.b]})
		affected := make([]int, 0, len(where[best]))
		for wi := range where[best] {
			affected = append(affected, wi)
		}
		sort.Ints(affected)
		for _, wi := range affected {
			addPairs(wi, -1)
			w := &words[wi]
			out := w.syms[:0:0]
			for i := 0; i < len(w.syms); i++ {
				if i+1 < len(w.syms) && w.syms[i] == best.a && w.syms[i+1] == best.b {
					out = append(out, newID)
					i++
					continue
				}
				out = append(out, w.syms[i])
			}
			w.syms = out
			addPairs(wi, +1)
		}
		delete(pairCount, best)
		delete(where, best)
		for p, n := range pairCount {
			if n <= 0 {
				delete(pairCount, p)
			}
		}
	}

	// Every " number" of a "word number" piece is one token, merged before
	// any entity: otherwise "cabinet 12" could become "cabinet 1" + "2".
	var nums []string
	for n := range numbers {
		nums = append(nums, n)
	}
	sort.Strings(nums)
	for _, n := range nums {
		rs := []rune(byteLevelString(n))
		cur := string(rs[0])
		for _, r := range rs[1:] {
			next := cur + string(r)
			if _, have := symID[next]; !have {
				symID[next] = len(symbols)
				symbols = append(symbols, next)
				merges = append(merges, [2]string{cur, string(r)})
			}
			cur = next
		}
	}
	for _, e := range sortedUnique(cfg.Entities) {
		m := entityPiece.FindStringSubmatch(" " + e)
		if m == nil {
			continue
		}
		word, num := strings.TrimPrefix(m[1], " "), m[2]
		for _, lead := range []string{"", " "} {
			a, b := byteLevelString(lead+word), byteLevelString(num)
			_, okA := symID[a]
			_, okB := symID[b]
			if _, have := symID[a+b]; !okA || !okB || have {
				continue
			}
			symID[a+b] = len(symbols)
			symbols = append(symbols, a+b)
			merges = append(merges, [2]string{a, b})
		}
	}

	vocab := make(map[string]int, len(symbols))
	for i, s := range symbols {
		vocab[s] = i
	}
	added := make([]AddedToken, len(cfg.SpecialTokens))
	for i, s := range cfg.SpecialTokens {
		added[i] = AddedToken{ID: len(symbols) + i, Content: s, Special: true}
	}
	mergesJSON, _ := json.Marshal(merges)
	f := fileJSON{
		Version:       "1.0",
		Truncation:    json.RawMessage("null"),
		Padding:       json.RawMessage("null"),
		AddedTokens:   added,
		Normalizer:    json.RawMessage(`{"type":"NFC"}`),
		PreTokenizer:  mustJSON(preTokenizerFor(cfg.Pattern)),
		PostProcessor: json.RawMessage(`{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":false,"use_regex":false}`),
		Decoder:       json.RawMessage(`{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":false,"use_regex":false}`),
		Model: modelJSON{
			Type: "BPE", Vocab: vocab, Merges: mergesJSON,
			ContinuingSubwordPrefix: ptr(""), EndOfWordSuffix: ptr(""),
		},
	}
	b, err := json.Marshal(f)
	if err != nil {
		return nil, fmt.Errorf("writing trained tokenizer.json: %w", err)
	}
	return Parse(b)
}

func pairLess(symbols []string, a1, b1, a2, b2 int) bool {
	if a2 < 0 {
		return true
	}
	if symbols[a1] != symbols[a2] {
		return symbols[a1] < symbols[a2]
	}
	return symbols[b1] < symbols[b2]
}

func preTokenizerFor(pattern string) map[string]any {
	return map[string]any{
		"type": "Sequence",
		"pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]string{"Regex": pattern}, "behavior": "Isolated", "invert": false},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
		},
	}
}

func splitOnAny(text string, seps []string) []string {
	parts := []string{text}
	for _, s := range seps {
		var next []string
		for _, p := range parts {
			next = append(next, strings.Split(p, s)...)
		}
		parts = next
	}
	return parts
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only called on literals built above
	}
	return b
}

func ptr[T any](v T) *T { return &v }

// MarshalJSON writes the tokenizer as a Hugging Face tokenizer.json.
func (t *Tokenizer) MarshalJSON() ([]byte, error) { return json.Marshal(t.raw) }

// WriteFile writes tokenizer.json atomically (temporary file, then rename).
func (t *Tokenizer) WriteFile(path string) error {
	b, err := json.MarshalIndent(t.raw, "", " ")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return writeFileAtomic(path, append(b, '\n'))
}

func writeFileAtomic(path string, data []byte) error {
	return atomicfile.WriteBytes(path, data)
}

// entityPiece is a "word number" piece: the word (with what leads it) and
// " number".
var entityPiece = regexp.MustCompile(`^([^\r\n\pL\pN]?\pL+)( \pN+)$`)

func sortedUnique(xs []string) []string {
	out := append([]string(nil), xs...)
	sort.Strings(out)
	return slices.Compact(out)
}
