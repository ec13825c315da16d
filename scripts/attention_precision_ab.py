"""What `train.precision=auto` chooses between, timed for longer than its calibration does: the training
step (session.train_step) at the default config in every effective precision, fp32, bf16 autocast and
bf16 autocast with fp32 attention, through auto's own timing (precision_timing.time_steps: two warm-up
steps, then the precisions alternated, the order reversed every round) with 6 rounds of 8 steps instead
of 3 of 2. Not a posenc setting: a measurement (docs/performance.md).

    python scripts/attention_precision_ab.py [SCHEMES] [BATCH]   # e.g. rope,alibi,none 16
"""

from __future__ import annotations

import sys
import time

import torch

from posenc_cli.bench.train_speed import compose
from posenc_cli.config.schema import check_keys
from posenc_cli.training.precision_timing import time_steps

ROUNDS, STEPS, VOCAB = 6, 8, 65


def main() -> None:
    schemes = sys.argv[1] if len(sys.argv) > 1 else "rope,alibi,none"
    batch_size = int(sys.argv[2]) if len(sys.argv) > 2 else 16
    print(f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC, {torch.get_num_threads()} threads")
    for scheme in schemes.split(","):
        cfg = check_keys(compose([f"scheme={scheme}", f"train.batch_size={batch_size}"]))
        ms = time_steps(cfg, torch.device("cpu"), VOCAB, rounds=ROUNDS, steps_per_round=STEPS)
        print(f"{scheme}, batch {batch_size}: " + ", ".join(f"{p} {v:.1f} ms" for p, v in ms.items()))


if __name__ == "__main__":
    main()
