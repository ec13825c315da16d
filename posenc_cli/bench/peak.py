"""The denominator of MFU: the GEMM peak of the precision a run computes in, measured in this run."""

from __future__ import annotations

import time

import torch

PRECISIONS = {"fp32": torch.float32, "bf16": torch.bfloat16}


class Peak:
    """The best FLOP/s of a square matmul per precision over every try in the run: measured again
    between trainings, so a quiet moment anywhere in the run counts."""

    def __init__(self, size: int, repeats: int):
        self.size, self.repeats = size, repeats
        self.flops = {name: 0.0 for name in PRECISIONS}
        self.operands = {
            name: (torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype))
            for name, dtype in PRECISIONS.items()
        }

    def measure(self) -> None:
        for name, (a, b) in self.operands.items():
            torch.mm(a, b)  # warm-up: the first call of a dtype picks and caches its kernel
            for _ in range(self.repeats):
                start = time.perf_counter()
                torch.mm(a, b)
                self.flops[name] = max(self.flops[name], 2 * self.size**3 / (time.perf_counter() - start))

    def rows(self) -> list[dict]:
        return [
            {
                "section": "gemm",
                "config": f"{self.size}x{self.size} {name}",
                "precision": name,
                "gflops": flops / 1e9,
            }
            for name, flops in self.flops.items()
        ]

    def with_mfu(self, row: dict) -> dict:
        """`row` with its achieved GFLOP/s and MFU against the peak of its own precision."""
        achieved = row["tokens_per_s"] * row["flops_per_token"]
        return {**row, "gflops": achieved / 1e9, "mfu": achieved / self.flops[row["precision"]]}


def flops_per_token(*, non_positional_params: int, n_layer: int, n_embd: int, seq_len: int) -> float:
    """nanoGPT's and PaLM's (appendix B) count: 6·N + 12·n_layer·d_model·T, N the non-positional
    parameters with the tied input/output embedding counted once."""
    return 6 * non_positional_params + 12 * n_layer * n_embd * seq_len
