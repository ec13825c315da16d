"""A corpus: its training and validation token arrays, the tokenizer that made them, and the facts a run
records about it (its sha256 fingerprint among them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


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
