"""Log-n attention scaling (Chiang and Cholak 2022; Qwen's `use_logn_attn`).

Softmax over n keys spreads thinner as n grows; multiplying the logits by log(n)/log(L) past the
training length L keeps a query's attention entropy near what it was trained at. As Qwen does, the
query at 0-based position p sees n = p + 1 keys and is scaled by max(1, log(p + 1) / log L): every
query within the training length is untouched.
"""

from __future__ import annotations

import math

import torch


def logn_factors(positions: torch.Tensor, train_len: int) -> torch.Tensor:
    """(T,) 0-based query positions -> (T,) float64 factors on the queries."""
    if train_len < 2:  # log 1 = 0: a one-token training length has no scale to keep
        return torch.ones(positions.shape, dtype=torch.float64, device=positions.device)
    counts = positions.to(torch.float64) + 1
    return (counts.log() / math.log(train_len)).clamp(min=1.0)
