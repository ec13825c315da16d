"""Training-free context extension of RoPE attention, beyond stretching its frequencies.

A column of `--rope-scaling` is a ContextMethod (method.py): a frequency scaling (rope_scaling.py),
at most one remapping of the positions queries and keys meet at (Self-Extend, ReRoPE, Leaky ReRoPE,
Dual Chunk Attention: one module each, remap.py's contract) and log-n query scaling. What it adds to a
layer is a ContextExtension: the layer's attention (model/attention.py `LayerAttention.extended`)
takes its remap, and its log-n as the layer's query temperature. posenc's own runs and transformers'
models (hf/extended_attention.py) are computed by the same executor.
"""

from __future__ import annotations

from dataclasses import dataclass

from posenc_cli.model.blocks import query_block
from posenc_cli.model.extension.remap import PositionRemap
from posenc_cli.model.extension.rotation import Rotation
from posenc_cli.model.window import FULL


@dataclass(frozen=True)
class ContextExtension:
    """What a column adds to a rotary model's attention: a remap of positions, log-n scaling past
    `logn_len` tokens (None: off). Built for one model's training length (ContextMethod.extension)."""

    remap: PositionRemap | None = None
    logn_len: int | None = None

    @property
    def names(self) -> tuple[str, ...]:
        """What a column's name adds after its scaling: (self_extend,), (logn,), (dca, logn)."""
        return ((self.remap.name,) if self.remap is not None else ()) + (("logn",) if self.logn_len else ())

    @property
    def marks(self) -> tuple[tuple[str, str], ...]:
        """Its parameters as the column's name shows them: (G, 8), (W, 1024)."""
        return self.remap.marks() if self.remap is not None else ()

    def extra_bytes(self, *, batch: int, heads: int, length: int, head_dim: int) -> int:
        """Bytes the executor holds beyond plain attention at `length` tokens (fp32), read from the rule
        its query blocks follow (blocks.query_block): what the memory models add for a column."""
        rows_of_all = 4 * batch * heads * length * head_dim
        if self.remap is None:  # log-n alone: the scaled queries
            return rows_of_all
        parts = self.remap.parts
        rows = query_block(length, length, planes=parts, window=FULL)
        moved = (
            2 * parts * rows_of_all + 3 * rows_of_all
        )  # each part's queries and keys, and the move's temporaries
        masks = parts * rows * length * (8 + 3 + 4)  # per part: its region, three boolean masks, a float mask
        pieces = 2 * parts * batch * heads * rows * head_dim * 4 + rows_of_all  # the merge, and its output
        return moved + masks + pieces


__all__ = ["ContextExtension", "PositionRemap", "Rotation"]
