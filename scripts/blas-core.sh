#!/usr/bin/env bash
# Prints the fastest OpenBLAS 0.3.21 kernel set this CPU runs (Cooperlake,
# SkylakeX or Haswell), or nothing on older CPUs or outside x86-64: the rule
# of trainer.BestBLASCore, read from /proc/cpuinfo. `just test` exports it as
# OPENBLAS_CORETYPE when that is unset, because OpenBLAS does not recognise
# every CPU: on a VM whose CPUID model is a generic "Intel Xeon Processor"
# it falls back to its Prescott (SSE3) kernels, 3.4x slower in sgemm
# (seedctl itself restarts with the variable set: trainer.FixBLASCore).
set -euo pipefail
flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true)
has() { [[ " $flags " == *" $1 "* ]]; }
if has avx512f && has avx512bw && has avx512vl && has avx512dq && has avx512cd; then
  if has avx512_bf16; then echo Cooperlake; else echo SkylakeX; fi
elif has avx2 && has fma; then
  echo Haswell
fi
