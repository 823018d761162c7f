#!/usr/bin/env python3
"""PyTorch eager peer of `seedctl model stepbench`: the same training step
on the same shape, device and precision, timed the same way.

    seedctl model stepbench --size qwen2.5-0.5b --device cuda --json > sb.json
    python3 eager_step.py sb.json [--device cuda]

The step, as seedctl's: random tokens in rows (one causal sequence per
row), the decoder (Qwen2 / Qwen3 / Llama: RMSNorm, RoPE, grouped-query
attention, SwiGLU MLP), the LM head, log-softmax in float32, the mean NLL
of the next token, backward, gradients clipped to norm 1, AdamW. As PyTorch
users write it: float32 parameters under torch.autocast for bfloat16 (the
same 8 bytes per parameter of weights and gradients as seedctl's bfloat16
weights with float32 master copies), F.scaled_dot_product_attention with
is_causal, torch.utils.checkpoint per layer when stepbench ran with
recomputation, the fused AdamW on CUDA. Llama 3's RoPE scaling is left out
(it does not change the cost). Random weights: the cost does not depend on
them.

Prints one JSON object: tokens_per_s (tokens over the median step),
step_seconds, peak_memory_bytes (torch.cuda.max_memory_allocated on CUDA),
torch. --profile FILE runs one more step under torch.profiler after the
timed ones and writes its Chrome trace there, of the same kind as
`seedctl model stepbench --profile` (trace_summary.py compares the two).
"""
import argparse
import json
import sys
import time

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


def build(cfg, device):
    h, inter, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    nh, nkv = cfg["num_attention_heads"], cfg.get("num_key_value_heads") or cfg["num_attention_heads"]
    hd = cfg.get("head_dim") or h // nh
    qwen2 = cfg.get("model_type") == "qwen2"
    bias = qwen2 or bool(cfg.get("attention_bias"))
    g = torch.Generator(device="cpu").manual_seed(1)

    def w(*shape):
        return (torch.randn(*shape, generator=g) * 0.02).to(device).requires_grad_(True)

    def ones(n):
        return torch.ones(n, device=device, requires_grad=True)

    p = {"embed": w(v, h), "norm": ones(h), "layers": []}
    for _ in range(cfg["num_hidden_layers"]):
        lay = {"in": ones(h), "post": ones(h), "q": w(nh * hd, h), "k": w(nkv * hd, h), "v": w(nkv * hd, h),
               "o": w(h, nh * hd), "gate": w(inter, h), "up": w(inter, h), "down": w(h, inter)}
        if bias:
            lay.update(qb=w(nh * hd), kb=w(nkv * hd), vb=w(nkv * hd))
        if cfg.get("model_type") == "qwen3":
            lay.update(qn=ones(hd), kn=ones(hd))
        p["layers"].append(lay)
    p["head"] = p["embed"] if cfg.get("tie_word_embeddings") else w(v, h)
    return p, (nh, nkv, hd)


def params(p):
    out = [p["embed"], p["norm"]] + [t for lay in p["layers"] for t in lay.values()]
    if p["head"] is not p["embed"]:
        out.append(p["head"])
    return out


def rms(x, wt, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * wt


def rope(t, hd, theta, device):
    inv = 1.0 / (theta ** (torch.arange(0, hd, 2, device=device).float() / hd))
    f = torch.outer(torch.arange(t, device=device).float(), inv)
    e = torch.cat([f, f], -1)
    return e.cos()[None, None], e.sin()[None, None]


def rot(x, cos, sin):
    x1, x2 = x.chunk(2, -1)
    return x * cos + torch.cat([-x2, x1], -1) * sin


def block(lay, x, cos, sin, dims, eps):
    nh, nkv, hd = dims
    b, t, _ = x.shape
    hN = rms(x, lay["in"], eps)
    q = F.linear(hN, lay["q"], lay.get("qb")).view(b, t, nh, hd)
    k = F.linear(hN, lay["k"], lay.get("kb")).view(b, t, nkv, hd)
    v = F.linear(hN, lay["v"], lay.get("vb")).view(b, t, nkv, hd)
    if "qn" in lay:
        q, k = rms(q, lay["qn"], eps), rms(k, lay["kn"], eps)
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    q, k = rot(q, cos.to(q.dtype), sin.to(q.dtype)), rot(k, cos.to(k.dtype), sin.to(k.dtype))
    if nkv != nh:
        k, v = k.repeat_interleave(nh // nkv, 1), v.repeat_interleave(nh // nkv, 1)
    a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    x = x + F.linear(a.transpose(1, 2).reshape(b, t, nh * hd), lay["o"])
    h2 = rms(x, lay["post"], eps)
    return x + F.linear(F.silu(F.linear(h2, lay["gate"])) * F.linear(h2, lay["up"]), lay["down"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("stepbench_json", help="the output of seedctl model stepbench --json")
    ap.add_argument("--device", help="default: the stepbench's")
    ap.add_argument("--steps", type=int, default=0, help="timed steps (default: the stepbench's)")
    ap.add_argument("--profile", help="write a Chrome trace of one more step (torch.profiler) to this file")
    a = ap.parse_args()
    sb = json.load(open(a.stepbench_json))
    cfg = sb["config"]
    device = torch.device(a.device or sb["device"])
    steps = a.steps or len(sb["step_seconds"])
    tokens, row, recompute = sb["tokens"], sb["row"], sb["recompute"]
    bf16 = sb["dtype"] in ("bfloat16", "bf16")
    eps, theta = cfg.get("rms_norm_eps", 1e-6), cfg.get("rope_theta", 10000.0)

    p, dims = build(cfg, device)
    opt = torch.optim.AdamW(params(p), lr=1e-6, weight_decay=0.0, fused=device.type == "cuda")
    g = torch.Generator(device="cpu").manual_seed(1)
    ids = torch.randint(0, cfg["vocab_size"], (tokens // row, row + 1), generator=g).to(device)
    inp, tgt = ids[:, :-1], ids[:, 1:]
    cos, sin = rope(row, dims[2], theta, device)

    def step():
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            x = p["embed"][inp]
            for lay in p["layers"]:
                if recompute:
                    x = checkpoint(block, lay, x, cos, sin, dims, eps, use_reentrant=False)
                else:
                    x = block(lay, x, cos, sin, dims, eps)
            logits = F.linear(rms(x, p["norm"], eps), p["head"])
        lp = torch.log_softmax(logits.float(), -1)
        loss = -lp.gather(-1, tgt[..., None]).mean()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params(p), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    step()  # warm-up
    sync()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    secs = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        sync()
        secs.append(time.perf_counter() - t0)
    med = sorted(secs)[len(secs) // 2]
    out = {"tokens_per_s": tokens / med, "step_seconds": secs, "torch": torch.__version__,
           "device": str(device), "threads": torch.get_num_threads()}
    if device.type == "cuda":
        out["peak_memory_bytes"] = torch.cuda.max_memory_allocated(device)
    if a.profile:
        try:
            acts = [torch.profiler.ProfilerActivity.CPU]
            if device.type == "cuda":
                acts.append(torch.profiler.ProfilerActivity.CUDA)
            with torch.profiler.profile(activities=acts) as prof:
                step()
                sync()
            prof.export_chrome_trace(a.profile)
            out["profile"] = a.profile
        except Exception as e:  # the timing stands without the trace
            out["profile_error"] = f"{type(e).__name__}: {e}"
    json.dump(out, sys.stdout)
    print()


if __name__ == "__main__":
    main()
