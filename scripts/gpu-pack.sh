#!/usr/bin/env bash
# Packs the one-shot GPU check (scripts/gpu/gpu-check.sh) into one folder,
# on a CPU machine with Go and network, for a GPU machine with neither:
# seedctl built against the libtorch of PyPI's torch wheel of the target's
# version (CUDA; the CUDA libraries are resolved on the target, from its
# own torch), the tiny household model, and the Python peers.
#
#   scripts/gpu-pack.sh [--torch 2.11.0] [--out dist/gpu-check] [--cpu]
#
# --cpu links the CPU-only build (libtorch_cpu.so and libc10.so), for a dry
# run on a machine whose torch has no CUDA libraries; the default CUDA build
# dry-runs too (gpu-check.sh --device cpu) where a CUDA torch is installed.
# The folder must stay under 60 MB (checked): copy it to the GPU machine
# and run ./gpu-check.sh there (docs/gpu.md, "A prepared GPU check").
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
TORCH_VERSION=2.11.0
OUT="$ROOT/dist/gpu-check"
CPU=0
while (($#)); do
  case "$1" in
    --torch) TORCH_VERSION="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --cpu) CPU=1; shift ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "gpu-pack: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
log() { echo "gpu-pack: $*" >&2; }
die() { echo "gpu-pack: error: $*" >&2; exit 1; }
LIMIT_MB=60

# The torch wheel (pip --no-deps into .build/torch2), as `just test-torch2`.
SEEDCTL_TORCH2_VERSION="$TORCH_VERSION" ./scripts/test-torch2.sh --install-only
PKG="$ROOT/.build/torch2"
[[ -f "$PKG/torch/lib/libtorch_cuda.so" || $CPU == 1 ]] || die "the torch $TORCH_VERSION wheel has no libtorch_cuda.so"
# NCCL's and CUDA's headers, so that the CUDA build has its NCCL process
# group (doctor's dist line forms a one-rank group on the GPU).
[[ $CPU == 1 ]] || ./scripts/fetch-cuda-headers.sh "$PKG"

# The base model: the cached tiny household policy (built on first use).
go build -o "$ROOT/bin/seedctl" ./cmd/seedctl
MODEL="$("$ROOT/bin/seedctl" model bootstrap 2>/dev/null | sed -n 's/.*base model at \([^ ]*\) .*/\1/p' | tail -n1)"
[[ -d "$MODEL" ]] || die "could not find or build the tiny household base model (seedctl model bootstrap)"

# A tree of its own, gotch prepared for this libtorch with CUDA (or CPU).
TREE="$ROOT/.build/gpu-pack-tree"
./scripts/copy-checkout.sh "$TREE"
(
  cd "$TREE"
  if [[ $CPU == 1 ]]; then export CUDA_VER=cpu; else unset CUDA_VER; fi
  LIBTORCH="$PKG/torch" ./scripts/prepare-gotch.sh
  log "building seedctl against libtorch $TORCH_VERSION ($([[ $CPU == 1 ]] && echo CPU || echo CUDA))"
  go build -trimpath -ldflags "-s -w -X main.version=$(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo dev)-torch$TORCH_VERSION" \
    -o "$TREE/seedctl.packed" ./cmd/seedctl
)

rm -rf "$OUT"
mkdir -p "$OUT"
mv "$TREE/seedctl.packed" "$OUT/seedctl"
cp scripts/gpu/gpu-check.sh scripts/gpu/eager_step.py scripts/gpu/decode_bench.py scripts/gpu/trace_summary.py "$OUT/"
cp -r "$MODEL" "$OUT/household-tiny"
sed -n "s/^__version__ = '\(.*\)'/\1/p" "$PKG/torch/version.py" >"$OUT/torch-version"
cat >"$OUT/README.txt" <<EOF
seedctl GPU check, packed $(date -u +%F) from $(git describe --always --dirty 2>/dev/null || echo "a checkout")
for torch $(cat "$OUT/torch-version") ($([[ $CPU == 1 ]] && echo "CPU-only build" || echo "CUDA build")).

  ./gpu-check.sh --python /path/to/venv/bin/python     # the venv whose torch is $(cat "$OUT/torch-version")

Under 5 minutes on one H200 (2026-12-04): doctor, trainer step vs PyTorch eager at
0.5B and 1.5B shapes, GPU memory vs the plan, embedded server decode at 1
and 64 requests, two iterations of seedctl run (SEED, GRPO). Results in ./results-<date>/.
EOF
size_kb=$(du -sk "$OUT" | cut -f1)
log "packed $OUT: $((size_kb / 1024)) MB ($(ls "$OUT" | tr '\n' ' '))"
((size_kb <= LIMIT_MB * 1024)) || die "the folder is $((size_kb / 1024)) MB, over the $LIMIT_MB MB limit"
