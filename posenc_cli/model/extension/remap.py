"""The contract every training-free extension of RoPE attention implements (a PositionRemap).

Each method scores a query–key pair in one of a few parts; in each part the query and the key take
positions of the method's choosing, functions of their own indices alone, and the pair's part is a
function of both indices. blocked.py turns any such method into attention whose memory stays linear in
the length. A method's parameters are given or None, then the paper's default for the model's training
length L (`for_length`).
"""

from __future__ import annotations

from typing import ClassVar, Protocol

import torch

from posenc_cli.core.errors import UsageError


class PositionRemap(Protocol):
    name: str  # its --rope-scaling name
    parts: int  # how many parts its pairs fall in (what its memory grows with: blocked.remapped_bytes)

    def reaches(self, length: int) -> bool:
        """Whether a sequence of `length` tokens has a pair outside the first part (exact positions);
        where it has none, attention is plain attention, computed by the plain kernel."""
        ...

    def positions(self, index: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """(T,) token indices -> per part, (positions the tokens take as queries, as keys), each (T,)."""
        ...

    def region(self, query: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
        """(Tq, 1) query and (1, Tk) key indices -> (Tq, Tk) long: the part each pair is scored in."""
        ...

    def keys(self, part: int, start: int, stop: int) -> tuple[int, int]:
        """The keys [low, high) queries start..stop-1 may meet in `part`: a superset (region decides
        each pair), tight enough that each key is scored in about one part."""
        ...

    def marks(self) -> tuple[tuple[str, str], ...]:
        """Its parameters as a column's name shows them: (("G", "4"), ("W", "64"))."""
        ...

    def for_length(self, train_len: int) -> PositionRemap:
        """Itself with every parameter left None set to the paper's default for a model trained at
        `train_len` tokens."""
        ...

    def check_context(self, train_len: int) -> None:
        """One line (UsageError) where a parameter does not fit a model trained at `train_len` tokens."""
        ...


class ExactWithinWindow:
    """The shared half of Self-Extend and ReRoPE: pairs closer than `window` keep their exact positions
    (part 0), farther ones are the method's own (part 1)."""

    window: int | None
    window_option: ClassVar[str]  # the option that sets it: --self-extend-window, --rerope-window
    parts = 2

    def reaches(self, length: int) -> bool:
        return length > self.window

    def region(self, query, key):
        return (query - key >= self.window).long()

    def keys(self, part, start, stop):
        return (max(0, start - self.window + 1), stop) if part == 0 else (0, max(0, stop - self.window))

    def check_context(self, train_len: int) -> None:
        if self.window is not None and self.window > train_len:
            raise UsageError(
                f"{self.window_option} {self.window} is past the model's context of {train_len} tokens: "
                f"pairs in it would meet at distances it never saw; choose 1 to {train_len}"
            )
