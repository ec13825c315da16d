"""Self-Extend (Jin et al. 2024, "LLM Maybe LongLM"), as datamllab/LongLM computes it.

Neighbours (i - j < W) keep their exact positions. Farther pairs use grouped positions: the key at
floor(j / G), the query at floor(i / G) + W - W / G, so the grouped distance meets the exact one at
the window's edge and grows G times slower past it. With W = 1024 and G = 4 a model trained at 4k
reads (4096 - 1024)·4 + 1024 = 13k tokens without a distance it never saw. The paper's W - W/G
is a float where G does not divide W, as in LongLM's Llama patch.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from posenc_cli.core.choices import MAX_LENGTH
from posenc_cli.core.errors import require_int
from posenc_cli.model.extension.remap import ExactWithinWindow


@dataclass(frozen=True)
class SelfExtend(ExactWithinWindow):
    group: int | None = None  # G (--self-extend-group); None: 8, LongLM's default
    window: int | None = None  # W (--self-extend-window); None: L/4, LongLM's 1024 for Llama-2's 4k

    name = "self_extend"  # its parts: neighbours (exact), then groups
    window_option = "--self-extend-window"

    def __post_init__(self) -> None:
        if self.group is not None:
            require_int("--self-extend-group", self.group, at_least=1, at_most=MAX_LENGTH)
        if self.window is not None:
            require_int("--self-extend-window", self.window, at_least=1, at_most=MAX_LENGTH)

    def for_length(self, train_len: int) -> SelfExtend:
        window = self.window if self.window is not None else max(1, train_len // 4)
        return replace(self, group=self.group or DEFAULT_GROUP, window=window)

    def positions(self, index):
        grouped_query = index.div(self.group, rounding_mode="floor") + self.window - self.window / self.group
        return [(index, index), (grouped_query, index.div(self.group, rounding_mode="floor"))]

    def marks(self):
        return (("G", str(self.group)), ("W", str(self.window)))


DEFAULT_GROUP = 8  # self_extend_forward's default in LongLM; any G reaches (L - W)·G + W tokens
