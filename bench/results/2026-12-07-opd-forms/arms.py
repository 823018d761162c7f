#!/usr/bin/env python3
"""[opd] items 4-5: each arm against GRPO at the default's settings, per seed.

    python3 arms.py [DIR]

For each arm prefix (oofull, seedfull, oofull01, seedfull01, oocs1,
oogated01, seedcsdef) and seed s
with a finished run ARM-sS in DIR, beside grpo-def-sS in
../2026-12-07-seed-grpo-default: greedy and T = 1 eval_seen, base → final,
ARM − GRPO per seed and its 95% t-interval over seeds, and each run's mean
iteration time (iteration_s in metrics.jsonl) with the ratio to GRPO's
(the runs were not side by side with GRPO's: two lanes busy in both).
"""
import json
import math
import os
import statistics
import sys

T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228]
ARMS = [
    ("oofull", "oracle-other advice as the skill, full form, λ = 1"),
    ("seedfull", "the policy's own skills (stage 1 included), full form, λ = 1"),
    ("oofull01", "oracle-other advice as the skill, full form, λ = 0.1"),
    ("seedfull01", "the policy's own skills (stage 1 included), full form, λ = 0.1"),
    ("oocs1", "oracle-other advice as the skill, the contrastive gap (signed, shuffled baseline), λ = 1"),
    ("oogated01", "oracle-other advice as the skill, the paper's gated NLL, λ = 0.1"),
    ("seedcsdef", "the policy's own skills (stage 1 included), the contrastive gap (signed, shuffled baseline), λ = 1"),
]


def load(d):
    st = json.load(open(os.path.join(d, "state.json")))
    its, rej = [], []
    for line in open(os.path.join(d, "metrics.jsonl")):
        m = json.loads(line)
        v = m.get("values") or {}
        if m.get("kind") in (None, "iteration") and "iteration_s" in v:
            its.append(v["iteration_s"])
            rej.append(v.get("rejected_rate", float("nan")))
    return st, its, rej


def ci(xs):
    if not xs:
        return "—"
    m = statistics.mean(xs)
    if len(xs) < 2:
        return f"{m:+.1f} (1 seed)"
    h = T975[len(xs) - 2] * statistics.stdev(xs) / math.sqrt(len(xs))
    return f"{m:+.1f} [{m - h:+.1f}, {m + h:+.1f}] ({len(xs)} seeds)"


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    grpo = os.path.join(root, "..", "2026-12-07-seed-grpo-default")
    for arm, what in ARMS:
        rows = []
        for s in range(1, 13):
            a, g = os.path.join(root, f"{arm}-s{s}"), os.path.join(grpo, f"grpo-def-s{s}")
            if not (os.path.exists(a) and os.path.exists(g)):
                continue
            (ast, ai, ar), (gst, gi, _) = load(a), load(g)
            if not ast.get("final_eval") or not gst.get("final_eval"):
                continue
            b = gst["base_eval"]
            rows.append((s, 100 * b["seen_success"], 100 * gst["final_eval"]["seen_success"], 100 * ast["final_eval"]["seen_success"],
                         100 * b["seen_sampled_success"], 100 * gst["final_eval"]["seen_sampled_success"], 100 * ast["final_eval"]["seen_sampled_success"],
                         statistics.mean(gi), statistics.mean(ai), 100 * ar[-1]))
        if not rows:
            continue
        print(f"**{arm}**: {what}")
        print()
        print("| seed | base | GRPO | arm | arm − GRPO | base T=1 | GRPO T=1 | arm T=1 | arm − GRPO T=1 | rejected, last iteration | s/iteration GRPO, arm (ratio) |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for s, b, g, e, b1, g1, e1, gt, et, rj in rows:
            print(f"| {s} | {b:.1f} | {g:.1f} | {e:.1f} | {e - g:+.1f} | {b1:.1f} | {g1:.1f} | {e1:.1f} | {e1 - g1:+.1f} | {rj:.0f}% | {gt:.0f}, {et:.0f} ({et / gt:.2f}) |")
        print()
        print("arm − GRPO greedy:", ci([r[3] - r[2] for r in rows]), "; at T = 1:", ci([r[6] - r[5] for r in rows]))
        print("gain over the base, greedy:", ci([r[3] - r[1] for r in rows]), "; at T = 1:", ci([r[6] - r[4] for r in rows]))
        print(f"iteration time arm / GRPO (not side by side): mean {statistics.mean([r[8] / r[7] for r in rows]):.2f}")
        print()


main()
