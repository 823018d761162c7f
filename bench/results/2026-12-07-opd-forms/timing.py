#!/usr/bin/env python3
"""[opd] item 4: each form's iteration time beside GRPO's, side by side.

    python3 timing.py [DIR]

DIR (default: timing/ here) holds pairs ARM and grpo-vs-ARM that ran at the
same time, one each on the two cores (timing.sh's pair), 3 iterations,
seed 1, from the committed base; the ratio is the arm's summed
iteration_s over GRPO's.
"""
import json
import os
import sys

ARMS = [("oofull01", "advice, full form, λ = 0.1"), ("oocs1", "advice, contrastive gap, λ = 1"),
        ("oogated01", "advice, gated NLL, λ = 0.1"), ("seedcs1", "own skills (stage 1 included), contrastive gap, λ = 1")]


def its(path):
    out = []
    for line in open(path):
        m = json.loads(line)
        if m.get("kind") == "iteration":
            out.append(m["values"]["iteration_s"])
    return out


root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "timing")
print("| arm | s/iteration, arm | s/iteration, GRPO beside it | arm / GRPO |")
print("|---|---|---|---|")
for arm, what in ARMS:
    a, g = os.path.join(root, arm, "metrics.jsonl"), os.path.join(root, "grpo-vs-" + arm, "metrics.jsonl")
    if not (os.path.exists(a) and os.path.exists(g)):
        continue
    ai, gi = its(a), its(g)
    if len(ai) < 3 or len(gi) < 3:
        continue
    print(f"| {arm}: {what} | {', '.join(f'{x:.0f}' for x in ai)} | {', '.join(f'{x:.0f}' for x in gi)} | {sum(ai) / sum(gi):.2f} |")
