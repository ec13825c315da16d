"""The Forgetting Transformer (Lin et al., ICLR 2025, arXiv 2503.02130): each token has a forget gate per
head, f_t = σ(w_fᵀ x_t + b_f), x_t the layer's input (after its layer norm, what q, k and v are made
from), and the score of key j for query i gains D_ij = Σ_{l=j+1..i} log f_l: the more a head forgets on
the way from a key to its query, the less the key counts. No positional embedding otherwise.

D_ij = c_i − c_j for the cumulative sum c_t = Σ_{l<=t} log f_l, taken over the keys a query block sees
(they run up to its last query), so a block never needs the tokens before its first key. Choices, as the
authors' code (zhixuan-lin/forgetting-transformer, its "full" gate): one w_f, b_f per layer, w_f drawn
with std 0.02 and b_f = 0 (every gate starts near 1/2), log f and its sum in fp32, q·k scaled by 1/√D and D_ij
added unscaled.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from posenc_cli.model.positional.base import Claim
from posenc_cli.model.positional.content import ContentScheme

WEIGHT_STD = 0.02  # the authors' initializer_range


class FoX(ContentScheme):
    name = "fox"
    param_formula = "h·(d + 1)"
    claim = Claim(used_by="Forgetting Transformer (Lin et al. 2025)")

    def __init__(self, n_embd: int, n_head: int, block_size: int):
        super().__init__(n_embd, n_head, block_size)
        self.gate = nn.Linear(n_embd, n_head)  # w_f: one row per head, b_f
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.normal_(self.gate.weight, std=WEIGHT_STD)
        nn.init.zeros_(self.gate.bias)

    def bias_activations(self, length: int) -> int:
        """Per sequence and pair: the mask the attention keeps (c_i − c_j keeps nothing of its own)."""
        return self.n_head * length * length

    def content_bias(self, q, k, x, *, seen):
        with torch.autocast(x.device.type, enabled=False):
            log_forget = F.logsigmoid(self.gate(x.float())).transpose(1, 2)  # (B, H, Tk)
            cumulative = log_forget.cumsum(-1)
            at_queries = cumulative[..., x.size(1) - q.size(2) :]  # the queries: the last Tq tokens
            return at_queries[..., :, None] - cumulative[..., None, :]
