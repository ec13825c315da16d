"""ALiBi (Press et al. 2022): no embedding; score(i, j) gets -slope_h * (i - j) for keys j <= i.

The bias is added to the scaled scores as they are (not divided by sqrt(d)), as in the paper.
`scheme.slopes` picks the slopes: `paper` (default), the geometric 2^(-8h/H); or `chapter`, the
chapter's code's 1/2^h, h = 1..H (its |i - j| equals i - j on the keys a causal model attends to).
"""

from __future__ import annotations

import math

import torch

from posenc_cli.core.errors import UsageError
from posenc_cli.model.positional.base import Claim, PositionalScheme, per_head


def alibi_slopes(n_head: int) -> list[float]:
    """Geometric slopes 2^(-8/n), 2^(-16/n), ...; for n not a power of two, the ALiBi repo's rule:
    the slopes of the nearest lower power of two, then every other slope of twice that count."""

    def power_of_two(n: int) -> list[float]:
        start = 2 ** (-8 / n)
        return [start ** (i + 1) for i in range(n)]

    if math.log2(n_head).is_integer():
        return power_of_two(n_head)
    lower = 2 ** math.floor(math.log2(n_head))
    return power_of_two(lower) + power_of_two(2 * lower)[0::2][: n_head - lower]


def chapter_slopes(n_head: int) -> list[float]:
    """The chapter's code: 1/2, 1/4, ..., 1/2^H, whatever H."""
    return [2.0 ** -(h + 1) for h in range(n_head)]


# rule -> (slopes for H heads, the rule as written)
SLOPE_RULES = {"paper": (alibi_slopes, "2^(−8h/H)"), "chapter": (chapter_slopes, "1/2^h")}


class ALiBi(PositionalScheme):
    name = "alibi"
    kind = "bias"
    relative = "explicit"
    claim = Claim("very strong", "极强", "BLOOM")

    def __init__(self, n_embd: int, n_head: int, block_size: int, *, slopes: str = "paper"):
        super().__init__(n_embd, n_head, block_size)
        if slopes not in SLOPE_RULES:
            raise UsageError(f"scheme.slopes={slopes} is not known; choose one of: {', '.join(SLOPE_RULES)}")
        self.slope_rule = slopes
        self.register_buffer("slopes", torch.tensor(SLOPE_RULES[slopes][0](n_head)), persistent=False)

    @property
    def label_options(self) -> tuple[str, ...]:
        return () if self.slope_rule == "paper" else (f"{self.slope_rule}-slopes",)

    def bias(self, distance):
        return -per_head(self.slopes, distance) * distance.clamp(min=0).to(self.slopes.dtype)
