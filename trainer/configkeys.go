package trainer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
)

// ropeParameters is transformers 5's rope_parameters: rope_theta with
// the rope type and its scaling fields in one object.
type ropeParameters struct {
	RopeTheta float64 `json:"rope_theta"`
	RopeScaling
}

// readV5Keys reads the keys transformers 5 writes where 4.x wrote others
// (rope_parameters for rope_theta and rope_scaling, dtype for
// torch_dtype) and refuses keys that would change the forward pass in a
// way the trainer does not implement (sliding-window attention, partial
// rotary embeddings, attention dropout). A key that changes the math is
// never left to a silent default.
func (c *ModelConfig) readV5Keys(all map[string]json.RawMessage) error {
	if raw, ok := all["rope_parameters"]; ok && !isNull(raw) {
		rp, err := parseRopeParameters(raw)
		if err != nil {
			return err
		}
		if _, has := all["rope_theta"]; has && c.RopeTheta != rp.RopeTheta {
			return fmt.Errorf("field rope_theta %v and rope_parameters.rope_theta %v disagree", c.RopeTheta, rp.RopeTheta)
		}
		if rp.RopeTheta <= 0 {
			return fmt.Errorf("field rope_parameters.rope_theta %v must be positive", rp.RopeTheta)
		}
		c.RopeTheta = rp.RopeTheta
		if k := rp.Kind(); k != "" && k != "default" {
			sc := rp.RopeScaling
			if c.RopeScaling != nil && !reflect.DeepEqual(*c.RopeScaling, sc) {
				return fmt.Errorf("field rope_scaling %+v and rope_parameters %+v disagree", *c.RopeScaling, sc)
			}
			c.RopeScaling = &sc
		}
		_, hasTheta := all["rope_theta"]
		_, hasScaling := all["rope_scaling"]
		c.v5Rope = !hasTheta && !hasScaling
	}
	if raw, ok := all["dtype"]; ok && !isNull(raw) {
		var d string
		if err := json.Unmarshal(raw, &d); err != nil {
			return fmt.Errorf("field dtype: want a string: %w", err)
		}
		if c.TorchDtype != "" && c.TorchDtype != d {
			return fmt.Errorf("field dtype %q and torch_dtype %q disagree", d, c.TorchDtype)
		}
		if _, has := all["torch_dtype"]; !has {
			c.TorchDtype, c.v5DType = d, true
		}
	}
	for _, k := range slices.Sorted(maps.Keys(all)) {
		if r, ok := configKeyRules[k]; ok && r.refuse != nil {
			if err := r.refuse(all[k], all); err != nil {
				return fmt.Errorf("field %s: %w", k, err)
			}
		}
	}
	return nil
}

// parseRopeParameters reads rope_parameters: one object, or one per layer
// type (transformers 5 for models that mix attention kinds), which must
// then all be the same here (no layer of these architectures differs).
func parseRopeParameters(raw json.RawMessage) (ropeParameters, error) {
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(raw, &probe); err != nil {
		return ropeParameters{}, fmt.Errorf("field rope_parameters: want an object: %w", err)
	}
	_, t1 := probe["rope_theta"]
	_, t2 := probe["rope_type"]
	if t1 || t2 {
		var rp ropeParameters
		if err := json.Unmarshal(raw, &rp); err != nil {
			return rp, fmt.Errorf("field rope_parameters: %w", err)
		}
		return rp, nil
	}
	var first *ropeParameters
	for _, k := range slices.Sorted(maps.Keys(probe)) {
		var rp ropeParameters
		if err := json.Unmarshal(probe[k], &rp); err != nil {
			return rp, fmt.Errorf("field rope_parameters.%s: %w", k, err)
		}
		if first != nil && !reflect.DeepEqual(*first, rp) {
			return rp, fmt.Errorf("field rope_parameters: layer types %v have different rotary settings; one setting for every layer is supported", slices.Sorted(maps.Keys(probe)))
		}
		first = &rp
	}
	if first == nil {
		return ropeParameters{}, fmt.Errorf("field rope_parameters is empty")
	}
	return *first, nil
}

func isNull(raw json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(raw), []byte("null")) }

// configKeyRule is what the trainer does with a config.json key it keeps
// in Extra: why leaving it unread is safe, or, where a value would change
// the forward pass, refuse that value.
type configKeyRule struct {
	read   bool // the trainer reads it (not an ignored key)
	why    string
	refuse func(v json.RawMessage, all map[string]json.RawMessage) error
}

// numberIs refuses a number other than want (null and absence are fine).
func numberIs(want float64, what string) func(json.RawMessage, map[string]json.RawMessage) error {
	return func(v json.RawMessage, _ map[string]json.RawMessage) error {
		if isNull(v) {
			return nil
		}
		var f float64
		if err := json.Unmarshal(v, &f); err != nil {
			return fmt.Errorf("want a number: %w", err)
		}
		if f != want {
			return fmt.Errorf("%v: %s is not implemented", f, what)
		}
		return nil
	}
}

var configKeyRules = map[string]configKeyRule{
	"rope_parameters": {read: true, why: "read: rope_theta and the rope type (transformers 5's form of rope_theta / rope_scaling)"},
	"dtype":           {read: true, why: "read: the weights' dtype (transformers 5's name for torch_dtype)"},
	"use_sliding_window": {why: "false: every layer attends to the whole context", refuse: func(v json.RawMessage, _ map[string]json.RawMessage) error {
		var b bool
		if err := json.Unmarshal(v, &b); err != nil {
			return fmt.Errorf("want true or false: %w", err)
		}
		if b {
			return fmt.Errorf("true: sliding-window attention is not implemented (the forward would differ from transformers' past the window)")
		}
		return nil
	}},
	"sliding_window":    {why: "read by transformers only with use_sliding_window true (or sliding layer_types), refused here"},
	"max_window_layers": {why: "read by transformers only with sliding-window attention, refused here"},
	"layer_types": {why: "every layer full_attention", refuse: func(v json.RawMessage, _ map[string]json.RawMessage) error {
		if isNull(v) {
			return nil
		}
		var ts []string
		if err := json.Unmarshal(v, &ts); err != nil {
			return fmt.Errorf("want a list of strings: %w", err)
		}
		for i, t := range ts {
			if t != "full_attention" {
				return fmt.Errorf("layer %d is %q: only full_attention is implemented", i, t)
			}
		}
		return nil
	}},
	"partial_rotary_factor": {why: "1: rotary embeddings on the whole head", refuse: numberIs(1, "partial rotary embeddings")},
	"attention_dropout":     {why: "0: no dropout in attention", refuse: numberIs(0, "attention dropout")},
	"pretraining_tp":        {why: "splits transformers' matmuls into slices; the same math"},
	"use_cache":             {why: "generation setting: the KV cache does not change log-probs"},
	"transformers_version":  {why: "provenance only"},
	"pad_token_id":          {why: "generation and batching setting, not part of the forward"},
	"quantization_config": {why: "not read", refuse: func(v json.RawMessage, _ map[string]json.RawMessage) error {
		if isNull(v) {
			return nil
		}
		return fmt.Errorf("quantized weights are not supported (dequantize to float32, bfloat16 or float16 first)")
	}},
	// transformers' generic PretrainedConfig fields (to_dict writes them
	// all): heads, outputs and bookkeeping, nothing of a causal LM's
	// forward.
	"_name_or_path":           {why: "transformers' bookkeeping"},
	"_model_name_or_path":     {why: "transformers' bookkeeping"},
	"id2label":                {why: "a classification head's labels; no such head here"},
	"label2id":                {why: "a classification head's labels; no such head here"},
	"problem_type":            {why: "a classification head's loss; no such head here"},
	"is_encoder_decoder":      {why: "false for these decoders (the architecture says so)"},
	"output_attentions":       {why: "what transformers returns besides the logits"},
	"output_hidden_states":    {why: "what transformers returns besides the logits"},
	"return_dict":             {why: "what transformers returns besides the logits"},
	"chunk_size_feed_forward": {why: "chunks transformers' feed-forward; the same math"},
	"unk_token_id":            {why: "tokenizer setting"},
	"attn_logit_softcapping":  {why: "null: no soft-capping", refuse: nullOnly("attention logit soft-capping")},
	"final_logit_softcapping": {why: "null: no soft-capping", refuse: nullOnly("final logit soft-capping")},
}

// nullOnly refuses any value but null.
func nullOnly(what string) func(json.RawMessage, map[string]json.RawMessage) error {
	return func(v json.RawMessage, _ map[string]json.RawMessage) error {
		if isNull(v) {
			return nil
		}
		return fmt.Errorf("%s: %s is not implemented", v, what)
	}
}

// IgnoredKey is a config.json key the forward pass does not read, and why
// that is safe.
type IgnoredKey struct {
	Key, Why string
}

// IgnoredKeys lists the config's keys the trainer keeps without reading
// for the forward pass: those it knows are safe (with the reason) and
// those it does not know ("not known to this trainer"). Keys whose
// values would change the math were refused when the config was parsed.
func (c *ModelConfig) IgnoredKeys() []IgnoredKey {
	var out []IgnoredKey
	for _, k := range slices.Sorted(maps.Keys(c.Extra)) {
		why := "not known to this trainer; not read"
		if r, ok := configKeyRules[k]; ok {
			if r.read {
				continue
			}
			why = r.why
		}
		out = append(out, IgnoredKey{Key: k, Why: why})
	}
	return out
}
