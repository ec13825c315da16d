"""The denominator of MFU: the GEMM peak of the precision a run computes in, measured in this run."""

from __future__ import annotations

import time

import torch

GEMM_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def timed_mm(a: torch.Tensor, b: torch.Tensor) -> float:
    start = time.perf_counter()
    torch.mm(a, b)
    return time.perf_counter() - start


def sized_operands(dtype: torch.dtype, size: int, seconds: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Square operands of `size`, or smaller where one matmul would take over `seconds`: a CPU without
    native bf16 emulates it at ~1 GFLOP/s, where a 2048 matmul takes 13 s and the run's ten tries after
    every training took the benchmark past 20 minutes. From 256, doubling while the next size (8x the
    work) fits."""
    n = min(256, size)
    while True:
        a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
        torch.mm(a, b)  # warm-up: the first call of a dtype picks and caches its kernel
        if 2 * n > size or 8 * timed_mm(a, b) > seconds:
            return a, b
        n *= 2


class Peak:
    """The best FLOP/s of a square matmul per precision over every try in the run: measured again
    between trainings, so a quiet moment anywhere in the run counts."""

    def __init__(self, size: int, repeats: int, seconds: float = 1.0):
        self.repeats = repeats
        self.flops = {name: 0.0 for name in GEMM_DTYPES}
        self.operands = {name: sized_operands(dtype, size, seconds) for name, dtype in GEMM_DTYPES.items()}

    def measure(self) -> None:
        for name, (a, b) in self.operands.items():
            for _ in range(self.repeats):
                self.flops[name] = max(self.flops[name], 2 * len(a) ** 3 / timed_mm(a, b))

    def rows(self) -> list[dict]:
        return [
            {
                "section": "gemm",
                "config": f"{len(a)}x{len(a)} {name}",
                "precision": name,
                "gflops": self.flops[name] / 1e9,
            }
            for name, (a, _) in self.operands.items()
        ]

    def with_mfu(self, row: dict) -> dict:
        """`row` with its achieved GFLOP/s and MFU against the peak of its own precision."""
        achieved = row["tokens_per_s"] * row["flops_per_token"]
        return {**row, "gflops": achieved / 1e9, "mfu": achieved / self.flops[row["precision"]]}


def flops_per_token(*, non_positional_params: int, n_layer: int, n_embd: int, seq_len: int) -> float:
    """nanoGPT's and PaLM's (appendix B) count: 6·N + 12·n_layer·d_model·T, N the non-positional
    parameters with the tied input/output embedding counted once."""
    return 6 * non_positional_params + 12 * n_layer * n_embd * seq_len
