#!/usr/bin/env bash
# The one-shot GPU check, run from the folder `scripts/gpu-pack.sh` made
# (docs/gpu.md, "A prepared GPU check"). For a machine with an NVIDIA GPU and
# a Python whose torch has CUDA, without Go or network: the folder brings
# seedctl built against that torch version's libtorch (CUDA), linked at run
# time against the torch found here.
#
#   ./gpu-check.sh [--python PY] [--device cuda|cpu] [--sizes a,b] [--tokens N]
#                  [--peak-tflops T] [--out DIR] [--parts 1,2,3,4] [--profile]
#
# In one go (under 5 minutes on one H200, 2026-12-04: bench/results/2026-12-04-h200-gpu-check), each step's
# output in DIR (default ./results-<date>) and a summary at the end:
#   1. seedctl doctor (its dist line forms a one-rank NCCL group on the GPU);
#   2. per size (default qwen2.5-0.5b,qwen2.5-1.5b): the bfloat16 trainer
#      step (seedctl model stepbench: tokens/s, MFU) beside PyTorch eager's
#      same step on the same card (eager_step.py: the ratio), and the peak
#      GPU memory (nvidia-smi, sampled) beside the memory plan's prediction,
#      and the same step as before 2026-12-04 (--adamw go, SEEDCTL_CAUSAL=0);
#   3. the embedded server's decode tokens/s at 1 and 64 concurrent requests
#      (seedctl serve + decode_bench.py);
#   4. two iterations of `seedctl run` with the tiny household model, SEED
#      then GRPO, and their phase times side by side.
# --parts runs only the parts listed. --profile also profiles one step of
# each size, seedctl's and eager's (libtorch's profiler, Chrome traces
# stepbench-SIZE.trace.json and eager-SIZE.trace.json) and compares them
# (trace_summary.py: kernel time by kind, GPU idle time, host waits); it
# leaves out the "before" step of part 2.
# --device cpu is the dry run (same folder, same steps; small shapes).
set -uo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PY=python3
DEVICE=cuda
SIZES=qwen2.5-0.5b,qwen2.5-1.5b
TOKENS=4096
PEAK="" # default: 989 on CUDA (H100/H200 SXM, dense bfloat16 TFLOP/s), none on CPU
OUT=""
PARTS=1,2,3,4
PROFILE=0
while (($#)); do
  case "$1" in
    --python) PY="$2"; shift 2 ;;
    --device) DEVICE="$2"; shift 2 ;;
    --sizes) SIZES="$2"; shift 2 ;;
    --tokens) TOKENS="$2"; shift 2 ;;
    --peak-tflops) PEAK="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --parts) PARTS="$2"; shift 2 ;;
    --profile) PROFILE=1; shift ;;
    -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
    *) echo "gpu-check: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
OUT="${OUT:-$HERE/results-$(date +%Y%m%d-%H%M%S)}"
[[ -z "$PEAK" && "$DEVICE" == cuda* ]] && PEAK=989
PEAKFLAG=()
[[ -n "$PEAK" ]] && PEAKFLAG=(--peak-tflops "$PEAK")
mkdir -p "$OUT"
exec > >(tee "$OUT/gpu-check.log") 2>&1
say() { echo "== $*"; }
part() { [[ ",$PARTS," == *",$1,"* ]]; }
START=$(date +%s)

# ---- the torch here supplies libtorch -------------------------------------------
TORCH_LIB="$("$PY" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')" || {
  echo "gpu-check: $PY cannot import torch: pass --python with the venv's python (the one beside vLLM)"; exit 1; }
TORCH_VER="$("$PY" -c 'import torch; print(torch.__version__)')"
BUILT_FOR="$(cat "$HERE/torch-version" 2>/dev/null || echo unknown)"
say "torch $TORCH_VER at $TORCH_LIB (seedctl built against $BUILT_FOR)"
[[ "${TORCH_VER%%+*}" == "${BUILT_FOR%%+*}" ]] || echo "WARNING: seedctl was built against torch $BUILT_FOR, this is $TORCH_VER: libtorch's C++ ABI may differ"
export LD_LIBRARY_PATH="$TORCH_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
S="$HERE/seedctl"
MODEL="$HERE/household-tiny"

# ---- 1. doctor -----------------------------------------------------------------
if part 1; then
say "1. seedctl doctor"
"$S" doctor --matmul-time 500ms | tee "$OUT/doctor.txt"
fi

# ---- 2. trainer step vs PyTorch eager, memory vs plan ------------------------------------
smi_peak() { # runs "$@" while sampling nvidia-smi; prints the peak MiB used
  local log="$OUT/smi.$$" pid
  if [[ "$DEVICE" == cuda* ]] && command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 >"$log" 2>/dev/null &
    pid=$!
  fi
  "$@"
  local rc=$?
  if [[ -n "${pid:-}" ]]; then kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; sort -n "$log" | tail -n1 >"$OUT/smi-peak"; rm -f "$log"; fi
  return $rc
}
IFS=, read -r -a sizes <<<"$SIZES"
part 2 || sizes=()
for size in "${sizes[@]}"; do
  say "2. trainer step at $size: seedctl, then PyTorch eager ($TOKENS tokens, bfloat16, $DEVICE)"
  base="$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null | head -n1 || echo 0)"
  rm -f "$OUT/smi-peak"
  PROF=() EPROF=()
  if ((PROFILE)); then PROF=(--profile "$OUT/stepbench-$size.trace.json"); EPROF=(--profile "$OUT/eager-$size.trace.json"); fi
  smi_peak "$S" model stepbench --size "$size" --device "$DEVICE" --dtype bfloat16 --tokens "$TOKENS" \
    --steps 3 "${PEAKFLAG[@]}" "${PROF[@]}" --json >"$OUT/stepbench-$size.json" || { echo "stepbench $size failed"; continue; }
  seed_peak="$(cat "$OUT/smi-peak" 2>/dev/null || echo 0)"
  # The same step as before 2026-12-04, side by side: the per-parameter Go
  # AdamW loop, and attention with a mask built in Go (no flash kernel).
  rm -f "$OUT/stepbench-$size-go.json"
  ((PROFILE)) || SEEDCTL_CAUSAL=0 "$S" model stepbench --size "$size" --device "$DEVICE" --dtype bfloat16 --tokens "$TOKENS" \
    --steps 3 --adamw go "${PEAKFLAG[@]}" --json >"$OUT/stepbench-$size-go.json" || echo "stepbench $size (before) failed"
  "$PY" "$HERE/eager_step.py" "$OUT/stepbench-$size.json" "${EPROF[@]}" >"$OUT/eager-$size.json" || echo "eager $size failed"
  if ((PROFILE)); then
    if [[ -f "$OUT/stepbench-$size.trace.json" && -f "$OUT/eager-$size.trace.json" ]]; then
      "$PY" "$HERE/trace_summary.py" "$OUT/stepbench-$size.trace.json" "$OUT/eager-$size.trace.json" \
        --labels seedctl,eager --json "$OUT/trace-summary-$size.json" | tee "$OUT/trace-summary-$size.txt"
    else
      echo "   profile $size: a trace is missing ($(grep -o '"profile_error": "[^"]*"' "$OUT/eager-$size.json" || true))"
    fi
  fi
  "$PY" - "$OUT/stepbench-$size.json" "$OUT/eager-$size.json" "$seed_peak" "$base" "$OUT/stepbench-$size-go.json" <<'EOF'
import json, statistics, sys
sb = json.load(open(sys.argv[1]))
try:
    ea = json.load(open(sys.argv[2]))
except Exception:
    ea = {}
try:
    go = json.load(open(sys.argv[5]))
except Exception:
    go = {}
peak_mib, base_mib = float(sys.argv[3] or 0), float(sys.argv[4] or 0)
med = lambda xs: statistics.median(xs) if xs else 0.0
for r in ([go] if go else []) + [sb]:
    what = "before: Go AdamW, masked attention" if r is go else f"AdamW {r.get('adamw', '?')}, causal attention"
    line = f"   seedctl ({what}) {r['tokens_per_s']:.0f} tokens/s, {r['model_tflops_per_s']:.1f} TFLOP/s"
    if r.get("mfu"):
        line += f", MFU {100 * r['mfu']:.1f}%"
    line += f"; forward+backward {med(r.get('backward_seconds')):.3f} s, update {med(r.get('update_seconds')):.3f} s"
    if ea.get("tokens_per_s"):
        line += f"; seedctl/eager {r['tokens_per_s'] / ea['tokens_per_s']:.2f}"
    print(line)
if ea.get("tokens_per_s"):
    print(f"   PyTorch {ea['torch']} eager {ea['tokens_per_s']:.0f} tokens/s (attention here {sb['attention']})")
plan = sb["plan_peak_bytes"] / 2**30
if peak_mib:
    used = (peak_mib - base_mib) / 1024
    print(f"   GPU memory: peak {used:.1f} GiB used by the step's process (nvidia-smi, caching allocator included), plan {plan:.1f} GiB: measured/plan {used / plan:.2f}")
else:
    print(f"   memory plan peak {plan:.1f} GiB (no nvidia-smi: not measured)")
if ea.get("peak_memory_bytes"):
    print(f"   PyTorch eager's own peak (max_memory_allocated): {ea['peak_memory_bytes'] / 2**30:.1f} GiB")
EOF
done

# ---- 3. embedded server decode -----------------------------------------------------
if part 3; then
say "3. embedded server decode tokens/s at 1 and 64 concurrent requests ($DEVICE)"
PORT=18437
"$S" serve --model "$MODEL" --device "$DEVICE" --addr "127.0.0.1:$PORT" --served-model-name tiny >"$OUT/serve.log" 2>&1 &
SERVE=$!
for _ in $(seq 1 120); do
  "$PY" -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$PORT/health', timeout=1)" 2>/dev/null && break
  sleep 0.5
done
"$PY" "$HERE/decode_bench.py" --url "http://127.0.0.1:$PORT" --model tiny --concurrency 1,64 --max-tokens 64 >"$OUT/decode.json"
"$PY" - "$OUT/decode.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
for l in r["levels"]:
    ms = 1000 * (l["median_request_seconds_per_token"] or 0)
    print(f"   {l['concurrency']:>3} concurrent: {l['tokens_per_s']:.0f} tokens/s, {ms:.1f} ms per token per request, {l['errors']} errors")
    if l["first_error"]:
        print(f"       first error: {l['first_error']}")
if "speedup" in r:
    print(f"   64 vs 1: {r['speedup']:.1f}x tokens/s")
EOF
kill "$SERVE" 2>/dev/null; wait "$SERVE" 2>/dev/null
fi

# ---- 4. two iterations of seedctl run --------------------------------------------------
if part 4; then
say "4. seedctl run: two iterations of SEED, then of GRPO, with the tiny household model ($DEVICE)"
for algo in seed grpo; do
  "$S" run --model "$MODEL" --device "$DEVICE" --algo "$algo" --iterations 2 --eval-episodes 20 --stage1-episodes 32 \
    --runs-dir "$OUT/runs" --name "gpu-check-$algo" 2>&1 | tail -n 4
done
"$PY" - "$OUT/runs" <<'EOF'
import json, os, sys
phases = ["rollout_s", "analysis_s", "rescore_s", "update_s", "publish_s", "iteration_s"]
mean = {}
for algo in ("seed", "grpo"):
    path = os.path.join(sys.argv[1], f"gpu-check-{algo}", "metrics.jsonl")
    try:
        rows = [json.loads(l)["values"] for l in open(path) if '"kind":"iteration"' in l]
    except OSError:
        continue
    if rows:
        mean[algo] = {p: sum(r.get(p, 0) for r in rows) / len(rows) for p in phases}
        print(f"   {algo:>4}: " + ", ".join(f"{p[:-2]} {mean[algo][p]:.2f} s" for p in phases) + f" (mean of {len(rows)} iterations)")
if len(mean) == 2 and mean["grpo"]["iteration_s"]:
    print(f"   SEED/GRPO iteration time: {mean['seed']['iteration_s'] / mean['grpo']['iteration_s']:.2f}")
EOF
fi

say "done in $(( $(date +%s) - START ))s; results in $OUT"
