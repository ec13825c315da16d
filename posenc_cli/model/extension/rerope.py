"""ReRoPE and Leaky ReRoPE (Su 2023, kexue.fm/archives/9708), as bojone/rerope computes them.

Pairs closer than the window w keep their exact distance. Past it, ReRoPE clips the distance at w
(the query at position w, the key at 0); Leaky ReRoPE lets it grow with slope 1/k instead, to
w + (i - j - w)/k (the query at i/k + w - w/k, the key at j/k). Either way no distance exceeds what
the model saw in training as long as w and the leak keep it below L. The repository's patches also
scale queries by log-n; here that is `rerope+logn`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from posenc_cli.core.choices import MAX_LENGTH
from posenc_cli.core.errors import require_int, require_number
from posenc_cli.model.extension.remap import ExactWithinWindow

MAX_LEAK = 1e6


@dataclass(frozen=True)
class ReRoPE(ExactWithinWindow):
    window: int | None = None  # w (--rerope-window); None: L/8, bojone/rerope's 512 at 4k
    leak: float | None = None  # k (--rerope-leak): Leaky ReRoPE's 1/k slope; None: clipped (ReRoPE)
    leaky: bool = False

    window_option = "--rerope-window"  # its parts: exact, then clipped (or leaking) past the window

    def __post_init__(self) -> None:
        if self.window is not None:
            require_int("--rerope-window", self.window, at_least=1, at_most=MAX_LENGTH)
        if self.leak is not None:
            require_number("--rerope-leak", self.leak, above=1, at_most=MAX_LEAK)

    @property
    def name(self) -> str:
        return "leaky_rerope" if self.leaky else "rerope"

    def for_length(self, train_len: int) -> ReRoPE:
        window = self.window if self.window is not None else max(1, train_len // 8)
        leak = (self.leak or DEFAULT_LEAK) if self.leaky else None
        return replace(self, window=window, leak=leak)

    def positions(self, index):
        if self.leak is None:
            return [(index, index), (torch.full_like(index, self.window), torch.zeros_like(index))]
        far_query = index / self.leak + self.window - self.window / self.leak
        return [(index, index), (far_query, index / self.leak)]

    def marks(self):
        # every digit --rerope-leak was given: k=1.000001, never a rounded k=1 the option refuses
        leak = (("k", f"{self.leak:.12g}"),) if self.leak is not None else ()
        return (("w", str(self.window)),) + leak


DEFAULT_LEAK = 16.0  # bojone/rerope's leaky_rerope_patch.py
