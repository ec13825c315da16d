"""Sinusoidal encoding (Vaswani et al. 2017): PE(pos, 2i) = sin(pos / base^(2i/d)), PE(pos, 2i+1) = cos(...).

Computed from the positions on every call, so it has no table and no length limit. As in the paper
(section 3.4) the token embeddings are multiplied by sqrt(d) first: unscaled, the unit-amplitude
encoding drowns embeddings initialised at std 0.02 and the model trains markedly worse than NoPE.
"""

from __future__ import annotations

import torch

from posenc_cli.errors import require_number
from posenc_cli.model.positional.base import Claim, PositionalScheme


def sinusoidal_table(positions: torch.Tensor, dim: int, base: float = 10000.0) -> torch.Tensor:
    """(..., T) positions -> (..., T, dim): even dims sin, odd dims cos, frequencies base^(-2i/d)."""
    freqs = base ** (-torch.arange(0, dim, 2, dtype=torch.float64, device=positions.device) / dim)
    angles = positions.to(torch.float64)[..., None] * freqs
    pe = torch.empty(*positions.shape, dim, dtype=torch.float64, device=positions.device)
    pe[..., 0::2] = torch.sin(angles)
    pe[..., 1::2] = torch.cos(angles[..., : dim // 2])
    return pe.to(torch.float32)


class Sinusoidal(PositionalScheme):
    name = "sinusoidal"
    kind = "additive"
    relative = "implicit"
    claim = Claim("weak", "弱", "original Transformer")

    def __init__(self, n_embd: int, n_head: int, block_size: int, base: float = 10000.0):
        super().__init__(n_embd, n_head, block_size)
        require_number("scheme.base", base, above=1)
        self.base = base

    def embed(self, x, positions):
        return x * self.n_embd**0.5 + sinusoidal_table(positions, self.n_embd, self.base).to(x.dtype)
