"""Moving rotated queries and keys to other positions: what every training-free extension does.

RoPE turns pair i of a token at position m by m·θ_i, and rotations compose: a row already turned to
position m reaches position p by one more turn of (p - m)·θ_i. So an extension never needs the
unrotated vectors, only the rotation that produced them; a factor on cos and sin (YaRN's temperature)
rides along unchanged. This is why posenc's own runs and transformers' models share one implementation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

Turn = Callable[[torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class Rotation:
    """The rotation a model gave its queries and keys: inverse frequencies per pair, and its layout's
    two functions (the pair partner turned by 90°; one value per pair spread over the pair's dims)."""

    inv_freq: torch.Tensor  # (D/2,)
    turn: Turn
    spread: Turn

    def move(self, x: torch.Tensor, positions: torch.Tensor, origin: torch.Tensor) -> torch.Tensor:
        """x: (B, H, T, D) rows rotated to `origin` (T,) -> the same rows rotated to `positions` (T,),
        computed in x's dtype from float64 angles."""
        delta = (positions.to(torch.float64) - origin.to(torch.float64))[:, None]
        angles = self.spread(delta * self.inv_freq.to(device=x.device, dtype=torch.float64))
        cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
        return x * cos + self.turn(x) * sin
