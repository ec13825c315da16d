"""Training-free context extension of RoPE attention, beyond stretching its frequencies.

A column of `--rope-scaling` is a ContextMethod (method.py): a frequency scaling (rope_scaling.py),
at most one remapping of the positions queries and keys meet at (Self-Extend, ReRoPE, Leaky ReRoPE,
Dual Chunk Attention: one module each, remap.py's contract) and log-n query scaling. A rotary scheme
given a ContextExtension computes its attention here (PositionalScheme.attend); posenc's own runs and
transformers' models (evaluation/hf_extension.py) share every line of it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from posenc_cli.model.extension.blocked import remapped_attention, remapped_bytes
from posenc_cli.model.extension.remap import PositionRemap
from posenc_cli.model.extension.rotation import Rotation
from posenc_cli.model.temperature import logn_factors


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
        """Bytes `attend` holds beyond plain attention at `length` tokens (fp32): what the memory models
        add for a column with this extension."""
        if self.remap is None:  # log-n alone: the scaled queries
            return 4 * batch * heads * length * head_dim
        return remapped_bytes(
            self.remap.parts, batch=batch, heads=heads, length=length, head_dim=head_dim, element=4
        )

    def attend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, rotation: Rotation
    ) -> torch.Tensor:
        """q: (B, H, Tq, D), the newest Tq of Tk tokens; k, v: (B, H, Tk, D); q and k rotated to their
        own positions by `rotation`. Causal attention as this extension computes it."""
        Tq, Tk = q.size(2), k.size(2)
        scale = None
        if self.logn_len is not None:
            scale = logn_factors(torch.arange(Tk - Tq, Tk, device=q.device), self.logn_len)
        if self.remap is not None and self.remap.reaches(Tk):
            return remapped_attention(q, k, v, remap=self.remap, rotation=rotation, query_scale=scale)
        if scale is not None:
            q = q * scale.to(q.dtype)[:, None]
        if Tq == Tk:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        seen = torch.arange(Tk - Tq, Tk, device=q.device)[:, None] >= torch.arange(Tk, device=q.device)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=seen)


__all__ = ["ContextExtension", "PositionRemap", "Rotation"]
