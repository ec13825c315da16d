"""Attention in which each query–key pair is scored in its method's part (remap.py), a block of queries
at a time.

Every part moves the rotated queries and keys to its own positions once (rotation.py); then, per
block of queries, each part's scores are computed against the keys the block can see and each pair
keeps the score of its own part. A block's (H, Tq, Tk) scores stay within SCORE_BUDGET floats per
part, so memory grows linearly with the length, as it does for plain flash attention.
"""

from __future__ import annotations

import torch

from posenc_cli.model.extension.remap import PositionRemap
from posenc_cli.model.extension.rotation import Rotation

# floats of one part's scores per block of queries (16 MiB in fp32): the block is as tall as fits
SCORE_BUDGET = 1 << 22


def remapped_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    remap: PositionRemap,
    rotation: Rotation,
    query_scale: torch.Tensor | None = None,
) -> torch.Tensor:
    """q: (B, H, Tq, D) the newest Tq of Tk tokens, k, v: (B, H, Tk, D), all rotated to their own
    positions 0..Tk-1 -> (B, H, Tq, D): causal softmax attention, each pair scored in its part.
    `query_scale`: (Tq,) factors on the queries' logits (log-n), or None."""
    Tq, Tk = q.size(2), k.size(2)
    index = torch.arange(Tk, device=q.device)
    query_index = index[Tk - Tq :]
    parts = remap.positions(index)
    queries = [rotation.move(q, qpos[Tk - Tq :], query_index) for qpos, _ in parts]
    keys = [rotation.move(k, kpos, index) for _, kpos in parts]
    scale = q.size(-1) ** -0.5
    if query_scale is not None:
        scale = query_scale.to(q.dtype)[:, None] * scale
    block = max(1, min(Tq, SCORE_BUDGET // (q.size(0) * q.size(1) * Tk)))
    outputs = []
    for start in range(0, Tq, block):
        rows = slice(start, min(start + block, Tq))
        seen = Tk - Tq + rows.stop  # the keys the block's last query sees
        region = remap.region(query_index[rows, None], index[None, :seen])
        scores = torch.zeros(
            q.size(0), q.size(1), rows.stop - rows.start, seen, dtype=q.dtype, device=q.device
        )
        for part, (query, key) in enumerate(zip(queries, keys)):
            scores = torch.where(region == part, query[:, :, rows] @ key[:, :, :seen].mT, scores)
        scores = scores * (scale[rows] if isinstance(scale, torch.Tensor) else scale)
        future = query_index[rows, None] < index[None, :seen]
        probs = scores.masked_fill(future, float("-inf")).softmax(dim=-1)
        outputs.append(probs @ v[:, :, :seen])
    return torch.cat(outputs, dim=2)
