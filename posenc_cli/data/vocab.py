"""Character vocabulary, saved with every run so evaluation uses exactly the training mapping."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from posenc_cli.errors import UsageError

UNK = "<unk>"


def describe_chars(chars) -> str:
    return ", ".join(repr(c) for c in sorted(chars)[:10]) + (" …" if len(chars) > 10 else "")


@dataclass(frozen=True)
class Vocab:
    chars: tuple[str, ...]  # may end with UNK: then unseen characters map to it

    @classmethod
    def from_text(cls, text: str, with_unk: bool = False) -> "Vocab":
        return cls(tuple(sorted(set(text))) + ((UNK,) if with_unk else ()))

    def __len__(self) -> int:
        return len(self.chars)

    @property
    def has_unk(self) -> bool:
        return bool(self.chars) and self.chars[-1] == UNK

    def missing(self, text: str) -> set[str]:
        return set(text) - set(self.chars)

    def encode(self, text: str, strict: bool = True) -> torch.Tensor:
        """strict: unseen characters are an error; otherwise they map to <unk> (which must exist)."""
        index = {c: i for i, c in enumerate(self.chars)}
        missing = self.missing(text)
        if missing and (strict or not self.has_unk):
            raise UsageError(
                f"text has {len(missing)} character(s) outside the run's vocabulary: {describe_chars(missing)}"
            )
        unk = len(self.chars) - 1
        return torch.tensor([index.get(c, unk) for c in text], dtype=torch.long)

    def token_bytes(self, ids: torch.Tensor) -> torch.Tensor:
        """UTF-8 bytes of each token's character (<unk> counts as one byte: the character it replaced
        is gone)."""
        table = torch.tensor([1 if c == UNK else len(c.encode("utf-8")) for c in self.chars], dtype=torch.long)
        return table[ids]

    def decode(self, ids) -> str:
        return "".join(self.chars[int(i)] for i in ids)
