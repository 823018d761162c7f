#!/usr/bin/env bash
# Before/after in one run: builds the trainer's step benchmark and the
# embedded server's benchmark at OLD_REV and at the working tree, then runs
# them alternately (old, new, old, new, ...), so that each figure is a
# side-by-side ratio on one machine at one time, not two runs on a shared
# machine hours apart. OLD_REV gets the working tree's server benchmark
# file, so both measure the same thing. With a checkpoint folder as MODEL,
# each round also times `seedctl model stepbench` of both sides on it (a
# 1,024-token row in float32, five steps: the step the GPU check compares
# with PyTorch eager).
#
#   scripts/bench-compare.sh OLD_REV [ROUNDS [MODEL]]   # e.g. scripts/bench-compare.sh 8623bc3 2
set -euo pipefail
old="${1:?usage: scripts/bench-compare.sh OLD_REV [ROUNDS [MODEL]]}"
rounds="${2:-2}"
model="${3:-}"
root="$(git rev-parse --show-toplevel)"
tmp="$(mktemp -d)"
cleanup() { git -C "$root" worktree remove --force "$tmp/old" >/dev/null 2>&1 || true; rm -rf "$tmp"; }
trap cleanup EXIT
git -C "$root" worktree add -q "$tmp/old" "$old"
ln -s "$root/.build" "$tmp/old/.build"
cp "$root/inference/server/bench_test.go" "$tmp/old/inference/server/bench_test.go"
for side in old new; do
  dir="$root"
  [[ $side == old ]] && dir="$tmp/old"
  (cd "$dir/trainer" && go test -c -o "$tmp/trainer-$side.test" .)
  (cd "$dir/inference/server" && go test -c -o "$tmp/server-$side.test" .)
  [[ -z $model ]] || (cd "$dir" && go build -o "$tmp/seedctl-$side" ./cmd/seedctl)
done
echo "old: $(git -C "$root" rev-parse --short "$old"), new: working tree at $(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet || echo '+changes')"
for ((r = 1; r <= rounds; r++)); do
  for side in old new; do
    dir="$root"
    [[ $side == old ]] && dir="$tmp/old"
    (cd "$dir/trainer" && "$tmp/trainer-$side.test" -test.run '^$' -test.bench 'TrainStep$' -test.benchtime 20x) | grep '^Benchmark' | sed "s/^/$side round $r: /"
    (cd "$dir/inference/server" && "$tmp/server-$side.test" -test.run '^$' -test.bench 'Serve$' -test.benchtime 1x) | grep '^Benchmark' | sed "s/^/$side round $r: /"
    if [[ -n $model ]]; then
      "$tmp/seedctl-$side" model stepbench --model "$model" --dtype float32 --tokens 1024 --steps 5 --json 2>/dev/null |
        python3 -c 'import json, sys; d = json.load(sys.stdin); print("stepbench %.0f tokens/s, steps (ms) %s" % (d["tokens_per_s"], [round(s * 1000) for s in d["step_seconds"]]))' |
        sed "s/^/$side round $r: /"
    fi
  done
done
