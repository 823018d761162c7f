#!/usr/bin/env bash
# Fetches the headers a CUDA build of seedctl's NCCL process group compiles
# against — nccl.h and the CUDA headers ATen's CUDA context includes
# (runtime's crt, cccl, cuBLAS, cuSPARSE, cuSOLVER) — into a pip --target
# folder holding a torch wheel, as the nvidia-* packages a full
# `pip install torch` brings would: only their include/ folders, no
# libraries (those are the GPU machine's, resolved when seedctl starts).
# Versions are the ones the torch wheel's metadata pins (nvidia-nccl-*,
# and cuda-toolkit's for the others).
#
#   scripts/fetch-cuda-headers.sh [PKG]   # default .build/torch2
#
# Used by scripts/gpu-pack.sh and scripts/check-nccl.sh. Measured on the
# build VM: about 970 MB of wheels downloaded (cuBLAS's is 423 MB), 25 s in
# all, 25 MB of headers kept.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PKG="${1:-$ROOT/.build/torch2}"
log() { echo "fetch-cuda-headers: $*" >&2; }
die() { echo "fetch-cuda-headers: error: $*" >&2; exit 1; }

meta="$(ls -d "$PKG"/torch-*.dist-info 2>/dev/null | head -n1)"
[[ -n "$meta" && -f "$meta/METADATA" ]] || die "no torch wheel in $PKG (scripts/test-torch2.sh --install-only installs one)"
stamp="$PKG/.seedctl-cuda-headers-$(basename "$meta")"
[[ -f "$stamp" ]] && { log "up to date ($PKG)"; exit 0; }

# "Requires-Dist: NAME==VERSION; platform_system == ..." → NAME==VERSION
pin() { sed -n "s/^Requires-Dist: \\($1\\)\\(\\[[^]]*\\]\\)\\{0,1\\}==\\([^;, ]*\\).*/\\1==\\3/p" "$2" | head -n1; }
nccl="$(pin 'nvidia-nccl-cu[0-9]*' "$meta/METADATA")"
toolkit="$(pin 'cuda-toolkit' "$meta/METADATA")"
[[ -n "$nccl" && -n "$toolkit" ]] || die "$meta/METADATA pins no nvidia-nccl-* or cuda-toolkit (a CPU-only torch wheel?)"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
pipdl() { python3 -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: -d "$tmp" "$@"; }
pipdl "$toolkit" || die "pip could not download $toolkit"
# Wheels are zip files; Python's zipfile reads them (no unzip needed).
python3 - "$tmp"/cuda_toolkit-*.whl >"$tmp/toolkit.METADATA" <<'PY'
import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
sys.stdout.write(z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode())
PY
wheels=("$nccl")
for name in nvidia-cuda-crt nvidia-cuda-cccl nvidia-cublas nvidia-cusparse nvidia-cusolver; do
  v="$(sed -n "s/^Requires-Dist: $name==\\([^;, ]*\\);.*extra == 'all'.*/\\1/p" "$tmp/toolkit.METADATA" | head -n1)"
  [[ -n "$v" ]] || die "$toolkit pins no $name"
  wheels+=("$name==$v")
done
log "downloading ${wheels[*]} (headers only are kept)"
start=$(date +%s)
pipdl "${wheels[@]}" || die "pip could not download ${wheels[*]}"
python3 - "$PKG" "$tmp"/nvidia_*.whl <<'PY' || die "unpacking the headers"
import re, sys, zipfile
dest = sys.argv[1]
for w in sys.argv[2:]:
    z = zipfile.ZipFile(w)
    z.extractall(dest, [n for n in z.namelist() if re.match(r"nvidia/[^/]+/include/", n)])
PY
[[ -n "$(ls "$PKG"/nvidia/*/include/nccl.h 2>/dev/null)" ]] || die "no nccl.h after unpacking $nccl"
log "headers in $PKG/nvidia in $(( $(date +%s) - start ))s ($(du -sch "$PKG"/nvidia/*/include | tail -n1 | cut -f1))"
touch "$stamp"
