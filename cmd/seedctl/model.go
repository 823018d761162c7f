package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/seedctl/seedctl/basemodel"
	"github.com/seedctl/seedctl/envadapters"
	"github.com/seedctl/seedctl/inference"
	"github.com/seedctl/seedctl/tokenizer"
	"github.com/seedctl/seedctl/trainer"
)

// modelSize presets for `model init`.
type modelSize struct {
	hidden, inter, layers, heads, kv int
}

var modelSizes = map[string]modelSize{
	"tiny":  {hidden: 64, inter: 176, layers: 2, heads: 4, kv: 2},
	"small": {hidden: 256, inter: 704, layers: 4, heads: 8, kv: 2},
	"base":  {hidden: 512, inter: 1408, layers: 8, heads: 8, kv: 4},
}

var archClassNames = map[string]string{
	"qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM", "llama": "LlamaForCausalLM",
}

func modelCommand() *cli.Command {
	return &cli.Command{
		Name:  "model",
		Usage: "create and inspect Hugging Face checkpoints",
		Subcommands: []*cli.Command{
			modelInitCommand(),
			modelInspectCommand(),
			bootstrapCommand(),
			refineCommand(),
			accuracyCommand(),
			memcheckCommand(),
			stepbenchCommand(),
			servedCopyCommand(),
		},
	}
}

// servedCopyCommand writes the folder a vLLM or SGLang server should be
// started from for reload publishing: the model's files only, tied
// embeddings untied (vLLM's reload never updates a tied head).
func servedCopyCommand() *cli.Command {
	return &cli.Command{
		Name:      "served-copy",
		Usage:     "write the folder to start vLLM from for reload publishing (backend.served_dir): model files only, tied embeddings untied",
		ArgsUsage: "MODEL SERVED_DIR",
		Action: func(c *cli.Context) error {
			if c.NArg() != 2 {
				return cli.Exit("model served-copy: want MODEL SERVED_DIR", 2)
			}
			info, err := inference.WriteServedCopy(c.Args().Get(0), c.Args().Get(1))
			if err != nil {
				return cli.Exit("model served-copy: "+err.Error(), 1)
			}
			note := "weights as they are"
			if info.Untied {
				note = "tied embeddings written out as lm_head.weight (tie_word_embeddings false)"
			}
			fmt.Fprintf(c.App.Writer, "wrote %s: %s; %s\n", c.Args().Get(1), strings.Join(info.Files, ", "), note)
			return nil
		},
	}
}

func modelInitCommand() *cli.Command {
	return &cli.Command{
		Name:      "init",
		Usage:     "write a randomly initialised checkpoint of a given architecture and size",
		ArgsUsage: " ",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "out", Required: true, Usage: "checkpoint folder to write (replaced atomically if it exists)"},
			&cli.StringFlag{Name: "arch", Value: "qwen2", Usage: "qwen2 (Qwen2/2.5), qwen3 or llama (Llama 3)"},
			&cli.StringFlag{Name: "size", Value: "tiny", Usage: "preset: tiny, small, base, or a released shape with random weights (qwen2.5-0.5b, qwen2.5-1.5b, qwen2.5-3b, qwen2.5-7b, qwen3-1.7b, qwen3-4b; --arch is then the shape's); see --hidden etc. to override"},
			&cli.IntFlag{Name: "hidden", Usage: "hidden size (overrides the preset)"},
			&cli.IntFlag{Name: "intermediate", Usage: "MLP size (overrides the preset)"},
			&cli.IntFlag{Name: "layers", Usage: "decoder layers (overrides the preset)"},
			&cli.IntFlag{Name: "heads", Usage: "attention heads (overrides the preset)"},
			&cli.IntFlag{Name: "kv-heads", Usage: "key/value heads, for grouped-query attention (overrides the preset)"},
			&cli.StringFlag{Name: "tokenizer", Usage: "folder with tokenizer.json (and tokenizer_config.json) to use as is, e.g. a Hugging Face model's folder"},
			&cli.StringFlag{Name: "corpus", Usage: "text file to train a byte-level BPE tokenizer on (one document per line)"},
			&cli.StringFlag{Name: "env", Value: "household", Usage: "with neither --tokenizer nor --corpus: the built-in environment whose expert episodes the BPE tokenizer is trained on (household, webshop, searchqa)"},
			&cli.IntFlag{Name: "vocab-size", Value: 2048, Usage: "learned vocabulary size when training a tokenizer"},
			&cli.StringFlag{Name: "dtype", Value: "float32", Usage: "stored dtype: float32, bfloat16 or float16"},
			&cli.Uint64Flag{Name: "seed", Value: 1, Usage: "initialisation seed (same seed, same weights)"},
			&cli.BoolFlag{Name: "untied", Usage: "separate lm_head instead of tying it to the embeddings"},
		},
		Action: func(c *cli.Context) error {
			log := logger(c)
			if c.String("tokenizer") != "" && c.String("corpus") != "" {
				return cli.Exit("model init: --tokenizer and --corpus both given: pass one (--tokenizer DIR uses a tokenizer as is, --corpus FILE trains one on your text)", 2)
			}
			if dir := c.String("tokenizer"); dir != "" {
				if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err != nil {
					return cli.Exit(fmt.Sprintf("model init: --tokenizer %s: no tokenizer.json there; pass a folder with tokenizer.json (such as a Hugging Face model's), or --corpus FILE to train one, or neither to train one on --env's text", dir), 2)
				}
			}
			var texts []string
			if c.String("tokenizer") == "" && c.String("corpus") == "" {
				// No tokenizer named: train one on the built-in
				// environment's text, so the model can act there at once.
				var err error
				if texts, err = envTexts(c.Context, c.String("env")); err != nil {
					return cli.Exit("model init: "+err.Error(), 2)
				}
				log.Info().Str("env", c.String("env")).Int("texts", len(texts)).Msg("training a BPE tokenizer on the environment's expert episodes (pass --tokenizer DIR or --corpus FILE to choose)")
			}
			tok, tcfg, err := initTokenizer(c.String("tokenizer"), c.String("corpus"), texts, c.Int("vocab-size"))
			if err != nil {
				return cli.Exit("model init: "+err.Error(), 1)
			}
			cfg, err := initConfig(c, tok, tcfg)
			if err != nil {
				return cli.Exit("model init: "+err.Error(), 2)
			}
			m, err := trainer.InitRandom(cfg, trainer.ModelOptions{}, c.Uint64("seed"))
			if err != nil {
				return cli.Exit("model init: "+err.Error(), 1)
			}
			out := c.String("out")
			save := trainer.SaveOptions{DType: c.String("dtype")}
			if dir := c.String("tokenizer"); dir != "" {
				// Given tokenizer files are copied verbatim; only a missing
				// chat template is added.
				save.TokenizerFrom = dir
				if tcfg.ChatTemplate == tokenizer.Qwen25ChatTemplate {
					save.WriteExtra = func(tmp string) error {
						return tokenizer.WriteConfigFile(filepath.Join(tmp, "tokenizer_config.json"), tok, tcfg)
					}
				}
			} else {
				save.WriteExtra = func(tmp string) error { return tokenizer.Save(tmp, tok, tcfg) }
			}
			err = m.Save(out, save)
			if err != nil {
				return cli.Exit("model init: "+err.Error(), 1)
			}
			log.Info().Str("out", out).Str("arch", cfg.Architectures[0]).Int64("params", m.NumParams()).
				Int("vocab", cfg.VocabSize).Msg("wrote checkpoint")
			fmt.Fprintf(c.App.Writer, "wrote %s: %s, %s parameters, vocabulary %d\n", out, cfg.Architectures[0], humanCount(m.NumParams()), cfg.VocabSize)
			return nil
		},
	}
}

// envTexts is the text of 200 expert episodes of a built-in environment
// (prompts, actions, observations), the default tokenizer corpus.
func envTexts(ctx context.Context, env string) ([]string, error) {
	r, err := basemodel.DefaultRecipe(env, "tiny")
	if err != nil {
		return nil, fmt.Errorf("--env %q: %w (or pass --tokenizer DIR or --corpus FILE)", env, err)
	}
	b, err := envadapters.Lookup(r.Env)
	if err != nil {
		return nil, fmt.Errorf("--env %q: %w", env, err)
	}
	cc := r.Corpus
	cc.Episodes = min(cc.Episodes, 200)
	eps, err := basemodel.GenerateCorpus(ctx, b, cc, nil)
	if err != nil {
		return nil, fmt.Errorf("generating %s episodes for the tokenizer: %w", env, err)
	}
	return append(basemodel.Texts(eps), tokenizer.Qwen25ChatTemplate), nil
}

// initTokenizer loads the tokenizer in dir, or trains a byte-level BPE on
// the lines of corpus, or on texts.
func initTokenizer(dir, corpus string, texts []string, vocab int) (*tokenizer.Tokenizer, *tokenizer.Config, error) {
	if dir != "" {
		tok, cfg, err := tokenizer.Load(dir)
		if err != nil {
			return nil, nil, fmt.Errorf("--tokenizer %s: %w (want a folder with tokenizer.json, such as a Hugging Face model's)", dir, err)
		}
		if cfg.ChatTemplate == "" {
			cfg.ChatTemplate = tokenizer.Qwen25ChatTemplate
		}
		return tok, cfg, nil
	}
	source := "the environment's episodes"
	if corpus != "" {
		source = corpus
		f, err := os.Open(corpus)
		if err != nil {
			return nil, nil, fmt.Errorf("reading --corpus: %w", err)
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		for sc.Scan() {
			if line := strings.ReplaceAll(sc.Text(), `\n`, "\n"); strings.TrimSpace(line) != "" {
				texts = append(texts, line)
			}
		}
		if err := sc.Err(); err != nil {
			return nil, nil, fmt.Errorf("reading --corpus %s: %w", corpus, err)
		}
	}
	tc := tokenizer.DefaultTrainConfig()
	tc.VocabSize = vocab
	tok, err := tokenizer.TrainBPE(texts, tc)
	if err != nil {
		return nil, nil, fmt.Errorf("training a tokenizer on %s: %w", source, err)
	}
	return tok, &tokenizer.Config{EOSToken: "<|im_end|>", PadToken: "<|endoftext|>", ChatTemplate: tokenizer.Qwen25ChatTemplate}, nil
}

func initConfig(c *cli.Context, tok *tokenizer.Tokenizer, tcfg *tokenizer.Config) (*trainer.ModelConfig, error) {
	if shape, ok := trainer.KnownShape(c.String("size")); ok {
		return realShapeConfig(c, shape, tok, tcfg)
	}
	arch := c.String("arch")
	class, ok := archClassNames[arch]
	if !ok {
		return nil, fmt.Errorf("--arch %q: want qwen2, qwen3 or llama", arch)
	}
	size, ok := modelSizes[c.String("size")]
	if !ok {
		return nil, fmt.Errorf("--size %q: want tiny, small, base or a released shape (%s)", c.String("size"), strings.Join(trainer.ShapeNames(), ", "))
	}
	for flag, dst := range map[string]*int{"hidden": &size.hidden, "intermediate": &size.inter, "layers": &size.layers, "heads": &size.heads, "kv-heads": &size.kv} {
		if c.IsSet(flag) {
			*dst = c.Int(flag)
		}
	}
	cfg := &trainer.ModelConfig{
		Architectures: []string{class}, ModelType: arch,
		VocabSize: tok.VocabSize(), HiddenSize: size.hidden, IntermediateSize: size.inter,
		NumHiddenLayers: size.layers, NumAttentionHeads: size.heads, NumKeyValueHeads: size.kv,
		MaxPositionEmbeddings: 4096, RMSNormEps: 1e-6, RopeTheta: 1e6, HiddenAct: "silu",
		InitializerRange: 0.02, TieWordEmbeddings: !c.Bool("untied"),
	}
	if arch == "qwen3" {
		f := false
		cfg.AttentionBias = &f
		if size.heads > 0 {
			cfg.HeadDim = size.hidden / size.heads
		}
	}
	if arch == "llama" {
		f := false
		cfg.AttentionBias = &f
		cfg.RopeTheta = 500000
	}
	return withSpecialTokens(cfg, tok, tcfg)
}

func modelInspectCommand() *cli.Command {
	return &cli.Command{
		Name:      "inspect",
		Usage:     "describe a checkpoint: architecture, parameters, dtypes, tokenizer, chat template",
		ArgsUsage: "DIR",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "print the description as JSON"},
			&cli.BoolFlag{Name: "tensors", Usage: "list every tensor"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return cli.Exit("model inspect: give one checkpoint folder, e.g. seedctl model inspect ~/models/Qwen2.5-3B-Instruct", 2)
			}
			if err := checkModelFlag("DIR", c.Args().First()); err != nil {
				return cli.Exit("model inspect: "+err.Error(), 2)
			}
			rep, err := inspectModel(c.Args().First())
			if err != nil {
				return cli.Exit("model inspect: "+err.Error(), 1)
			}
			if c.Bool("json") {
				enc := json.NewEncoder(c.App.Writer)
				enc.SetIndent("", "  ")
				return enc.Encode(rep)
			}
			printInspect(c.App.Writer, rep, c.Bool("tensors"))
			return nil
		},
	}
}

type inspectReport struct {
	Dir          string               `json:"dir"`
	Arch         string               `json:"arch"`
	Class        []string             `json:"architectures"`
	Layers       int                  `json:"layers"`
	Hidden       int                  `json:"hidden_size"`
	Intermediate int                  `json:"intermediate_size"`
	Heads        int                  `json:"attention_heads"`
	KVHeads      int                  `json:"kv_heads"`
	HeadDim      int                  `json:"head_dim"`
	Vocab        int                  `json:"vocab_size"`
	Tied         bool                 `json:"tie_word_embeddings"`
	RopeTheta    float64              `json:"rope_theta"`
	RopeScaling  string               `json:"rope_scaling,omitempty"`
	Params       int64                `json:"parameters"`
	DTypes       map[string]int64     `json:"parameters_by_dtype"`
	Files        []string             `json:"weight_files"`
	Bytes        int64                `json:"weight_bytes"`
	Tensors      []trainer.TensorInfo `json:"tensors"`
	Tokenizer    *inspectTokenizer    `json:"tokenizer,omitempty"`
	Problems     []string             `json:"problems,omitempty"`
	// IgnoredKeys are config.json keys the forward pass does not read,
	// each with why that is safe (keys that would change it are refused).
	IgnoredKeys []trainer.IgnoredKey   `json:"ignored_config_keys,omitempty"`
	Extra       map[string]interface{} `json:"-"`
}

type inspectTokenizer struct {
	VocabSize      int      `json:"vocab_size"`
	Special        []string `json:"special_tokens"`
	EOS            string   `json:"eos_token"`
	Pad            string   `json:"pad_token"`
	ChatTemplate   bool     `json:"chat_template"`
	TemplateFile   string   `json:"chat_template_file,omitempty"`
	TemplateSample string   `json:"template_sample,omitempty"`
}

func inspectModel(dir string) (*inspectReport, error) {
	info, err := trainer.InspectCheckpoint(dir)
	if err != nil {
		return nil, err
	}
	cfg := info.Config
	rep := &inspectReport{
		Dir: dir, Arch: string(info.Arch), Class: cfg.Architectures, Layers: cfg.NumHiddenLayers,
		Hidden: cfg.HiddenSize, Intermediate: cfg.IntermediateSize, Heads: cfg.NumAttentionHeads,
		KVHeads: cfg.NumKeyValueHeads, HeadDim: cfg.HeadDimension(), Vocab: cfg.VocabSize,
		Tied: cfg.TieWordEmbeddings, RopeTheta: cfg.RopeTheta, Params: info.Params, DTypes: info.DTypes,
		Files: info.Files, Bytes: info.TotalBytes, Tensors: info.Tensors, IgnoredKeys: cfg.IgnoredKeys(),
	}
	if cfg.RopeScaling != nil {
		rep.RopeScaling = cfg.RopeScaling.Kind()
	}
	if want := cfg.ParamCount(); want != info.Params {
		rep.Problems = append(rep.Problems, fmt.Sprintf("config.json implies %d parameters, the weights hold %d", want, info.Params))
	}
	tok, tcfg, err := tokenizer.Load(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		rep.Problems = append(rep.Problems, "no tokenizer.json")
	case err != nil:
		rep.Problems = append(rep.Problems, "tokenizer: "+err.Error())
	default:
		ti := &inspectTokenizer{VocabSize: tok.VocabSize(), EOS: tcfg.EOSToken, Pad: tcfg.PadToken, ChatTemplate: tcfg.ChatTemplate != "", TemplateFile: tcfg.ChatTemplateFile}
		for _, a := range tok.AddedTokens() {
			if a.Special {
				ti.Special = append(ti.Special, a.Content)
			}
		}
		if tok.VocabSize() > cfg.VocabSize {
			rep.Problems = append(rep.Problems, fmt.Sprintf("tokenizer has %d tokens, the model's vocab_size is %d", tok.VocabSize(), cfg.VocabSize))
		}
		if ct, err := tcfg.CompileChatTemplate(); err == nil {
			s, err := ct.Render([]tokenizer.Message{{Role: "user", Content: "Your task is to: put a mug in the fridge."}}, tokenizer.ChatOptions{AddGenerationPrompt: true})
			if err != nil {
				rep.Problems = append(rep.Problems, "chat template: "+err.Error())
			}
			ti.TemplateSample = s
		} else if !errors.Is(err, tokenizer.ErrNoChatTemplate) {
			rep.Problems = append(rep.Problems, "chat template: "+err.Error())
		}
		rep.Tokenizer = ti
	}
	return rep, nil
}

func printInspect(w io.Writer, r *inspectReport, tensors bool) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "checkpoint\t%s\n", r.Dir)
	fmt.Fprintf(tw, "architecture\t%s (%s)\n", strings.Join(r.Class, ","), r.Arch)
	fmt.Fprintf(tw, "shape\t%d layers, hidden %d, MLP %d, %d heads / %d kv heads of %d, vocab %d, tied head %v\n",
		r.Layers, r.Hidden, r.Intermediate, r.Heads, r.KVHeads, r.HeadDim, r.Vocab, r.Tied)
	rope := fmt.Sprintf("theta %g", r.RopeTheta)
	if r.RopeScaling != "" {
		rope += ", scaling " + r.RopeScaling
	}
	fmt.Fprintf(tw, "rope\t%s\n", rope)
	var dts []string
	for _, k := range sortedMapKeys(r.DTypes) {
		dts = append(dts, fmt.Sprintf("%s %s", k, humanCount(r.DTypes[k])))
	}
	fmt.Fprintf(tw, "parameters\t%s (%s)\n", humanCount(r.Params), strings.Join(dts, ", "))
	fmt.Fprintf(tw, "weights\t%s in %s\n", humanBytes(r.Bytes), strings.Join(r.Files, ", "))
	if t := r.Tokenizer; t != nil {
		fmt.Fprintf(tw, "tokenizer\t%d tokens, eos %q, pad %q, special %s\n", t.VocabSize, t.EOS, t.Pad, strings.Join(t.Special, " "))
		if t.ChatTemplate {
			fmt.Fprintf(tw, "chat template\tfrom %s; a user turn renders as %q\n", t.TemplateFile, t.TemplateSample)
		} else {
			fmt.Fprintf(tw, "chat template\tnone\n")
		}
	}
	for _, k := range r.IgnoredKeys {
		fmt.Fprintf(tw, "config key not read\t%s: %s\n", k.Key, k.Why)
	}
	for _, p := range r.Problems {
		fmt.Fprintf(tw, "PROBLEM\t%s\n", p)
	}
	tw.Flush()
	if tensors {
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		for _, t := range r.Tensors {
			fmt.Fprintf(tw, "%s\t%s\t%v\t%s\n", t.Name, t.DType, t.Shape, filepath.Base(t.File))
		}
		tw.Flush()
	}
}

func sortedMapKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func humanCount(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.2fB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.2fM", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1fK", float64(n)/1e3)
	}
	return fmt.Sprint(n)
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

func memcheckCommand() *cli.Command {
	return &cli.Command{
		Name:  "memcheck",
		Usage: "run RL steps of a model on random rows and set the measured peak memory beside the memory plan's prediction (CPU; e.g. seedctl model memcheck --model DIR --tokens 2048)",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "model", Required: true, Usage: "checkpoint folder (seedctl model init --size qwen2.5-0.5b makes one of the real shape)"},
			&cli.IntFlag{Name: "tokens", Value: 2048, Usage: "padded tokens per micro-batch"},
			&cli.IntFlag{Name: "row", Usage: "tokens per row (default: --tokens, one row)"},
			&cli.StringFlag{Name: "dtype", Value: "float32", Usage: "float32 or bfloat16"},
			&cli.StringFlag{Name: "recompute", Value: "on", Usage: "on or off: activation recomputation"},
			&cli.BoolFlag{Name: "reference", Usage: "also hold a reference copy of the weights (a KL run)"},
		},
		Action: func(c *cli.Context) error {
			mo := trainer.ModelOptions{DType: c.String("dtype")}
			if err := mo.Validate(); err != nil {
				return cli.Exit("model memcheck: --dtype: "+err.Error(), 2)
			}
			if r := c.String("recompute"); r != "on" && r != "off" {
				return cli.Exit(fmt.Sprintf("model memcheck: --recompute %q: want on or off", r), 2)
			}
			row := c.Int("row")
			if row == 0 {
				row = c.Int("tokens")
			}
			m, err := trainer.LoadCheckpoint(c.String("model"), mo)
			if err != nil {
				return cli.Exit("model memcheck: "+err.Error(), 1)
			}
			defer m.Close()
			m.SetRecompute(c.String("recompute") == "on")
			var ref *trainer.Model
			if c.Bool("reference") {
				if ref, err = trainer.LoadCheckpoint(c.String("model"), mo); err != nil {
					return cli.Exit("model memcheck: "+err.Error(), 1)
				}
				defer ref.Close()
			}
			opt, err := m.NewAdamW(1e-6, 0)
			if err != nil {
				return cli.Exit("model memcheck: "+err.Error(), 1)
			}
			mc, err := trainer.MeasureRLStep(m, opt, ref, c.Int("tokens"), row, 1)
			if err != nil {
				return cli.Exit("model memcheck: "+err.Error(), 1)
			}
			w := c.App.Writer
			fmt.Fprintf(w, "%s: %s parameters, %s, %d tokens per micro-batch in rows of %d, recompute %s\n",
				c.String("model"), humanCount(mc.Plan.Params), m.DType(), c.Int("tokens"), row, c.String("recompute"))
			printPlan(w, "  ", mc.Plan)
			fmt.Fprintf(w, "measured: resident %s after a step, peak %s during one (%.0f s); predicted resident %s, peak %s: measured/predicted peak %.2f\n",
				trainer.GiB(mc.Resident), trainer.GiB(mc.Peak), mc.StepSeconds, trainer.GiB(mc.Plan.Resident()), trainer.GiB(mc.Plan.Peak()), float64(mc.Peak)/float64(mc.Plan.Peak()))
			return nil
		},
	}
}

// printPlan writes a memory plan's breakdown.
func printPlan(w io.Writer, indent string, p trainer.MemoryPlan) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, l := range p.Lines() {
		fmt.Fprintf(tw, "%s%s\t%s\n", indent, l.Part, trainer.GiB(l.Bytes))
	}
	fmt.Fprintf(tw, "%strainer peak\t%s\n", indent, trainer.GiB(p.Peak()))
	tw.Flush()
}

// realShapeConfig is a released model's shape (trainer.KnownShape) with
// the tokenizer's special tokens, for random checkpoints of the real size
// (memory checks); the vocabulary is the released one (padded beyond the
// tokenizer, as Qwen's is) unless the tokenizer is larger.
func realShapeConfig(c *cli.Context, cfg *trainer.ModelConfig, tok *tokenizer.Tokenizer, tcfg *tokenizer.Config) (*trainer.ModelConfig, error) {
	for flag, dst := range map[string]*int{"hidden": &cfg.HiddenSize, "intermediate": &cfg.IntermediateSize, "layers": &cfg.NumHiddenLayers, "heads": &cfg.NumAttentionHeads, "kv-heads": &cfg.NumKeyValueHeads} {
		if c.IsSet(flag) {
			*dst = c.Int(flag)
		}
	}
	cfg.VocabSize = max(cfg.VocabSize, tok.VocabSize())
	cfg.InitializerRange = 0.02
	return withSpecialTokens(cfg, tok, tcfg)
}

// withSpecialTokens sets cfg's BOS and EOS ids from the tokenizer and
// validates it.
func withSpecialTokens(cfg *trainer.ModelConfig, tok *tokenizer.Tokenizer, tcfg *tokenizer.Config) (*trainer.ModelConfig, error) {
	if id, ok := tok.TokenID("<|endoftext|>"); ok {
		cfg.BOSTokenID = &id
	}
	if id, ok := tok.TokenID(tcfg.EOSToken); ok {
		cfg.EOSTokenID = float64(id)
	}
	return cfg, cfg.Validate()
}
