"""Query temperature: the one home of multiplying each query by a factor of its position.

A softmax over n keys spreads thinner as n grows, so a query far past the training length attends
more diffusely than any query trained. Three published answers scale the query (equivalently its
logits) by a factor that grows with its position p (0-based, so it sees n = p + 1 keys):

- log-n (Chiang and Cholak 2022; Qwen's `use_logn_attn`): max(1, ln(p + 1) / ln L); untouched within
  the training length L. Also the training-free extension's `logn` (model/extension).
- Llama 4 (transformers' `attn_temperature_tuning` on its NoPE layers): 1 + β·ln(1 + ⌊(p + 1) / F⌋),
  1 below the floor F.
- SSMax (Nakanishi 2025, "Scalable-Softmax"): s_h·ln(p + 1), with s learned per head: trained with it.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
from torch import nn

from posenc_cli.core.choices import MAX_LENGTH
from posenc_cli.core.errors import UsageError, require_int, require_number

# Llama4TextConfig's defaults: attn_scale (β) and floor_scale (F, at its 8,192-token attention chunks)
LLAMA4_BETA = 0.1


def logn_factors(positions: torch.Tensor, train_len: int) -> torch.Tensor:
    """(T,) 0-based query positions -> (T,) float64 log-n factors for training length `train_len`."""
    if train_len < 2:  # log 1 = 0: a one-token training length has no scale to keep
        return torch.ones(positions.shape, dtype=torch.float64, device=positions.device)
    counts = positions.to(torch.float64) + 1
    return (counts.log() / math.log(train_len)).clamp(min=1.0)


class QueryTemperature(nn.Module):
    """A factor per query position (and per head, where learned) that the queries are multiplied by,
    after their rotation and before the scores: what `scale` applies."""

    name: ClassVar[str] = ""

    def factors(self, positions: torch.Tensor) -> torch.Tensor:
        """(T,) positions -> (T,) factors shared by the heads, or (H, T) per head."""
        raise NotImplementedError

    @property
    def options(self) -> tuple[str, ...]:
        """What a column's label adds: `temperature=llama4`."""
        return (f"temperature={self.name}",)

    def scale(self, q: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """q: (B, H, T, D) queries at `positions` (T,) or (B, T) -> the scaled queries."""
        factors = self.factors(positions)
        if factors.dim() == 1:  # (T,) -> broadcast over batch and heads
            return q * factors.to(q.dtype)[:, None]
        if positions.dim() == 2:  # (B, T) positions: (B, T) shared factors, or (H, B, T) per head
            shaped = factors[:, None] if factors.dim() == 2 else factors.transpose(0, 1)
            return q * shaped.to(q.dtype)[..., None]
        return q * factors.to(q.dtype)[..., None]


class LogN(QueryTemperature):
    name = "logn"

    def __init__(self, train_len: int):
        super().__init__()
        self.train_len = train_len

    def factors(self, positions):
        return logn_factors(positions, self.train_len)


class Llama4Temperature(QueryTemperature):
    name = "llama4"

    def __init__(self, beta: float, floor: int):
        super().__init__()
        self.beta, self.floor = beta, floor

    def factors(self, positions):
        steps = torch.floor((positions.to(torch.float64) + 1) / self.floor)
        return 1 + self.beta * torch.log1p(steps)


class SSMax(QueryTemperature):
    """s starts at 1 / ln L, so the last query of a training window starts as plain attention and
    earlier ones flatter; training moves each head's s from there."""

    name = "ssmax"

    def __init__(self, n_head: int, train_len: int):
        super().__init__()
        start = 1 / math.log(train_len) if train_len > 1 else 1.0
        self.s = nn.Parameter(torch.full((n_head,), start))

    def factors(self, positions):
        counts = positions.to(self.s.dtype) + 1
        return self.s.view(-1, *[1] * positions.dim()) * counts.log()  # (H, T) or (H, B, T)


TEMPERATURES = ("none", LogN.name, Llama4Temperature.name, SSMax.name)


def build_temperature(
    name: Any, *, n_head: int, train_len: int, beta: float = LLAMA4_BETA, floor: int | None = None
) -> QueryTemperature | None:
    """`scheme.temperature` by name (None for none); `floor` None: the training length, as Llama 4's
    floor is its attention chunk."""
    if name not in TEMPERATURES:
        raise UsageError(f"scheme.temperature={name} is not known; choose one of: {', '.join(TEMPERATURES)}")
    require_number("scheme.temperature_beta", beta, at_least=0, at_most=100)
    if floor is not None:
        require_int("scheme.temperature_floor", floor, at_least=1, at_most=MAX_LENGTH)
    if name != Llama4Temperature.name and (beta != LLAMA4_BETA or floor is not None):
        raise UsageError(
            f"scheme.temperature_beta and scheme.temperature_floor apply to scheme.temperature=llama4 only, "
            f"not {name}; drop them or use scheme.temperature=llama4"
        )
    if name == LogN.name:
        return LogN(train_len)
    if name == Llama4Temperature.name:
        return Llama4Temperature(beta, train_len if floor is None else floor)
    if name == SSMax.name:
        return SSMax(n_head, train_len)
    return None
