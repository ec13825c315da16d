"""RoPE frequencies, and context extension: stretch the rotations to reach past the training length.

One implementation serves both uses: `posenc eval --rope-scaling` (a trained model, no retraining) and
`scheme.scaling=...` while training (fine-tuning at a longer length, as Position Interpolation and
YaRN are meant to be used). Both reach it through the rotary schemes' constructor options.

Notation: d = rotary dim (head_dim), b = base, inv_freq_i = b^(-2i/d), L = the original training
length, s = scale factor, T = the sequence length being run. Each method maps (inv_freq, s) to new
inverse frequencies and a factor on cos/sin (YaRN's attention temperature; 1 elsewhere):

    linear  (position interpolation, Chen et al. 2023): inv_freq / s
    ntk     (NTK-aware): base b' = b·s^(d/(d-2)): high frequencies kept, the lowest divided by s
    dynamic (dynamic NTK): for T > L, b' = b·(s·T/L - (s-1))^(d/(d-2)); unchanged for T <= L
    yarn    (Peng et al. 2023): interpolate only the pairs that turn less than α times over L,
            keep those that turn more than β times, ramp in between; cos, sin × (0.1·ln s + 1)
    longrope (Ding et al. 2024): inv_freq_i / λ_i, one factor per pair, for T > L only (one set per
            forward, as transformers switches Phi-3's); cos, sin × sqrt(1 + ln s / ln L). λ from a file
            (eval's --longrope-factors), or the rule that seeds LongRoPE's search: YaRN's ramp as
            factors, λ_i = 1 + (s - 1)·ramp_i (α = 1, β = 32): 1 on the pairs that turn more than 32
            times over L, s on those that turn less than once

Every method is the identity at s = 1 (dynamic: whenever T <= L; longrope: whenever T <= L).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from posenc_cli.core.choices import HF_ROPE_SCALING as HF_ONLY
from posenc_cli.core.choices import MAX_LENGTH
from posenc_cli.core.choices import ROPE_SCALING as METHODS
from posenc_cli.core.errors import UsageError, require_int, require_number


def rope_inv_freq(head_dim: int, base: float) -> torch.Tensor:
    return base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)


def ntk_base(base: float, s: float, head_dim: int) -> float:
    return base * s ** (head_dim / (head_dim - 2))


def dynamic_base(base: float, s: float, head_dim: int, *, seq_len: int, train_len: int) -> float:
    if seq_len <= train_len:
        return base
    return ntk_base(base, s * seq_len / train_len - (s - 1), head_dim)


def yarn_ramp(
    head_dim: int, base: float, train_len: int, *, alpha: float = 1, beta: float = 32
) -> torch.Tensor:
    """0 for pairs that turn more than beta times over L (kept), 1 below alpha turns (interpolated)."""

    def correction_dim(turns: float) -> float:  # the pair index that turns `turns` times over L
        return head_dim * math.log(train_len / (2 * math.pi * turns)) / (2 * math.log(base))

    low = min(max(math.floor(correction_dim(beta)), 0), head_dim - 1)
    high = min(max(math.ceil(correction_dim(alpha)), 0), head_dim - 1)
    if low == high:
        high += 0.001
    pair = torch.arange(head_dim // 2, dtype=torch.float64)
    return ((pair - low) / (high - low)).clamp(0, 1)


def yarn_inv_freq(inv_freq: torch.Tensor, s: float, ramp: torch.Tensor) -> torch.Tensor:
    return inv_freq / s * ramp + inv_freq * (1 - ramp)


def yarn_temperature(s: float) -> float:
    """Factor on cos and sin, so attention logits grow by its square (YaRN's sqrt(1/t))."""
    return 0.1 * math.log(s) + 1 if s > 1 else 1.0


def longrope_rule(head_dim: int, base: float, train_len: int, *, s: float) -> torch.Tensor:
    """LongRoPE's λ per pair before its search (microsoft/LongRoPE's seed): YaRN's ramp, with the seed's
    β_fast = 32 and β_slow = 1, as factors between 1 (high frequencies) and s (low ones)."""
    return 1 + (s - 1) * yarn_ramp(head_dim, base, train_len, alpha=1, beta=32)


def longrope_temperature(s: float, train_len: int) -> float:
    """Factor on cos and sin, as transformers' longrope computes it: sqrt(1 + ln s / ln L), 1 for s <= 1."""
    return math.sqrt(1 + math.log(s) / math.log(train_len)) if s > 1 and train_len > 1 else 1.0


@dataclass(frozen=True)
class LongRopeFactors:
    """LongRoPE's λ per rotary pair, as given (eval's --longrope-factors): a scheme's `scaling` option may
    be one, for method longrope with these factors in place of the rule's. Each at least 1, non-decreasing."""

    values: tuple[float, ...]
    source: str  # the file they were read from, named in a refusal

    method = "longrope"

    def check_pairs(self, pairs: int) -> None:
        if len(self.values) != pairs:
            raise UsageError(
                f"--longrope-factors {self.source}: {len(self.values)} factors, the model rotates {pairs} pairs "
                "(head_dim/2, or its rotary dims/2); give one factor per pair"
            )


MAX_FACTOR = 1e4  # beyond any published extension (LongRoPE: 512x); larger ones overflow the maths
# YaRN's alpha and beta count turns over L (the paper's 1 and 32); infinite ones took a log of 0. Past 1e6
# (L/2π turns need L > 6e6) every pair of any run is on the same side of the ramp.
MAX_TURNS = 1e6


@dataclass(frozen=True)
class RopeScaling:
    """One extension method for a rotary model first trained at `train_len` (L) tokens.

    factor None: s = max(1, T/L) for a sequence of T tokens, so a model run at length L is unchanged.
    Dynamic NTK scales with T by itself; its s then defaults to 1. alpha, beta: YaRN's ramp bounds.
    """

    method: str
    train_len: int
    factor: float | None = None
    alpha: float = 1.0
    beta: float = 32.0
    long_factors: LongRopeFactors | None = None  # longrope's λ as given; None: its rule

    @property
    def follows_length(self) -> bool:
        """Whether the frequencies depend on the length of the sequence rotated: dynamic NTK, longrope (its
        factor set switches at L, as transformers' does per forward), or a factor taken from the length."""
        return self.method in ("dynamic", "longrope") or self.factor is None

    def __post_init__(self) -> None:
        if self.method not in METHODS + HF_ONLY:
            raise UsageError(
                f"RoPE scaling {self.method!r} (--rope-scaling, scheme.scaling) is not known; "
                f"choose from: {', '.join(METHODS)} (hf: models also {', '.join(HF_ONLY)})"
            )
        factor_ok = isinstance(self.factor, (int, float)) and 1 <= self.factor <= MAX_FACTOR
        if self.factor is not None and not factor_ok:
            raise UsageError(
                f"the RoPE scale factor (--rope-factor, scheme.scaling_factor) must be a number in "
                f"[1, {MAX_FACTOR:g}] (scaling stretches positions; below 1 it would shrink them), "
                f"got {self.factor!r}"
            )
        require_number("scheme.yarn_alpha", self.alpha, above=0, at_most=MAX_TURNS)
        require_number("scheme.yarn_beta", self.beta, above=0, at_most=MAX_TURNS)
        if not self.alpha < self.beta:
            raise UsageError(
                f"YaRN needs 0 < scheme.yarn_alpha < scheme.yarn_beta, got {self.alpha} and {self.beta}"
            )

    def scale(self, seq_len: int) -> float:
        if self.method == "longrope" and seq_len <= self.train_len:
            return 1.0  # its short set: the model's own frequencies
        if self.factor is not None:
            return self.factor
        return 1.0 if self.method == "dynamic" else max(1.0, seq_len / self.train_len)

    def frequencies(self, head_dim: int, base: float, seq_len: int) -> tuple[torch.Tensor, float]:
        """(inverse frequencies, factor on cos/sin) for a sequence of `seq_len` tokens."""
        s = self.scale(seq_len)
        if self.method in ("ntk", "dynamic") and head_dim <= 2:
            raise UsageError(
                f"RoPE scaling {self.method} needs a rotary dim above 2, the model has {head_dim}"
            )
        inv_freq = rope_inv_freq(head_dim, base)
        if self.method == "linear":
            return inv_freq / s, 1.0
        if self.method == "ntk":
            return rope_inv_freq(head_dim, ntk_base(base, s, head_dim)), 1.0
        if self.method == "dynamic":
            return rope_inv_freq(
                head_dim, dynamic_base(base, s, head_dim, seq_len=seq_len, train_len=self.train_len)
            ), 1.0
        if self.method == "yarn":
            ramp = yarn_ramp(head_dim, base, self.train_len, alpha=self.alpha, beta=self.beta)
            return yarn_inv_freq(inv_freq, s, ramp), yarn_temperature(s)
        if self.method == "longrope":
            return self.longrope(inv_freq, base, seq_len)
        if self.method == "none":
            return inv_freq, 1.0
        raise UsageError(
            f"RoPE scaling {self.method!r} exists for hf: models only (transformers' implementation)"
        )

    def longrope(self, inv_freq: torch.Tensor, base: float, seq_len: int) -> tuple[torch.Tensor, float]:
        """LongRoPE's long set past L (the given factors, else the rule's at s), the model's own within."""
        if self.long_factors is not None:
            self.long_factors.check_pairs(inv_freq.numel())
        if seq_len <= self.train_len:
            return inv_freq, 1.0
        s = self.scale(seq_len)
        factors = (
            torch.tensor(self.long_factors.values, dtype=torch.float64)
            if self.long_factors is not None
            else longrope_rule(2 * inv_freq.numel(), base, self.train_len, s=s)
        )
        return inv_freq / factors, longrope_temperature(s, self.train_len)


def rope_scaling(
    method: str | LongRopeFactors,
    block_size: int,
    factor: float | None,
    *,
    original_len: int | None,
    alpha: float,
    beta: float,
) -> RopeScaling | None:
    """The scaling a rotary scheme's options ask for, None for 'none': a method's name, or LongRoPE's
    factors as given. L (`original_len`) defaults to block_size / factor: fine-tuning at 1,024 with factor 4
    extends a model first trained at 256, as s = L'/L in the papers; with no factor, L is the block size
    itself (s = T/L past it)."""
    long_factors = method if isinstance(method, LongRopeFactors) else None
    method = method.method if isinstance(method, LongRopeFactors) else method
    if method == "none" and (factor is not None or original_len is not None):
        given = "scheme.scaling_factor" if factor is not None else "scheme.scaling_len"
        raise UsageError(
            f"{given} applies only with a RoPE scaling; add scheme.scaling=linear|ntk|dynamic|yarn or drop it"
        )
    if original_len is not None:  # 0 once divided by zero in the pre-flight
        require_int("scheme.scaling_len", original_len, at_least=1, at_most=MAX_LENGTH)
    else:
        original_len = (
            max(1, round(block_size / factor))
            if isinstance(factor, (int, float)) and factor > 0
            else block_size
        )
    scaling = RopeScaling(method, original_len, factor, alpha, beta, long_factors)
    return None if method == "none" else scaling
