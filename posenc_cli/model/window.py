"""Which earlier keys a layer's queries see: all of them, the last W (a sliding window: Mistral, Gemma 3's
local layers, cohere2), or those of their own chunk of C tokens (Llama 4's RoPE layers), or both.

A window is an attention property a layer states (`PositionalScheme.window`); the attention reads it
through `visible`, and a KV cache keeps only the keys the next query can still see (`first_key`). Counts
are in tokens, never positions: randomized training positions do not change which keys are in view.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from posenc_cli.core.choices import MAX_LENGTH
from posenc_cli.core.errors import UsageError, require_int


@dataclass(frozen=True)
class AttentionWindow:
    """size: a query sees itself and the size − 1 keys before it (None: no limit). chunk: a query sees only
    keys of its own chunk [c·C, (c + 1)·C) (None: no chunks). Both: the window within the chunk."""

    size: int | None = None
    chunk: int | None = None

    def __post_init__(self) -> None:
        if self.size is not None:
            require_int("scheme.window", self.size, at_least=1, at_most=MAX_LENGTH)
        if self.chunk is not None:
            require_int("scheme.chunk", self.chunk, at_least=1, at_most=MAX_LENGTH)
        if self.size is not None and self.chunk is not None and self.size > self.chunk:
            raise UsageError(
                f"scheme.window={self.size} is longer than scheme.chunk={self.chunk}: no query of a chunk sees "
                f"that far; use scheme.window <= {self.chunk} or drop one of them"
            )

    @property
    def full(self) -> bool:
        return self.size is None and self.chunk is None

    @property
    def options(self) -> tuple[str, ...]:
        """What a column's label adds: `window=64`, `chunk=128`."""
        sizes = (("window", self.size), ("chunk", self.chunk))
        return tuple(f"{name}={value}" for name, value in sizes if value is not None)

    def limits(self, length: int) -> bool:
        """Whether some query of `length` tokens misses an earlier key: otherwise the window changes nothing
        and full causal attention, bit for bit, is what the layer computes."""
        return any(value is not None and value < length for value in (self.size, self.chunk))

    def first_key(self, query: int) -> int:
        """The earliest key the query at token `query` sees."""
        starts = [0]
        if self.size is not None:
            starts.append(query - self.size + 1)
        if self.chunk is not None:
            starts.append(query // self.chunk * self.chunk)
        return max(starts)

    def visible(self, query: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
        """Bool, `query` and `key` token indices broadcast together: causal, and inside the window."""
        seen = key <= query
        if self.size is not None:
            seen = seen & (query - key < self.size)
        if self.chunk is not None:
            seen = seen & (query // self.chunk == key // self.chunk)
        return seen

    def span(self, length: int) -> int:
        """Most keys one query sees at `length` tokens: what the attention's memory grows with."""
        return min([length, *(v for v in (self.size, self.chunk) if v is not None)])


FULL = AttentionWindow()
