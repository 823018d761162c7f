#!/usr/bin/python3
"""PyTorch eager peer for the trainer benchmark: the same forward+backward
step (per-token log-probs of the next token, mean NLL, backward) on the same
checkpoint, timed in the same way.

    /usr/bin/python3 torch_bench.py CHECKPOINT_DIR BATCH SEQ MIN_SECONDS

Prints {"tokens_per_s": ..., "steps": ..., "seconds": ..., "threads": ...}.
"""
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_forward import load, logits  # noqa: E402


def main():
    dir_, batch, seq, min_s = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
    cfg, w = load(dir_)
    for t in w.values():
        t.requires_grad_(True)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, cfg["vocab_size"], (batch, seq), generator=g)
    pos = torch.arange(seq)[None].expand(batch, seq)
    seg = torch.ones(batch, seq, dtype=torch.long)
    tgt = torch.roll(ids, -1, dims=1)

    def step():
        lp = torch.log_softmax(logits(cfg, w, ids, pos, seg).float(), dim=-1)
        loss = -lp.gather(2, tgt[:, :, None]).mean()
        loss.backward()
        for t in w.values():
            t.grad = None

    step()  # warm-up
    n, t0 = 0, time.perf_counter()
    while True:
        step()
        n += 1
        el = time.perf_counter() - t0
        if el >= min_s:
            break
    print(json.dumps({"tokens_per_s": n * batch * seq / el, "steps": n, "seconds": el,
                      "threads": torch.get_num_threads(), "torch": torch.__version__}))


if __name__ == "__main__":
    main()
