#!/usr/bin/env bash
# Copies what git would commit from the checkout (tracked and untracked,
# not ignored: no .build, bin or runs) into DEST, replacing what was there
# except DEST/.build (gotch prepared for another libtorch stays). Used by
# scripts/test-torch2.sh and scripts/gpu-pack.sh, which build in trees of
# their own.
#
#   scripts/copy-checkout.sh DEST
set -euo pipefail
DEST="${1:?usage: copy-checkout.sh DEST}"
cd "$(dirname "${BASH_SOURCE[0]}")/.."
mkdir -p "$DEST"
find "$DEST" -mindepth 1 -maxdepth 1 ! -name .build -exec rm -rf {} +
git ls-files -z --cached --others --exclude-standard |
  tar --null -T - --ignore-failed-read -cf - 2>/dev/null | tar -xf - -C "$DEST"
