"""Learned absolute positions (GPT-2, BERT): one trained vector per position, nothing past the table.

Grown for a longer length (train.init_from with a larger max_len), the table repeats its trained rows
as Longformer did (Beltagy et al. 2020, section 5: copying beat random rows for continued training):
row p starts as row p mod the old max_len, so positions the old run knew keep their vectors.
"""

from __future__ import annotations

import torch
from torch import nn

from posenc_cli.core.choices import MAX_LENGTH
from posenc_cli.core.errors import PositionOutOfRange, require_int
from posenc_cli.model.positional.base import AdditiveScheme, Claim


class Learned(AdditiveScheme):
    name = "learned"
    relative = "none"
    param_formula = "max_len·d"
    claim = Claim("none", "无", "GPT-2")

    def __init__(
        self,
        n_embd: int,
        n_head: int,
        block_size: int,
        *,
        max_len: int | None = None,
        scale_embeddings: bool | None = None,
    ):
        super().__init__(n_embd, n_head, block_size, scale_embeddings=scale_embeddings)
        if max_len is not None:
            require_int("scheme.max_len", max_len, at_least=1, at_most=MAX_LENGTH)
        self.table = nn.Embedding(block_size if max_len is None else max_len, n_embd)
        nn.init.normal_(self.table.weight, std=0.02)

    @property
    def max_len(self) -> int:
        return self.table.num_embeddings

    def extend_state(self, state):
        old = state["table.weight"]
        return {**state, "table.weight": old[torch.arange(self.max_len, device=old.device) % old.size(0)]}

    def encoding(self, positions):
        if positions.numel() and int(positions.max()) >= self.max_len:
            raise PositionOutOfRange(
                f"learned positions stop at {self.max_len - 1}: the table has max_len={self.max_len} rows, "
                f"position {int(positions.max())} was asked for"
            )
        return self.table(positions)
