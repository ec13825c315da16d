"""KERPLE, logarithmic variant (Chi et al. 2022): score(i, j) gets -p_h·log(1 + a_h·|i - j|).

Two learned positive scalars per head (kept positive as exp of a free parameter): p sets how strongly
a head discounts distance, a how soon the log bends. The bias is a function of distance alone, is 0
at distance 0 and never positive, and grows only logarithmically, so unlike ALiBi's straight line it
still lets far tokens through. Initialised as in the authors' code: p ~ U(0, 2), a ~ U(0, 1).
"""

from __future__ import annotations

import torch
from torch import nn

from posenc_cli.model.positional.base import Claim, PositionalScheme, per_head


class Kerple(PositionalScheme):
    name = "kerple"
    kind = "bias"
    relative = "explicit"
    param_formula = "2·h"
    claim = Claim(used_by="research (Chi et al. 2022)")

    def __init__(self, n_embd: int, n_head: int, block_size: int):
        super().__init__(n_embd, n_head, block_size)
        self.log_p = nn.Parameter(torch.empty(n_head).uniform_(0, 2).clamp(min=1e-2).log())
        self.log_a = nn.Parameter(torch.empty(n_head).uniform_(0, 1).clamp(min=1e-2).log())

    def bias(self, distance):
        p, a = per_head(self.log_p.exp(), distance), per_head(self.log_a.exp(), distance)
        return -p * torch.log1p(a * distance.abs().to(p.dtype))
