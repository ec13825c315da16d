"""p-RoPE (Barbero et al., ICLR 2025, "Round and Round We Go! What makes Rotary Positional Encodings
useful?", arXiv 2410.06205; transformers' "proportional" RoPE, Gemma 4's global layers).

RoPE over the whole head, θ_i = base^(-2i/D), with only its highest frequencies kept: the first
int(keep_fraction·D // 2) pairs turn as in RoPE, the rest get θ_i = 0 and are never rotated, so they
carry position-free (semantic) channels. The count is rounded down exactly as transformers'
`_compute_proportional_rope_parameters` rounds its `rope_angles`. A scaling (scheme.scaling) stretches
the kept frequencies as it would RoPE's; the zeroed ones stay zero.
"""

from __future__ import annotations

import torch

from posenc_cli.core.errors import UsageError, require_number
from posenc_cli.model.positional.base import Claim
from posenc_cli.model.positional.rope import RoPE

DEFAULT_KEEP = 0.75  # the paper's 0.75-p-RoPE


class PRoPE(RoPE):
    name = "p_rope"
    claim = Claim(used_by="Gemma 4 global layers (p-RoPE, Barbero et al. 2025)")

    def __init__(
        self,
        n_embd: int,
        n_head: int,
        block_size: int,
        *,
        keep_fraction: float = DEFAULT_KEEP,
        **rope_options,
    ):
        fraction = rope_options.get("rotary_fraction", 1.0)
        if fraction != 1:
            raise UsageError(
                f"scheme=p_rope needs scheme.rotary_fraction=1, got {fraction!r}: p-RoPE keeps the highest "
                "frequencies of the whole head (scheme.keep_fraction); rotary_fraction is scheme=rope's"
            )
        require_number("scheme.keep_fraction", keep_fraction, at_least=0, at_most=1)
        super().__init__(n_embd, n_head, block_size, **rope_options)
        self.keep_fraction = keep_fraction
        self.kept_pairs = int(keep_fraction * self.head_dim // 2)  # transformers' rope_angles

    @property
    def label_options(self) -> tuple[str, ...]:
        keep = () if self.keep_fraction == DEFAULT_KEEP else (f"keep={self.keep_fraction:g}",)
        return super().label_options + keep

    @property
    def unrotated_dims(self) -> int:
        return self.head_dim - 2 * self.kept_pairs

    @property
    def unrotated(self) -> str:
        pairs = self.head_dim // 2
        return f"rotates {self.kept_pairs} of {pairs} pairs; the {pairs - self.kept_pairs} lowest frequencies set to zero"

    def frequencies(self, seq_len: int) -> tuple[torch.Tensor, float]:
        inv_freq, factor = super().frequencies(seq_len)
        return torch.cat(
            (inv_freq[: self.kept_pairs], inv_freq.new_zeros(len(inv_freq) - self.kept_pairs))
        ), factor
