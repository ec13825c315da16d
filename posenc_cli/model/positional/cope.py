"""CoPE (Golovneva et al. 2024, arXiv 2405.18719, "Contextual Position Encoding"): a query counts the keys
its gates let through, and looks that count up in a learned table.

For query i and key j <= i: gates g_it = σ(q_i·k_t/√D), a fractional position p_ij = Σ_{t=j..i} g_it
(clamped to npos − 1), and the score gains q_i·e(p_ij)/√D, where e interpolates a learned (npos, D)
table E between integer positions: e(p) = (1 − frac p)·E[⌊p⌋] + frac p·E[⌈p⌉]. As the paper says, q·E
is computed once per integer position and the logits are interpolated, not the vectors.

Choices, following the authors' code (facebookresearch/RAM, projects/cope, context_position.py, at its
defaults): the gate reads q·k/√D; the added term is divided by √D too (their logits are (q·k + q·e)/√D
unless --cope-nodiv); one table shared by the heads of a layer, one per layer (not --cope-shared); npos
defaults to the training length + 1, since a query's count runs from 0 to T. One departure: the table
starts at N(0, 0.02²), not at zero, which would make a fresh CoPE exactly NoPE (no order at all, so
`posenc inspect`'s permutation check could not tell them apart); its scores start within ~0.01 of it. The gates use the queries and keys as the layer scores them (rotated where CoPE is
part of a composite, after any query temperature).
"""

from __future__ import annotations

import torch
from torch import nn

from posenc_cli.core.choices import MAX_LENGTH
from posenc_cli.core.errors import UsageError, require_int
from posenc_cli.model.positional.base import Claim
from posenc_cli.model.positional.content import ContentScheme

TABLE_STD = 0.02  # the model's own init std of its weights


class CoPE(ContentScheme):
    name = "cope"
    param_formula = "npos·d/h"
    claim = Claim(used_by="CoPE (Golovneva et al. 2024)")

    def __init__(self, n_embd: int, n_head: int, block_size: int, *, npos: int | None = None):
        super().__init__(n_embd, n_head, block_size)
        least = block_size + 1
        if npos is not None:
            require_int("scheme.npos", npos, at_least=1, at_most=MAX_LENGTH + 1)
            if npos < least:
                raise UsageError(
                    f"scheme.npos={npos} is a table smaller than the counts 0..{block_size} a query of "
                    f"train.block_size={block_size} tokens makes; CoPE needs scheme.npos >= {least} (or null)"
                )
        self.npos = least if npos is None else npos
        self.table = nn.Parameter(torch.empty(self.npos, self.head_dim))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.normal_(self.table, std=TABLE_STD)

    def bias_activations(self, length: int) -> int:
        """Per sequence and pair: the gates, the clamped counts, their floor and ceiling (int64, two floats
        each), the interpolation's two factors, and the mask the attention keeps."""
        return self.n_head * length * length * 10

    def extend_state(self, state):
        """A longer training length grows the table: the new rows start as the last one, which every count
        past it read when clamped, so the trained scores are kept."""
        extended = dict(state)
        for key, old in state.items():
            if key == "table" or key.endswith(".table"):
                extended[key] = old[torch.arange(self.npos, device=old.device).clamp(max=old.size(0) - 1)]
        return extended

    def content_bias(self, q, k, x, *, seen):
        # in fp32 under bf16 autocast: a bf16 count past 256 is off by whole positions
        with torch.autocast(q.device.type, enabled=False):
            q, k = q.float(), k.float()
            scale = self.head_dim**-0.5
            gates = torch.sigmoid(q @ k.mT * scale).masked_fill(~seen, 0.0)
            counts = gates.flip(-1).cumsum(-1).flip(-1).clamp(max=self.npos - 1)
            floor = counts.detach().floor()
            by_count = q @ self.table.float().mT  # (B, H, Tq, npos): the logit of each integer position
            lower = by_count.gather(-1, floor.long())
            upper = by_count.gather(-1, counts.detach().ceil().long())
            return (lower + (counts - floor) * (upper - lower)) * scale
