"""T5 relative position bias (Raffel et al. 2020): one learned scalar per head and distance bucket.

Causal buckets: distance i - j (keys j <= i) below n_buckets/2 gets its own bucket; longer distances
share log-spaced buckets up to max_distance, and everything beyond falls into the last bucket, so
the bias is defined at any length but stops changing past max_distance. One table serves every
layer (the model shares its scheme across blocks), as in T5.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from posenc_cli.core.choices import MAX_LENGTH
from posenc_cli.core.errors import require_int
from posenc_cli.model.positional.base import Claim, PositionalScheme


def t5_bucket(distance: torch.Tensor, n_buckets: int = 32, max_distance: int = 128) -> torch.Tensor:
    """Causal (unidirectional) bucket of each distance i - j >= 0; negative distances count as 0."""
    distance = distance.clamp(min=0)
    exact = n_buckets // 2
    log_ratio = torch.log(distance.clamp(min=1).float() / exact) / math.log(max_distance / exact)
    far = (exact + (log_ratio * (n_buckets - exact)).long()).clamp(max=n_buckets - 1)
    return torch.where(distance < exact, distance, far)


class T5Bias(PositionalScheme):
    name = "t5"
    kind = "bias"
    relative = "explicit"
    param_formula = "buckets·h"
    claim = Claim(used_by="T5, Flan-T5")

    def __init__(
        self, n_embd: int, n_head: int, block_size: int, *, n_buckets: int = 32, max_distance: int = 128
    ):
        super().__init__(n_embd, n_head, block_size)
        # half exact, half log-spaced
        require_int("scheme.n_buckets", n_buckets, at_least=2, at_most=MAX_LENGTH)
        require_int("scheme.max_distance", max_distance, at_least=n_buckets // 2 + 1, at_most=MAX_LENGTH)
        self.n_buckets, self.max_distance = n_buckets, max_distance
        self.table = nn.Embedding(n_buckets, n_head)
        nn.init.normal_(self.table.weight, std=n_embd**-0.5)  # as HF's T5 initialises its bias table

    def bias(self, distance):
        return self.table(t5_bucket(distance, self.n_buckets, self.max_distance)).movedim(-1, 0)
