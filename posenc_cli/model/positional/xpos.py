"""xPos (Sun et al. 2022, "A Length-Extrapolatable Transformer"): RoPE times a decay on each pair.

Pair j of q at position n is scaled by ζ_j^(n/B) and of k by ζ_j^(-n/B), ζ_j = (2j/d + γ)/(1 + γ),
γ = 0.4, B = 512. The rotation makes q_m·k_n depend on m - n; the scales multiply pair j of that
product by ζ_j^((m-n)/B) < 1 for m > n, so attention to far keys decays, fastest in the
high-frequency pairs (small ζ_j). The decay only shrinks for m > n: xPos is for causal attention.
Positions are centred on the window before scaling, which leaves every logit unchanged but keeps
ζ^(±n/B) within ζ^(±T/2B) instead of ζ^(-T/B).
"""

from __future__ import annotations

import torch

from posenc_cli.core.errors import require_number
from posenc_cli.model.positional.base import Claim
from posenc_cli.model.positional.rope import RoPE


class XPos(RoPE):
    name = "xpos"
    preserves_norms = False  # q and k are scaled by the decay on purpose
    rotation_reads_context = True  # the decay is centred on the positions' mean
    claim = Claim(used_by="LEX Transformer (TorchScale)")

    def __init__(
        self,
        n_embd: int,
        n_head: int,
        block_size: int,
        *,
        base: float = 10000.0,
        gamma: float = 0.4,
        scale_base: float = 512.0,
        **rope_options,
    ):
        super().__init__(n_embd, n_head, block_size, base=base, **rope_options)
        require_number("scheme.gamma", gamma, above=0)  # every ζ_j in (0, 1]
        require_number("scheme.scale_base", scale_base, above=0)
        self.scale_base = scale_base
        zeta = (torch.arange(0, self.head_dim, 2, dtype=torch.float64) / self.head_dim + gamma) / (1 + gamma)
        self.register_buffer("zeta", zeta, persistent=False)

    def decay(self, positions: torch.Tensor) -> torch.Tensor:
        """(..., T, head_dim): ζ_j^(n/B) for each position n (centred) and each dimension's pair j."""
        centred = positions.to(torch.float64) - positions.to(torch.float64).mean(-1, keepdim=True)
        scale = self.zeta.to(positions.device) ** (centred[..., None] / self.scale_base)
        return self.spread(scale).float()

    def rotate(self, q, k, positions):
        q, k = super().rotate(q, k, positions)
        scale = self.decay(positions).unsqueeze(-3).to(q.dtype)
        return q * scale, k / scale
