#!/usr/bin/env bash
# One prepared GPU run within a budget (default 8 minutes, evaluation included): the needle table
# (multikey, multivalue, multiquery x five schemes x 2 seeds at length 512, probed at 2x-8x, rope also under
# NTK and YaRN), the algorithmic tasks (reverse, parity, addition, copy x seven schemes x 3 seeds at up to
# 20,000 steps), PI and YaRN fine-tuning of a rope run to 4x, and a DroPE-style comparison (RoPE, ALiBi,
# NoPE, RNoPE-SWA at the needle recipe, DroPE recalibrated from each RoPE run for an eighth of its steps,
# all probed and evaluated at 2x). It measures a per-step profile first (or reads PROFILE), prints the plan
# and its predicted wall time, cuts steps (MAY_CUT) to fit BUDGET_S, runs the trainings side by side and
# writes $OUT/summary.md. The work is scripts/gpu_evidence.py.
#
#   bash scripts/gpu_evidence.sh                                   # on a GPU: into outputs/gpu_evidence/<time>
#   OUT=/tmp/ev BUDGET_S=540 bash scripts/gpu_evidence.sh           # another directory and budget
#   PROFILE=/tmp/ev/profile.json PLAN_ONLY=1 bash scripts/gpu_evidence.sh   # the plan an earlier profile predicts
#   SMOKE=1 OUT=/tmp/smoke bash scripts/gpu_evidence.sh             # the CPU smoke: the same path, tiny (CI)
#   CPU=1 BUDGET_S=14400 bash scripts/gpu_evidence.sh               # the DroPE comparison without a GPU
#
# CPU=1 is the drope part's CPU fallback: the needle recipe at length 512 (model=small, batch 16), one seed,
# 1,500 steps a run planned and cut to fit BUDGET_S (on a 2-core CPU, 4 hours leave roughly 1,000: the plan
# printed first says exactly how many), DroPE an eighth of them, 10 probe trials at 1,024. Short runs may
# not reach the phase change in which retrieval is learned; the page says so.
#
# Settings: OUT, BUDGET_S (seconds, 480), SLOTS (runs side by side to measure, cores,2xcores), MAY_CUT
# (steps,seeds; default steps), PARTS (needles,tasks,extension,drope; CPU=1: drope), PROFILE, PROFILE_STEPS,
# PLAN_ONLY, SMOKE, CPU; POSENC (default: this Python's -m posenc_cli), PYTHON (default: python3).
set -euo pipefail
exec "${PYTHON:-python3}" "$(dirname "$0")/gpu_evidence.py"
