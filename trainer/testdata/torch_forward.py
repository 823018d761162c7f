#!/usr/bin/python3
"""Independent PyTorch forward of a Hugging Face Qwen2/Qwen3/Llama checkpoint.

Written from transformers' modeling code (eager attention), without
transformers itself, so the Go trainer can be checked against it:

    /usr/bin/python3 torch_forward.py CHECKPOINT_DIR < input.json > logits.json

input.json: {"ids": [[...]], "positions": [[...]], "segments": [[...]]}
(segments: tokens see earlier tokens of the same non-zero segment, and
themselves). Output: {"logits": [[[...]]]} in float32.
Needs Debian's python3-torch (1.13) and numpy; nothing else.
"""
import json
import math
import os
import struct
import sys

import numpy as np
import torch

DT = {"F32": np.float32, "F16": np.float16, "BF16": None}


def read_safetensors(path):
    out = {}
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    for name, e in header.items():
        if name == "__metadata__":
            continue
        a, b = e["data_offsets"]
        raw = data[a:b]
        if e["dtype"] == "BF16":
            u = np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16
            arr = u.view(np.float32)
        else:
            arr = np.frombuffer(raw, dtype=DT[e["dtype"]]).astype(np.float32)
        out[name] = torch.from_numpy(arr.copy()).reshape(e["shape"])
    return out


def load(dir_):
    cfg = json.load(open(os.path.join(dir_, "config.json")))
    idx = os.path.join(dir_, "model.safetensors.index.json")
    w = {}
    if os.path.exists(idx):
        for f in sorted(set(json.load(open(idx))["weight_map"].values())):
            w.update(read_safetensors(os.path.join(dir_, f)))
    else:
        w = read_safetensors(os.path.join(dir_, "model.safetensors"))
    return cfg, w


def inv_freq(cfg, hd):
    # transformers 5 writes rope_parameters in place of rope_theta / rope_scaling.
    rp = cfg.get("rope_parameters") or {}
    base = cfg.get("rope_theta", rp.get("rope_theta", 10000.0))
    inv = 1.0 / (base ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))
    rs = cfg.get("rope_scaling") or rp
    kind = rs.get("rope_type", rs.get("type", "default"))
    if kind == "linear":
        inv = inv / rs["factor"]
    elif kind == "llama3":
        factor, lo, hi = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
        old = rs["original_max_position_embeddings"]
        lo_w, hi_w = old / lo, old / hi
        wave = 2 * math.pi / inv
        scaled = torch.where(wave > lo_w, inv / factor, inv)
        smooth = (old / wave - lo) / (hi - lo)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wave < hi_w) * ~(wave > lo_w)
        inv = torch.where(medium, smoothed, scaled)
    return inv


def rms(x, w, eps):
    v = x.pow(2).mean(-1, keepdim=True)
    return w * (x * torch.rsqrt(v + eps))


def rot(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def logits(cfg, w, ids, pos, seg):
    """Logits [B, T, V] for ids with RoPE positions pos and segments seg."""
    arch = cfg["architectures"][0]
    L, nh = cfg["num_hidden_layers"], cfg["num_attention_heads"]
    nkv = cfg.get("num_key_value_heads", nh)
    hd = cfg.get("head_dim") or cfg["hidden_size"] // nh
    eps = cfg.get("rms_norm_eps", 1e-6)
    qwen3 = arch == "Qwen3ForCausalLM"
    B, T = ids.shape
    i = torch.arange(T)
    allowed = (i[None, :, None] >= i[None, None, :]) & (seg[:, :, None] == seg[:, None, :]) & (seg[:, :, None] != 0)
    allowed = allowed | torch.eye(T, dtype=torch.bool)[None]
    mask = torch.zeros(B, 1, T, T)
    mask.masked_fill_(~allowed[:, None], torch.finfo(torch.float32).min)

    freqs = pos.float()[:, :, None] * inv_freq(cfg, hd)[None, None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos()[:, None], emb.sin()[:, None]

    x = w["model.embed_tokens.weight"][ids]
    for l in range(L):
        p = f"model.layers.{l}."
        h = rms(x, w[p + "input_layernorm.weight"], eps)

        def proj(n):
            return torch.nn.functional.linear(h, w[p + f"self_attn.{n}_proj.weight"], w.get(p + f"self_attn.{n}_proj.bias"))

        q = proj("q").view(B, T, nh, hd)
        k = proj("k").view(B, T, nkv, hd)
        v = proj("v").view(B, T, nkv, hd)
        if qwen3:
            q = rms(q, w[p + "self_attn.q_norm.weight"], eps)
            k = rms(k, w[p + "self_attn.k_norm.weight"], eps)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        q = q * cos + rot(q) * sin
        k = k * cos + rot(k) * sin
        rep = nh // nkv
        k = k[:, :, None].expand(B, nkv, rep, T, hd).reshape(B, nh, T, hd)
        v = v[:, :, None].expand(B, nkv, rep, T, hd).reshape(B, nh, T, hd)
        a = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(hd) + mask
        a = torch.softmax(a, dim=-1)
        o = torch.matmul(a, v).transpose(1, 2).reshape(B, T, nh * hd)
        x = x + torch.nn.functional.linear(o, w[p + "self_attn.o_proj.weight"], w.get(p + "self_attn.o_proj.bias"))
        h = rms(x, w[p + "post_attention_layernorm.weight"], eps)
        g = torch.nn.functional.silu(h @ w[p + "mlp.gate_proj.weight"].T)
        u = h @ w[p + "mlp.up_proj.weight"].T
        x = x + (g * u) @ w[p + "mlp.down_proj.weight"].T
    x = rms(x, w["model.norm.weight"], eps)
    head = w.get("lm_head.weight", w["model.embed_tokens.weight"])
    return x @ head.T


def main():
    dir_ = sys.argv[1]
    inp = json.load(sys.stdin)
    cfg, w = load(dir_)
    out = logits(cfg, w, torch.tensor(inp["ids"]), torch.tensor(inp["positions"]), torch.tensor(inp["segments"]))
    json.dump({"logits": out.tolist(), "torch": torch.__version__}, sys.stdout)


if __name__ == "__main__":
    with torch.no_grad():
        main()
