// seedctl's own libtorch calls, for what gotch's generated wrappers cannot
// say or say too slowly. Copied into gotch's tree (libtch/seedops) by
// scripts/prepare-gotch.sh, with libtch's cgo flags.
//
// The optimizer step: the gradient norm and the AdamW update over all of a
// model's parameters in one call each, so that a step costs a handful of
// calls from Go instead of ~20 per parameter (each gotch call allocates Go
// objects and crosses cgo: ~7 µs on CPU before any work, and on a GPU the
// per-parameter norm read-back synchronised the stream every time). Where
// libtorch has the fused AdamW kernel (_fused_adamw_, CUDA from 2.0, CPU
// from 2.4) the update is that kernel over chunks of parameters; elsewhere
// a C++ loop of in-place ops (torch.optim.AdamW's single-tensor update).
//
// The profiler: libtorch's own (Kineto), the one torch.profiler drives,
// so that a step of seedctl's and PyTorch eager's same step give traces of
// the same kind (Chrome trace JSON: CPU ops and, on CUDA, kernels).
//
// Causal attention without a mask: gotch's wrapper of
// scaled_dot_product_attention hands an absent mask over as an undefined
// tensor inside the optional, which libtorch 2.x refuses.
#ifndef SEEDCTL_SEEDOPS_H
#define SEEDCTL_SEEDOPS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// A gotch tensor handle (a torch::Tensor *), as gotch's Tensor.Ctensor()
// gives it.
typedef void *seed_tensor;

// 1 when this libtorch has the fused AdamW kernel for the device (0: CPU,
// 1: CUDA).
int seed_optim_fused_available(int cuda);

// The L2 norm of the gradients of params[0..n) (those with a gradient),
// each tensor's norm computed in float32 and the sum of their squares in
// float64; one read-back. Returns 0, or -1 with *err (free it).
int seed_optim_grad_norm(seed_tensor *params, int n, double *norm, char **err);

// One AdamW update (decoupled weight decay, bias correction for step) of
// params[0..n) from their gradients, first multiplied by grad_scale (1: no
// clipping). master[i] (float32) is updated in place of params[i] and
// params[i] becomes its rounding; master may be NULL (float32 models).
// exp[i] and exp_sq[i] are the moments (float32); a NULL exp[i] skips
// parameter i (another rank owns it), as does a missing gradient.
// fused: use _fused_adamw_ (seed_optim_fused_available must say so),
// over chunks of at most chunk elements of float32 gradient copies.
// Returns 0, or -1 with *err.
int seed_optim_adamw(seed_tensor *params, seed_tensor *master, seed_tensor *exp, seed_tensor *exp_sq, int n,
                     double grad_scale, double lr, double weight_decay, double beta1, double beta2, double eps,
                     int64_t step, int fused, int64_t chunk, char **err);

// scaled_dot_product_attention(q, k, v, is_causal=true) with no mask:
// *out is a new tensor handle (delete it with gotch's at_free). Returns 0,
// or -1 with *err (libtorch 1.x has no such op).
int seed_sdpa_causal(seed_tensor q, seed_tensor k, seed_tensor v, seed_tensor *out, char **err);

// One decode step's attention on the CPU: for q [B, H, 1, d] and k, v
// [B, KVH, S, d] (starts: n_starts = B values; H a multiple of KVH; query head h reads key/value head
// h / (H / KVH); the last dimension contiguous, the others any stride),
// out[b, h] = softmax(scale · q[b, h]·k[b, g, s] for s in [starts[b], S)) ·
// v[b, g, starts[b]:]: the columns before starts[b] (a row's left padding)
// are skipped, not masked. float32 or bfloat16 (all three alike), float32
// arithmetic; each key and value row is read once for all the query heads
// that share it. *out is a new [B, H, 1, d] tensor in q's dtype. Returns 0,
// or -1 with *err.
int seed_decode_attention(seed_tensor q, seed_tensor k, seed_tensor v, const int64_t *starts, int64_t n_starts, double scale,
                          seed_tensor *out, char **err);

// Makes seed_decode_attention use its portable loops even where the CPU
// has AVX2 (on != 0), or not (tests compare both); returns the previous
// setting.
int seed_decode_attention_portable(int on);

// Starts libtorch's profiler on the calling thread (and the autograd
// threads it hands work to): CPU ops, and CUDA kernels and copies when
// cuda. The caller keeps its work on this thread (Go: LockOSThread) until
// seed_profile_stop. Returns 0, or -1 with *err.
int seed_profile_start(int cuda, char **err);

// Stops the profiler started by seed_profile_start and writes its Chrome
// trace to path. Returns 0, or -1 with *err (libtorch built without
// Kineto cannot write one).
int seed_profile_stop(const char *path, char **err);

#ifdef __cplusplus
}
#endif

#endif
