package trainer

import (
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// The memory plan predicts the trainer's peak memory for one RL step (or
// SFT step) of a model shape, from what this trainer keeps: the weights,
// their gradients, AdamW's two moments (and float32 master weights when
// the model computes in bfloat16), a reference copy for the KL term, the
// activations autograd saves for the backward pass, and the language-model
// head's [tokens, vocabulary] tensors. Each term is counted from the code
// (trainer/model.go, logprobs.go, rl.go); the sum is checked against the
// measured peak RSS of real steps on CPU (seedctl model memcheck; README,
// "Memory plan").

// MemoryInput is what the plan depends on.
type MemoryInput struct {
	Model *ModelConfig
	// DType is the compute precision: "float32" (or "") or "bfloat16".
	DType string
	// Tokens is the padded tokens of one micro-batch (rows × longest row).
	Tokens int
	// RowTokens is the longest row of the micro-batch: attention scores
	// grow with rows × RowTokens². 0: Tokens (one row).
	RowTokens int
	// Recompute: per-layer activation recomputation (only each layer's
	// input is kept; one layer is rebuilt at a time in the backward pass).
	Recompute bool
	// Reference: a second copy of the weights for the KL term.
	Reference bool
	// Entropy: the entropy bonus keeps its graph (rl.entropy_coef > 0).
	Entropy bool
	// OptimizerShards is the number of ranks a ZeRO-1 optimizer
	// (NewShardedAdamW) spreads the moments and master weights over (0 or
	// 1: not sharded). Whole parameters are dealt to ranks, so a rank
	// holds at most 1/N of the elements plus the largest parameter.
	OptimizerShards int
	// FusedAttention: attention is libtorch 2.x's
	// scaled_dot_product_attention (AttentionKernel), whose flash and
	// memory-efficient kernels keep a float32 log-sum-exp per query and
	// head for the backward pass, not the probabilities. false plans for
	// matmul and softmax written out (libtorch 1.13), which keeps them: an
	// upper bound for either build.
	FusedAttention bool
	// CUDA: the step runs on a GPU, whose process also holds the CUDA
	// context, cuBLAS's workspaces and the caching allocator's slack
	// (cudaOverhead in place of memOverhead).
	CUDA bool
}

// MemoryPlan is the predicted peak, in bytes, by part.
type MemoryPlan struct {
	Params int64
	// Weights, Grads, Master (float32 copies for bfloat16), Adam (two
	// float32 moments) and Reference are resident between steps.
	Weights, Grads, Master, Adam, Reference int64
	// Activations are what autograd keeps of the decoder layers for one
	// micro-batch at the end of the forward pass: every layer's saved
	// tensors, or with recomputation each layer's input plus one layer
	// rebuilt.
	Activations int64
	// Rebuilt is the part of Activations that exists only while the
	// backward pass recomputes the layers one at a time (the rebuilt layer's
	// graph and its attention), after the LM head's chunks are freed: with
	// recomputation the two peak apart. 0 without recomputation.
	Rebuilt int64
	// Attention is the part of Activations that is attention scores
	// (rows × heads × RowTokens² per layer kept; with recomputation one
	// block of queries at a time, tokens × heads × block).
	Attention int64
	// Logits is the language-model head's [positions, vocabulary] tensors
	// at the peak of the loss's backward pass, for one chunk of positions.
	Logits int64
	// Overhead is the process's own (libtorch, Go runtime, buffers).
	Overhead int64
	// Optimizer is the AdamW update's temporaries for the largest
	// parameter (adamw.go: at most two beside its float32 gradient, one
	// more for a bfloat16 gradient's float32 copy). The update runs after
	// the backward pass, so it peaks apart from the activations.
	Optimizer int64
}

// Resident is what the trainer holds between steps.
func (p MemoryPlan) Resident() int64 {
	return p.Weights + p.Grads + p.Master + p.Adam + p.Reference + p.Overhead
}

// Peak is the predicted peak of a step: the resident state plus the
// largest transient of the backward pass through the LM head, of the
// layers' backward pass (apart from the head's with recomputation) and of
// the optimizer update.
func (p MemoryPlan) Peak() int64 {
	return p.Resident() + max(p.Activations-p.Rebuilt+p.Logits, p.Activations, p.Optimizer)
}

// memOverhead is the trainer process's memory beyond its tensors: measured
// on CPU as the resident set of a loaded tiny model (libtorch's CPU
// allocator and kernels, the Go runtime), about 0.4 GiB; on a GPU the CUDA
// context takes about as much.
const memOverhead = 512 << 20

// cudaOverhead is the same on a GPU: the CUDA context, cuBLAS's
// workspaces and the caching allocator's rounding and slack. On one H200
// (torch 2.11, 2026-12-04: bench/results/2026-12-04-h200-gpu-check)
// nvidia-smi's peak for the bfloat16 step at 4,096 tokens exceeded the
// tensors the plan counts by 1.8 GiB at Qwen2.5-0.5B's shape and 2.0 GiB
// at 1.5B's.
const cudaOverhead = 2 << 30

// logitsCopies is how many float32 [tokens, vocabulary] tensors exist at
// the peak: the log-softmax autograd keeps and the gradient flowing into
// it, the logits themselves and, with the entropy bonus, exp(log p) and
// its product with log p (rl.go, scoreT).
func logitsCopies(entropy bool) int64 {
	if entropy {
		return 5
	}
	return 3
}

// PlanMemory predicts the peak of one step.
func PlanMemory(in MemoryInput) (MemoryPlan, error) {
	c := in.Model
	if c == nil {
		return MemoryPlan{}, errors.New("memory plan: no model config")
	}
	if err := c.Validate(); err != nil {
		return MemoryPlan{}, fmt.Errorf("memory plan: %w", err)
	}
	if in.Tokens < 1 {
		return MemoryPlan{}, fmt.Errorf("memory plan: %d tokens per micro-batch", in.Tokens)
	}
	w := int64(4)
	switch in.DType {
	case "", "float32", "fp32":
	case "bfloat16", "bf16":
		w = 2
	default:
		return MemoryPlan{}, fmt.Errorf("memory plan: dtype %q: want float32 or bfloat16", in.DType)
	}
	var p MemoryPlan
	var largest int64
	for _, s := range paramSpecs(c) {
		p.Params += numel(s.shape)
		largest = max(largest, numel(s.shape))
	}
	p.Optimizer = 3 * largest * 4
	if w == 2 {
		p.Optimizer += largest * 4
	}
	owned := p.Params // elements whose moments (and master weights) this rank keeps
	if in.OptimizerShards > 1 {
		owned = min(p.Params, (p.Params+int64(in.OptimizerShards)-1)/int64(in.OptimizerShards)+largest)
	}
	p.Weights, p.Grads, p.Adam = p.Params*w, p.Params*w, owned*8
	if w == 2 {
		p.Master = owned * 4
	}
	if in.Reference {
		p.Reference = p.Params * w
	}
	p.Overhead = memOverhead
	if in.CUDA {
		p.Overhead = cudaOverhead
	}

	T := int64(in.Tokens)
	L := int64(in.RowTokens)
	if L <= 0 || L > T {
		L = T
	}
	h, inter := int64(c.HiddenSize), int64(c.IntermediateSize)
	hd := int64(c.HeadDimension())
	nH := int64(c.NumAttentionHeads)
	q := nH * hd // queries, and keys/values once repeated to every head
	// Saved per token by one decoder layer (model.go, block.forward):
	// each RMSNorm keeps its float32 input, the normalised value and the
	// scaled output (4h + 2hw, twice); attention keeps q, the repeated k
	// and v, and its output before o_proj (4qw); the MLP keeps gate before
	// SiLU, SiLU(gate), up and their product (4Iw).
	perTok := 2*(4*h+2*h*w) + 4*q*w + 4*inter*w
	arch, _ := c.Arch()
	if arch == ArchQwen3 { // per-head q/k norms
		kv := int64(c.NumKeyValueHeads) * hd
		perTok += (q + kv) * (4 + 2*w)
	}
	// Attention probabilities per query: float32 softmax output, plus its
	// bfloat16 copy that the value matmul keeps.
	scoreBytes := int64(4)
	if w == 2 {
		scoreBytes += 2
	}
	perTokAttn := nH * L * scoreBytes
	if in.FusedAttention {
		perTokAttn = nH * 4 // the log-sum-exp per head
	}
	layers := int64(c.NumHiddenLayers)
	if in.Recompute {
		if n := attentionChunk; n > 0 && L > n && !in.FusedAttention {
			// The rebuilt layer's attention runs a block of n queries at a
			// time (block.recomputeBackward): one block's probabilities
			// (float32, and the bfloat16 copy) with their gradients and the
			// scores' gradient in float32, and the block's mask on the host
			// and as a tensor; beside them the gradients at q, k, v and the
			// attention output (the leaves share their tensors' storage).
			blockBytes := 3 * int64(4)
			if w == 2 {
				blockBytes = 4 + 2 + 2 + 4 + 4
			}
			perTokAttn = nH*n*blockBytes + 2*n*4
			perTok += 4 * q * w
		}
		p.Activations = layers*T*h*w + T*(perTok+perTokAttn)
		p.Attention = T * perTokAttn
		p.Rebuilt = T * (perTok + perTokAttn)
	} else {
		p.Activations = layers * T * (perTok + perTokAttn)
		p.Attention = layers * T * perTokAttn
	}
	// The final norm's saved tensors, and the gradient the head's chunks
	// accumulate for its output.
	p.Activations += T * (4*h + 3*h*w)
	// The head runs headChunkTokens positions at a time (rl.go,
	// headBackward).
	p.Logits = min(T, int64(headChunkTokens)) * int64(c.VocabSize) * 4 * logitsCopies(in.Entropy)
	return p, nil
}

// MemoryLine is one row of a plan's breakdown.
type MemoryLine struct {
	Part  string
	Bytes int64
}

// Lines is the plan's breakdown, resident parts first.
func (p MemoryPlan) Lines() []MemoryLine {
	out := []MemoryLine{{"weights", p.Weights}, {"gradients", p.Grads}}
	if p.Master > 0 {
		out = append(out, MemoryLine{"float32 master weights", p.Master})
	}
	out = append(out, MemoryLine{"AdamW moments", p.Adam})
	if p.Reference > 0 {
		out = append(out, MemoryLine{"reference policy (KL)", p.Reference})
	}
	act := fmt.Sprintf("activations (of which attention %s)", GiB(p.Attention))
	if p.Rebuilt > 0 {
		act = fmt.Sprintf("activations (rebuilt layer %s, attention %s)", GiB(p.Rebuilt), GiB(p.Attention))
	}
	return append(out,
		MemoryLine{"runtime overhead", p.Overhead},
		MemoryLine{act, p.Activations},
		MemoryLine{"LM head logits", p.Logits},
		MemoryLine{"optimizer update (apart from the two above)", p.Optimizer},
	)
}

// GiB formats bytes as GiB with one decimal.
func GiB(b int64) string { return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30)) }

// knownShapes are the released configs' dimensions of models the shipped
// presets name, for planning before the weights are on the machine.
var knownShapes = map[string]ModelConfig{
	"qwen2.5-0.5b": {Architectures: []string{"Qwen2ForCausalLM"}, ModelType: "qwen2", VocabSize: 151936, HiddenSize: 896, IntermediateSize: 4864, NumHiddenLayers: 24, NumAttentionHeads: 14, NumKeyValueHeads: 2, TieWordEmbeddings: true},
	"qwen2.5-1.5b": {Architectures: []string{"Qwen2ForCausalLM"}, ModelType: "qwen2", VocabSize: 151936, HiddenSize: 1536, IntermediateSize: 8960, NumHiddenLayers: 28, NumAttentionHeads: 12, NumKeyValueHeads: 2, TieWordEmbeddings: true},
	"qwen2.5-3b":   {Architectures: []string{"Qwen2ForCausalLM"}, ModelType: "qwen2", VocabSize: 151936, HiddenSize: 2048, IntermediateSize: 11008, NumHiddenLayers: 36, NumAttentionHeads: 16, NumKeyValueHeads: 2, TieWordEmbeddings: true},
	"qwen2.5-7b":   {Architectures: []string{"Qwen2ForCausalLM"}, ModelType: "qwen2", VocabSize: 152064, HiddenSize: 3584, IntermediateSize: 18944, NumHiddenLayers: 28, NumAttentionHeads: 28, NumKeyValueHeads: 4},
	"qwen3-1.7b":   {Architectures: []string{"Qwen3ForCausalLM"}, ModelType: "qwen3", VocabSize: 151936, HiddenSize: 2048, IntermediateSize: 6144, NumHiddenLayers: 28, NumAttentionHeads: 16, NumKeyValueHeads: 8, HeadDim: 128, TieWordEmbeddings: true},
	"qwen3-4b":     {Architectures: []string{"Qwen3ForCausalLM"}, ModelType: "qwen3", VocabSize: 151936, HiddenSize: 2560, IntermediateSize: 9728, NumHiddenLayers: 36, NumAttentionHeads: 32, NumKeyValueHeads: 8, HeadDim: 128, TieWordEmbeddings: true},
}

// KnownShape returns the released dimensions of a model named like a
// known one ("/models/Qwen2.5-3B-Instruct" → qwen2.5-3b), for planning
// without its files; ok is false for other names.
func KnownShape(name string) (*ModelConfig, bool) {
	base := strings.ToLower(filepath.Base(name))
	keys := ShapeNames()
	// The longest key first, so "qwen2.5-1.5b" is not read as "qwen2.5-1".
	sort.Slice(keys, func(i, j int) bool { return len(keys[i]) > len(keys[j]) })
	for _, k := range keys {
		if base == k || strings.HasPrefix(base, k+"-") {
			c := knownShapes[k]
			c.Architectures = append([]string(nil), c.Architectures...)
			c.MaxPositionEmbeddings, c.RMSNormEps, c.RopeTheta, c.HiddenAct = 32768, 1e-6, 1e6, "silu"
			return &c, true
		}
	}
	return nil, false
}

// ShapeNames lists the known shapes' names.
func ShapeNames() []string { return slices.Sorted(maps.Keys(knownShapes)) }
