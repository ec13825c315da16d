#!/usr/bin/env bash
# Reproduce docs/tasks.md: exact-match accuracy by instance length on three algorithmic tasks (reverse,
# parity, binary addition with reversed digits), trained on lengths 1-8 and tested at 1x, 2x, 4x, 8x,
# for none, sinusoidal, learned, rope, alibi, t5, fire and randomized sinusoidal / rope / fire.
#
#   bash scripts/reproduce_tasks.sh                         # docs/tasks.md's: seeds 0,1,2, 1,500 steps (90 runs)
#   STEPS=400 bash scripts/reproduce_tasks.sh               # its earlier 400-step table
#   SEEDS=0 JOBS=1 bash scripts/reproduce_tasks.sh train.max_steps=20    # a dry run
#
# A tiny model (2 layers, width 64, 4 heads) on one thread per run, two side by side: at 1,500 steps
# about a minute a run on a shared 2-core Xeon (AVX-512/AMX), 6-7 min a randomized one; the 90 runs'
# training wall times summed to 137.5 min, 76 min of wall time for the whole script (docs/tasks.md).
# The learned table is given 200 rows (positions past training stay untrained, so it can be scored at
# 8x); randomized positions are drawn from [0, 8 x train.block_size). Extra arguments are Hydra
# overrides for every training run.
set -euo pipefail
source "$(dirname "$0")/common.sh"

POSENC=${POSENC:-posenc}                      # or: POSENC="python -m posenc_cli"
TASKS=${TASKS:-reverse parity addition}      # any of these three, space-separated
SEEDS=${SEEDS:-0,1,2}
STEPS=${STEPS:-1500}
JOBS=${JOBS:-2}                               # training jobs side by side, one torch thread each
LENGTHS=${LENGTHS:-8,16,32,64}
NAME=tasks_$(date +%Y-%m-%d_%H-%M-%S)
SWEEP=outputs/sweeps/$NAME
OUT=outputs/eval/$NAME
require_jobs "$JOBS"
require_lengths "$LENGTHS"
[[ $STEPS =~ ^[1-9][0-9]*$ ]] || refuse "STEPS must be a positive integer, got '$STEPS'"
set_launcher "$JOBS"

common=(
  model.n_layer=2 model.n_head=4 model.n_embd=64 "train.max_steps=$STEPS" train.batch_size=32
  train.warmup_steps=30 train.lr=3e-3 "train.eval_interval=$STEPS" "train.checkpoint_interval=$STEPS"
  train.log_interval=50 train.threads=1 train.precision=fp32 "seed=$SEEDS" data=task data.max_train_len=8
)
# task -> its overrides; train.block_size is the longest training sequence (data.max_train_len=8)
declare -A TASK=(
  [reverse]="data.task=reverse train.block_size=17"
  [parity]="data.task=parity train.block_size=10"
  [addition]="data.task=addition data.reversed_digits=true train.block_size=27"
)
# run=(...): the overrides of one sweep, a task ($1) and a group of schemes ($2: 0, 1 or 2)
sweep_of() {
  [[ -v TASK[$1] ]] || refuse "TASKS: unknown task '$1'; choose from: ${!TASK[*]}"
  read -r -a options <<< "${TASK[$1]}"
  local block=${options[-1]#train.block_size=}
  local groups=(
    "scheme=none,sinusoidal,rope,alibi,t5,fire"
    "scheme=learned scheme.max_len=200"
    "scheme=sinusoidal,rope,fire train.positions=randomized train.max_position=$((8 * block))"
  )
  read -r -a group <<< "${groups[$2]}"
  run=("${common[@]}" "${options[@]}" "${group[@]}" "hydra.sweep.dir=$SWEEP/$1/$2" "${launcher[@]}")
}
sweeps=()
for task in $TASKS; do  # every run composes (--cfg job trains none) before any trains
  for g in 0 1 2; do
    sweep_of "$task" "$g"
    $POSENC train -m "${run[@]}" "$@" --cfg job > /dev/null
    sweeps+=("$SWEEP/$task/$g")
  done
done
for task in $TASKS; do
  for g in 0 1 2; do
    sweep_of "$task" "$g"
    $POSENC train -m "${run[@]}" "$@"
  done
done
$POSENC eval "${sweeps[@]}" --lengths "$LENGTHS" --out "$OUT"

echo
echo "Table: $OUT/task_accuracy.md; figure: $OUT/task_accuracy.png; tidy results: $OUT/task_accuracy.csv"
