"""A corpus: its training and validation token arrays, the tokenizer that made them, and the facts a run
records about it (its sha256 fingerprint among them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import torch


@dataclass
class Corpus:
    name: str
    train: np.ndarray
    val: np.ndarray
    tokenizer: Any  # a tokenizers.TokenizerBase
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def sha256(self) -> str | None:
        """The corpus's fingerprint (stream.scan's sha256 of its text, or of a bin corpus's files): a run
        records it, and eval, probe and resume refuse a corpus that changed since."""
        return self.stats.get("sha256")

    @property
    def window_limit(self) -> int | None:
        """Tokens in the smaller split, which bound the training window; None: no bound (a task)."""
        return min(len(self.train), len(self.val))

    def batch(
        self, split: Literal["train", "val"], batch_size: int, block_size: int, *, generator: torch.Generator
    ):
        """(inputs, targets) of one training or validation step: random windows of that split's tokens."""
        return random_batch(getattr(self, split), batch_size, block_size, generator=generator)


def token_window(tokens, start: int, length: int) -> torch.Tensor:
    """tokens[start : start + length] as int64 (from a numpy array, a memory map or a tensor)."""
    return torch.from_numpy(np.asarray(tokens[start : start + length], dtype=np.int64))


def random_batch(tokens, batch_size: int, block_size: int, *, generator: torch.Generator):
    """Random windows of block_size+1 tokens -> (inputs, next-token targets)."""
    starts = torch.randint(len(tokens) - block_size, (batch_size,), generator=generator)
    windows = torch.stack([token_window(tokens, s, block_size + 1) for s in starts.tolist()])
    return windows[:, :-1], windows[:, 1:]
