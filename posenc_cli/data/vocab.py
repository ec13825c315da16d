"""Character vocabulary (the `char` tokenizer), saved with every run so evaluation uses exactly the
training mapping."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from posenc_cli.core.errors import UsageError
from posenc_cli.data.tokenizer_base import TokenizerBase

UNK = "<unk>"
UNK_TEXT = (
    "\ufffd"  # what <unk> decodes to (Unicode's replacement character): one character, re-encoded as <unk>
)


def describe_chars(chars) -> str:
    return ", ".join(repr(c) for c in sorted(chars)[:10]) + (" …" if len(chars) > 10 else "")


def code_points(text: str) -> np.ndarray:
    return np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)


@dataclass(frozen=True)
class Vocab(TokenizerBase):
    chars: tuple[str, ...]  # may end with UNK: then unseen characters map to it
    kind = "char"
    context_free = True

    @classmethod
    def from_text(cls, text: str, with_unk: bool = False) -> Vocab:
        return cls(tuple(sorted(set(text))) + ((UNK,) if with_unk else ()))

    def __len__(self) -> int:
        return len(self.chars)

    @property
    def has_unk(self) -> bool:
        return bool(self.chars) and self.chars[-1] == UNK

    def missing(self, text: str) -> set[str]:
        return set(text) - set(self.chars)

    @cached_property
    def _known(self) -> np.ndarray:
        """The code points of the characters, in id order (sorted, as `from_text` makes them)."""
        return code_points("".join(self.chars[: len(self.chars) - self.has_unk]))

    def encode_array(self, text: str, strict: bool = True) -> np.ndarray:
        """strict: unseen characters are an error; otherwise they map to <unk> (which must exist)."""
        points = code_points(text)
        known = self._known
        ids = np.searchsorted(known, points).astype(np.int64)
        found = (
            known[np.minimum(ids, len(known) - 1)] == points if len(known) else np.zeros(len(points), bool)
        )
        if not found.all():
            missing = self.missing(text)
            if strict or not self.has_unk:
                raise UsageError(
                    f"text has {len(missing)} character(s) outside the run's vocabulary: "
                    + describe_chars(missing)
                )
            ids[~found] = len(self.chars) - 1
        return ids

    def token_ends(self, text: str) -> tuple[np.ndarray, np.ndarray]:
        return self.encode_array(text, strict=False), np.arange(1, len(text) + 1)

    def decode(self, ids) -> str:
        return "".join(UNK_TEXT if self.chars[int(i)] == UNK else self.chars[int(i)] for i in ids)

    @cached_property
    def byte_counts(self) -> np.ndarray:
        """UTF-8 bytes per character; <unk> stands for one character of unknown width, counted as one byte."""
        return np.array([1 if c == UNK else len(c.encode("utf-8")) for c in self.chars], dtype=np.int64)

    @cached_property
    def char_counts(self) -> np.ndarray:
        return np.ones(len(self.chars), dtype=np.int64)

    def payload(self) -> dict:
        return {"kind": "char", "chars": list(self.chars)}
