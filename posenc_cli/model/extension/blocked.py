"""Attention in which each query–key pair is scored in its method's part (remap.py), a block of queries
at a time.

Every part moves the rotated queries and keys to its own positions once (rotation.py). Per block of
queries, each part runs the CPU flash kernel over the keys it can meet (`remap.keys`), masked to its
own pairs, and the parts are merged by their log-sum-exps: one softmax over all keys, as if computed
at once. A block's masks stay within SCORE_BUDGET floats, so memory grows linearly with the length,
and each key is scored in about one part, so time stays near plain attention's.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from posenc_cli.model.extension.remap import PositionRemap
from posenc_cli.model.extension.rotation import Rotation

# floats of one part's (Tq, Tk) mask per block of queries (16 MiB in fp32): the block is as tall as fits
SCORE_BUDGET = 1 << 22
# at most this many queries per block: a block meets every key up to its last query, so taller blocks
# score more pairs past the causal triangle, shorter ones call the kernel more often (512 was fastest
# of 128-1024 for 9 heads of 64 dims at 4k tokens on a 2-core AVX2 EPYC)
MAX_BLOCK = 512


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
    if query_scale is not None:
        q = q * query_scale.to(q.dtype)[:, None]
    parts = remap.positions(index)
    queries = [rotation.move(q, qpos[Tk - Tq :], index[Tk - Tq :]) for qpos, _ in parts]
    keys = [rotation.move(k, kpos, index) for _, kpos in parts]
    block = max(1, min(Tq, SCORE_BUDGET // Tk, 128))
    outputs = []
    for start in range(Tk - Tq, Tk, block):
        rows = index[start : min(start + block, Tk)]
        pieces = []
        for part, (query, key) in enumerate(zip(queries, keys)):
            low, high = remap.keys(part, start, int(rows[-1]) + 1)
            if high > low:
                local = rows - (Tk - Tq)
                pieces.append(
                    part_attention(
                        query[:, :, local],
                        key[:, :, low:high],
                        v[:, :, low:high],
                        own=remap.region(rows[:, None], index[None, low:high]).eq(part)
                        & (rows[:, None] >= index[None, low:high]),
                    )
                )
        outputs.append(merged(pieces))
    return torch.cat(outputs, dim=2)


def remapped_bytes(parts: int, *, batch: int, heads: int, length: int, head_dim: int, element: int) -> int:
    """Bytes remapped_attention holds beyond its inputs at `length` tokens: each part's moved queries
    and keys, the three temporaries of the move being computed (Rotation.move), one block's masks per
    part (a region index, three boolean masks, a float mask) and the merged output in fp32. Linear in
    the length: the memory models add it to a forward's."""
    rows = max(1, min(length, SCORE_BUDGET // max(1, length), MAX_BLOCK))
    rows_of_all = batch * heads * length * head_dim * element
    moved = 2 * parts * rows_of_all + 3 * rows_of_all
    masks = parts * rows * length * (8 + 3 + element)
    merged_out = 2 * parts * batch * heads * rows * head_dim * 4 + batch * heads * length * head_dim * 4
    return moved + masks + merged_out


def part_attention(q, k, v, *, own: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One part's attention over its keys, `own`: (Tq, Tk) the pairs it scores -> (output, log-sum-exp
    of its scores, whether each query has any pair here): what `merged` needs."""
    mask = torch.zeros(own.shape, dtype=q.dtype, device=q.device).masked_fill_(~own, float("-inf"))
    if q.device.type == "cpu":
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, attn_mask=mask)
    else:  # other devices: the scores once, for the log-sum-exp the merge needs
        scores = (q @ k.mT) * q.size(-1) ** -0.5 + mask
        lse = scores.logsumexp(-1)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return out, lse, own.any(-1)


def merged(pieces: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]) -> torch.Tensor:
    """The parts' outputs weighted by each part's share of the softmax: exp(lse_p - lse_all)."""
    lse = torch.stack([piece_lse.float().masked_fill(~has, float("-inf")) for _, piece_lse, has in pieces])
    weights = (lse - lse.logsumexp(0)).exp().nan_to_num(0.0)  # a part no query of the block meets: 0
    total = sum(w[..., None] * out.float().nan_to_num(0.0) for w, (out, _, _) in zip(weights, pieces))
    return total.to(pieces[0][0].dtype)
