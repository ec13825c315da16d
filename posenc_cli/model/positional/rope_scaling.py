"""RoPE context extension at evaluation time: stretch a trained model's rotations, no retraining.

Notation: d = rotary dim (head_dim), b = base, inv_freq_i = b^(-2i/d), L = training length, s = scale
factor, T = the sequence length being run. Each method maps (inv_freq, s) to new inverse frequencies
and a factor on cos/sin (YaRN's attention temperature; 1 elsewhere):

    linear  (position interpolation, Chen et al. 2023): inv_freq / s
    ntk     (NTK-aware): base b' = b·s^(d/(d-2)): high frequencies kept, the lowest divided by s
    dynamic (dynamic NTK): for T > L, b' = b·(s·T/L - (s-1))^(d/(d-2)); unchanged for T <= L
    yarn    (Peng et al. 2023): interpolate only the pairs that turn less than β_slow times over L,
            keep those that turn more than β_fast times, ramp in between; cos, sin × (0.1·ln s + 1)

Every method is the identity at s = 1 (dynamic: whenever T <= L).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from posenc_cli.errors import UsageError
from posenc_cli.model.positional.rope import rope_inv_freq

METHODS = ("none", "linear", "ntk", "dynamic", "yarn")
HF_ONLY = ("llama3",)  # transformers' own implementations, for `hf:` models (see posenc_cli/hf.py)


def ntk_base(base: float, s: float, head_dim: int) -> float:
    return base * s ** (head_dim / (head_dim - 2))


def dynamic_base(base: float, s: float, head_dim: int, seq_len: int, train_len: int) -> float:
    if seq_len <= train_len:
        return base
    return ntk_base(base, s * seq_len / train_len - (s - 1), head_dim)


def yarn_ramp(head_dim: int, base: float, train_len: int, beta_fast: float = 32, beta_slow: float = 1) -> torch.Tensor:
    """0 for pairs that turn more than beta_fast times over L (kept), 1 below beta_slow turns (interpolated)."""

    def correction_dim(turns: float) -> float:  # the pair index that turns `turns` times over L
        return head_dim * math.log(train_len / (2 * math.pi * turns)) / (2 * math.log(base))

    low = min(max(math.floor(correction_dim(beta_fast)), 0), head_dim - 1)
    high = min(max(math.ceil(correction_dim(beta_slow)), 0), head_dim - 1)
    if low == high:
        high += 0.001
    pair = torch.arange(head_dim // 2, dtype=torch.float64)
    return ((pair - low) / (high - low)).clamp(0, 1)


def yarn_inv_freq(inv_freq: torch.Tensor, s: float, ramp: torch.Tensor) -> torch.Tensor:
    return inv_freq / s * ramp + inv_freq * (1 - ramp)


def yarn_temperature(s: float) -> float:
    """Factor on cos and sin, so attention logits grow by its square (YaRN's sqrt(1/t))."""
    return 0.1 * math.log(s) + 1 if s > 1 else 1.0


@dataclass(frozen=True)
class RopeScaling:
    """One evaluation-time extension method for a rotary model trained at `train_len` tokens.

    factor None: s = max(1, T/L) for a sequence of T tokens, so a model run at its training length
    is unchanged. Dynamic NTK scales with T by itself; its s then defaults to 1.
    """

    method: str
    train_len: int
    factor: float | None = None

    def __post_init__(self) -> None:
        if self.method not in METHODS + HF_ONLY:
            raise UsageError(f"--rope-scaling {self.method} is not known; choose from: {', '.join(METHODS)} "
                             f"(hf: models also {', '.join(HF_ONLY)})")
        if self.factor is not None and not self.factor > 0:
            raise UsageError(f"--rope-factor must be a positive number, got {self.factor}")

    def scale(self, seq_len: int) -> float:
        if self.factor is not None:
            return self.factor
        return 1.0 if self.method == "dynamic" else max(1.0, seq_len / self.train_len)

    def frequencies(self, head_dim: int, base: float, seq_len: int) -> tuple[torch.Tensor, float]:
        """(inverse frequencies, factor on cos/sin) for a sequence of `seq_len` tokens."""
        s = self.scale(seq_len)
        if self.method in ("ntk", "dynamic") and head_dim <= 2:
            raise UsageError(f"--rope-scaling {self.method} needs a rotary dim above 2, the model has {head_dim}")
        inv_freq = rope_inv_freq(head_dim, base)
        if self.method == "linear":
            return inv_freq / s, 1.0
        if self.method == "ntk":
            return rope_inv_freq(head_dim, ntk_base(base, s, head_dim)), 1.0
        if self.method == "dynamic":
            return rope_inv_freq(head_dim, dynamic_base(base, s, head_dim, seq_len, self.train_len)), 1.0
        if self.method == "yarn":
            return yarn_inv_freq(inv_freq, s, yarn_ramp(head_dim, base, self.train_len)), yarn_temperature(s)
        if self.method == "none":
            return inv_freq, 1.0
        raise UsageError(f"--rope-scaling {self.method} exists for hf: models only")


def parse_rope_scaling(text: str, factor: float | None) -> list[str]:
    """'none,ntk,yarn' -> ['none', 'ntk', 'yarn'] in the order given; an unknown method or a bad
    --rope-factor is one clear error before any run is loaded."""
    methods = list(dict.fromkeys(p.strip() for p in str(text).split(",")))
    for method in methods:
        RopeScaling(method, train_len=1, factor=factor)
    return methods
