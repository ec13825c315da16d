#!/usr/bin/env bash
# Reproduce the needle tables (docs/probe.md, "Needle tasks beyond one passkey"): the five chapter
# schemes trained on each of RULER's multi-needle tasks (data.probe_task), several seeds each, then
# retrieval (posenc probe --task) at 2x-8x, and the rotary runs again under RoPE scaling
# (--rope-scaling none,ntk,yarn). The passkey itself is scripts/reproduce_probe.sh.
#
# A 4-needle episode is 249-325 characters before its filler, so the runs train at length 512 (not the
# preset's 128) with 16-160 characters of filler an episode: experiment=probe's recipe otherwise.
#
#   bash scripts/reproduce_needles.sh                      # 3 tasks x 5 schemes x 3 seeds (45 runs)
#   JOBS=21 bash scripts/reproduce_needles.sh              # on a GPU: many runs side by side
#   TASKS=multikey SCHEMES=rope SEEDS=0 JOBS=1 LENGTHS=1024 TRIALS=2 \
#       bash scripts/reproduce_needles.sh train.max_steps=5 # a dry run (a minute on a CPU)
#
# Cost on a CPU: a run at length 512 is several times one at 128 (33 CPU-minutes there): hours a run.
# Extra arguments are Hydra overrides for every training run.
set -euo pipefail

POSENC=${POSENC:-posenc}                      # or: POSENC="python -m posenc_cli"
TASKS=${TASKS:-multikey,multivalue,multiquery}
SCHEMES=${SCHEMES:-none,sinusoidal,learned,rope,alibi}
SEEDS=${SEEDS:-0,1,2}
LENGTHS=${LENGTHS:-1024,2048,4096}
TRIALS=${TRIALS:-50}
JOBS=${JOBS:-2}                               # training jobs side by side; each gets cores/JOBS torch threads
NAME=needles_$(date +%Y-%m-%d_%H-%M-%S)

. "$(dirname "$0")/common.sh"
require_lengths "$LENGTHS"
require_jobs "$JOBS"
[[ $TRIALS =~ ^[1-9][0-9]*$ ]] || refuse "TRIALS must be a positive integer, got '$TRIALS'"
[[ $TASKS =~ ^(multikey|multivalue|multiquery)(,(multikey|multivalue|multiquery))*$ ]] \
  || refuse "TASKS must be a comma list of multikey, multivalue, multiquery, got '$TASKS'"
set_launcher "$JOBS"

recipe=(experiment=probe train.block_size=512 data.passkey_min_distance=16 data.passkey_max_distance=160)
IFS=, read -r -a tasks <<< "$TASKS"
# Every sweep's overrides are checked (--cfg job composes every run and trains none) before any trains.
for task in "${tasks[@]}"; do
  $POSENC train -m "${recipe[@]}" "data.probe_task=$task" "scheme=$SCHEMES" "seed=$SEEDS" \
    "hydra.sweep.dir=outputs/sweeps/$NAME/$task" "${launcher[@]}" "$@" --cfg job > /dev/null
done
for task in "${tasks[@]}"; do
  $POSENC train -m "${recipe[@]}" "data.probe_task=$task" "scheme=$SCHEMES" "seed=$SEEDS" \
    "hydra.sweep.dir=outputs/sweeps/$NAME/$task" "${launcher[@]}" "$@"
done
for task in "${tasks[@]}"; do
  sweep=outputs/sweeps/$NAME/$task
  $POSENC probe "$sweep" --task "$task" --lengths "$LENGTHS" --trials "$TRIALS" --out "outputs/probe/$NAME/$task"
  $POSENC probe "$sweep" --task "$task" --lengths "$LENGTHS" --trials "$TRIALS" \
    --rope-scaling none,ntk,yarn --out "outputs/probe/$NAME/${task}_scaled"
done

echo
echo "Tables: outputs/probe/$NAME/<task>/passkey.md (by depth, spread over seeds), <task>_scaled/ under RoPE scaling"
