"""Rotary position embedding (Su et al. 2021; LLaMA, Qwen, Mistral).

Pair layout (`scheme.layout`): `half` (default) pairs dimension i with i + D/2, as GPT-NeoX and HF
LLaMA do; `interleaved` pairs 2i with 2i+1, as the chapter's RotaryEmbedding does. The two are the
same rotation up to a fixed permutation of the head dimensions (LAYOUTS), so every property below
holds for both. Pair i turns by angle m·θ_i at position m, θ_i = base^(-2i/D); rotations compose,
so q_m·k_n depends on m - n only.

Partial rotation (`scheme.rotary_fraction` p, GPT-NeoX's `rotary_pct`: Pythia, Phi-4-mini): only the
first d = int(p·D) dimensions of each head turn, paired in the layout's way among themselves, with
θ_i = base^(-2i/d) over those d (a scaling too: transformers' partial_rotary_factor); the other D - d
pass unchanged. d is rounded down, as transformers' GPTNeoXAttention.rotary_ndims is, and must be even.
"""

from __future__ import annotations

from functools import partial

import torch

from posenc_cli.core.errors import UsageError, require_number
from posenc_cli.model.extension.rotation import Rotation
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


def turn_first(x: torch.Tensor, *, turn, rotated: int) -> torch.Tensor:
    """`turn` on the first `rotated` dimensions, zero on the rest: they have no pair partner."""
    return torch.cat((turn(x[..., :rotated]), torch.zeros_like(x[..., rotated:])), dim=-1)


def spread_first(per_pair: torch.Tensor, *, spread, head_dim: int) -> torch.Tensor:
    """`spread` over the first dimensions, angle 0 on the rest (cos 1, sin 0: left as they are)."""
    spread_out = spread(per_pair)
    rest = per_pair.new_zeros(*per_pair.shape[:-1], head_dim - spread_out.size(-1))
    return torch.cat((spread_out, rest), dim=-1)


def rotated_dims(head_dim: int, fraction: float) -> int:
    """int(fraction·head_dim), GPT-NeoX's rotary_ndims: refused outside (0, 1], and when odd or 0."""
    require_number("scheme.rotary_fraction", fraction, above=0, at_most=1)
    dims = int(head_dim * fraction)
    if dims % 2 or not dims:
        raise UsageError(
            f"scheme.rotary_fraction={fraction:g} rotates int({fraction:g}·{head_dim}) = {dims} of head_dim "
            f"{head_dim}, and rotation needs an even number above 0; choose a fraction whose product with "
            f"{head_dim} rounds down to an even number, e.g. a multiple of {2 / head_dim:g} up to 1"
        )
    return dims


DEFAULT_BASE = 10000.0  # RoFormer's and LLaMA's θ


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
        base: float = DEFAULT_BASE,
        scaling: str = "none",
        scaling_factor: float | None = None,
        scaling_len: int | None = None,
        yarn_alpha: float = 1.0,
        yarn_beta: float = 32.0,
        layout: str = "half",
        rotary_fraction: float = 1.0,
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
        self.rotary_fraction = rotary_fraction
        self.rotary_dims = rotated_dims(self.head_dim, rotary_fraction)
        require_number("scheme.base", base, above=1, at_most=MAX_BASE)
        self.base = base
        self.register_buffer("inv_freq", rope_inv_freq(self.rotary_dims, base), persistent=False)
        self.scaling = rope_scaling(
            scaling, block_size, scaling_factor, original_len=scaling_len, alpha=yarn_alpha, beta=yarn_beta
        )
        if self.scaling is not None:
            self.scaling.frequencies(
                self.rotary_dims, base, block_size
            )  # refused now if it cannot, not mid-run
        # the frequencies follow the context's length (RopeScaling.follows_length): a KV cache would be stale
        self.rotation_reads_length = self.scaling is not None and self.scaling.follows_length

    @property
    def label_options(self) -> tuple[str, ...]:
        layout = () if self.layout == "half" else (self.layout,)
        base = () if self.base == DEFAULT_BASE else (f"base={self.base:g}",)
        return layout + base + (() if self.rotary_fraction == 1 else (f"rotary={self.rotary_fraction:g}",))

    @property
    def unrotated_dims(self) -> int:
        """Dimensions of each head that no position turns."""
        return self.head_dim - self.rotary_dims

    @property
    def unrotated(self) -> str:
        """What `rotate` leaves as it is, in words (`posenc inspect`); "" where it turns every dimension."""
        if not self.unrotated_dims:
            return ""
        return (
            f"rotates {self.rotary_dims} of {self.head_dim} dimensions per head; "
            f"{self.unrotated_dims} left unrotated"
        )

    @property
    def scaling_method(self) -> str:
        return "" if self.scaling is None else self.scaling.method

    def frequencies(self, seq_len: int) -> tuple[torch.Tensor, float]:
        """Per-pair inverse frequencies and a factor on cos/sin for a sequence of `seq_len`."""
        if self.scaling is None:
            return self.inv_freq, 1.0
        return self.scaling.frequencies(self.rotary_dims, self.base, seq_len)

    def cos_sin(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(..., T) positions -> cos, sin shaped (..., T, rotary_dims)."""
        inv_freq, factor = self.frequencies(positions.size(-1))
        angles = positions.to(torch.float64)[..., None] * inv_freq.to(positions.device)
        angles = self.spread(angles)
        return (angles.cos() * factor).float(), (angles.sin() * factor).float()

    def rotation(self, seq_len: int) -> Rotation:
        """How `rotate` turns a sequence of `seq_len` tokens: what an extension moves rows by (the
        unrotated dimensions of a partial rotation by angle 0: not at all)."""
        inv_freq = self.frequencies(seq_len)[0]
        if self.rotary_dims == self.head_dim:
            return Rotation(inv_freq, self.turn, self.spread)
        turn = partial(turn_first, turn=self.turn, rotated=self.rotary_dims)
        return Rotation(inv_freq, turn, partial(spread_first, spread=self.spread, head_dim=self.head_dim))

    def rotate(self, q, k, positions):
        cos, sin = self.cos_sin(positions)
        cos, sin = cos.unsqueeze(-3).to(q.dtype), sin.unsqueeze(-3).to(q.dtype)  # over the head axis
        return self.turned(q, cos, sin), self.turned(k, cos, sin)

    def turned(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """x with its first rotary_dims turned, the rest as they are (GPT-NeoX's apply_rotary_pos_emb)."""
        rotated = x[..., : self.rotary_dims]
        rotated = rotated * cos + self.turn(rotated) * sin
        if self.rotary_dims == self.head_dim:
            return rotated
        return torch.cat((rotated, x[..., self.rotary_dims :]), dim=-1)
