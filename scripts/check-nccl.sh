#!/usr/bin/env bash
# Checks, on a CPU machine, that seedctl's NCCL process group compiles and
# links against the CUDA libtorch of PyPI's torch wheel: gotch is prepared
# for it with CUDA (scripts/prepare-gotch.sh must compile the NCCL shim
# in), the trainer and the command are vetted against it, and seedctl is
# built and linked, which resolves every symbol the shim takes from
# libtorch_cuda.so (c10d's ProcessGroupNCCL). Running it needs a GPU
# machine: seedctl doctor forms a one-rank NCCL group there
# (scripts/gpu/gpu-check.sh runs it). About 4 minutes the first time on the
# 2-core build VM (gotch's C++ for CUDA), seconds after. `just test-torch2` runs this after
# the CPU tests.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
log() { echo "check-nccl: $*" >&2; }
die() { echo "check-nccl: error: $*" >&2; exit 1; }
PKG="$ROOT/.build/torch2"
TREE="$ROOT/.build/nccl-tree"

./scripts/test-torch2.sh --install-only
[[ -f "$PKG/torch/lib/libtorch_cuda.so" ]] || die "the torch wheel in $PKG has no libtorch_cuda.so"
./scripts/fetch-cuda-headers.sh "$PKG"
./scripts/copy-checkout.sh "$TREE"
cd "$TREE"
unset CUDA_VER
LIBTORCH="$PKG/torch" ./scripts/prepare-gotch.sh
verdict="$(cat .build/gotch/.seedctl-nccl)"
[[ "$verdict" == yes ]] || die "prepare-gotch.sh left NCCL out: $verdict"
log "vetting and building seedctl against the CUDA libtorch with NCCL"
go vet ./trainer ./cmd/seedctl
go build -o .build/seedctl-cuda ./cmd/seedctl
nm -C .build/seedctl-cuda | grep 'U c10d::ProcessGroupNCCL::ProcessGroupNCCL' >/dev/null ||
  die "the linked seedctl does not call ProcessGroupNCCL's constructor"
log "ok: the NCCL process group compiles and links against torch $(sed -n "s/^__version__ = '\(.*\)'/\1/p" "$PKG/torch/version.py")"
