"""What `train.precision=auto` chooses between, timed for longer than its calibration does: the training
step (session.train_step) at the default config in every effective precision, fp32, bf16 autocast and
bf16 autocast with fp32 attention, alternated in one process (6 rounds of 8 steps, the order reversed
every round, medians). Not a posenc setting: a measurement (docs/performance.md).

    python scripts/attention_precision_ab.py [SCHEMES] [BATCH]   # e.g. rope,alibi,none 16
"""

from __future__ import annotations

import statistics
import sys
import time

import torch

from posenc_cli.bench.train_speed import compose
from posenc_cli.config.schema import check_keys
from posenc_cli.core.device import EFFECTIVE_PRECISIONS
from posenc_cli.model import GPT
from posenc_cli.training.session import make_optimizer, model_config, train_step

ROUNDS, STEPS, WARM_UP, VOCAB = 6, 8, 2, 65


def step_ms(scheme: str, batch_size: int) -> dict[str, float]:
    """Median ms a step per effective precision, for `posenc train scheme=S train.batch_size=B`."""
    cfg = check_keys(compose([f"scheme={scheme}", f"train.batch_size={batch_size}"]))
    model = GPT(model_config(cfg, VOCAB))
    optimizer = make_optimizer(model, cfg.train)
    x = torch.randint(0, VOCAB, (cfg.train.batch_size, cfg.train.block_size + 1))
    batch, cpu = (x[:, :-1], x[:, 1:], None), torch.device("cpu")

    def timed(precision: str, steps: int) -> float:
        start = time.perf_counter()
        for _ in range(steps):
            train_step(model, optimizer, batch, device=cpu, precision=precision, grad_clip=1.0)
        return (time.perf_counter() - start) / steps * 1000

    for precision in EFFECTIVE_PRECISIONS:
        timed(precision, WARM_UP)
    times = {precision: [] for precision in EFFECTIVE_PRECISIONS}
    for round_ in range(ROUNDS):
        for precision in EFFECTIVE_PRECISIONS[:: -1 if round_ % 2 else 1]:
            times[precision].append(timed(precision, STEPS))
    return {precision: statistics.median(t) for precision, t in times.items()}


def main() -> None:
    schemes = sys.argv[1] if len(sys.argv) > 1 else "rope,alibi,none"
    batch_size = int(sys.argv[2]) if len(sys.argv) > 2 else 16
    print(f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC, {torch.get_num_threads()} threads")
    for scheme in schemes.split(","):
        ms = step_ms(scheme, batch_size)
        print(f"{scheme}, batch {batch_size}: " + ", ".join(f"{p} {v:.1f} ms" for p, v in ms.items()))


if __name__ == "__main__":
    main()
