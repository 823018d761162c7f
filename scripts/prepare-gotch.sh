#!/usr/bin/env bash
# Prepares a copy of gotch for the libtorch found on this machine, in
# .build/gotch (git-ignored), which go.mod's `replace` points at.
#
# gotch v0.9.1 is generated against libtorch 2.1. Two cases are handled:
#   * default: Debian's CPU libtorch (apt package libtorch-dev, 1.13.1). The
#     wrappers whose ATen functions this libtorch lacks are rewritten into
#     bodies that set gotch's last error and return, so calling one fails with
#     a clear message instead of the whole package failing to compile.
#   * LIBTORCH=/path/to/libtorch (gotch's own variable name): an unpacked
#     libtorch 2.x archive from pytorch.org, or the torch folder of a Python
#     torch package (which LIBTORCH_USE_PYTORCH=1 finds with python3, as
#     tch-rs does). CUDA is used when it has libtorch_cuda.so, unless
#     CUDA_VER=cpu (gotch's convention).
#
# The list of missing wrappers is data kept per libtorch version in
# third_party/gotch/libtorch-<version>-missing-wrappers.txt. For a version
# without a list, or with SEEDCTL_GOTCH_PROBE=1, a compile probe (g++
# -fsyntax-only over gotch's C++ sources) finds them and writes the list.
#
# Idempotent: a stamp records what the copy was prepared for; when nothing
# changed the script exits at once.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
GOTCH_VERSION="v0.9.1"
DEST="$ROOT/.build/gotch"
LISTS="$ROOT/third_party/gotch"

log() { echo "prepare-gotch: $*" >&2; }
die() { echo "prepare-gotch: error: $*" >&2; exit 1; }

# ---- locate libtorch ------------------------------------------------------
if [[ -z "${LIBTORCH:-}" && "${LIBTORCH_USE_PYTORCH:-}" == 1 ]]; then
  # tch-rs's convention: the libtorch inside the Python torch package. Found
  # without importing torch (an install with --no-deps cannot be imported).
  LIBTORCH="$(python3 -c 'import importlib.util as u; s = u.find_spec("torch"); print(s.submodule_search_locations[0] if s else "")')"
  [[ -n "$LIBTORCH" ]] || die "LIBTORCH_USE_PYTORCH=1 but python3 finds no torch package (pip install torch, or set PYTHONPATH to where it is)"
  log "using the libtorch of Python's torch at $LIBTORCH"
fi
if [[ -n "${LIBTORCH:-}" ]]; then
  LT_ROOT="$(cd "$LIBTORCH" 2>/dev/null && pwd)" || die "LIBTORCH=$LIBTORCH is not a directory"
  LT_INC="$LT_ROOT/include"
  LT_API_INC="$LT_ROOT/include/torch/csrc/api/include"
  LT_LIB="$LT_ROOT/lib"
  [[ -f "$LT_LIB/libtorch_cpu.so" ]] || die "$LT_LIB/libtorch_cpu.so not found: LIBTORCH must point at an unpacked libtorch archive (the folder holding include/ and lib/)"
  if [[ -f "$LT_ROOT/build-version" ]]; then
    LT_VERSION="$(sed 's/[+].*//' "$LT_ROOT/build-version" | head -n1)"
  elif [[ -f "$LT_ROOT/version.py" ]]; then # a Python torch package
    LT_VERSION="$(sed -n "s/^__version__ = '\([0-9.]*\).*/\1/p" "$LT_ROOT/version.py" | head -n1)"
  elif [[ -f "$LT_INC/torch/headeronly/version.h" ]]; then # libtorch 2.9+
    LT_VERSION="$(awk '/define TORCH_VERSION_(MAJOR|MINOR|PATCH) /{v = v (v == "" ? "" : ".") $3} END {print v}' "$LT_INC/torch/headeronly/version.h")"
  else
    LT_VERSION="$(sed -n 's/^ *"\([0-9.]*\)".*/\1/p' "$LT_API_INC/torch/version.h" | head -n1)"
  fi
  # The archives come in two C++ ABIs; the symbols tell which one this is.
  if nm -D --defined-only "$LT_LIB/libc10.so" 2>/dev/null | grep '__cxx11' >/dev/null; then ABI=1; else ABI=0; fi # not grep -q: its early exit SIGPIPEs nm under pipefail
  if [[ "${CUDA_VER:-}" != "cpu" && -f "$LT_LIB/libtorch_cuda.so" ]]; then DEVICE=cuda; else DEVICE=cpu; fi
else
  LT_ROOT="/usr"
  # /usr/include is searched already; naming it with -I breaks libstdc++'s #include_next.
  LT_INC=""
  LT_API_INC="/usr/include/torch/csrc/api/include"
  LT_LIB=""
  [[ -f "$LT_API_INC/torch/torch.h" ]] || die "Debian's libtorch headers are missing: run ./setup.sh (or apt-get install libtorch-dev), or set LIBTORCH to an unpacked libtorch archive"
  # Debian's version.h says 1.13.0 for the 1.13.1 package; the package version is the truth.
  LT_VERSION="$(dpkg-query -W -f '${Version}' libtorch-dev 2>/dev/null | sed 's/[+~-].*//')"
  [[ -n "$LT_VERSION" ]] || LT_VERSION="$(sed -n 's/^ *"\([0-9.]*\)".*/\1/p' "$LT_API_INC/torch/version.h" | head -n1)"
  ABI=1
  DEVICE=cpu
fi
[[ -n "$LT_VERSION" ]] || die "could not tell the libtorch version under $LT_ROOT"

# ---- source of gotch --------------------------------------------------------
GOMODCACHE="$(go env GOMODCACHE)"
SRC="$GOMODCACHE/github.com/sugarme/gotch@$GOTCH_VERSION"
if [[ ! -d "$SRC/libtch" ]]; then
  log "downloading gotch $GOTCH_VERSION"
  tmp="$(mktemp -d)"
  (cd "$tmp" && go mod init seedctl-gotch-fetch >/dev/null 2>&1 && go mod download github.com/sugarme/gotch@"$GOTCH_VERSION") \
    || { rm -rf "$tmp"; die "downloading github.com/sugarme/gotch@$GOTCH_VERSION from the Go module proxy failed"; }
  rm -rf "$tmp"
fi

# ---- NCCL (CUDA builds) ------------------------------------------------------
# ProcessGroupNCCL.hpp needs nccl.h and the CUDA headers ATen's CUDA context
# includes (runtime, crt, cuBLAS, cuSPARSE, cuSOLVER). A Python torch's are
# pip's nvidia-* packages beside it (nvidia/cu13/include, or one folder per
# package for CUDA 12, and nvidia/nccl/include); an archive's are under
# CUDA_HOME, and NCCL_HOME or /usr/include. SEEDCTL_NCCL=0 leaves NCCL out.
NCCL_INC=()
if [[ "$DEVICE" == cuda && "${SEEDCTL_NCCL:-1}" != 0 ]]; then
  if [[ -f "$LT_ROOT/version.py" ]]; then
    for d in "$(dirname "$LT_ROOT")"/nvidia/*/include; do [[ -d "$d" ]] && NCCL_INC+=("-I$d"); done
  fi
  [[ -n "${NCCL_HOME:-}" ]] && NCCL_INC+=("-I$NCCL_HOME/include")
  [[ -f "$LT_ROOT/version.py" ]] || NCCL_INC+=("-I${CUDA_HOME:-/usr/local/cuda}/include")
fi
NCCL_KEY="$(printf '%s\n' "${NCCL_INC[@]}" | sha256sum | cut -c1-8)"

LIST="$LISTS/libtorch-$LT_VERSION-missing-wrappers.txt"
SELF_HASH="$({ cat "${BASH_SOURCE[0]}"; cat "$LIST" 2>/dev/null || true; cat "$LISTS"/c10d/* "$LISTS"/seedops/*; } | sha256sum | cut -c1-16)"
STAMP="gotch=$GOTCH_VERSION libtorch=$LT_VERSION root=$LT_ROOT device=$DEVICE abi=$ABI nccl=${SEEDCTL_NCCL:-1}:$NCCL_KEY script=$SELF_HASH probe=${SEEDCTL_GOTCH_PROBE:-0}"
if [[ -f "$DEST/.seedctl-prepared" && "$(cat "$DEST/.seedctl-prepared")" == "$STAMP" ]]; then
  log "up to date ($STAMP)"
  exit 0
fi

log "preparing gotch $GOTCH_VERSION for libtorch $LT_VERSION ($DEVICE) at $LT_ROOT"
rm -rf "$DEST.tmp"
mkdir -p "$(dirname "$DEST")"
cp -r "$SRC" "$DEST.tmp"
chmod -R u+w "$DEST.tmp"
# Examples and tests of gotch are not ours to build or vet.
rm -rf "$DEST.tmp/example" "$DEST.tmp/vision" "$DEST.tmp/gen"
find "$DEST.tmp" -name '*_test.go' -delete
# seedctl's binding of c10d (TCPStore, the Gloo process group and its
# collectives) becomes the package libtch/c10d, built with libtch's cgo
# flags (written below) against the same libtorch; without Gloo headers it
# builds as a stub that says so.
mkdir -p "$DEST.tmp/libtch/c10d"
cp "$LISTS"/c10d/c10d_shim.h "$LISTS"/c10d/c10d_shim.cpp "$LISTS"/c10d/c10d.go "$DEST.tmp/libtch/c10d/"
# seedctl's own libtorch calls (the optimizer step in C++ with the fused
# AdamW kernel where libtorch has it; causal attention without a mask)
# become the package libtch/seedops, likewise.
mkdir -p "$DEST.tmp/libtch/seedops"
cp "$LISTS"/seedops/seedops.h "$LISTS"/seedops/seedops.cpp "$LISTS"/seedops/seedops.go "$DEST.tmp/libtch/seedops/"

# ---- cgo flags (gotch rewrites libtch/lib.go per device the same way) ------
INC="${LT_INC:+-I$LT_INC }-I$LT_API_INC"
CXXINC="-I\${SRCDIR} $INC"
# WRAPPER_OPT: gotch's generated wrappers (libtch) and the c10d shim are
# one call into libtorch each, and the generated file is one translation
# unit of 2,514 of them, whose compile is most of a fresh clone's first
# build. Measured here (g++ 12, the libtorch 2.11 headers, beside two
# training runs): 175 s at go's default -g -O2, 112 s at -O2, 72 s at
# -O1 -g0. KERNEL_OPT: seedops' own kernels (the fused optimizer step,
# attention), where the optimisation pays.
WRAPPER_OPT="-O1 -g0"
KERNEL_OPT="-O2"
# cgo_preamble PACKAGE OPTFLAGS: the lib.go that carries a package's flags.
cgo_preamble() {
  local pkg=$1 opt=$2
  echo "// Code generated by scripts/prepare-gotch.sh for libtorch $LT_VERSION ($DEVICE); DO NOT EDIT."
  echo
  echo "package $pkg"
  echo
  echo "// #cgo CFLAGS: -I\${SRCDIR} -O3 -Wall -Wno-unused-variable -Wno-deprecated-declarations -Wno-c++11-narrowing -g -Wno-sign-compare -Wno-unused-function"
  echo "// #cgo CFLAGS: -D_GLIBCXX_USE_CXX11_ABI=$ABI"
  echo "// #cgo CFLAGS: $INC"
  echo "// #cgo CXXFLAGS: -std=c++17 -D_GLIBCXX_USE_CXX11_ABI=$ABI $CXXINC $opt -Wno-deprecated-declarations"
  if [[ -n "$LT_LIB" ]]; then
    echo "// #cgo LDFLAGS: -L$LT_LIB -Wl,-rpath,$LT_LIB"
  fi
  if [[ -n "$LT_LIB" && "$DEVICE" == cpu ]]; then
    # Not libtorch.so: in a CUDA build (Python torch's wheels) it pulls in
    # libtorch_cuda.so and the CUDA libraries; the CPU ops are all in
    # libtorch_cpu.so.
    echo "// #cgo LDFLAGS: -lstdc++ -lc10 -ltorch_cpu"
  else
    echo "// #cgo LDFLAGS: -lstdc++ -ltorch -lc10 -ltorch_cpu"
  fi
  if [[ "$DEVICE" == cuda && -f "$LT_ROOT/version.py" ]]; then
    # Python torch: the CUDA libraries come from pip's nvidia-* packages,
    # which libtorch_cuda.so finds through its own RPATH. They need not be
    # on the build machine: the loader resolves them on the target.
    echo "// #cgo LDFLAGS: -Wl,--no-as-needed -ltorch_cuda -lc10_cuda -Wl,--as-needed -Wl,--allow-shlib-undefined"
  elif [[ "$DEVICE" == cuda ]]; then
    CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
    echo "// #cgo CFLAGS: -I$CUDA_HOME/include"
    echo "// #cgo CXXFLAGS: -I$CUDA_HOME/include"
    echo "// #cgo LDFLAGS: -L$CUDA_HOME/lib64 -Wl,-rpath,$CUDA_HOME/lib64 -lcuda -lcudart -lc10_cuda -ltorch_cuda"
    # Without this the CUDA kernels are dropped by --as-needed and CUDA looks absent.
    echo "// #cgo LDFLAGS: -Wl,--no-as-needed -ltorch_cuda -Wl,--as-needed"
  fi
  echo 'import "C"'
}
cgo_preamble libtch "$WRAPPER_OPT" >"$DEST.tmp/libtch/lib.go"
cgo_preamble c10d "$WRAPPER_OPT" >"$DEST.tmp/libtch/c10d/lib.go"
cgo_preamble seedops "$KERNEL_OPT" >"$DEST.tmp/libtch/seedops/lib.go"
# The NCCL process group is compiled in when the shim compiles with it
# (a syntax-only probe, ~15 s); otherwise c10d's NCCL calls say what is
# missing. .seedctl-nccl records the outcome.
if ((${#NCCL_INC[@]})); then
  probe_out="$(g++ -std=c++17 -fsyntax-only -w "-D_GLIBCXX_USE_CXX11_ABI=$ABI" -DSEEDCTL_NCCL $INC "${NCCL_INC[@]}" \
    "$DEST.tmp/libtch/c10d/c10d_shim.cpp" 2>&1)" && nccl_ok=1 || nccl_ok=0
  if ((nccl_ok)); then
    sed -i "s|^import \"C\"$|// #cgo CXXFLAGS: -DSEEDCTL_NCCL -Wno-interference-size ${NCCL_INC[*]}\nimport \"C\"|" "$DEST.tmp/libtch/c10d/lib.go"
    echo "yes" >"$DEST.tmp/.seedctl-nccl"
    log "NCCL process group: compiled in (headers: ${NCCL_INC[*]})"
  else
    why="$(grep -m1 -E 'fatal error|error:' <<<"$probe_out" || true)"
    echo "no: ${why:-the shim did not compile with SEEDCTL_NCCL}" >"$DEST.tmp/.seedctl-nccl"
    log "NCCL process group: left out, the shim does not compile with it ($why); scripts/fetch-cuda-headers.sh fetches the headers for a Python torch"
  fi
else
  echo "no: $([[ $DEVICE == cuda ]] && echo "SEEDCTL_NCCL=0" || echo "a CPU build")" >"$DEST.tmp/.seedctl-nccl"
fi

# ---- fixes to gotch itself ------------------------------------------------
# AtGradSetEnabled reads the C int result through an *int (8 bytes), so the
# "previous grad mode" it returns is garbage and code that restores it leaves
# autograd switched off. Convert the value instead.
GOFILE="$DEST.tmp/libtch/tensor.go"
grep -q 'return \*(\*int)(unsafe.Pointer(&cretVal))' "$GOFILE" || die "gotch's AtGradSetEnabled changed; review the patch in prepare-gotch.sh"
sed -i 's/return \*(\*int)(unsafe.Pointer(&cretVal))/return int(cretVal)/' "$GOFILE"

# ts.NoGrad and ts.NoGrad1 switch libtorch's grad mode, which is per OS
# thread, without pinning the goroutine to one: when it moves between
# threads inside fn, grad mode stays off on the first thread, and the next
# training step scheduled there builds no graph ("element 0 of tensors
# does not require grad"). gotch's own nn initialisers and VarStore call
# them. Pin the thread and restore the previous mode.
TSFILE="$DEST.tmp/ts/tensor.go"
python3 - "$TSFILE" <<'NOGRAD' || die "gotch's ts.NoGrad changed; review the patch in prepare-gotch.sh"
import re, sys
p = sys.argv[1]
s = open(p).read()
pin = "\truntime.LockOSThread()\n\tdefer runtime.UnlockOSThread()\n\tprev := MustGradSetEnabled(false)\n\tdefer MustGradSetEnabled(prev)\n"
new1 = "func NoGrad(fn func()) {\n" + pin + "\tfn()\n}\n"
new2 = "func NoGrad1(fn func() interface{}) interface{} {\n" + pin + "\treturn fn()\n}\n"
s, n1 = re.subn(r"func NoGrad\(fn func\(\)\) \{\n.*?\n\}\n", lambda m: new1, s, count=1, flags=re.S)
s, n2 = re.subn(r"func NoGrad1\(fn func\(\) interface\{\}\) interface\{\} \{\n.*?\n\}\n", lambda m: new2, s, count=1, flags=re.S)
if n1 != 1 or n2 != 1 or '"runtime"' not in s:
    sys.exit(1)
open(p, "w").write(s)
NOGRAD

# Every tensor gotch wraps carries a 100 kB Go "ballast" (bigStruct), so
# that the Go heap grows with the C tensors and the GC runs their
# finalizers often. Allocating and zeroing it was a fifth of the embedded
# server's decode time (memclr and mallocgc in the profile) and taxes every
# op of the trainer. seedctl frees its tensors itself; the ballast becomes
# ts.Ballast bytes (the trainer sets a small one, so leaked tensors still
# push the GC), and ts.LiveTensors counts the tensors not yet freed (leak
# tests).
python3 - "$TSFILE" <<'BALLAST' || die "gotch's newTensor or bigStruct changed; review the patch in prepare-gotch.sh"
import sys
p = sys.argv[1]
s = open(p).read()
old_struct = "type bigStruct struct {\n\tlots [1e5]byte // 100k - always on host memory.\n}\n"
new_struct = ("// Ballast is the Go memory each tensor carries (seedctl's patch; gotch's\n"
              "// own is 100 kB) so that the Go heap, and with it the GC that runs the\n"
              "// finalizers, grows with the C tensors.\n"
              "var Ballast = 100_000\n\n"
              "// LiveTensors is the number of tensors created and not yet freed.\n"
              "func LiveTensors() int {\n\tlock.Lock()\n\tdefer lock.Unlock()\n\treturn len(ExistingTensors)\n}\n")
for old, new in [(old_struct, new_struct),
                 ("\td          *bigStruct\n", "\td          []byte\n"),
                 ("\tx.d = new(bigStruct)\n", "\tif Ballast > 0 {\n\t\tx.d = make([]byte, Ballast)\n\t}\n")]:
    if s.count(old) != 1:
        sys.exit(1)
    s = s.replace(old, new)
open(p, "w").write(s)
BALLAST

# ---- stub the wrappers this libtorch lacks -------------------------------
GEN="$DEST.tmp/libtch/torch_api_generated.cpp.h"

stub_wrappers() { # $1 = file with one wrapper name per line
  local names="$1" tmpout
  tmpout="$(mktemp)"
  awk -v ver="$LT_VERSION" '
    FNR == NR { if ($1 != "" && $1 !~ /^#/) want[$1] = 1; next }
    skipping {
      if ($0 == "}") { skipping = 0; print $0 }
      next
    }
    match($0, /^[a-z0-9_]+ \**atg_[A-Za-z0-9_]+\(/) {
      sig = substr($0, RSTART, RLENGTH - 1)
      name = sig; sub(/^.* \**/, "", name)
      if (name in want) {
        print $0
        printf "  torch_last_err = strdup(\"%s is not available in libtorch %s (stubbed by seedctl scripts/prepare-gotch.sh)\");\n", name, ver
        if (sig ~ /^void /) {}
        else if (sig ~ /\*/) print "  return nullptr;"
        else print "  return 0;"
        done[name] = 1
        skipping = 1
        next
      }
    }
    { print }
    END { for (n in want) if (!(n in done)) { print "prepare-gotch: wrapper " n " named in the list is not in gotch" > "/dev/stderr"; bad = 1 }
          exit bad }
  ' "$names" "$GEN" >"$tmpout" || { rm -f "$tmpout"; die "stubbing wrappers from $names failed"; }
  mv "$tmpout" "$GEN"
}

probe() { # prints names of wrappers that fail to compile
  local flags=(-std=c++17 -fsyntax-only -fmax-errors=0 "-D_GLIBCXX_USE_CXX11_ABI=$ABI" -w
               -I"$DEST.tmp/libtch" $INC)
  [[ "$DEVICE" == cuda ]] && flags+=(-I"${CUDA_HOME:-/usr/local/cuda}/include")
  local errs
  errs="$(g++ "${flags[@]}" "$DEST.tmp/libtch/torch_api.cpp" 2>&1 || true)"
  if grep -q 'error:' <<<"$errs" && ! grep -q 'torch_api_generated.cpp.h:[0-9]*:[0-9]*: error' <<<"$errs"; then
    echo "$errs" | grep 'error:' | head -n 20 >&2
    die "gotch's hand-written C++ does not compile against libtorch $LT_VERSION; only generated wrappers can be stubbed"
  fi
  echo "$errs" | sed -n 's/.*torch_api_generated\.cpp\.h:\([0-9]*\):[0-9]*: error.*/\1/p' | sort -un | while read -r line; do
    # The wrapper that owns an error line is the closest definition above it.
    head -n "$line" "$GEN" | grep -E '^[a-z0-9_]+ \**atg_[A-Za-z0-9_]+\(' | tail -n 1 | sed -E 's/^[a-z0-9_]+ \**(atg_[A-Za-z0-9_]+)\(.*/\1/'
  done | sort -u
}

if [[ -f "$LIST" && "${SEEDCTL_GOTCH_PROBE:-0}" != 1 ]]; then
  log "stubbing $(grep -c . "$LIST") wrappers listed in ${LIST#$ROOT/}"
  stub_wrappers "$LIST"
elif [[ "$LT_VERSION" == 2.1.* && "${SEEDCTL_GOTCH_PROBE:-0}" != 1 ]]; then
  log "libtorch $LT_VERSION is the version gotch was generated for: no stubs"
else
  log "no wrapper list for libtorch $LT_VERSION: probing with g++ -fsyntax-only (a few minutes)"
  found="$(mktemp)"
  : >"$found"
  for pass in 1 2 3; do
    probe >"$found.new"
    [[ -s "$found.new" ]] || break
    log "probe pass $pass: $(wc -l <"$found.new") wrappers do not compile"
    stub_wrappers "$found.new"
    sort -u "$found" "$found.new" -o "$found"
  done
  if [[ -s "$found" ]]; then
    cp "$found" "$LIST"
    log "wrote ${LIST#$ROOT/} ($(wc -l <"$LIST") names); commit it so the next setup skips the probe"
  fi
  rm -f "$found" "$found.new"
fi

rm -rf "$DEST"
mv "$DEST.tmp" "$DEST"
echo "$STAMP" >"$DEST/.seedctl-prepared"
log "done: $DEST"
