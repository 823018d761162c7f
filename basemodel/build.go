package basemodel

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/seedctl/seedctl/envadapters"
	"github.com/seedctl/seedctl/envadapters/agentgym"
	"github.com/seedctl/seedctl/internal/ckpthash"
	"github.com/seedctl/seedctl/rollout"
	"github.com/seedctl/seedctl/tokenizer"
	"github.com/seedctl/seedctl/trainer"
)

// RecipeVersion changes whenever the way base models are built changes, so
// cached models from older recipes are rebuilt.
const RecipeVersion = 12

// Recipe is everything that determines a base model.
type Recipe struct {
	Version int          `json:"version"`
	Env     string       `json:"env"`
	Size    string       `json:"size"`
	Corpus  CorpusConfig `json:"corpus"`
	// Mode and Window are the prompt format the model is trained for; rollouts
	// with this model must use the same.
	Mode      string            `json:"prompt_mode"`
	Window    int               `json:"window"`
	VocabSize int               `json:"vocab_size"`
	Hidden    int               `json:"hidden"`
	Layers    int               `json:"layers"`
	Heads     int               `json:"heads"`
	KVHeads   int               `json:"kv_heads"`
	Inter     int               `json:"intermediate"`
	SFT       trainer.SFTConfig `json:"sft"`
	// PromptLoss trains on every token, not only the responses.
	PromptLoss bool `json:"prompt_loss,omitempty"`
	// EntityTokens makes every place the corpus's first observations name
	// ("cabinet 4") one token, and numbers with their leading space (" 4")
	// tokens of their own (tokenizer.EntityPattern and Entities): a place is
	// copied from context as one token, an object ("apple 1") as the word
	// its task names plus its number.
	EntityTokens bool `json:"entity_tokens,omitempty"`
	// RareRepeat repeats window-mode examples of rare decisions (take,
	// move, heat, cool, clean, use) this many times.
	RareRepeat int `json:"rare_repeat,omitempty"`
	// RepeatAsWeight trains each repeated example once with its repeat
	// count as loss weight instead of repeating it (trainer.SFTExample
	// Weight): the same emphasis for the compute of one copy.
	RepeatAsWeight bool   `json:"repeat_as_weight,omitempty"`
	Seed           uint64 `json:"seed"`
	// DAgger refines the pre-trained model on its own states (zero: no
	// refinement, and no change to older recipes' cache keys).
	DAgger DAggerConfig `json:"dagger,omitzero"`
	// HeldOutEpisodes is how many held-out demonstrations the build is
	// measured on (0: 40; negative: none). It does not change the model,
	// so it is not part of the cache key.
	HeldOutEpisodes int `json:"-"`
	// Source, when set, is the environment the corpus is played in, in
	// place of the built-in named Env (agentgym.TextCraftSource: a running
	// TextCraft server).
	Source envadapters.Builtin `json:"-"`
	// SourceInfo says what Source is (the server, its splits, the expert's
	// data), kept in recipe.json and the recipe's key.
	SourceInfo string `json:"source,omitempty"`
}

// DefaultRecipe is the measured default for env and size ("tiny" or "small").
func DefaultRecipe(env, size string) (Recipe, error) {
	// Window mode: chat-mode sequences of whole episodes (~1,600 tokens)
	// made pre-training ~6x slower per step on 2 cores (attention over long
	// contexts); see the README's base-model section for what was measured.
	// Seed 3: the committed base (basemodel/committed) is this recipe's
	// build. Builds of one recipe differ by seed and by CPU (each CPU's
	// kernels round differently over ~2,000 steps); on one machine, seeds
	// 1–4 at five epochs gave 8.5–17.0% plain eval-seen success and oracle
	// gains from −0.5 to +56.5 points, seed 3 at seven epochs 22.0% and
	// +50.0 (docs/experiments.md, "The committed base").
	r := Recipe{Version: RecipeVersion, Env: env, Size: size, Seed: 3, Mode: rollout.ModeWindow, Window: 3,
		Corpus:     CorpusConfig{Episodes: 400, Noise: 0.1, HintShare: 0.65, StepHintShare: 0.3, Seed: 3, MaxSteps: 30, AnalysisShare: 0.25},
		PromptLoss: true, EntityTokens: true, RareRepeat: 2}
	// Small batches (more optimizer steps for the same compute) and the
	// loss on every token measured better than 8k-token batches on actions
	// only (README, "Tiny base policies").
	// Epochs: with the next-place line (recipe v11) 3.5 epochs gave 10.5%
	// plain success on eval_seen and 5 gave 18.0% (docs/experiments.md).
	sft := trainer.DefaultSFTConfig()
	// Seven epochs since the committed base: with seed 3, five gave 14.5%
	// plain eval-seen success and seven 22.0%.
	sft.Epochs, sft.BatchTokens, sft.MaxLen, sft.LR, sft.WarmupFrac = 7, 4096, 4096, 4e-3, 0.05
	// Recipe v12: each 4,096-token step runs as micro-batches of at most
	// 2,048 padded tokens of similar length — the same steps as v11's one
	// padded batch, 1.3x faster (go test ./trainer -bench MicroBatch; a
	// build in 9m36s against 13m). On one machine the embedded default's
	// RL gained +5.5 (SEED) and +8 (GRPO) on it, -0.5 and +2.5 on that
	// machine's v11 build (README, "Tiny base policies").
	sft.MicroBatchTokens = 2048
	r.SFT = sft
	switch size {
	case "tiny":
		r.VocabSize, r.Hidden, r.Layers, r.Heads, r.KVHeads, r.Inter = 2048, 128, 4, 4, 2, 384
	case "small":
		r.VocabSize, r.Hidden, r.Layers, r.Heads, r.KVHeads, r.Inter = 3072, 192, 6, 6, 2, 512
		r.Corpus.Episodes = 800
	default:
		return Recipe{}, fmt.Errorf("base model size %q: want tiny or small", size)
	}
	if env == agentgym.TextCraft {
		// The environment is a server the caller names (Recipe.Source).
		// TextCraft's items are not the household's places: no entity
		// tokens. 30 steps hold every plan but two of the 544.
		r.EntityTokens = false
		return r, nil
	}
	if _, err := envadapters.Lookup(env); err != nil {
		return Recipe{}, err
	}
	// No refinement on the model's own states by default (DAggerConfig):
	// on recipes v9 and v11 it raised success with oracle hints (25.0% →
	// 38.0%, 23.5% → 37.5%) but not plain success (7.0% → 7.0%, 10.5% →
	// 9.0%), and v11 with five epochs already gains 32 points from hints.
	if env == "webshop" {
		r.Corpus.MaxSteps = 15
	}
	if env == "searchqa" {
		r.Corpus.MaxSteps = 6
	}
	return r, nil
}

// heldOutEpisodes is how many demonstrations a build is measured on.
const heldOutEpisodes = 40

// BuildReport is what a build measured, saved as build.json next to the
// weights.
type BuildReport struct {
	Episodes     int      `json:"episodes"`
	ExpertWon    int      `json:"expert_won"`
	Examples     int      `json:"examples"`
	Tokens       int      `json:"tokens"`
	FinalLoss    float64  `json:"final_loss"`
	TrainSeconds float64  `json:"train_seconds"`
	Seconds      float64  `json:"seconds"`
	HeldOut      Accuracy `json:"held_out_accuracy"`
	// DAgger has one entry per refinement round.
	DAgger []DAggerRound `json:"dagger,omitempty"`
}

// Template is the prompt template the recipe's model is trained for (the
// environment's, with the corpus's places line).
func (r Recipe) Template() (rollout.Template, error) {
	return rollout.TemplateFor(r.Env).WithPlacesLine(r.Corpus.PlacesLine)
}

// Key names a recipe's cache folder.
func (r Recipe) Key() string {
	b, _ := json.Marshal(r)
	h := sha256.Sum256(b)
	return fmt.Sprintf("%s-%s-v%d-%s", r.Env, r.Size, r.Version, hex.EncodeToString(h[:6]))
}

// CacheDir is $XDG_CACHE_HOME/seedctl/base-models (or ~/.cache/...).
func CacheDir() (string, error) {
	base := os.Getenv("XDG_CACHE_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("finding the cache directory: %w", err)
		}
		base = filepath.Join(home, ".cache")
	}
	return filepath.Join(base, "seedctl", "base-models"), nil
}

// Progress reports a stage and its advance.
type Progress func(stage string, done, total int, detail string)

// Ensure returns the cached model for r, building it when missing. The
// folder holds recipe.json; a folder without it (an interrupted build) is
// rebuilt.
func Ensure(ctx context.Context, r Recipe, dir string, log zerolog.Logger, progress Progress) (string, bool, error) {
	if dir == "" {
		base, err := CacheDir()
		if err != nil {
			return "", false, err
		}
		dir = filepath.Join(base, r.Key())
	}
	if cached(dir, r) {
		return dir, false, nil
	}
	// A refined recipe whose base is cached refines that base instead of
	// pre-training again (the same weights: TestRefineMatchesBuildWithDAgger).
	if r.DAgger.Rounds > 0 {
		base := r
		base.DAgger = DAggerConfig{}
		if root, err := CacheDir(); err == nil && cached(filepath.Join(root, base.Key()), base) {
			log.Info().Str("base", base.Key()).Msg("refining the cached base model")
			if err := Refine(ctx, filepath.Join(root, base.Key()), dir, r.DAgger, log, progress); err != nil {
				return "", false, err
			}
			return dir, true, nil
		}
	}
	if err := Build(ctx, r, dir, log, progress); err != nil {
		return "", false, err
	}
	return dir, true, nil
}

// cached reports whether dir holds a finished build of r.
func cached(dir string, r Recipe) bool {
	b, err := os.ReadFile(filepath.Join(dir, "recipe.json"))
	if err != nil {
		return false
	}
	var have Recipe
	return json.Unmarshal(b, &have) == nil && have.Key() == r.Key()
}

// Build generates the corpus, trains the tokenizer, pre-trains the model,
// refines it on its own states when the recipe says so (DAggerConfig) and
// saves the checkpoint (with recipe.json) atomically into out.
func Build(ctx context.Context, r Recipe, out string, log zerolog.Logger, progress Progress) error {
	if progress == nil {
		progress = func(string, int, int, string) {}
	}
	start := time.Now()
	pc, err := prepare(ctx, r, nil, nil, log, progress)
	if err != nil {
		return err
	}
	eos, _ := pc.tok.TokenID("<|im_end|>")
	bos, _ := pc.tok.TokenID("<|endoftext|>")
	cfg := &trainer.ModelConfig{
		Architectures: []string{"Qwen2ForCausalLM"}, ModelType: "qwen2", VocabSize: pc.tok.VocabSize(),
		HiddenSize: r.Hidden, IntermediateSize: r.Inter, NumHiddenLayers: r.Layers, NumAttentionHeads: r.Heads,
		NumKeyValueHeads: r.KVHeads, MaxPositionEmbeddings: 8192, RMSNormEps: 1e-6, RopeTheta: 1e6, HiddenAct: "silu",
		InitializerRange: 0.02, TieWordEmbeddings: true, BOSTokenID: &bos, EOSTokenID: float64(eos),
	}
	m, err := trainer.InitRandom(cfg, trainer.ModelOptions{}, r.Seed)
	if err != nil {
		return err
	}
	defer m.Close()
	trainStart := time.Now()
	lastLoss := 0.0
	err = trainer.TrainSFT(ctx, m, pc.examples, r.SFT, func(p trainer.SFTProgress) {
		lastLoss = p.Loss
		rate := float64(p.Tokens) / p.Elapsed.Seconds()
		progress("pretrain", p.Step, p.Steps, fmt.Sprintf("loss %.3f, %.0f trained tokens/s", p.Loss, rate))
	})
	if err != nil {
		return fmt.Errorf("pre-training the %s base model: %w", r.Env, err)
	}
	log.Info().Dur("took", time.Since(trainStart)).Msg("pre-training done")
	report := BuildReport{Episodes: len(pc.eps), ExpertWon: pc.won, Examples: len(pc.examples), Tokens: pc.tokens, FinalLoss: lastLoss,
		TrainSeconds: time.Since(trainStart).Seconds()}
	if r.DAgger.Rounds > 0 {
		t := time.Now()
		if report.DAgger, err = refine(ctx, r, m, pc, log, progress); err != nil {
			return err
		}
		report.TrainSeconds += time.Since(t).Seconds()
	}
	return finish(ctx, r, m, pc, report, start, out, log, progress)
}

// prepared is a recipe's corpus, tokenizer and encoded examples.
type prepared struct {
	b        envadapters.Builtin
	eps      []Episode
	won      int
	tok      *tokenizer.Tokenizer
	tcfg     *tokenizer.Config
	policy   *rollout.Policy
	tmpl     rollout.Template
	examples []trainer.SFTExample
	tokens   int
}

// prepare generates r's corpus and encodes it, training the tokenizer
// unless one is given (a refined model keeps its base's).
func prepare(ctx context.Context, r Recipe, tok *tokenizer.Tokenizer, tcfg *tokenizer.Config, log zerolog.Logger, progress Progress) (*prepared, error) {
	b := r.Source
	if b == nil {
		var err error
		if b, err = envadapters.Lookup(r.Env); err != nil {
			return nil, err
		}
	}
	start := time.Now()
	tmpl, err := r.Template()
	if err != nil {
		return nil, fmt.Errorf("base model recipe: %w", err)
	}
	pc := &prepared{b: b, tmpl: tmpl}
	pc.eps, err = GenerateCorpus(ctx, b, r.Corpus, func(d, t int) { progress("corpus", d, t, "") })
	if err != nil {
		return nil, fmt.Errorf("building the %s base model: %w", r.Env, err)
	}
	for _, e := range pc.eps {
		if e.Won {
			pc.won++
		}
	}
	log.Info().Int("episodes", len(pc.eps)).Int("won", pc.won).Dur("took", time.Since(start)).Msg("corpus generated")

	if tok == nil {
		progress("tokenizer", 0, 1, "")
		tc := tokenizer.DefaultTrainConfig()
		tc.VocabSize = r.VocabSize
		if r.EntityTokens {
			tc.Pattern, tc.Entities = tokenizer.EntityPattern, Places(pc.eps)
		}
		texts := append(Texts(pc.eps), tokenizer.Qwen25ChatTemplate)
		// The prompt format's own words (window headers, the action request).
		for _, e := range pc.eps[:min(len(pc.eps), 50)] {
			texts = append(texts, e.userTexts(pc.tmpl, r.Mode, r.Window)...)
		}
		if tok, err = tokenizer.TrainBPE(texts, tc); err != nil {
			return nil, fmt.Errorf("training the tokenizer: %w", err)
		}
		tcfg = &tokenizer.Config{EOSToken: "<|im_end|>", PadToken: "<|endoftext|>", ChatTemplate: tokenizer.Qwen25ChatTemplate}
		progress("tokenizer", 1, 1, fmt.Sprintf("%d tokens", tok.VocabSize()))
	}
	pc.tok, pc.tcfg = tok, tcfg
	if pc.policy, err = rollout.NewPolicy(nil, tok, tcfg); err != nil {
		return nil, err
	}
	examples, tokens, err := EncodeRepeated(pc.eps, pc.policy, pc.tmpl, r.Mode, r.Window, max(1, r.RareRepeat), r.RepeatAsWeight)
	if err != nil {
		return nil, err
	}
	pc.examples, pc.tokens = fitting(examples, r.SFT.MaxLen, log), tokens
	log.Info().Int("examples", len(pc.examples)).Int("tokens", tokens).Msg("corpus encoded")
	if r.PromptLoss {
		// Language-model loss on every token: predicting the observations
		// (which repeat entity names and numbers from the prompt) is copying
		// practice that the action tokens alone give too little of.
		for _, ex := range pc.examples {
			for k := 1; k < len(ex.Loss); k++ {
				ex.Loss[k] = true
			}
		}
	}
	return pc, nil
}

// fitting keeps the examples no longer than maxLen.
func fitting(examples []trainer.SFTExample, maxLen int, log zerolog.Logger) []trainer.SFTExample {
	kept := examples[:0]
	for _, ex := range examples {
		if len(ex.IDs) <= maxLen {
			kept = append(kept, ex)
		}
	}
	if dropped := len(examples) - len(kept); dropped > 0 {
		log.Warn().Int("dropped", dropped).Int("max_len", maxLen).Msg("corpus examples longer than max_len left out")
	}
	return kept
}

// finish measures the held-out accuracy and saves the model with its
// tokenizer, recipe.json and build.json.
func finish(ctx context.Context, r Recipe, m *trainer.Model, pc *prepared, report BuildReport, start time.Time, out string, log zerolog.Logger, progress Progress) error {
	if n := cmp.Or(r.HeldOutEpisodes, heldOutEpisodes); r.Mode == rollout.ModeWindow && n > 0 {
		progress("held-out accuracy", 0, 1, "")
		held, err := HeldOut(ctx, pc.b, r.Corpus, n)
		if err != nil {
			return fmt.Errorf("held-out demonstrations: %w", err)
		}
		if report.HeldOut, err = MeasureAccuracy(m, pc.policy, pc.tmpl, held, r.Mode, r.Window); err != nil {
			return err
		}
		report.HeldOut.Misses = report.HeldOut.Misses[:min(len(report.HeldOut.Misses), 20)] // a sample to read, not every miss
		progress("held-out accuracy", 1, 1, fmt.Sprintf("plain %.1f%% of %d steps, hinted %.1f%% of %d", 100*report.HeldOut.Plain, report.HeldOut.PlainSteps, 100*report.HeldOut.Hinted, report.HeldOut.HintedSteps))
		log.Info().Float64("plain", report.HeldOut.Plain).Float64("hinted", report.HeldOut.Hinted).Msg("held-out step accuracy (greedy reply = expert's)")
	}
	report.Seconds = time.Since(start).Seconds()
	rb, _ := json.MarshalIndent(r, "", "  ")
	bb, _ := json.MarshalIndent(report, "", "  ")
	return m.Save(out, trainer.SaveOptions{WriteExtra: func(tmp string) error {
		if err := tokenizer.Save(tmp, pc.tok, pc.tcfg); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(tmp, "build.json"), append(bb, '\n'), 0o644); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(tmp, "recipe.json"), append(rb, '\n'), 0o644)
	}})
}

// Encode turns episodes into training sequences exactly as rollouts
// prompt. Chat mode: one sequence per episode (first prompt, then each
// response closed by EOS — trained on — and the tokens opening the next
// turn). Window mode: one sequence per step (its window prompt, then the
// response and EOS, trained on).
func Encode(eps []Episode, p *rollout.Policy, tmpl rollout.Template, mode string, window int) ([]trainer.SFTExample, int, error) {
	return EncodeRepeated(eps, p, tmpl, mode, window, 1, false)
}

// rareVerb reports whether an action is one of the rare decisions of an
// episode (taking, treating, placing, using), as opposed to the searching
// moves (go to, open) that make up most steps.
func rareVerb(action string) bool {
	verb, _, _ := strings.Cut(action, " ")
	switch verb {
	case "take", "move", "heat", "cool", "clean", "use":
		return true
	}
	return strings.HasPrefix(action, "click[buy") || strings.HasPrefix(action, "<answer>")
}

// hintFirstRepeat is how often the first step of a hinted episode is
// repeated when rare decisions are (EncodeRepeated with rare > 1): it is
// the one step whose right action only the hint tells, and the base model
// must learn to use hints for SEED's teacher contexts to carry a signal.
const hintFirstRepeat = 4

// EncodeRepeated is Encode with window-mode examples of rare decisions
// (rareVerb) repeated `rare` times: one take and one placement per episode
// against a dozen searching moves left a tiny model that never took
// anything (0% held-out accuracy on take/move/heat/cool/clean/use). With
// asWeight each such example appears once, weighing as many copies. The
// count returned is of the examples' tokens.
func EncodeRepeated(eps []Episode, p *rollout.Policy, tmpl rollout.Template, mode string, window, rare int, asWeight bool) ([]trainer.SFTExample, int, error) {
	hintFirstRepeat := hintFirstRepeat
	if rare <= 1 {
		hintFirstRepeat = 1
	}
	var out []trainer.SFTExample
	total := 0
	add := func(ids []int, loss []bool) bool {
		if len(ids) < 2 {
			return false
		}
		out = append(out, trainer.SFTExample{IDs: ids, Loss: loss})
		total += len(ids)
		return true
	}
	for i, e := range eps {
		users := e.userTexts(tmpl, mode, window)
		var ids []int
		var loss []bool
		for k, s := range e.Steps {
			var prompt []int
			var err error
			if k == 0 || mode == rollout.ModeWindow {
				prompt, err = p.StartIDs(e.System, users[k])
			} else {
				prompt, err = p.NextIDs(e.System, users[k])
			}
			if err != nil {
				return nil, 0, fmt.Errorf("encoding episode %d step %d: %w", i, k, err)
			}
			resp, err := p.Tok.Encode(s.Response)
			if err != nil {
				return nil, 0, fmt.Errorf("encoding episode %d step %d: %w", i, k, err)
			}
			resp = append(resp, p.EOS)
			if mode == rollout.ModeWindow {
				if s.Random {
					continue // a noise action is context for later steps, never a target
				}
				ids, loss = nil, nil
			}
			ids = append(ids, prompt...)
			loss = append(loss, make([]bool, len(prompt))...)
			ids = append(ids, resp...)
			for range resp {
				loss = append(loss, !s.Random)
			}
			if mode == rollout.ModeWindow {
				added := add(ids, loss)
				n := 1
				switch {
				case e.EpisodeHint != "" && k == 0:
					// The step that needs the hint: going where the skill
					// says the object is, instead of searching.
					n = hintFirstRepeat
				case rareVerb(cmp.Or(s.Target, s.Action)):
					n = rare
				}
				if asWeight && added {
					out[len(out)-1].Weight = float64(n)
					n = 1
				}
				for range n - 1 {
					add(ids, loss)
				}
			}
		}
		if mode != rollout.ModeWindow {
			add(ids, loss)
		}
		if e.AnalysisPrompt != "" {
			prompt, err := p.StartIDs("", e.AnalysisPrompt)
			if err != nil {
				return nil, 0, fmt.Errorf("encoding episode %d's analysis: %w", i, err)
			}
			ans, err := p.Tok.Encode(e.AnalysisAnswer)
			if err != nil {
				return nil, 0, fmt.Errorf("encoding episode %d's analysis: %w", i, err)
			}
			ids := append(append(prompt, ans...), p.EOS)
			loss := make([]bool, len(ids))
			for k := len(prompt); k < len(ids); k++ {
				loss[k] = true
			}
			add(ids, loss)
		}
	}
	if len(out) == 0 {
		return nil, 0, errors.New("encoding the corpus: no examples")
	}
	return out, total, nil
}

// WeightsHash fingerprints a checkpoint's weights (model.safetensors).
func WeightsHash(dir string) (string, error) { return ckpthash.Weights(dir) }
