"""xPos (Sun et al. 2022, "A Length-Extrapolatable Transformer"): RoPE times a decay on each pair.

Pair j of q at position n is scaled by ζ_j^(n/B) and of k by ζ_j^(-n/B), ζ_j = (2j/d + γ)/(1 + γ),
γ = 0.4, B = 512. The rotation makes q_m·k_n depend on m - n; the scales multiply pair j of that
product by ζ_j^((m-n)/B) < 1 for m > n, so attention to far keys decays, fastest in the
high-frequency pairs (small ζ_j). The decay only shrinks for m > n: xPos is for causal attention.
Positions are centred on the window before scaling, which leaves every logit unchanged but keeps
ζ^(±n/B) within ζ^(±T/2B) instead of ζ^(-T/B).
"""

from __future__ import annotations

import math

import torch

from posenc_cli.core.choices import MAX_LENGTH
from posenc_cli.core.errors import UsageError, require_number
from posenc_cli.model.positional.base import Claim
from posenc_cli.model.positional.rope import RoPE

# γ, three decades either side of the paper's 0.4: below, the fastest pair's ζ ≈ γ leaves nothing of
# attention a few B away; above, every ζ ≈ 1 and xPos is RoPE
GAMMA_RANGE = (1e-3, 1e3)
# The largest scale, e^SPAN, q or k may be multiplied by at the training length: ζ^(±T/2B) past float32's
# e^88 made the first step NaN (scale_base=0.25 at 64 tokens); e^40 leaves room to evaluate at twice it.
MAX_SPAN = 40.0


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
        if self.unrotated_dims:
            raise UsageError(
                f"scheme=xpos needs scheme.rotary_fraction=1, got {self.rotary_fraction:g}: its decay scales "
                "every pair; a partial rotation is scheme=rope's"
            )
        # every ζ_j in (0, 1]
        require_number("scheme.gamma", gamma, at_least=GAMMA_RANGE[0], at_most=GAMMA_RANGE[1])
        require_number("scheme.scale_base", scale_base, at_least=1, at_most=MAX_LENGTH)  # B, in positions
        check_span(gamma, scale_base, block_size)
        self.scale_base = scale_base
        zeta = (torch.arange(0, self.head_dim, 2, dtype=torch.float64) / self.head_dim + gamma) / (1 + gamma)
        self.register_buffer("zeta", zeta, persistent=False)

    def rotation(self, seq_len: int) -> None:
        """None: its decay is tied to the tokens' own positions, so no extension can move them."""
        return None

    def decay(self, positions: torch.Tensor) -> torch.Tensor:
        """(..., T, head_dim): ζ_j^(n/B) for each position n (centred) and each dimension's pair j."""
        centred = positions.to(torch.float64) - positions.to(torch.float64).mean(-1, keepdim=True)
        scale = self.zeta.to(positions.device) ** (centred[..., None] / self.scale_base)
        return self.spread(scale).float()

    def rotate(self, q, k, positions):
        q, k = super().rotate(q, k, positions)
        scale = self.decay(positions).unsqueeze(-3).to(q.dtype)
        return q * scale, k / scale


def check_span(gamma: float, scale_base: float, block_size: int) -> None:
    """The decay of the fastest pair, ζ_0 = γ/(1 + γ), to the power ±(T/2)/B over a centred window of T
    positions, must stay within e^±MAX_SPAN: a larger B (or γ) where it would not."""
    per_position = math.log((1 + gamma) / gamma)
    span = per_position * block_size / (2 * scale_base)
    if span > MAX_SPAN:
        least = per_position * block_size / (2 * MAX_SPAN)
        raise UsageError(
            f"scheme.scale_base={scale_base:g} is too small for train.block_size={block_size} with "
            f"scheme.gamma={gamma:g}: xPos would scale q and k by up to e^{span:.0f}, more than e^{MAX_SPAN:g} "
            f"(float32 ends at e^88); use scheme.scale_base >= {math.ceil(least)}"
        )
