#!/usr/bin/env bash
# Reproduce the passkey table: the five chapter schemes under experiment=probe (6,000 steps at length
# 128), several seeds each, then perplexity (eval) and passkey retrieval (probe) of every run at 1x-8x.
# Retrieval is learned in a phase change that some seeds miss, so the table needs the spread over seeds
# (passkey.md: mean ± std [min–max] per depth and length, and how many seeds retrieve).
#
#   bash scripts/reproduce_probe.sh                  # the README's: 5 seeds, 10 for rope and alibi (35 runs)
#   SEEDS=0,1,2 SEEDS_RELATIVE=0,1,2,3,4 bash scripts/reproduce_probe.sh        # the minimum: 3 and 5 seeds
#   JOBS=21 bash scripts/reproduce_probe.sh          # on a GPU: many runs side by side (H200: ~4 min for 21)
#   SEEDS=0 SEEDS_RELATIVE=0 JOBS=1 bash scripts/reproduce_probe.sh train.max_steps=20   # a dry run
#
# Cost on a CPU: one run is ~0.33 s a step on one thread of a 2-core AVX2 machine (~35-40 min for
# 6,000 steps, two side by side), so the README's 35 runs take a night there (docs/probe.md).
# Extra arguments are Hydra overrides for every training run.
set -euo pipefail

POSENC=${POSENC:-posenc}                      # or: POSENC="python -m posenc_cli"
SEEDS=${SEEDS:-0,1,2,3,4}                     # none, sinusoidal, learned
SEEDS_RELATIVE=${SEEDS_RELATIVE:-0,1,2,3,4,5,6,7,8,9}   # rope, alibi: their far-length numbers are the finding
LENGTHS=${LENGTHS:-256,512,1024}
JOBS=${JOBS:-2}                               # training jobs side by side; each gets cores/JOBS torch threads
NAME=probe_$(date +%Y-%m-%d_%H-%M-%S)
SWEEP=outputs/sweeps/$NAME
OUT=outputs/eval/$NAME

. "$(dirname "$0")/common.sh"
require_lengths "$LENGTHS"
require_jobs "$JOBS"
set_launcher "$JOBS"

absolute=(experiment=probe scheme=none,sinusoidal,learned "seed=$SEEDS" "hydra.sweep.dir=$SWEEP/absolute")
relative=(experiment=probe scheme=rope,alibi "seed=$SEEDS_RELATIVE" "hydra.sweep.dir=$SWEEP/relative")
# Both sweeps' overrides are checked (--cfg job composes every run and trains none) before either trains.
$POSENC train -m "${absolute[@]}" "${launcher[@]}" "$@" --cfg job > /dev/null
$POSENC train -m "${relative[@]}" "${launcher[@]}" "$@" --cfg job > /dev/null
$POSENC train -m "${absolute[@]}" "${launcher[@]}" "$@"
$POSENC train -m "${relative[@]}" "${launcher[@]}" "$@"
$POSENC eval "$SWEEP/absolute" "$SWEEP/relative" --lengths "$LENGTHS" --out "$OUT"
$POSENC probe "$SWEEP/absolute" "$SWEEP/relative" --lengths "$LENGTHS" --out "$OUT"

echo
echo "Tables: $OUT/comparison.md (perplexity and passkey rows) and $OUT/passkey.md (by depth, spread over seeds)"
