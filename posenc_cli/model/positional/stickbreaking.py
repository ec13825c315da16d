"""Stick-breaking attention (Tan, Yang, Courville, Panda and Shen, ICLR 2025, arXiv 2410.17980;
shawntan/stickbreaking-attention): no positional encoding, and no softmax. Each query breaks a stick
over its keys, nearest first: key j takes the share β_ij = σ(z_ij) of what the nearer keys left,

    A_ij = β_ij · ∏_{j < k < i} (1 − β_ik),      z_ij = q_i·k_j / √D,

so a key counts less the more the keys between it and its query took: order, not position, shapes the
weights. As the reference (`sb_ref.stickbreaking`, `attend_current=False`) the query's own key is not
broken over, and the stick left over, ∏ (1 − β), goes to the query's own value (the reference tests'
`o + rem·v`). Computed in log space: log A_ij = logσ(z_ij) − Σ_{j<k<i} softplus(z_ik).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from posenc_cli.model.positional.base import Claim, PositionalScheme


class StickBreaking(PositionalScheme):
    name = "stickbreaking"
    kind = "content"  # its weights read the keys' content, in their order
    relative = (
        "explicit"  # a key's weight depends on the keys between it and its query, never on where they sit
    )
    claim = Claim(used_by="Tan et al. 2025 (IBM's stick-breaking 1B and 3B models)")

    def bias_activations(self, length: int) -> int:
        """Per sequence and pair, what the backward keeps: the logits, log β, the sums of log (1 − β), the
        weights, and the mask."""
        return 5 * self.n_head * length * length

    def weigh(self, logits: torch.Tensor, *, seen: torch.Tensor, own: torch.Tensor) -> torch.Tensor:
        """(B, H, Tq, Tk) logits (scaled, anything added, -inf unseen) -> each key's weight, the stick left
        over on the query's own key (`own`, (Tq, Tk): the pair of a token with itself)."""
        with torch.autocast(logits.device.type, enabled=False):
            z = logits.float()
            broken = seen & ~own  # the keys a query breaks the stick over: those it sees, not itself
            log_beta = F.logsigmoid(z).masked_fill(~broken, float("-inf"))
            log_rest = F.logsigmoid(-z).masked_fill(~broken, 0.0)  # log (1 − β)
            nearer = log_rest.flip(-1).cumsum(-1).flip(-1) - log_rest  # Σ over the keys after j
            weights = (log_beta + nearer).exp()
            left = 1 - weights.sum(-1, keepdim=True)
            return (weights + left * own).to(logits.dtype)
