"""StreamingLLM (Xiao et al., ICLR 2024, "Efficient Streaming Language Models with Attention Sinks"), as
mit-han-lab/streaming-llm scores a stream: each query sees the first k tokens (the attention sinks) and
its W most recent ones, nothing in between, and positions are those of the cache, not of the text.

In the cache of a query at token i the sinks sit at 0..k−1 and the recent tokens right after them, the
query last, at k + W − 1 once anything has been evicted. So a recent pair keeps its exact distance (part
0), a sink s is met by the query at min(i, k + W − 1) (part 1), and every other pair is in no part:
evicted, never scored. Defaults: the paper's k = 4 sinks, and W = L − k recent tokens, a cache of the
training length L, so no position ever passes L.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from posenc_cli.core.choices import MAX_LENGTH
from posenc_cli.core.errors import UsageError, require_int

EVICTED = -1  # the region of a pair no part scores


@dataclass(frozen=True)
class Streaming:
    sinks: int | None = None  # k (--streaming-sinks): the first tokens every query keeps; None: 4
    window: int | None = None  # W (--streaming-window): the recent tokens a query keeps, itself included

    name = "streaming"
    parts = 2  # the recent tokens (exact), the sinks (at their cache positions)

    def __post_init__(self) -> None:
        if self.sinks is not None:
            require_int("--streaming-sinks", self.sinks, at_least=0, at_most=MAX_LENGTH)
        if self.window is not None:
            require_int("--streaming-window", self.window, at_least=1, at_most=MAX_LENGTH)

    def for_length(self, train_len: int) -> Streaming:
        sinks = DEFAULT_SINKS if self.sinks is None else self.sinks
        window = self.window if self.window is not None else max(1, train_len - sinks)
        return replace(self, sinks=sinks, window=window)

    def check_context(self, train_len: int) -> None:
        full = self.for_length(train_len)
        if full.sinks + full.window > train_len:  # type: ignore[operator]
            raise UsageError(
                f"--streaming-sinks {full.sinks} + --streaming-window {full.window} = {full.sinks + full.window} "  # type: ignore[operator]
                f"is past the model's context of {train_len} tokens: the cache's last position is their sum "
                f"minus 1; choose them so it is at most {train_len}"
            )

    def reaches(self, length: int) -> bool:
        return length > self.sinks + self.window  # type: ignore[operator]

    def positions(self, index):
        return [(index, index), (index.clamp(max=self.sinks + self.window - 1), index)]  # type: ignore[operator]

    def region(self, query, key):
        recent = query - key < self.window
        sink = key < self.sinks
        return torch.where(recent, 0, torch.where(sink, 1, EVICTED))

    def keys(self, part, start, stop):
        if part == 0:
            return max(0, start - self.window + 1), stop  # type: ignore[operator]
        return 0, min(self.sinks, stop)  # type: ignore[type-var]

    def marks(self):
        return (("k", str(self.sinks)), ("W", str(self.window)))


DEFAULT_SINKS = 4  # the paper's: four initial tokens restore a windowed model's perplexity
