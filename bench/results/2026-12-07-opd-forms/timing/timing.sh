#!/usr/bin/env bash
# [opd] item 4: each form's iteration time beside GRPO's, side by side:
# GRPO and the arm run at once (each a lane), 3 iterations, seed 1, from
# the committed base, 20 eval tasks (the evals are not timed). Binary
# fce80fd (the runs'). Whatever else runs on the cores runs under both.
cd /work/main
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
R=/work/runs/timing
mkdir -p $R
S="./bin/seedctl-torch2 run --runs-dir $R --seed 1 --iterations 3 --eval-episodes 20"
pair() { # NAME ARGS...
  local name=$1; shift
  $S --name grpo-vs-$name --algo grpo > $R/grpo-vs-$name.log 2>&1 &
  $S --name $name "$@" > $R/$name.log 2>&1
  wait
}
pair oofull01 --algo oracle-other-skill --distill-form full --lambda 0.1
pair oocs1 --algo oracle-other-skill --distill-form signed --distill-baseline shuffled --lambda 1
pair oogated01 --algo oracle-other-skill --distill-form gated_nll --lambda 0.1
pair seedcs1 --algo seed --distill-form signed --distill-baseline shuffled --lambda 1
echo timing done
