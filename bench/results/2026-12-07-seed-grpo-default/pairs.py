#!/usr/bin/env python3
"""SEED − GRPO at the embedded default's settings, per seed.

    python3 pairs.py [DIR]

For each seed s with finished runs grpo-def-sS and seed-def-sS in DIR (for
seed 3 the SEED arm is ../2026-12-07-opd/teacher-s3, the default's own
run of that seed): greedy and T = 1 eval_seen, base → final, the
difference SEED − GRPO, and each run's mean iteration time (iteration_s in
metrics.jsonl) with their ratio where the two ran side by side (SIDE: the
same seed's runs started together on the two lanes).
"""
import json
import math
import os
import statistics
import sys

# Seeds whose two runs started together on the two lanes (the others ran
# beside other runs of the queue: their times are not a pair).
SIDE = (1, 2)

T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228]


def load(d):
    st = json.load(open(os.path.join(d, "state.json")))
    its = []
    for line in open(os.path.join(d, "metrics.jsonl")):
        m = json.loads(line)
        v = m.get("values") or {}
        if m.get("kind") in (None, "iteration") and "iteration_s" in v:
            its.append(v["iteration_s"])
    return st, its


def ci(xs):
    if len(xs) < 2:
        return f"{statistics.mean(xs):+.1f} (1 seed)"
    m = statistics.mean(xs)
    h = T975[len(xs) - 2] * statistics.stdev(xs) / math.sqrt(len(xs))
    return f"{m:+.1f} [{m - h:+.1f}, {m + h:+.1f}] ({len(xs)} seeds)"


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    rows = []
    for s in range(1, 13):
        g = os.path.join(root, f"grpo-def-s{s}")
        e = os.path.join(root, f"seed-def-s{s}")
        if s == 3:
            e = os.path.join(root, "..", "2026-12-07-opd", "teacher-s3")
        if not (os.path.exists(g) and os.path.exists(e)):
            continue
        (gs, gi), (es, ei) = load(g), load(e)
        if not gs.get("final_eval") or not es.get("final_eval"):
            continue
        b = gs["base_eval"]
        rows.append((s, 100 * b["seen_success"], 100 * gs["final_eval"]["seen_success"], 100 * es["final_eval"]["seen_success"],
                     100 * b["seen_sampled_success"], 100 * gs["final_eval"]["seen_sampled_success"], 100 * es["final_eval"]["seen_sampled_success"],
                     statistics.mean(gi) if gi else float("nan"), statistics.mean(ei) if ei else float("nan")))
    print("| seed | base | GRPO | SEED | SEED − GRPO | base T=1 | GRPO T=1 | SEED T=1 | SEED − GRPO T=1 | s/iteration GRPO, SEED (ratio) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for s, b, g, e, b1, g1, e1, gt, et in rows:
        side = "" if s in SIDE else " (not side by side)"
        print(f"| {s} | {b:.1f} | {g:.1f} | {e:.1f} | {e - g:+.1f} | {b1:.1f} | {g1:.1f} | {e1:.1f} | {e1 - g1:+.1f} | {gt:.0f}, {et:.0f} ({et / gt:.2f}){side} |")
    if rows:
        print()
        print("SEED − GRPO greedy:", ci([r[3] - r[2] for r in rows]), "; at T = 1:", ci([r[6] - r[5] for r in rows]))
        print("gains over the base, greedy: GRPO", ci([r[2] - r[1] for r in rows]), ", SEED", ci([r[3] - r[1] for r in rows]))
        side = [r[8] / r[7] for r in rows if r[0] in SIDE]
        if side:
            print(f"iteration time SEED / GRPO, side by side: mean {statistics.mean(side):.2f} over {len(side)} seeds")


main()
