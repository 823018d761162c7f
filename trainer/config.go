package trainer

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
)

// Arch is a supported decoder family.
type Arch string

const (
	ArchQwen2 Arch = "qwen2" // Qwen2 and Qwen2.5: q/k/v biases
	ArchQwen3 Arch = "qwen3" // per-head q/k RMSNorm, no biases, explicit head_dim
	ArchLlama Arch = "llama" // Llama 3: rope scaling, optional biases
)

var archClasses = map[string]Arch{
	"Qwen2ForCausalLM": ArchQwen2,
	"Qwen3ForCausalLM": ArchQwen3,
	"LlamaForCausalLM": ArchLlama,
}

// ErrUnknownArch means config.json names an architecture the trainer lacks.
var ErrUnknownArch = errors.New("unknown architecture")

// RopeScaling is config.json's rope_scaling.
type RopeScaling struct {
	RopeType                      string  `json:"rope_type,omitempty"`
	Type                          string  `json:"type,omitempty"` // older name of rope_type
	Factor                        float64 `json:"factor,omitempty"`
	LowFreqFactor                 float64 `json:"low_freq_factor,omitempty"`
	HighFreqFactor                float64 `json:"high_freq_factor,omitempty"`
	OriginalMaxPositionEmbeddings int     `json:"original_max_position_embeddings,omitempty"`
}

// Kind is the rope scaling type, whichever key the file used.
func (r *RopeScaling) Kind() string {
	if r == nil {
		return ""
	}
	if r.RopeType != "" {
		return r.RopeType
	}
	return r.Type
}

// ModelConfig is a Hugging Face config.json of a decoder-only causal LM.
// Fields the trainer does not use are kept in Extra and written back.
type ModelConfig struct {
	Architectures         []string     `json:"architectures"`
	ModelType             string       `json:"model_type"`
	VocabSize             int          `json:"vocab_size"`
	HiddenSize            int          `json:"hidden_size"`
	IntermediateSize      int          `json:"intermediate_size"`
	NumHiddenLayers       int          `json:"num_hidden_layers"`
	NumAttentionHeads     int          `json:"num_attention_heads"`
	NumKeyValueHeads      int          `json:"num_key_value_heads"`
	HeadDim               int          `json:"head_dim,omitempty"`
	MaxPositionEmbeddings int          `json:"max_position_embeddings"`
	RMSNormEps            float64      `json:"rms_norm_eps"`
	RopeTheta             float64      `json:"rope_theta"`
	RopeScaling           *RopeScaling `json:"rope_scaling"`
	TieWordEmbeddings     bool         `json:"tie_word_embeddings"`
	AttentionBias         *bool        `json:"attention_bias,omitempty"`
	MLPBias               bool         `json:"mlp_bias,omitempty"`
	HiddenAct             string       `json:"hidden_act"`
	InitializerRange      float64      `json:"initializer_range"`
	TorchDtype            string       `json:"torch_dtype"`
	BOSTokenID            *int         `json:"bos_token_id"`
	EOSTokenID            any          `json:"eos_token_id"` // an id or a list of ids

	Extra map[string]json.RawMessage `json:"-"`
	// v5 records the keys transformers 5 writes in place of 4.x's, so a
	// saved config keeps the file's style: rope_parameters (no top-level
	// rope_theta / rope_scaling) and dtype (no torch_dtype).
	v5Rope, v5DType bool
}

// knownConfigKeys are the keys ModelConfig decodes itself.
var knownConfigKeys = map[string]bool{
	"architectures": true, "model_type": true, "vocab_size": true, "hidden_size": true,
	"intermediate_size": true, "num_hidden_layers": true, "num_attention_heads": true,
	"num_key_value_heads": true, "head_dim": true, "max_position_embeddings": true,
	"rms_norm_eps": true, "rope_theta": true, "rope_scaling": true, "tie_word_embeddings": true,
	"attention_bias": true, "mlp_bias": true, "hidden_act": true, "initializer_range": true,
	"torch_dtype": true, "bos_token_id": true, "eos_token_id": true,
}

// ParseModelConfig parses config.json bytes; name is used in errors.
func ParseModelConfig(b []byte, name string) (*ModelConfig, error) {
	var c ModelConfig
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	var all map[string]json.RawMessage
	if err := json.Unmarshal(b, &all); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	c.Extra = map[string]json.RawMessage{}
	for k, v := range all {
		if !knownConfigKeys[k] {
			c.Extra[k] = v
		}
	}
	if err := c.readV5Keys(all); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if c.NumKeyValueHeads == 0 {
		c.NumKeyValueHeads = c.NumAttentionHeads
	}
	if c.RopeTheta == 0 {
		c.RopeTheta = 10000 // transformers' default for these architectures
	}
	if c.RMSNormEps == 0 {
		c.RMSNormEps = 1e-6
	}
	if c.HiddenAct == "" {
		c.HiddenAct = "silu"
	}
	if c.InitializerRange == 0 {
		c.InitializerRange = 0.02
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return &c, nil
}

// LoadModelConfig reads and validates a config.json.
func LoadModelConfig(path string) (*ModelConfig, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading model config: %w", err)
	}
	return ParseModelConfig(b, path)
}

// Arch resolves the architecture from "architectures" (or model_type).
func (c *ModelConfig) Arch() (Arch, error) {
	for _, a := range c.Architectures {
		if arch, ok := archClasses[a]; ok {
			return arch, nil
		}
	}
	switch Arch(c.ModelType) {
	case ArchQwen2, ArchQwen3, ArchLlama:
		if len(c.Architectures) == 0 {
			return Arch(c.ModelType), nil
		}
	}
	known := make([]string, 0, len(archClasses))
	for k := range archClasses {
		known = append(known, k)
	}
	return "", fmt.Errorf("field architectures %v (model_type %q): %w (supported: %s)", c.Architectures, c.ModelType, ErrUnknownArch, strings.Join(sortedStrings(known), ", "))
}

// HeadDimension is head_dim, or hidden_size / num_attention_heads when absent.
func (c *ModelConfig) HeadDimension() int {
	if c.HeadDim > 0 {
		return c.HeadDim
	}
	if c.NumAttentionHeads == 0 {
		return 0
	}
	return c.HiddenSize / c.NumAttentionHeads
}

// QKVBias reports whether q/k/v projections carry biases: always for Qwen2,
// attention_bias for the others.
func (c *ModelConfig) QKVBias() bool {
	arch, _ := c.Arch()
	if arch == ArchQwen2 {
		return c.AttentionBias == nil || *c.AttentionBias
	}
	return c.AttentionBias != nil && *c.AttentionBias
}

// OBias reports whether o_proj has a bias (Llama's attention_bias covers it; Qwen never).
func (c *ModelConfig) OBias() bool {
	arch, _ := c.Arch()
	return arch == ArchLlama && c.AttentionBias != nil && *c.AttentionBias
}

// Validate names the first field that cannot describe a working model.
func (c *ModelConfig) Validate() error {
	if _, err := c.Arch(); err != nil {
		return err
	}
	pos := map[string]int{
		"vocab_size": c.VocabSize, "hidden_size": c.HiddenSize, "intermediate_size": c.IntermediateSize,
		"num_hidden_layers": c.NumHiddenLayers, "num_attention_heads": c.NumAttentionHeads,
		"num_key_value_heads": c.NumKeyValueHeads,
	}
	for _, k := range slices.Sorted(maps.Keys(pos)) {
		if pos[k] <= 0 {
			return fmt.Errorf("field %s is %d, want a positive integer", k, pos[k])
		}
	}
	if c.NumAttentionHeads%c.NumKeyValueHeads != 0 {
		return fmt.Errorf("field num_attention_heads %d is not a multiple of num_key_value_heads %d", c.NumAttentionHeads, c.NumKeyValueHeads)
	}
	hd := c.HeadDimension()
	if hd <= 0 || hd%2 != 0 {
		return fmt.Errorf("field head_dim %d (or hidden_size/num_attention_heads) must be positive and even for RoPE", hd)
	}
	if c.HeadDim == 0 && c.HiddenSize%c.NumAttentionHeads != 0 {
		return fmt.Errorf("field hidden_size %d is not a multiple of num_attention_heads %d and head_dim is absent", c.HiddenSize, c.NumAttentionHeads)
	}
	if c.HiddenAct != "silu" && c.HiddenAct != "swish" {
		return fmt.Errorf("field hidden_act %q: only silu (SwiGLU) is supported", c.HiddenAct)
	}
	if c.MLPBias {
		return fmt.Errorf("field mlp_bias: MLP biases are not supported")
	}
	switch c.RopeScaling.Kind() {
	case "", "default":
	case "linear":
		if c.RopeScaling.Factor <= 0 {
			return fmt.Errorf("field rope_scaling.factor %v must be positive", c.RopeScaling.Factor)
		}
	case "llama3":
		r := c.RopeScaling
		if r.Factor <= 0 || r.LowFreqFactor <= 0 || r.HighFreqFactor <= r.LowFreqFactor || r.OriginalMaxPositionEmbeddings <= 0 {
			return fmt.Errorf("field rope_scaling: llama3 needs factor>0, 0<low_freq_factor<high_freq_factor, original_max_position_embeddings>0")
		}
	default:
		key := "rope_scaling"
		if c.v5Rope {
			key = "rope_parameters"
		}
		return fmt.Errorf("field %s.rope_type %q is not supported (default, linear, llama3)", key, c.RopeScaling.Kind())
	}
	return nil
}

// MarshalJSON writes the config with the fields it did not interpret.
func (c *ModelConfig) MarshalJSON() ([]byte, error) {
	type plain ModelConfig
	b, err := json.Marshal((*plain)(c))
	if err != nil {
		return nil, err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	for k, v := range c.Extra {
		m[k] = v
	}
	if c.v5Rope {
		delete(m, "rope_theta")
		delete(m, "rope_scaling")
	}
	if c.v5DType {
		m["dtype"] = m["torch_dtype"]
		delete(m, "torch_dtype")
	}
	return json.Marshal(m)
}

// EOSIDs lists eos_token_id whether it was one id or a list.
func (c *ModelConfig) EOSIDs() []int {
	switch v := c.EOSTokenID.(type) {
	case float64:
		return []int{int(v)}
	case []any:
		var out []int
		for _, x := range v {
			if f, ok := x.(float64); ok {
				out = append(out, int(f))
			}
		}
		return out
	}
	return nil
}

// ParamCount is the number of parameters the config implies.
func (c *ModelConfig) ParamCount() int64 {
	h, v, i := int64(c.HiddenSize), int64(c.VocabSize), int64(c.IntermediateSize)
	hd := int64(c.HeadDimension())
	q, kv := int64(c.NumAttentionHeads)*hd, int64(c.NumKeyValueHeads)*hd
	layer := h*q + 2*h*kv + q*h + 3*h*i + 2*h
	if c.QKVBias() {
		layer += q + 2*kv
	}
	if c.OBias() {
		layer += h
	}
	if arch, _ := c.Arch(); arch == ArchQwen3 {
		layer += 2 * hd
	}
	n := v*h + int64(c.NumHiddenLayers)*layer + h
	if !c.TieWordEmbeddings {
		n += v * h
	}
	return n
}
