"""Dual Chunk Attention (An et al. 2024, "Training-Free Long-Context Scaling of Large Language
Models"), as HKUNLP/ChunkLlama computes it.

The sequence is cut into chunks of s tokens and every key takes its position within its chunk, j mod s.
A query meets keys of its own chunk at its own position in the chunk (intra-chunk: exact distances),
keys of the chunk just before at min(i mod s + s, s + w) (successive-chunk: the first w queries of a
chunk keep exact distances to their neighbours), and keys of earlier chunks at min(2s - 1, s + w)
(inter-chunk). No distance exceeds s + w, which must stay within the training length L. ChunkLlama's
defaults: s = 5L/8 and w = L/8 (its chunk_size 3L/4 is s + w). Like the paper, and unlike the
repository's later code, no temperature on cos and sin.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from posenc_cli.core.choices import MAX_LENGTH
from posenc_cli.core.errors import UsageError, require_int


@dataclass(frozen=True)
class DualChunk:
    chunk: int | None = None  # s (--dca-chunk); None: 5/8 of the training length
    local: int | None = None  # w (--dca-local); None: 1/8 of the training length

    name = "dca"
    parts = 3  # intra-chunk, successive-chunk, inter-chunk

    def __post_init__(self) -> None:
        if self.chunk is not None:
            require_int("--dca-chunk", self.chunk, at_least=1, at_most=MAX_LENGTH)
        if self.local is not None:
            require_int("--dca-local", self.local, at_least=0, at_most=MAX_LENGTH)

    def for_length(self, train_len: int) -> DualChunk:
        chunk = self.chunk if self.chunk is not None else max(1, train_len * 5 // 8)
        return replace(self, chunk=chunk, local=self.local if self.local is not None else train_len // 8)

    def check_context(self, train_len: int) -> None:
        full = self.for_length(train_len)
        if full.chunk + full.local > train_len:
            raise UsageError(
                f"--dca-chunk {full.chunk} + --dca-local {full.local} = {full.chunk + full.local} is past the "
                f"model's context of {train_len} tokens: the farthest distance DCA uses is their sum; "
                f"choose them so it is at most {train_len}"
            )

    def reaches(self, length: int) -> bool:
        return length > self.chunk

    def positions(self, index):
        within = index % self.chunk
        cap = self.chunk + self.local
        successive = (within + self.chunk).clamp(max=cap)
        earlier = torch.full_like(index, min(2 * self.chunk - 1, cap))
        return [(within, within), (successive, within), (earlier, within)]

    def region(self, query, key):
        apart = query.div(self.chunk, rounding_mode="floor") - key.div(self.chunk, rounding_mode="floor")
        return apart.clamp(max=2)

    def keys(self, part, start, stop):
        first, last = start // self.chunk, (stop - 1) // self.chunk  # the block's chunks
        if part == 0:
            return first * self.chunk, stop
        if part == 1:
            return max(0, first - 1) * self.chunk, last * self.chunk
        return 0, max(0, last - 1) * self.chunk

    def marks(self):
        return (("chunk", str(self.chunk)), ("local", str(self.local)))
