// See seedops.h.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "seedops.h"

#if __has_include(<ATen/ops/_fused_adamw.h>)
#include <ATen/ops/_fused_adamw.h>
#define SEEDCTL_FUSED_ADAMW 1
#endif
#if __has_include(<ATen/ops/scaled_dot_product_attention.h>)
#define SEEDCTL_SDPA 1
#endif
#if __has_include(<torch/csrc/autograd/profiler_kineto.h>)
#include <set>
#include <torch/csrc/autograd/profiler_kineto.h>
#define SEEDCTL_PROFILER 1
#endif
#if __has_include(<ATen/ops/_fused_adamw_cpu_dispatch.h>)
#define SEEDCTL_FUSED_ADAMW_CPU 1
#endif

namespace {
void set_err(char **err, const std::string &msg) {
  if (err) *err = strdup(msg.c_str());
}

// An exception's message without libtorch's C++ backtrace.
std::string msg(const std::exception &e) {
  if (auto *c = dynamic_cast<const c10::Error *>(&e)) return c->what_without_backtrace();
  return e.what();
}

at::Tensor *T(seed_tensor t) { return static_cast<at::Tensor *>(t); }

// The single-tensor AdamW update of torch.optim.AdamW (foreach=False).
void adamw_one(at::Tensor &w, const at::Tensor &g, at::Tensor &m, at::Tensor &v, double lr, double wd, double b1,
               double b2, double eps, double bc1, double bc2) {
  if (wd > 0) w.mul_(1 - lr * wd);
  m.mul_(b1).add_(g, 1 - b1);
  v.mul_(b2).addcmul_(g, g, 1 - b2);
  at::Tensor denom = v.sqrt().div_(std::sqrt(bc2)).add_(eps);
  w.addcdiv_(m, denom, -lr / bc1);
}

// ---- one decode step's attention (seed_decode_attention) -----------------
//
// Per (row, key/value head): the scores of its query heads against every
// unpadded key (each key row read once for all of them), a softmax in
// float32, then the values (each read once) accumulated in float32. The
// x86-64 path uses AVX2 and FMA where the CPU has them (checked once at
// run time), the portable loops elsewhere: the same arithmetic up to the
// order of float32 additions and a polynomial exp within a few ulp.
inline float as_float(float x) { return x; }
inline float as_float(c10::BFloat16 x) { return static_cast<float>(x); }

template <typename T>
float dot_plain(const float *a, const T *b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; j++) acc[j] += a[i + j] * as_float(b[i + j]);
  float s = 0;
  for (int j = 0; j < 8; j++) s += acc[j];
  for (; i < n; i++) s += a[i] * as_float(b[i]);
  return s;
}

template <typename T>
void axpy_plain(float *y, float a, const T *x, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] += a * as_float(x[i]);
}

// x[i] = exp(x[i] - m), returning their sum.
float exp_sum_plain(float *x, int64_t n, float m) {
  float s = 0;
  for (int64_t i = 0; i < n; i++) {
    x[i] = std::exp(x[i] - m);
    s += x[i];
  }
  return s;
}

#if defined(__x86_64__)
#define SEED_AVX2 __attribute__((target("avx2,fma")))

SEED_AVX2 inline __m256 load8(const float *p) { return _mm256_loadu_ps(p); }
SEED_AVX2 inline __m256 load8(const c10::BFloat16 *p) {
  // bfloat16 is the high half of a float32.
  __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i *>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

SEED_AVX2 inline float hsum8(__m256 v) {
  __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  lo = _mm_hadd_ps(lo, lo);
  lo = _mm_hadd_ps(lo, lo);
  return _mm_cvtss_f32(lo);
}

template <typename T>
SEED_AVX2 float dot_avx2(const float *a, const T *b, int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), load8(b + i), acc);
  float s = hsum8(acc);
  for (; i < n; i++) s += a[i] * as_float(b[i]);
  return s;
}

// The dot products of a[0..n) with the 8 rows b, b + stride, …, into
// out[0..8): one horizontal reduction for the 8 (a tree of hadds) instead
// of one per row.
template <typename T>
SEED_AVX2 void dot8_avx2(const float *a, const T *b, int64_t stride, int64_t n, float *out) {
  __m256 acc[8];
  for (int j = 0; j < 8; j++) acc[j] = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 av = _mm256_loadu_ps(a + i);
    for (int j = 0; j < 8; j++) acc[j] = _mm256_fmadd_ps(av, load8(b + j * stride + i), acc[j]);
  }
  __m256 t0 = _mm256_hadd_ps(acc[0], acc[1]), t1 = _mm256_hadd_ps(acc[2], acc[3]);
  __m256 t2 = _mm256_hadd_ps(acc[4], acc[5]), t3 = _mm256_hadd_ps(acc[6], acc[7]);
  __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
  __m256 sum = _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
  _mm256_storeu_ps(out, sum);
  for (; i < n; i++)
    for (int j = 0; j < 8; j++) out[j] += a[i] * as_float(b[j * stride + i]);
}

template <typename T>
SEED_AVX2 void axpy_avx2(float *y, float a, const T *x, int64_t n) {
  __m256 av = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, load8(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; i++) y[i] += a * as_float(x[i]);
}

// exp for x <= 0 (scores minus their maximum): 2^k · e^r with
// k = round(x·log2 e), r = x − k·ln 2 (ln 2 split in two for precision),
// e^r by Cephes' expf polynomial; below −87 it is 0, as expf underflows.
SEED_AVX2 inline __m256 exp8(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-87.0f);
  __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  x = _mm256_max_ps(x, lo);
  __m256 k = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(k, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  __m256 r2 = _mm256_mul_ps(r, r);
  p = _mm256_fmadd_ps(p, r2, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
  __m256 y = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
  return _mm256_andnot_ps(under, y);
}

SEED_AVX2 float exp_sum_avx2(float *x, int64_t n, float m) {
  __m256 mv = _mm256_set1_ps(m), acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 y = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), mv));
    _mm256_storeu_ps(x + i, y);
    acc = _mm256_add_ps(acc, y);
  }
  float s = hsum8(acc);
  for (; i < n; i++) {
    x[i] = std::exp(x[i] - m);
    s += x[i];
  }
  return s;
}

std::atomic<bool> portable_only{false};

bool have_avx2() {
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return ok && !portable_only.load();
}
#else
std::atomic<bool> portable_only{false};
bool have_avx2() { return false; }
#endif

struct PlainOps {
  template <typename T>
  static float dot(const float *a, const T *b, int64_t n) { return dot_plain(a, b, n); }
  template <typename T>
  static void axpy(float *y, float a, const T *x, int64_t n) { axpy_plain(y, a, x, n); }
  template <typename T>
  static void dot8(const float *a, const T *b, int64_t stride, int64_t n, float *out) {
    for (int j = 0; j < 8; j++) out[j] = dot_plain(a, b + j * stride, n);
  }
  static float exp_sum(float *x, int64_t n, float m) { return exp_sum_plain(x, n, m); }
};

// The operands of decode_attention, and its scratch per thread.
template <typename T>
struct DecodeArgs {
  const T *q, *k, *v;
  T *out;
  int64_t H, d, KVH, S, rep;
  int64_t qs0, qs1, ks0, ks1, ks2, vs0, vs1, vs2;
  const int64_t *starts;
  float scale;
};

// One row's key/value head g: its rep query heads' outputs.
template <typename T, typename Ops>
inline void decode_head(const DecodeArgs<T> &a, int64_t b, int64_t g, float *qf, float *acc, float *sc) {
  const int64_t d = a.d, S = a.S, rep = a.rep, st = a.starts[b], n = S - st;
  for (int64_t r = 0; r < rep; r++) {
    const T *qr = a.q + b * a.qs0 + (g * rep + r) * a.qs1;
    for (int64_t i = 0; i < d; i++) qf[r * d + i] = as_float(qr[i]) * a.scale;
  }
  const T *kb = a.k + b * a.ks0 + g * a.ks1;
  int64_t s = st;
  for (; s + 8 <= S; s += 8)
    for (int64_t r = 0; r < rep; r++) Ops::dot8(qf + r * d, kb + s * a.ks2, a.ks2, d, sc + r * S + s);
  for (; s < S; s++) {
    const T *row = kb + s * a.ks2;
    for (int64_t r = 0; r < rep; r++) sc[r * S + s] = Ops::dot(qf + r * d, row, d);
  }
  for (int64_t r = 0; r < rep; r++) {
    float *x = sc + r * S + st;
    float m = x[0];
    for (int64_t s = 1; s < n; s++) m = std::max(m, x[s]);
    const float inv = 1.0f / Ops::exp_sum(x, n, m);
    for (int64_t s = 0; s < n; s++) x[s] *= inv;
  }
  std::fill(acc, acc + rep * d, 0.0f);
  const T *vb = a.v + b * a.vs0 + g * a.vs1;
  for (int64_t s = st; s < S; s++) {
    const T *row = vb + s * a.vs2;
    for (int64_t r = 0; r < rep; r++) Ops::axpy(acc + r * d, sc[r * S + s], row, d);
  }
  for (int64_t r = 0; r < rep; r++) {
    T *o = a.out + (b * a.H + g * rep + r) * d;
    for (int64_t i = 0; i < d; i++) o[i] = static_cast<T>(acc[r * d + i]);
  }
}

template <typename T>
void decode_head_plain(const DecodeArgs<T> &a, int64_t b, int64_t g, float *qf, float *acc, float *sc) {
  decode_head<T, PlainOps>(a, b, g, qf, acc, sc);
}

#if defined(__x86_64__)
struct Avx2Ops {
  template <typename T>
  SEED_AVX2 static float dot(const float *a, const T *b, int64_t n) { return dot_avx2(a, b, n); }
  template <typename T>
  SEED_AVX2 static void axpy(float *y, float a, const T *x, int64_t n) { axpy_avx2(y, a, x, n); }
  template <typename T>
  SEED_AVX2 static void dot8(const float *a, const T *b, int64_t stride, int64_t n, float *out) {
    dot8_avx2(a, b, stride, n, out);
  }
  SEED_AVX2 static float exp_sum(float *x, int64_t n, float m) { return exp_sum_avx2(x, n, m); }
};

// flatten: decode_head and the AVX2 helpers inlined here, compiled for
// AVX2 (a call per dot product would cost more than the product).
template <typename T>
SEED_AVX2 __attribute__((flatten)) void decode_head_avx2(const DecodeArgs<T> &a, int64_t b, int64_t g, float *qf,
                                                         float *acc, float *sc) {
  decode_head<T, Avx2Ops>(a, b, g, qf, acc, sc);
}
#endif

template <typename T>
void decode_attention(const at::Tensor &q, const at::Tensor &k, const at::Tensor &v, const int64_t *starts,
                      float scale, at::Tensor &out) {
  DecodeArgs<T> a;
  a.q = q.data_ptr<T>(), a.k = k.data_ptr<T>(), a.v = v.data_ptr<T>(), a.out = out.data_ptr<T>();
  a.H = q.size(1), a.d = q.size(3), a.KVH = k.size(1), a.S = k.size(2), a.rep = a.H / a.KVH;
  a.qs0 = q.stride(0), a.qs1 = q.stride(1);
  a.ks0 = k.stride(0), a.ks1 = k.stride(1), a.ks2 = k.stride(2);
  a.vs0 = v.stride(0), a.vs1 = v.stride(1), a.vs2 = v.stride(2);
  a.starts = starts, a.scale = scale;
  const bool avx2 = have_avx2();
  at::parallel_for(0, q.size(0) * a.KVH, 1, [&](int64_t lo, int64_t hi) {
    std::vector<float> qf(a.rep * a.d), acc(a.rep * a.d), sc(a.rep * a.S);
    for (int64_t idx = lo; idx < hi; idx++) {
      const int64_t b = idx / a.KVH, g = idx % a.KVH;
#if defined(__x86_64__)
      if (avx2) {
        decode_head_avx2<T>(a, b, g, qf.data(), acc.data(), sc.data());
        continue;
      }
#endif
      decode_head_plain<T>(a, b, g, qf.data(), acc.data(), sc.data());
    }
  });
}
}  // namespace

extern "C" {

int seed_optim_fused_available(int cuda) {
#if defined(SEEDCTL_FUSED_ADAMW)
  if (cuda) return 1;
#if defined(SEEDCTL_FUSED_ADAMW_CPU)
  return 1;
#endif
#endif
  return 0;
}

int seed_optim_grad_norm(seed_tensor *params, int n, double *norm, char **err) {
  try {
    at::NoGradGuard no_grad;
    std::vector<at::Tensor> norms;
    norms.reserve(n);
    for (int i = 0; i < n; i++) {
      const at::Tensor &g = T(params[i])->grad();
      if (!g.defined()) continue;
      norms.push_back(at::linalg_vector_norm(g, 2, at::OptionalIntArrayRef(), false, at::kFloat));
    }
    if (norms.empty()) {
      *norm = 0;
      return 0;
    }
    *norm = at::stack(norms).to(at::kDouble).square().sum().sqrt().item<double>();
    return 0;
  } catch (const std::exception &e) {
    set_err(err, std::string("gradient norm: ") + msg(e));
    return -1;
  }
}

int seed_optim_adamw(seed_tensor *params, seed_tensor *master, seed_tensor *exp, seed_tensor *exp_sq, int n,
                     double grad_scale, double lr, double weight_decay, double beta1, double beta2, double eps,
                     int64_t step, int fused, int64_t chunk, char **err) {
  try {
    at::NoGradGuard no_grad;
    const double bc1 = 1 - std::pow(beta1, static_cast<double>(step));
    const double bc2 = 1 - std::pow(beta2, static_cast<double>(step));
    if (!fused) {
      for (int i = 0; i < n; i++) {
        if (!exp[i]) continue;
        at::Tensor &p = *T(params[i]);
        const at::Tensor &grad = p.grad();
        if (!grad.defined()) continue;
        at::Tensor g = master ? grad.to(at::kFloat) : grad;
        if (grad_scale != 1) g.mul_(grad_scale);
        at::Tensor &w = master ? *T(master[i]) : p;
        adamw_one(w, g, *T(exp[i]), *T(exp_sq[i]), lr, weight_decay, beta1, beta2, eps, bc1, bc2);
        if (master) p.copy_(w);
      }
      return 0;
    }
#if defined(SEEDCTL_FUSED_ADAMW)
    at::Tensor steps;  // the kernel reads the step count from a float32 tensor on the parameters' device
    std::vector<at::Tensor> w, g, m, v, st, dst;
    int64_t held = 0;
    auto flush = [&]() {
      if (w.empty()) return;
      at::_fused_adamw_(w, g, m, v, {}, st, lr, beta1, beta2, weight_decay, eps, false, false);
      for (size_t k = 0; k < dst.size(); k++) dst[k].copy_(w[k]);
      w.clear(), g.clear(), m.clear(), v.clear(), st.clear(), dst.clear();
      held = 0;
    };
    for (int i = 0; i < n; i++) {
      if (!exp[i]) continue;
      at::Tensor &p = *T(params[i]);
      const at::Tensor &grad = p.grad();
      if (!grad.defined()) continue;
      if (!steps.defined()) steps = at::full({}, static_cast<double>(step), p.options().dtype(at::kFloat));
      at::Tensor gi = master ? grad.to(at::kFloat) : grad;
      if (grad_scale != 1) gi.mul_(grad_scale);
      w.push_back(master ? *T(master[i]) : p);
      g.push_back(gi);
      m.push_back(*T(exp[i]));
      v.push_back(*T(exp_sq[i]));
      st.push_back(steps);
      if (master) dst.push_back(p);
      if (master) held += gi.numel();
      if (held >= chunk) flush();
    }
    flush();
    return 0;
#else
    set_err(err, "AdamW update: this libtorch has no fused AdamW kernel (_fused_adamw_, libtorch 2.0 and later)");
    return -1;
#endif
  } catch (const std::exception &e) {
    set_err(err, std::string("AdamW update: ") + msg(e));
    return -1;
  }
}

int seed_sdpa_causal(seed_tensor q, seed_tensor k, seed_tensor v, seed_tensor *out, char **err) {
#if defined(SEEDCTL_SDPA)
  try {
    *out = new at::Tensor(at::scaled_dot_product_attention(*T(q), *T(k), *T(v), std::nullopt, 0.0, true));
    return 0;
  } catch (const std::exception &e) {
    set_err(err, std::string("causal attention: ") + msg(e));
    return -1;
  }
#else
  set_err(err, "causal attention: this libtorch has no scaled_dot_product_attention (libtorch 2.0 and later)");
  return -1;
#endif
}

int seed_decode_attention(seed_tensor q, seed_tensor k, seed_tensor v, const int64_t *starts, int64_t n_starts, double scale,
                          seed_tensor *out, char **err) {
  try {
    const at::Tensor &Q = *T(q), &K = *T(k), &V = *T(v);
    auto bad = [&](const std::string &why) {
      set_err(err, "decode attention: " + why);
      return -1;
    };
    if (Q.dim() != 4 || K.dim() != 4 || V.dim() != 4) return bad("q, k and v must be 4-dimensional");
    if (!Q.device().is_cpu() || !K.device().is_cpu() || !V.device().is_cpu()) return bad("CPU tensors only");
    if (Q.scalar_type() != K.scalar_type() || Q.scalar_type() != V.scalar_type())
      return bad("q, k and v must share a dtype");
    const int64_t B = Q.size(0), H = Q.size(1), d = Q.size(3), KVH = K.size(1), S = K.size(2);
    if (Q.size(2) != 1) return bad("one query per row (q [B, H, 1, d])");
    if (K.size(0) != B || V.size(0) != B || V.size(1) != KVH || V.size(2) != S || K.size(3) != d || V.size(3) != d)
      return bad("k and v must be [B, KVH, S, d] with q's B and d");
    if (KVH < 1 || H % KVH != 0) return bad("query heads must be a multiple of key/value heads");
    if (Q.stride(3) != 1 || K.stride(3) != 1 || V.stride(3) != 1) return bad("the last dimension must be contiguous");
    if (n_starts != B) return bad("one first key per row");
    for (int64_t b = 0; b < B; b++)
      if (starts[b] < 0 || starts[b] >= S) return bad("a row's first key is outside its keys");
    at::NoGradGuard no_grad;
    at::Tensor o = at::empty({B, H, 1, d}, Q.options());
    const float sc = static_cast<float>(scale);
    if (Q.scalar_type() == at::kFloat) {
      decode_attention<float>(Q, K, V, starts, sc, o);
    } else if (Q.scalar_type() == at::kBFloat16) {
      decode_attention<c10::BFloat16>(Q, K, V, starts, sc, o);
    } else {
      return bad("float32 or bfloat16 only");
    }
    *out = new at::Tensor(o);
    return 0;
  } catch (const std::exception &e) {
    set_err(err, std::string("decode attention: ") + msg(e));
    return -1;
  }
}

int seed_decode_attention_portable(int on) { return portable_only.exchange(on != 0) ? 1 : 0; }

int seed_profile_start(int cuda, char **err) {
#if defined(SEEDCTL_PROFILER)
  try {
    using torch::profiler::impl::ActivityType;
    torch::profiler::impl::ProfilerConfig cfg(torch::profiler::impl::ProfilerState::KINETO);
    std::set<ActivityType> acts{ActivityType::CPU};
    if (cuda) acts.insert(ActivityType::CUDA);
    torch::autograd::profiler::prepareProfiler(cfg, acts);
    torch::autograd::profiler::enableProfiler(cfg, acts);
    return 0;
  } catch (const std::exception &e) {
    set_err(err, std::string("starting the profiler: ") + msg(e));
    return -1;
  }
#else
  set_err(err, "starting the profiler: this libtorch has no profiler headers");
  return -1;
#endif
}

int seed_profile_stop(const char *path, char **err) {
#if defined(SEEDCTL_PROFILER)
  try {
    auto result = torch::autograd::profiler::disableProfiler();
    if (!result) {
      set_err(err, "stopping the profiler: it was not running");
      return -1;
    }
    result->save(path);
    return 0;
  } catch (const std::exception &e) {
    set_err(err, std::string("writing the profiler's trace to ") + path + ": " + msg(e));
    return -1;
  }
#else
  set_err(err, "stopping the profiler: this libtorch has no profiler headers");
  return -1;
#endif
}

}  // extern "C"
