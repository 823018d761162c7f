package trainer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// rewriteConfig loads dir's config.json as a map, lets edit change it and
// writes it into a copy of the checkpoint folder.
func rewriteConfig(t *testing.T, dir string, edit func(m map[string]any)) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "ckpt")
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if e.Name() == "config.json" {
			var m map[string]any
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatal(err)
			}
			edit(m)
			b, _ = json.MarshalIndent(m, "", "  ")
		}
		if err := os.WriteFile(filepath.Join(out, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// asV5 rewrites a 4.x-style config the way transformers 5 serialises it:
// rope_theta and rope_scaling become rope_parameters, torch_dtype dtype,
// and the sliding-window keys and layer_types are spelled out.
func asV5(m map[string]any) {
	rp := map[string]any{"rope_theta": m["rope_theta"], "rope_type": "default"}
	if rs, ok := m["rope_scaling"].(map[string]any); ok {
		for k, v := range rs {
			rp[k] = v
		}
	}
	delete(m, "rope_theta")
	delete(m, "rope_scaling")
	m["rope_parameters"] = rp
	m["dtype"] = m["torch_dtype"]
	delete(m, "torch_dtype")
	n := int(m["num_hidden_layers"].(float64))
	lt := make([]any, n)
	for i := range lt {
		lt[i] = "full_attention"
	}
	m["layer_types"] = lt
	m["use_sliding_window"], m["sliding_window"], m["max_window_layers"] = false, nil, 28
	m["transformers_version"] = "5.19.0"
}

// A checkpoint whose config.json transformers 5 wrote gives the same
// logits as the same weights with a 4.x-style config, for every
// architecture (Llama's llama3 rope scaling included), and saving it keeps
// transformers 5's keys.
func TestTransformers5ConfigMatchesV4(t *testing.T) {
	for _, arch := range []Arch{ArchQwen2, ArchQwen3, ArchLlama} {
		t.Run(string(arch), func(t *testing.T) {
			m4, dir := newTiny(t, arch, 17)
			v5 := rewriteConfig(t, dir, asV5)
			m5, err := LoadCheckpoint(v5, ModelOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if m5.cfg.RopeTheta != m4.cfg.RopeTheta || m5.cfg.RopeScaling.Kind() != m4.cfg.RopeScaling.Kind() || m5.cfg.TorchDtype != "float32" {
				t.Fatalf("v5 config read as theta %v scaling %q dtype %q; v4 theta %v scaling %q", m5.cfg.RopeTheta, m5.cfg.RopeScaling.Kind(), m5.cfg.TorchDtype, m4.cfg.RopeTheta, m4.cfg.RopeScaling.Kind())
			}
			in := testInput()
			a, err := m4.Logits(in)
			if err != nil {
				t.Fatal(err)
			}
			b, err := m5.Logits(in)
			if err != nil {
				t.Fatal(err)
			}
			if d := maxAbsDiff(a, b); d != 0 {
				t.Errorf("logits differ by %g between the v4 and v5 configs", d)
			}
			if d := maxAbsDiff(b, torchLogits(t, v5, in)); d > 1e-4 {
				t.Errorf("v5 config: max |Δlogit| against PyTorch %g", d)
			}
			saved := filepath.Join(t.TempDir(), "saved")
			if err := m5.Save(saved, SaveOptions{}); err != nil {
				t.Fatal(err)
			}
			raw, _ := os.ReadFile(filepath.Join(saved, "config.json"))
			var got map[string]any
			_ = json.Unmarshal(raw, &got)
			_, hasTheta := got["rope_theta"]
			_, hasTorch := got["torch_dtype"]
			if hasTheta || hasTorch || got["rope_parameters"] == nil || got["dtype"] != "float32" {
				t.Errorf("saved v5 config lost its style: %s", raw)
			}
			ign := map[string]string{}
			for _, k := range m5.cfg.IgnoredKeys() {
				ign[k.Key] = k.Why
			}
			for _, k := range []string{"layer_types", "use_sliding_window", "sliding_window", "max_window_layers", "transformers_version"} {
				if ign[k] == "" {
					t.Errorf("ignored keys %v lack %s", ign, k)
				}
			}
			if _, ok := ign["rope_parameters"]; ok {
				t.Errorf("rope_parameters is read, not ignored")
			}
		})
	}
}

// Keys that would change the forward pass in a way the trainer does not
// implement are refused by name, never defaulted.
func TestConfigRefusesUnimplementedMath(t *testing.T) {
	_, dir := newTiny(t, ArchQwen2, 18)
	cases := map[string]struct {
		edit func(m map[string]any)
		want string
	}{
		"yarn": {func(m map[string]any) {
			asV5(m)
			m["rope_parameters"] = map[string]any{"rope_theta": 1e6, "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32}
		}, `rope_parameters.rope_type "yarn"`},
		"dynamic (4.x)":  {func(m map[string]any) { m["rope_scaling"] = map[string]any{"type": "dynamic", "factor": 2.0} }, `rope_scaling.rope_type "dynamic"`},
		"sliding window": {func(m map[string]any) { m["use_sliding_window"], m["sliding_window"] = true, 4 }, "use_sliding_window"},
		"sliding layers": {func(m map[string]any) { m["layer_types"] = []any{"full_attention", "sliding_attention"} }, "layer_types"},
		"partial rotary": {func(m map[string]any) { m["partial_rotary_factor"] = 0.5 }, "partial_rotary_factor"},
		"dropout":        {func(m map[string]any) { m["attention_dropout"] = 0.1 }, "attention_dropout"},
		"quantized":      {func(m map[string]any) { m["quantization_config"] = map[string]any{"quant_method": "gptq"} }, "quantization_config"},
		"theta disagrees": {func(m map[string]any) {
			m["rope_parameters"] = map[string]any{"rope_theta": 1e4, "rope_type": "default"}
		}, "rope_parameters.rope_theta"},
		"dtype disagrees": {func(m map[string]any) { m["dtype"] = "bfloat16" }, "dtype"},
		"per-layer rope": {func(m map[string]any) {
			asV5(m)
			m["rope_parameters"] = map[string]any{"full_attention": map[string]any{"rope_theta": 1e6, "rope_type": "default"}, "sliding_attention": map[string]any{"rope_theta": 1e4, "rope_type": "default"}}
		}, "layer types"},
		"bad rope_parameters": {func(m map[string]any) { asV5(m); m["rope_parameters"] = "fast" }, "rope_parameters"},
	}
	for name, tc := range cases {
		d := rewriteConfig(t, dir, tc.edit)
		_, err := LoadCheckpoint(d, ModelOptions{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one naming %q", name, err, tc.want)
		}
	}
	// One setting for every layer type is fine.
	d := rewriteConfig(t, dir, func(m map[string]any) {
		asV5(m)
		p := map[string]any{"rope_theta": 1e6, "rope_type": "default"}
		m["rope_parameters"] = map[string]any{"full_attention": p, "sliding_attention": p}
	})
	if m, err := LoadCheckpoint(d, ModelOptions{}); err != nil || m.cfg.RopeTheta != 1e6 {
		t.Errorf("per-layer-type rope_parameters, all alike: %v", err)
	}
}
