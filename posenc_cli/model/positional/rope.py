"""Rotary position embedding (Su et al. 2021; LLaMA, Qwen, Mistral).

Pair layout (`scheme.layout`): `half` (default) pairs dimension i with i + D/2, as GPT-NeoX and HF
LLaMA do; `interleaved` pairs 2i with 2i+1, as the chapter's RotaryEmbedding does. The two are the
same rotation up to a fixed permutation of the head dimensions (LAYOUTS), so every property below
holds for both. Pair i turns by angle m·θ_i at position m, θ_i = base^(-2i/D); rotations compose,
so q_m·k_n depends on m - n only.
"""

from __future__ import annotations

import torch

from posenc_cli.core.errors import UsageError, require_number
from posenc_cli.model.extension import Rotation
from posenc_cli.model.positional.base import MAX_BASE, Claim, PositionalScheme
from posenc_cli.model.positional.rope_scaling import rope_inv_freq, rope_scaling


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


def rotate_interleaved(x: torch.Tensor) -> torch.Tensor:
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack((-odd, even), dim=-1).flatten(-2)


def spread_half(per_pair: torch.Tensor) -> torch.Tensor:
    """(..., D/2) one value per pair -> (..., D) on the dimensions of each pair: i and i + D/2."""
    return torch.cat((per_pair, per_pair), dim=-1)


def spread_interleaved(per_pair: torch.Tensor) -> torch.Tensor:
    """(..., D/2) one value per pair -> (..., D) on the dimensions of each pair: 2i and 2i + 1."""
    return per_pair.repeat_interleave(2, dim=-1)


# layout -> (the pair partner of each dimension, turned by 90°; one value per pair spread over its dimensions)
LAYOUTS = {"half": (rotate_half, spread_half), "interleaved": (rotate_interleaved, spread_interleaved)}


class RoPE(PositionalScheme):
    name = "rope"
    kind = "rotary"
    relative = "explicit"
    claim = Claim("medium–strong", "中等-强", "LLaMA/Qwen/Mistral")
    scalable = True

    def __init__(
        self,
        n_embd: int,
        n_head: int,
        block_size: int,
        *,
        base: float = 10000.0,
        scaling: str = "none",
        scaling_factor: float | None = None,
        scaling_len: int | None = None,
        yarn_alpha: float = 1.0,
        yarn_beta: float = 32.0,
        layout: str = "half",
    ):
        super().__init__(n_embd, n_head, block_size)
        if layout not in LAYOUTS:
            raise UsageError(f"scheme.layout={layout} is not known; choose one of: {', '.join(LAYOUTS)}")
        self.layout = layout
        self.turn, self.spread = LAYOUTS[layout]
        if self.head_dim % 2:
            raise UsageError(
                f"{self.name} needs an even head_dim, got n_embd/n_head = {n_embd}/{n_head} = {self.head_dim}; "
                "choose model.n_embd and model.n_head so their quotient is even"
            )
        require_number("scheme.base", base, above=1, at_most=MAX_BASE)
        self.base = base
        self.register_buffer("inv_freq", rope_inv_freq(self.head_dim, base), persistent=False)
        self.scaling = rope_scaling(
            scaling, block_size, scaling_factor, original_len=scaling_len, alpha=yarn_alpha, beta=yarn_beta
        )
        if self.scaling is not None:
            self.frequencies(block_size)  # a scaling this model cannot take is refused now, not mid-run
        # dynamic NTK, or a factor taken from the length (none given): the frequencies follow the context
        self.rotation_reads_length = self.scaling is not None and (
            self.scaling.method == "dynamic" or self.scaling.factor is None
        )

    @property
    def label_options(self) -> tuple[str, ...]:
        return () if self.layout == "half" else (self.layout,)

    @property
    def scaling_method(self) -> str:
        return "" if self.scaling is None else self.scaling.method

    def frequencies(self, seq_len: int) -> tuple[torch.Tensor, float]:
        """Per-pair inverse frequencies and a factor on cos/sin for a sequence of `seq_len`."""
        if self.scaling is None:
            return self.inv_freq, 1.0
        return self.scaling.frequencies(self.head_dim, self.base, seq_len)

    def cos_sin(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(..., T) positions -> cos, sin shaped (..., T, head_dim)."""
        inv_freq, factor = self.frequencies(positions.size(-1))
        angles = positions.to(torch.float64)[..., None] * inv_freq.to(positions.device)
        angles = self.spread(angles)
        return (angles.cos() * factor).float(), (angles.sin() * factor).float()

    def rotation(self, seq_len: int) -> Rotation:
        """How `rotate` turns a sequence of `seq_len` tokens: what an extension moves rows by."""
        return Rotation(self.frequencies(seq_len)[0], self.turn, self.spread)

    def check_takes_extension(self) -> None:
        """RoPE takes any: an extension moves its rotated rows by more turns of the same frequencies."""

    def attend(self, q, k, v):
        return (
            None
            if self.extension is None
            else self.extension.attend(q, k, v, rotation=self.rotation(k.size(2)))
        )

    def rotate(self, q, k, positions):
        cos, sin = self.cos_sin(positions)
        cos, sin = cos.unsqueeze(-3).to(q.dtype), sin.unsqueeze(-3).to(q.dtype)  # over the head axis
        return q * cos + self.turn(q) * sin, k * cos + self.turn(k) * sin
