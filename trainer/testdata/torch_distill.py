#!/usr/bin/python3
"""Reference for the full-distribution on-policy distillation loss.

    /usr/bin/python3 torch_distill.py CHECKPOINT_DIR < batch.json > out.json

batch.json: {"temperature": T, "lambda": λ, "rows": [{"ids": [...],
"dists": {"<position>": {"ids": [...] or null, "logp": [...]}}}]}.
At each listed position k of a row, the policy's next-token distribution
p = softmax(logits(ids[:k]) / T) is compared with the teacher's q by the
reverse KL Σ_v p(v)·(log p(v) − log q(v)) (or, with "beta" below 1,
TRL's generalized JSD: 0 the forward KL); a top-k q (ids given) keeps
the rest of the vocabulary as one bucket (p_R and q_R, both floored at
1e-12). loss = λ · mean over all listed positions.
Output: {"loss": float, "grads": {parameter name: flat list}}.
Written from the definition with torch autograd, independently of the
Go trainer; the forward is torch_forward.py's.
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_forward import load, logits  # noqa: E402

FLOOR = 1e-12


def divergence(lp, lq, beta):
    """TRL's generalized JSD (GKDTrainer.generalized_jsd_loss): beta 1 the
    reverse KL(p||q), 0 the forward KL(q||p), between them
    beta*KL(q||m) + (1-beta)*KL(p||m) with m = beta*q + (1-beta)*p."""
    kl = lambda a, b: (a.exp() * (a - b)).sum()
    if beta == 1:
        return kl(lp, lq)
    if beta == 0:
        return kl(lq, lp)
    lm = torch.log(torch.clamp(beta * lq.exp() + (1 - beta) * lp.exp(), min=1e-30))
    return beta * kl(lq, lm) + (1 - beta) * kl(lp, lm)


def main():
    cfg, w = load(sys.argv[1])
    for t in w.values():
        t.requires_grad_(True)
    inp = json.load(sys.stdin)
    temp = inp["temperature"] or 1.0
    beta = inp.get("beta", 1.0)
    total, n = 0.0, 0
    for row in inp["rows"]:
        ids = torch.tensor([row["ids"]])
        T = ids.shape[1]
        lg = logits(cfg, w, ids, torch.arange(T)[None], torch.ones(1, T, dtype=torch.int64))[0]
        logp = torch.log_softmax(lg.double() / temp, dim=-1)
        for k, d in row["dists"].items():
            k = int(k)
            lp = logp[k - 1]  # predicts ids[k] from ids[:k]
            lq = torch.tensor(d["logp"], dtype=torch.float64)
            if d.get("ids") is None:
                a, b = lp, lq
            else:
                sel = lp[torch.tensor(d["ids"])]
                p_r = torch.clamp(1 - sel.exp().sum(), min=FLOOR)
                q_r = max(1 - float(lq.exp().sum()), FLOOR)
                a = torch.cat([sel, p_r.log().reshape(1)])
                b = torch.cat([lq, torch.tensor([q_r], dtype=torch.float64).log()])
            total = total + divergence(a, b, beta)
            n += 1
    loss = inp["lambda"] * total / n
    loss.backward()
    grads = {k: t.grad.reshape(-1).tolist() for k, t in w.items() if t.grad is not None}
    json.dump({"loss": float(loss), "grads": grads}, sys.stdout)


if __name__ == "__main__":
    main()
