#!/usr/bin/env bash
# Builds and tests seedctl against libtorch 2.x — the libtorch inside
# PyPI's torch wheel, the one GPU users have beside vLLM — on CPU, beside
# the default build on Debian's libtorch 1.13.1 (`just test-torch2`; CI runs
# it after `just test`).
#
# What it does, idempotent:
#   1. installs the pinned torch wheel with pip --no-deps into
#      .build/torch2 (plus the two small CUDA runtime wheels its
#      libtorch_cpu.so links against: cudart and cupti; no GPU is used);
#   2. copies the checkout's files (tracked and untracked, not ignored) to
#      .build/torch2-tree, prepares gotch there for that libtorch
#      (scripts/prepare-gotch.sh, CPU: libtorch_cpu.so and libc10.so only),
#   3. runs `go test` there (all packages, or the ones given as arguments).
# --install-only stops after step 1 (scripts/gpu-pack.sh uses it).
# --build BIN builds seedctl there instead of step 3, to BIN (`just
# build-torch2`: a CPU binary on libtorch 2.11, which trains the tiny model
# 1.6-2x as fast as Debian's 1.13; README, Benchmarks).
#
# Measured on the 2-core build VM: the download is 543 MB (torch 530 MB,
# cupti 11 MB, cudart 2 MB), 1.2 GB unpacked, about 45 s; the first build of
# gotch's C++ against it a few minutes.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
TORCH_VERSION="${SEEDCTL_TORCH2_VERSION:-2.11.0}"
# The CUDA 13 runtime wheels torch 2.11's libtorch_cpu.so needs (cuda-toolkit
# 13.0.2's cudart and cupti, as pinned by the torch wheel's metadata).
CUDA_WHEELS=(nvidia-cuda-runtime==13.0.96 nvidia-cuda-cupti==13.0.85)
PKG="$ROOT/.build/torch2"
TREE="$ROOT/.build/torch2-tree"
log() { echo "test-torch2: $*" >&2; }
die() { echo "test-torch2: error: $*" >&2; exit 1; }

stamp="$PKG/.seedctl-torch-$TORCH_VERSION"
if [[ ! -f "$stamp" ]]; then
  log "installing torch $TORCH_VERSION (and ${CUDA_WHEELS[*]}) from PyPI into ${PKG#$ROOT/} (about 540 MB)"
  start=$(date +%s)
  rm -rf "$PKG"
  python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --no-deps --only-binary=:all: \
    --target "$PKG" "torch==$TORCH_VERSION" "${CUDA_WHEELS[@]}" ||
    die "pip could not install torch==$TORCH_VERSION into $PKG"
  [[ -f "$PKG/torch/lib/libtorch_cpu.so" ]] || die "the torch wheel has no torch/lib/libtorch_cpu.so"
  log "installed in $(( $(date +%s) - start ))s ($(du -sh "$PKG" | cut -f1))"
  touch "$stamp"
fi

[[ "${1:-}" == --install-only ]] && exit 0
build_to=""
if [[ "${1:-}" == --build ]]; then
  [[ -n "${2:-}" ]] || die "--build needs the binary's path"
  build_to="$(realpath -m "$2")"
  version="$(git describe --always --dirty 2>/dev/null || echo dev)-torch$TORCH_VERSION"
  shift 2
fi

log "copying the checkout to ${TREE#$ROOT/}"
./scripts/copy-checkout.sh "$TREE"
# The npm test data (tokenizer, OpenAI client) is shared, not copied.
mkdir -p "$TREE/.build"
[[ -d "$ROOT/.build/npm" ]] && ln -sfn "$ROOT/.build/npm" "$TREE/.build/npm"

cd "$TREE"
LIBTORCH="$PKG/torch" CUDA_VER=cpu ./scripts/prepare-gotch.sh
if [[ -n $build_to ]]; then
  mkdir -p "$(dirname "$build_to")"
  go build -ldflags "-X main.version=$version" -o "$build_to" ./cmd/seedctl
  log "built $build_to against libtorch $TORCH_VERSION (CPU)"
  exit 0
fi
pkgs=("$@")
((${#pkgs[@]})) || pkgs=(./...)
log "go test ${pkgs[*]} against libtorch $TORCH_VERSION (CPU)"
go run ./cmd/seedctl doctor --matmul-time 200ms 2>&1 | grep -E 'libtorch|device' || true
go test -timeout 30m "${pkgs[@]}"
