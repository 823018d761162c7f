package trainer

import "testing"

// TestPlanMemory: the plan's terms follow from the shape: resident state
// per parameter (4+4+8 bytes in float32; 2+2+4+8 in bfloat16, plus a
// reference copy for KL), activations that recomputation cuts to one
// layer, and the LM head's copies of [tokens, vocabulary].
func TestPlanMemory(t *testing.T) {
	c := tinyConfig(ArchQwen2)
	m, err := InitRandom(c, ModelOptions{}, 1)
	if err != nil {
		t.Fatal(err)
	}
	params := m.NumParams()
	m.Close()
	base := MemoryInput{Model: c, Tokens: 64, RowTokens: 32}
	f32, err := PlanMemory(base)
	if err != nil {
		t.Fatal(err)
	}
	if f32.Params != params || f32.Weights != 4*params || f32.Grads != 4*params || f32.Adam != 8*params || f32.Master != 0 || f32.Reference != 0 {
		t.Errorf("float32 resident terms %+v for %d parameters", f32, params)
	}
	if f32.Logits != 64*int64(c.VocabSize)*4*3 {
		t.Errorf("logits %d, want 3 float32 copies of 64 × %d", f32.Logits, c.VocabSize)
	}
	// The head runs a chunk of positions at a time: beyond it, the logits
	// term stops growing.
	big := base
	big.Tokens, big.RowTokens = 4*headChunkTokens, 32
	if bp, _ := PlanMemory(big); bp.Logits != int64(headChunkTokens)*int64(c.VocabSize)*4*3 {
		t.Errorf("logits at %d tokens: %d, want one chunk of %d positions", big.Tokens, bp.Logits, headChunkTokens)
	}
	bf := base
	bf.DType, bf.Reference, bf.Entropy = "bfloat16", true, true
	b16, err := PlanMemory(bf)
	if err != nil {
		t.Fatal(err)
	}
	if b16.Weights != 2*params || b16.Master != 4*params || b16.Adam != 8*params || b16.Reference != 2*params || b16.Logits != 64*int64(c.VocabSize)*4*5 {
		t.Errorf("bfloat16 terms %+v", b16)
	}
	rc := base
	rc.Recompute = true
	rec, _ := PlanMemory(rc)
	if rec.Activations >= f32.Activations || rec.Attention*int64(c.NumHiddenLayers) != f32.Attention {
		t.Errorf("recompute activations %d (attention %d) vs %d (%d): want fewer, one layer's attention", rec.Activations, rec.Attention, f32.Activations, f32.Attention)
	}
	// Attention grows with the row: rows twice as long, twice the scores.
	long := base
	long.RowTokens = 64
	l, _ := PlanMemory(long)
	if l.Attention != 2*f32.Attention {
		t.Errorf("attention %d at rows of 64, %d at 32: want double", l.Attention, f32.Attention)
	}
	// The fused kernel keeps a log-sum-exp per query and head, whatever
	// the row: attention stops growing with it, and the rest is the same.
	fu := long
	fu.FusedAttention = true
	fp, _ := PlanMemory(fu)
	if want := int64(c.NumHiddenLayers) * 64 * int64(c.NumAttentionHeads) * 4; fp.Attention != want || fp.Activations-fp.Attention != l.Activations-l.Attention {
		t.Errorf("fused attention %d (activations %d), want %d and the rest as unfused (%d)", fp.Attention, fp.Activations, want, l.Activations-l.Attention)
	}
	// On a GPU the process's overhead is the CUDA context's and the
	// caching allocator's.
	cu := base
	cu.CUDA = true
	if cp, _ := PlanMemory(cu); cp.Overhead != cudaOverhead || cp.Peak()-f32.Peak() != cudaOverhead-memOverhead {
		t.Errorf("CUDA overhead %d, peak %d vs %d on CPU", cp.Overhead, cp.Peak(), f32.Peak())
	}
	for _, bad := range []MemoryInput{{Model: c}, {Model: c, Tokens: 8, DType: "fp8"}, {Tokens: 8}} {
		if _, err := PlanMemory(bad); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

// TestKnownShape: released shapes are found by their checkpoint's folder
// name, and the Qwen2.5 parameter counts are the released ones.
func TestKnownShape(t *testing.T) {
	for name, want := range map[string]int64{
		"/models/Qwen2.5-0.5B-Instruct": 494_032_768,
		"Qwen2.5-1.5B":                  1_543_714_304,
		"/x/qwen2.5-3b-instruct":        3_085_938_688,
		"Qwen2.5-7B-Instruct":           7_615_616_512,
	} {
		c, ok := KnownShape(name)
		if !ok {
			t.Errorf("%s: no shape", name)
			continue
		}
		p, err := PlanMemory(MemoryInput{Model: c, Tokens: 1})
		if err != nil || p.Params != want {
			t.Errorf("%s: %d parameters (%v), want %d", name, p.Params, err, want)
		}
	}
	if c, ok := KnownShape("/models/Qwen3-1.7B"); !ok || c.HeadDimension() != 128 || c.NumKeyValueHeads != 8 {
		t.Errorf("Qwen3-1.7B: %+v", c)
	}
	if _, ok := KnownShape("/models/mistral-7b"); ok {
		t.Error("an unknown model matched a shape")
	}
}

// A ZeRO-1 optimizer over N ranks keeps about 1/N of the moments and master
// weights on each (at most 1/N plus the largest parameter); the rest of the
// plan is unchanged.
func TestMemoryPlanShardedOptimizer(t *testing.T) {
	c := tinyConfig(ArchQwen2)
	c.HiddenSize, c.IntermediateSize, c.NumHiddenLayers = 256, 704, 8
	whole, err := PlanMemory(MemoryInput{Model: c, DType: "bfloat16", Tokens: 64})
	if err != nil {
		t.Fatal(err)
	}
	four, err := PlanMemory(MemoryInput{Model: c, DType: "bfloat16", Tokens: 64, OptimizerShards: 4})
	if err != nil {
		t.Fatal(err)
	}
	if four.Adam >= whole.Adam/2 || four.Adam < whole.Adam/4 || four.Master*2 != four.Adam {
		t.Errorf("moments %d and master %d with 4 shards, %d and %d whole: want about a quarter", four.Adam, four.Master, whole.Adam, whole.Master)
	}
	if four.Weights != whole.Weights || four.Grads != whole.Grads || four.Activations != whole.Activations {
		t.Errorf("sharding the optimizer changed other parts: %+v vs %+v", four, whole)
	}
}
