#!/usr/bin/env bash
# Reproduce the headline table: every chapter scheme x 3 seeds, trained at length 256 and evaluated
# past it. Train sweep -> eval of the whole sweep directory (seeds aggregated as mean ± std) -> tables.
#
#   bash scripts/reproduce_table.sh                      # the full table (tiny model, 600 steps a run)
#   JOBS=1 bash scripts/reproduce_table.sh               # without the joblib launcher (in a checkout: pip install -e '.[cluster]')
#   SEEDS=0 LENGTHS=128,256 bash scripts/reproduce_table.sh experiment=smoke   # a one-minute dry run
#
# Extra arguments are Hydra overrides for every training run (model=small, train.max_steps=1000, ...).
set -euo pipefail

POSENC=${POSENC:-posenc}                  # or: POSENC="python -m posenc_cli"
SCHEMES=${SCHEMES:-none,sinusoidal,learned,rope,alibi}
SEEDS=${SEEDS:-0,1,2}
LENGTHS=${LENGTHS:-512,1024,2048}
JOBS=${JOBS:-2}                           # training jobs side by side; each gets cores/JOBS torch threads
NAME=headline_$(date +%Y-%m-%d_%H-%M-%S)
SWEEP=outputs/sweeps/$NAME

. "$(dirname "$0")/common.sh"
require_lengths "$LENGTHS"
require_jobs "$JOBS"
set_launcher "$JOBS"

$POSENC train -m "scheme=$SCHEMES" "seed=$SEEDS" "hydra.sweep.dir=$SWEEP" "${launcher[@]}" "$@"
$POSENC eval "$SWEEP" --lengths "$LENGTHS" --out "outputs/eval/$NAME"

echo
echo "Tables: outputs/eval/$NAME/ppl.md and outputs/eval/$NAME/comparison.md (plots beside them)"
