"""STRING (An et al., ICLR 2025, "Why Does the Effective Context Length of LLMs Fall Short?"), as
HKUNLP/STRING computes it in decoding.

Pairs closer than the offset S keep their exact distance. Farther ones are shifted down by S − W: the
query sits at i − S + W, the key at its own position, so a distance d ≥ S is read as d − S + W. The
well-trained small distances then cover the far pairs, which a model trained with RoPE sees too rarely.
The paper's defaults: S = L/3 of the training length L, and a local window W of 128 at 2K (posenc
scales it as W = L/16, the same ratio). Differences from the repository: its prefill kernel scores the
pair at d = S in both parts (its flash window is inclusive), and it multiplies cos and sin by
1 + 0.1·ln 2; posenc follows the paper's equation and the repository's decoding, which do neither.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from posenc_cli.core.choices import MAX_LENGTH
from posenc_cli.core.errors import UsageError, require_int
from posenc_cli.model.extension.remap import ExactWithinWindow


@dataclass(frozen=True)
class String(ExactWithinWindow):
    window: int | None = None  # S (--string-offset): pairs this far apart or farther are shifted
    local: int | None = None  # W (--string-window): the distance a pair S apart is read at

    name = "string"  # its parts: exact, then shifted past the offset
    window_option = "--string-offset"

    def __post_init__(self) -> None:
        if self.window is not None:
            require_int("--string-offset", self.window, at_least=1, at_most=MAX_LENGTH)
        if self.local is not None:
            require_int("--string-window", self.local, at_least=0, at_most=MAX_LENGTH)
        if None not in (self.window, self.local) and self.local > self.window:  # type: ignore[operator]
            raise UsageError(
                f"--string-window {self.local} is past --string-offset {self.window}: a shifted pair would "
                "be read farther apart than it is; choose --string-window <= --string-offset"
            )

    def for_length(self, train_len: int) -> String:
        offset = self.window if self.window is not None else max(1, train_len // 3)
        local = self.local if self.local is not None else min(offset, max(1, train_len // 16))
        return replace(self, window=offset, local=local)

    def check_context(self, train_len: int) -> None:
        super().check_context(train_len)
        full = self.for_length(train_len)
        if full.local > full.window:  # type: ignore[operator]
            raise UsageError(
                f"--string-window {full.local} is past the offset {full.window} (a third of the training length "
                f"{train_len}); choose --string-window <= {full.window}"
            )

    def positions(self, index):
        return [(index, index), (index - self.window + self.local, index)]

    def marks(self):
        return (("S", str(self.window)), ("W", str(self.local)))
