#!/usr/bin/env python3
"""The positive control's criterion, per seed and over seeds.

    python3 halfway.py ARM_PREFIX TEACHER_EVAL_PREFIX [DIR]

For each seed s with a finished student run ARM_PREFIX-sS and a teacher
evaluation (TEACHER_EVAL_PREFIX-sS: a run of the teacher with 0
iterations, or for seed 3 the teacher's own training run, whose final
evaluation is the teacher) in DIR, both under seed s's evaluation
protocol: the student's base b, the teacher t and the student's final f
(greedy eval_seen success, and the same at T = 1), the share of the gap
closed (f − b)/(t − b), and f − (b + t)/2, whose mean over seeds with its
95% t-interval says whether the student moved at least halfway.
"""
import json
import math
import os
import statistics
import sys

T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228]


def state(d):
    return json.load(open(os.path.join(d, "state.json")))


def main():
    arm, teach = sys.argv[1], sys.argv[2]
    root = sys.argv[3] if len(sys.argv) > 3 else "."
    rows = []
    for s in range(1, 21):
        sd = os.path.join(root, f"{arm}-s{s}")
        td = os.path.join(root, f"{teach}-s{s}")
        if not (os.path.exists(sd) and os.path.exists(td)):
            continue
        st, tt = state(sd), state(td)
        if not st.get("final_eval") or not tt.get("final_eval"):
            continue
        b, f, t = st["base_eval"], st["final_eval"], tt["final_eval"]
        rows.append((s, 100 * b["seen_success"], 100 * t["seen_success"], 100 * f["seen_success"],
                     100 * b.get("seen_sampled_success", float("nan")), 100 * t.get("seen_sampled_success", float("nan")),
                     100 * f.get("seen_sampled_success", float("nan"))))
    print(f"| seed | base | teacher | {arm} | share of the gap closed | base T=1 | teacher T=1 | {arm} T=1 |")
    print("|---|---|---|---|---|---|---|---|")
    for s, b, t, f, b1, t1, f1 in rows:
        share = (f - b) / (t - b) if t != b else float("nan")
        print(f"| {s} | {b:.1f} | {t:.1f} | {f:.1f} | {share:+.2f} | {b1:.1f} | {t1:.1f} | {f1:.1f} |")
    for label, idx in (("greedy", (1, 2, 3)), ("T = 1", (4, 5, 6))):
        d = [r[idx[2]] - (r[idx[0]] + r[idx[1]]) / 2 for r in rows]
        gaps = [r[idx[1]] - r[idx[0]] for r in rows]
        moved = [r[idx[2]] - r[idx[0]] for r in rows]
        if len(d) < 2:
            print(f"{label}: {len(d)} seeds")
            continue
        m = statistics.mean(d)
        h = T975[len(d) - 2] * statistics.stdev(d) / math.sqrt(len(d))
        print(f"{label}, {len(d)} seeds: teacher − base {statistics.mean(gaps):+.1f}, student gain {statistics.mean(moved):+.1f}, "
              f"share of the gap closed (means) {statistics.mean(moved) / statistics.mean(gaps):.2f}; "
              f"final − midpoint {m:+.1f} [{m - h:+.1f}, {m + h:+.1f}] (≥ 0: at least halfway)")


if __name__ == "__main__":
    main()
