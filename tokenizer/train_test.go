package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func trainingCorpus() []string {
	objs := []string{"mug", "apple", "egg", "spatula", "cellphone", "desklamp", "book"}
	recs := []string{"cabinet", "drawer", "countertop", "fridge", "microwave", "sinkbasin", "shelf"}
	var out []string
	for i := 0; i < 300; i++ {
		o, r := objs[i%len(objs)], recs[(i*3)%len(recs)]
		out = append(out,
			fmt.Sprintf("<|im_start|>user\nYou arrive at %s %d. On the %s %d, you see a %s %d.<|im_end|>\n", r, i%9+1, r, i%9+1, o, i%4+1),
			fmt.Sprintf("<|im_start|>assistant\n<action>take %s %d from %s %d</action><|im_end|>\n", o, i%4+1, r, i%9+1),
			fmt.Sprintf("Your task is to: put a clean %s in %s. Nothing happens.", o, r),
		)
	}
	return out
}

func TestTrainBPE(t *testing.T) {
	cfg := DefaultTrainConfig()
	cfg.VocabSize = 360
	tok, err := TrainBPE(trainingCorpus(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := tok.VocabSize(); got != 360+len(cfg.SpecialTokens) {
		t.Errorf("VocabSize = %d, want %d", got, 360+len(cfg.SpecialTokens))
	}
	text := "<|im_start|>user\nYou arrive at fridge 3. On the fridge 3, you see a egg 2.<|im_end|>\n"
	ids, err := tok.Encode(text)
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) >= len(text)/2 {
		t.Errorf("%d tokens for %d bytes: the merges compress too little", len(ids), len(text))
	}
	if back, _ := tok.Decode(ids, DecodeOptions{}); back != text {
		t.Errorf("round trip %q", back)
	}
	if id, ok := tok.TokenID("<|im_end|>"); !ok || id != 362 || !tok.IsSpecial(id) {
		t.Errorf("<|im_end|> id %d ok %v", id, ok)
	}
	// Text the corpus never saw still encodes, byte by byte if need be.
	if ids, err := tok.Encode("日本 🫠 Zebra"); err != nil || len(ids) == 0 {
		t.Errorf("unseen text: %v %v", ids, err)
	}
	// Deterministic: same corpus, same file.
	tok2, _ := TrainBPE(trainingCorpus(), cfg)
	a, _ := tok.MarshalJSON()
	b, _ := tok2.MarshalJSON()
	if !bytes.Equal(a, b) {
		t.Error("two trainings on the same corpus wrote different tokenizer.json files")
	}
}

func TestTrainConfigValidate(t *testing.T) {
	for _, mut := range []func(*TrainConfig){
		func(c *TrainConfig) { c.VocabSize = 100 },
		func(c *TrainConfig) { c.MinFrequency = 0 },
		func(c *TrainConfig) { c.SpecialTokens = []string{"<a>", "<a>"} },
		func(c *TrainConfig) { c.Pattern = "(" },
	} {
		c := DefaultTrainConfig()
		mut(&c)
		if _, err := TrainBPE([]string{"abc"}, c); err == nil {
			t.Errorf("config %+v accepted", c)
		}
	}
	if _, err := TrainBPE(nil, DefaultTrainConfig()); err != ErrEmptyCorpus {
		t.Errorf("empty corpus: err = %v", err)
	}
}

// TestSavedTokenizerAgreesWithTokenizersJS saves a trained tokenizer with
// its config and has Hugging Face's Tokenizers.js encode the same strings.
func TestSavedTokenizerAgreesWithTokenizersJS(t *testing.T) {
	mods, _ := filepath.Abs("../.build/npm/node_modules")
	if _, err := os.Stat(filepath.Join(mods, "@huggingface/tokenizers")); err != nil {
		t.Fatalf("@huggingface/tokenizers is missing (%v): run ./setup.sh", err)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is missing: run ./setup.sh")
	}
	cfg := DefaultTrainConfig()
	cfg.VocabSize = 380
	tok, err := TrainBPE(trainingCorpus(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := Save(dir, tok, &Config{EOSToken: "<|im_end|>", PadToken: "<|endoftext|>", ChatTemplate: Qwen25ChatTemplate}); err != nil {
		t.Fatal(err)
	}
	reloaded, cfgBack, err := Load(dir)
	if err != nil {
		t.Fatalf("loading what Save wrote: %v", err)
	}
	if cfgBack.ChatTemplate != Qwen25ChatTemplate || cfgBack.EOSToken != "<|im_end|>" {
		t.Errorf("config round trip: %+v", cfgBack)
	}
	texts := append(trainingCorpus()[:20], "unseen: 日本 🫠  spaces\n\n", "I'm DON'T 12345", "<|im_start|>x<|im_end|>")
	in, _ := json.Marshal(texts)
	cmd := exec.Command(node, "testdata/encode.mjs", mods, dir)
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("Tokenizers.js: %v: %s", err, stderr.String())
	}
	var want [][]int
	if err := json.Unmarshal(out, &want); err != nil {
		t.Fatalf("Tokenizers.js output %q: %v", out, err)
	}
	if len(want) != len(texts) {
		t.Fatalf("Tokenizers.js returned %d encodings for %d texts", len(want), len(texts))
	}
	for i, s := range texts {
		got, err := reloaded.Encode(s)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got) != fmt.Sprint(want[i]) {
			t.Errorf("Encode(%q)\n go %v\n js %v", s, got, want[i])
		}
	}
}

// TestTrainBPEEntities: listed numbered names are one token wherever they
// appear, other numbered names are their word plus " number", no merge
// crosses the space, and the tokenizer still round-trips and reloads.
func TestTrainBPEEntities(t *testing.T) {
	cfg := DefaultTrainConfig()
	cfg.VocabSize, cfg.Pattern = 400, EntityPattern
	for _, r := range []string{"cabinet", "drawer", "countertop", "fridge", "microwave", "sinkbasin", "shelf"} {
		for n := 1; n <= 9; n++ {
			cfg.Entities = append(cfg.Entities, fmt.Sprintf("%s %d", r, n))
		}
	}
	corpus := trainingCorpus()
	for i := 0; i < 20; i++ {
		corpus = append(corpus, "You arrive at cabinet 12. The cabinet 12 is closed.")
	}
	tok, err := TrainBPE(corpus, cfg)
	if err != nil {
		t.Fatal(err)
	}
	pieces := func(s string) []string {
		ids, err := tok.Encode(s)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, id := range ids {
			p, _ := tok.Decode([]int{id}, DecodeOptions{})
			out = append(out, p)
		}
		return out
	}
	cases := []struct {
		text string
		want []string
	}{
		{" cabinet 4", []string{" cabinet 4"}},
		{" fridge 3", []string{" fridge 3"}},
		{" apple 2", []string{" apple", " 2"}},
		{" spatula 3", []string{" spatula", " 3"}},
		// Not an entity: the word, then the number (never "cabinet 1" + "2").
		{" cabinet 12", []string{" cabinet", " 12"}},
	}
	for _, c := range cases {
		got := pieces(c.text)
		if !slices.Equal(got, c.want) {
			t.Errorf("%q → %q, want %q", c.text, got, c.want)
		}
		if strings.Join(got, "") != c.text {
			t.Errorf("%q decodes to %q", c.text, strings.Join(got, ""))
		}
	}
	if got := pieces("take apple 2 from cabinet 4"); !slices.Contains(got, " apple") || !slices.Contains(got, " cabinet 4") {
		t.Errorf("take apple 2 from cabinet 4 → %q", got)
	}
	dir := t.TempDir()
	if err := Save(dir, tok, &Config{EOSToken: "<|im_end|>"}); err != nil {
		t.Fatal(err)
	}
	again, _, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := tok.Encode("You arrive at cabinet 4. On the cabinet 4, you see a apple 2.")
	b, _ := again.Encode("You arrive at cabinet 4. On the cabinet 4, you see a apple 2.")
	if !slices.Equal(a, b) {
		t.Errorf("the saved tokenizer encodes differently: %v vs %v", a, b)
	}
}
