#!/usr/bin/env python3
"""Stage 1 measured on held-out trajectories, per variant and seed.

    python3 table.py [DIR]

Reads the stage1 line of metrics.jsonl in DIR/s1V-sS (V in A–D, S the
seed): the analyzer's skill NLL per target token on the held-out groups
before and after the fine-tuning, and the share of the policy's own
analyses of them (greedy, as stage 2 makes them) that parsed with a skill;
and greedy eval_seen of the base and of the policy after stage 1 (the
runs stop there: --iterations 0).
"""
import json
import os
import sys

VARIANTS = {
    "A": "ours, lr 5e-5, 1 epoch (the embedded default)",
    "B": "ours, lr 1e-3, 3 epochs",
    "C": "public optimizer, lr 1e-3, 3 epochs",
    "D": "public optimizer, lr 5e-5, 1 epoch",
}


def stage1(d):
    for line in open(os.path.join(d, "metrics.jsonl")):
        m = json.loads(line)
        if m.get("kind") == "stage1":
            return m["values"]
    return None


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    print("| variant | seed | held out | skill NLL before → after | own analyses with a skill, before → after | eval_seen greedy, base → after stage 1 | last SFT step's loss | stage 1 s |")
    print("|---|---|---|---|---|---|---|---|")
    for v, what in VARIANTS.items():
        for s in (1, 2):
            d = os.path.join(root, f"s1{v}-s{s}")
            if not os.path.exists(d):
                continue
            x = stage1(d)
            if not x or "held_out" not in x:
                continue
            st = json.load(open(os.path.join(d, "state.json")))
            ev = f"{100 * st['base_eval']['seen_success']:.1f} → {100 * st['final_eval']['seen_success']:.1f}" if st.get("final_eval") else "—"
            print(f"| {v}: {what} | {s} | {x['held_out']:.0f} | {x['held_out_nll_before']:.3f} → {x['held_out_nll_after']:.3f} | "
                  f"{100 * x['held_out_skill_share_before']:.0f}% → {100 * x['held_out_skill_share_after']:.0f}% | {ev} | {x['sft_final_loss']:.3f} | {x['seconds']:.0f} |")


main()
