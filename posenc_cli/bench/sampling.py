"""`posenc sample`'s speed with and without the KV cache: the same model and seed, alternated in one run."""

from __future__ import annotations

import time
from typing import Any

import torch

from posenc_cli.bench.train_speed import compose
from posenc_cli.config.schema import check_keys
from posenc_cli.evaluation.sample import Sampling, generate
from posenc_cli.model import GPT
from posenc_cli.training.session import model_config

SAMPLE_SCHEMES = ("rope", "alibi")  # one rotary, one bias scheme: the two paths a new token takes
VOCAB = 256  # the byte tokenizer's


def sampling_speed(model: GPT, tokens: int, *, cached: bool) -> float:
    """tokens/s of generating `tokens` after a one-token prompt, context growing (no --window)."""
    prompt = torch.zeros(1, dtype=torch.long)
    start = time.perf_counter()
    ids = list(
        generate(
            model,
            prompt,
            tokens,
            sampling=Sampling(1.0, None, 0),
            window=None,
            device=torch.device("cpu"),
            cached=cached,
        )
    )
    return len(ids) / (time.perf_counter() - start)


def bench_sampling(effort) -> list[dict[str, Any]]:
    """Each scheme's model (the default config's, untrained), cached and uncached alternated
    effort.sample_pairs times; the pair with the median speed-up is reported, as the nanoGPT side by
    side reports its median pair (one busy moment then decides nothing)."""
    rows = []
    for scheme in SAMPLE_SCHEMES:
        torch.manual_seed(0)
        model = GPT(model_config(check_keys(compose([f"scheme={scheme}", *effort.overrides])), VOCAB)).eval()
        pairs = sorted(
            (
                (
                    sampling_speed(model, effort.sample_tokens, cached=True),
                    sampling_speed(model, effort.sample_tokens, cached=False),
                )
                for _ in range(effort.sample_pairs)
            ),
            key=lambda pair: pair[0] / pair[1],
        )
        cached, uncached = pairs[(len(pairs) - 1) // 2]  # the lower median where the count is even
        for mode, speed in (("kv cache", cached), ("whole context", uncached)):
            rows.append(
                {
                    "section": "sample",
                    "scheme": scheme,
                    "config": mode,
                    "length": effort.sample_tokens,
                    "tokens_per_s": speed,
                    "vs_baseline": speed / uncached,
                }
            )
    return rows
