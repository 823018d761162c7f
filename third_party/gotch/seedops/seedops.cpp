// See seedops.h.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

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
