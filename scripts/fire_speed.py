"""FIRE's speed against rope, alibi and t5 (docs/tasks.md): a training step and evaluation forwards of
the tiny model, one thread, schemes interleaved in each of 5 rounds, the median of the last 4.

    OMP_NUM_THREADS=1 python scripts/fire_speed.py
"""

from __future__ import annotations

import statistics
import time

import torch

from posenc_cli.model import GPT, ModelConfig, ModelSize

SCHEMES = ["rope", "alibi", "t5", "fire"]


def train_step(model: GPT) -> None:
    model(torch.randint(64, (16, 256))).float().logsumexp(-1).mean().backward()


def eval_at(length: int):
    def forward(model: GPT) -> None:
        with torch.no_grad():
            model(torch.randint(64, (1, length)))

    return forward


def main() -> None:
    torch.set_num_threads(1)
    size = ModelSize(n_layer=2, n_head=4, n_embd=128)
    models = {s: GPT(ModelConfig(vocab_size=64, block_size=256, size=size, scheme=s)) for s in SCHEMES}
    cases = {
        "train step, B=16 T=256 (fwd+bwd)": train_step,
        "eval T=2048 (8x)": eval_at(2048),
        "eval T=8192 (32x)": eval_at(8192),
    }
    times: dict[tuple[str, str], list[float]] = {(c, s): [] for c in cases for s in SCHEMES}
    for _ in range(5):
        for case, run in cases.items():
            for scheme in SCHEMES:
                start = time.perf_counter()
                run(models[scheme])
                times[(case, scheme)].append(time.perf_counter() - start)
    for case in cases:
        median = {s: statistics.median(times[(case, s)][1:]) for s in SCHEMES}
        print(
            case,
            " | ".join(
                f"{s} {median[s] * 1000:.0f} ms ({median['rope'] / median[s]:.2f}x rope)" for s in SCHEMES
            ),
        )


if __name__ == "__main__":
    main()
