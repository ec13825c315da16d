"""What every tokenizer is: text <-> ids, the bytes and characters each id stands for, and a payload of
plain data whose fingerprint names the tokenizer (the char vocabulary and the others share it)."""

from __future__ import annotations

import hashlib
import json
from functools import cached_property

import numpy as np
import torch


def fingerprint_of(payload: dict) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


class TokenizerBase:
    """What the corpus, eval and probe need; subclasses set the per-id counts and the codec."""

    kind: str
    context_free = False  # True: every slice of ids decodes to text that encodes back to those ids

    def __len__(self) -> int:
        return len(self.byte_counts)

    def encode(self, text: str, strict: bool = True) -> torch.Tensor:
        return torch.from_numpy(self.encode_pieces([text], strict))

    def encode_pieces(self, pieces: list[str], strict: bool = True) -> np.ndarray:
        """The concatenated ids of `pieces` (int64)."""
        arrays = [self.encode_array(p, strict) for p in pieces]
        return np.concatenate(arrays) if arrays else np.zeros(0, dtype=np.int64)

    def encode_array(self, text: str, strict: bool = True) -> np.ndarray:
        raise NotImplementedError

    def token_ends(self, text: str) -> tuple[np.ndarray, np.ndarray]:
        """(ids, end): token i covers characters up to end[i] (exclusive) of `text`."""
        raise NotImplementedError

    def missing(self, text: str) -> set[str]:
        """Characters of `text` this tokenizer cannot represent."""
        return set()

    @property
    def byte_counts(self) -> np.ndarray:
        raise NotImplementedError

    @property
    def char_counts(self) -> np.ndarray:
        """Characters per id, counted by their first byte: sums over any token stream are exact."""
        raise NotImplementedError

    def payload(self) -> dict:
        raise NotImplementedError

    @cached_property
    def fingerprint(self) -> str:
        return fingerprint_of(self.payload())

    def describe(self) -> str:
        return f"{self.kind} (vocabulary {len(self):,})"
