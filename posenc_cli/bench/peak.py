"""The denominator of MFU: the GEMM peak of the precision a run computes in, measured in this run."""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from posenc_cli.model import ModelConfig

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


@dataclass(frozen=True)
class Gemm:
    """One matmul shape of a training step, (m × k) @ (k × n), run `count` times a step."""

    name: str
    m: int
    k: int
    n: int
    count: int

    @property
    def flops(self) -> int:
        return 2 * self.m * self.k * self.n * self.count


def step_gemms(mc: ModelConfig, rows: int) -> list[Gemm]:
    """The matmuls of one training step of `mc` at `rows` = batch × T tokens: each linear layer's
    forward and its two backward GEMMs (the input's gradient, the weight's), every block's and the LM head's."""
    d, layers = mc.size.n_embd, mc.size.n_layer
    linears = [("qkv", d, 3 * d, layers), ("attention proj", d, d, layers), ("mlp up", d, 4 * d, layers)]
    linears += [("mlp down", 4 * d, d, layers), ("lm head", d, mc.vocab_size, 1)]
    return [
        gemm
        for name, d_in, d_out, count in linears
        for gemm in (
            Gemm(f"{name} forward", rows, d_in, d_out, count),
            Gemm(f"{name} grad input", rows, d_out, d_in, count),
            Gemm(f"{name} grad weight", d_out, rows, d_in, count),
        )
    ]


def shapes_flops(gemms: list[Gemm], dtype: torch.dtype, repeats: int) -> float:
    """FLOP/s of `gemms` run at each shape's best time of `repeats`: the step's matmul FLOPs over the
    time they take at best, so each shape weighs by its FLOPs."""
    seconds = 0.0
    for gemm in gemms:
        a, b = torch.randn(gemm.m, gemm.k, dtype=dtype), torch.randn(gemm.k, gemm.n, dtype=dtype)
        torch.mm(a, b)  # warm-up
        seconds += gemm.count * min(timed_mm(a, b) for _ in range(repeats))
    return sum(gemm.flops for gemm in gemms) / seconds


class Peak:
    """The best FLOP/s of a square matmul per precision over every try in the run: measured again
    between trainings, so a quiet moment anywhere in the run counts; and, once measured
    (measure_step_shapes), that of the default training step's own matmul shapes."""

    def __init__(self, size: int, repeats: int, seconds: float = 1.0):
        self.repeats = repeats
        self.flops = {name: 0.0 for name in GEMM_DTYPES}
        self.operands = {name: sized_operands(dtype, size, seconds) for name, dtype in GEMM_DTYPES.items()}
        self.step_flops: dict[str, float] = {}
        self.step_shapes = ""

    def measure_step_shapes(self, gemms: list[Gemm], precisions: set[str]) -> None:
        """The step-shape peak of each of `precisions` (those the runs computed in, and fp32)."""
        self.step_shapes = ", ".join(
            f"{g.name.removesuffix(' forward')} {g.m}×{g.k}·{g.k}×{g.n}" for g in gemms if "forward" in g.name
        )
        for name in sorted(precisions | {"fp32"}):
            self.step_flops[name] = shapes_flops(gemms, GEMM_DTYPES[name], self.repeats)

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
        ] + [
            {
                "section": "gemm",
                "config": f"step shapes {name}",
                "precision": name,
                "gflops": flops / 1e9,
                "note": self.step_shapes,
            }
            for name, flops in self.step_flops.items()
        ]

    def with_mfu(self, row: dict) -> dict:
        """`row` with its achieved GFLOP/s and MFU against the peaks of its own precision: the square
        matmul's, and the step shapes' (where measured)."""
        achieved = row["tokens_per_s"] * row["flops_per_token"]
        step_peak = self.step_flops.get(row["precision"], float("nan"))
        mfu = achieved / self.flops[row["precision"]]
        return {**row, "gflops": achieved / 1e9, "mfu": mfu, "mfu_step": achieved / step_peak}


def flops_per_token(*, non_positional_params: int, n_layer: int, n_embd: int, seq_len: int) -> float:
    """nanoGPT's and PaLM's (appendix B) count: 6·N + 12·n_layer·d_model·T, N the non-positional
    parameters with the tied input/output embedding counted once."""
    return 6 * non_positional_params + 12 * n_layer * n_embd * seq_len
