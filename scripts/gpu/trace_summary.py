#!/usr/bin/env python3
"""Compares Chrome traces of one training step from libtorch's profiler:
`seedctl model stepbench --profile A.json` and `eager_step.py --profile
B.json` (torch.profiler), side by side. Standard library only.

    python3 trace_summary.py seedctl.json eager.json [--labels seedctl,eager] [--json out.json]

For each trace: the step's span (first to last event), the libtorch ops
the host issued (top-level ones: what the caller asked for; all: with the
ops they call), on CUDA the kernels (count, summed time, the GPU's busy
time as the union of kernel and copy intervals, idle gaps), the host's
waits on the device (synchronisations and device-to-host copies), and
kernel time by kind (matmul, attention, softmax, normalisation,
elementwise, reduction, copy/cast, optimizer, other) and the top kernels.
The difference between the traces' kernel times is work the device did
that the other did not do; a difference in span not in kernel time is the
device waiting for the host.
"""
import argparse
import collections
import json
import re
import sys

KINDS = [  # first match wins
    ("optimizer", re.compile(r"adam|multi_tensor|foreach", re.I)),
    ("attention", re.compile(r"flash|fmha|attention|sdpa|efficient_attention", re.I)),
    ("matmul", re.compile(r"gemm|cutlass|xmma|nvjet|sm\d+_|cublas|matmul|dot_kernel|splitk", re.I)),
    ("softmax", re.compile(r"softmax", re.I)),
    ("normalisation", re.compile(r"norm|rsqrt", re.I)),
    ("reduction", re.compile(r"reduce|sum_|mean|norm", re.I)),
    ("copy/cast", re.compile(r"copy|cast|convert|cat_|catarray|gather|scatter|index|embedding|fill", re.I)),
    ("elementwise", re.compile(r"elementwise|vectorized|unrolled|pointwise", re.I)),
]
HOST_WAITS = re.compile(r"Synchronize|cudaMemcpy(?!.*Async)|cudaStreamSynchronize|cudaEventSynchronize|cudaMemcpyAsync", re.I)


def kind(name):
    for k, rx in KINDS:
        if rx.search(name):
            return k
    return "other"


def union(intervals):
    total, end = 0.0, None
    gaps = []
    for s, e in sorted(intervals):
        if end is None:
            total, end = e - s, e
            continue
        if s > end:
            gaps.append(s - end)
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total, gaps


def top_level(ops):
    """Ops not nested in another op of the same thread."""
    by_tid = collections.defaultdict(list)
    for e in ops:
        by_tid[e.get("tid")].append(e)
    out = []
    for evs in by_tid.values():
        evs.sort(key=lambda e: (e["ts"], -e.get("dur", 0)))
        end = -1.0
        for e in evs:
            if e["ts"] >= end:
                out.append(e)
                end = e["ts"] + e.get("dur", 0)
    return out


def short(name, n=70):
    name = re.sub(r"\s+", " ", name)
    return name if len(name) <= n else name[: n - 1] + "…"


def summarise(path):
    with open(path) as f:
        trace = json.load(f)
    ev = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X" and "ts" in e]
    if not ev:
        raise SystemExit(f"trace_summary: {path}: no complete events (is it a Chrome trace from libtorch's profiler?)")
    ops = [e for e in ev if e.get("cat") == "cpu_op"]
    kernels = [e for e in ev if e.get("cat") == "kernel"]
    copies = [e for e in ev if e.get("cat") in ("gpu_memcpy", "gpu_memset")]
    runtime = [e for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver")]
    t0 = min(e["ts"] for e in ev)
    t1 = max(e["ts"] + e.get("dur", 0) for e in ev)
    top = top_level(ops)
    s = {
        "trace": path,
        "span_ms": (t1 - t0) / 1e3,
        "ops_top_level": len(top),
        "ops_all": len(ops),
        "host_op_ms": sum(e.get("dur", 0) for e in top) / 1e3,
        "kernels": len(kernels),
        "kernel_ms": sum(e.get("dur", 0) for e in kernels) / 1e3,
        "copies": len(copies),
        "copy_ms": sum(e.get("dur", 0) for e in copies) / 1e3,
    }
    if kernels or copies:
        busy, gaps = union([(e["ts"], e["ts"] + e.get("dur", 0)) for e in kernels + copies])
        s["gpu_busy_ms"] = busy / 1e3
        s["gpu_idle_ms"] = s["span_ms"] - s["gpu_busy_ms"]
        s["gaps_over_50us"] = sum(1 for g in gaps if g > 50)
        s["gap_ms_over_50us"] = sum(g for g in gaps if g > 50) / 1e3
    waits = [e for e in runtime if HOST_WAITS.search(e.get("name", ""))]
    s["host_waits"] = len(waits)
    s["host_wait_ms"] = sum(e.get("dur", 0) for e in waits) / 1e3
    s["launches"] = sum(1 for e in runtime if "Launch" in e.get("name", ""))
    by_kind = collections.Counter()
    by_name = collections.Counter()
    n_name = collections.Counter()
    for e in kernels:
        by_kind[kind(e["name"])] += e.get("dur", 0) / 1e3
        by_name[e["name"]] += e.get("dur", 0) / 1e3
        n_name[e["name"]] += 1
    s["kernel_ms_by_kind"] = dict(by_kind)
    s["top_kernels"] = [{"name": n, "ms": ms, "count": n_name[n]} for n, ms in by_name.most_common(15)]
    op_ms = collections.Counter()
    op_n = collections.Counter()
    for e in top:
        op_ms[e["name"]] += e.get("dur", 0) / 1e3
        op_n[e["name"]] += 1
    s["top_ops"] = [{"name": n, "host_ms": ms, "count": op_n[n]} for n, ms in op_ms.most_common(15)]
    return s


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("traces", nargs="+", help="Chrome trace JSON files (one step each)")
    ap.add_argument("--labels", help="comma-separated names for the traces (default: the file names)")
    ap.add_argument("--json", help="also write the summaries to this file")
    a = ap.parse_args()
    labels = a.labels.split(",") if a.labels else a.traces
    if len(labels) != len(a.traces):
        raise SystemExit("trace_summary: --labels needs one name per trace")
    sums = [summarise(p) for p in a.traces]
    w = max(len(l) for l in labels) + 2
    rows = [
        ("step span (ms)", "span_ms"), ("host: top-level ops", "ops_top_level"), ("host: all ops", "ops_all"),
        ("host: time in top-level ops (ms)", "host_op_ms"), ("kernel launches", "launches"), ("kernels", "kernels"),
        ("kernel time (ms)", "kernel_ms"), ("copies/memsets", "copies"), ("copy time (ms)", "copy_ms"),
        ("GPU busy (ms)", "gpu_busy_ms"), ("GPU idle within the step (ms)", "gpu_idle_ms"),
        ("idle gaps > 50 µs", "gaps_over_50us"), ("time in those gaps (ms)", "gap_ms_over_50us"),
        ("host waits on the device", "host_waits"), ("time in those waits (ms)", "host_wait_ms"),
    ]
    print(f"{'':34}" + "".join(f"{l:>{w}}" for l in labels))
    for title, key in rows:
        if not any(key in s for s in sums):
            continue
        vals = [s.get(key) for s in sums]
        print(f"{title:34}" + "".join(f"{(f'{v:.1f}' if isinstance(v, float) else str(v)) if v is not None else '-':>{w}}" for v in vals))
    kinds = sorted({k for s in sums for k in s["kernel_ms_by_kind"]}, key=lambda k: -max(s["kernel_ms_by_kind"].get(k, 0) for s in sums))
    if kinds:
        print("kernel time by kind (ms):")
        for k in kinds:
            print(f"  {k:32}" + "".join(f"{s['kernel_ms_by_kind'].get(k, 0):>{w}.1f}" for s in sums))
    for l, s in zip(labels, sums):
        if s["top_kernels"]:
            print(f"top kernels, {l}:")
            for k in s["top_kernels"][:10]:
                print(f"  {k['ms']:8.2f} ms {k['count']:5d}×  [{kind(k['name'])}] {short(k['name'])}")
        print(f"top host ops, {l}:")
        for o in s["top_ops"][:10]:
            print(f"  {o['host_ms']:8.2f} ms {o['count']:5d}×  {short(o['name'])}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(zip(labels, sums)), f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
