"""Rotary position embedding (Su et al. 2021; LLaMA, Qwen, Mistral).

Pair layout: split halves, as in GPT-NeoX and HF LLaMA: dimension i is paired with i + D/2 (the
chapter pairs 2i with 2i+1; the two layouts are the same rotation up to a fixed permutation of the
head dimensions, so every property below holds for both). Pair i turns by angle m·θ_i at position m,
θ_i = base^(-2i/D); rotations compose, so q_m·k_n depends on m - n only.
"""

from __future__ import annotations

import torch

from posenc_cli.errors import UsageError, require_number
from posenc_cli.model.positional.base import Claim, PositionalScheme
from posenc_cli.model.positional.rope_scaling import rope_inv_freq, rope_scaling


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    return x * cos + rotate_half(x) * sin


class RoPE(PositionalScheme):
    name = "rope"
    kind = "rotary"
    relative = "explicit"
    claim = Claim("medium–strong", "中等-强", "LLaMA/Qwen/Mistral")
    scalable = True

    def __init__(self, n_embd: int, n_head: int, block_size: int, base: float = 10000.0, scaling: str = "none",
                 scaling_factor: float | None = None, scaling_len: int | None = None,
                 yarn_alpha: float = 1.0, yarn_beta: float = 32.0):
        super().__init__(n_embd, n_head, block_size)
        if self.head_dim % 2:
            raise UsageError(
                f"{self.name} needs an even head_dim, got n_embd/n_head = {n_embd}/{n_head} = {self.head_dim}; "
                "choose model.n_embd and model.n_head so their quotient is even"
            )
        require_number("scheme.base", base, above=1)
        self.base = base
        self.register_buffer("inv_freq", rope_inv_freq(self.head_dim, base), persistent=False)
        self.scaling = rope_scaling(scaling, block_size, scaling_factor, scaling_len, yarn_alpha, yarn_beta)
        if self.scaling is not None:
            self.frequencies(block_size)  # a scaling this model cannot take is refused now, not mid-run

    @property
    def label(self) -> str:
        return self.name if self.scaling is None else f"{self.name}+{self.scaling.method}"

    def frequencies(self, seq_len: int) -> tuple[torch.Tensor, float]:
        """Per-pair inverse frequencies and a factor on cos/sin for a sequence of `seq_len`."""
        if self.scaling is None:
            return self.inv_freq, 1.0
        return self.scaling.frequencies(self.head_dim, self.base, seq_len)

    def cos_sin(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(..., T) positions -> cos, sin shaped (..., T, head_dim)."""
        inv_freq, factor = self.frequencies(positions.size(-1))
        angles = positions.to(torch.float64)[..., None] * inv_freq.to(positions.device)
        angles = torch.cat((angles, angles), dim=-1)
        return (angles.cos() * factor).float(), (angles.sin() * factor).float()

    def rotate(self, q, k, positions):
        cos, sin = self.cos_sin(positions)
        cos, sin = cos.unsqueeze(-3).to(q.dtype), sin.unsqueeze(-3).to(q.dtype)  # over the head axis
        return apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
