"""The one executor of attention: every scheme, window, temperature, extension and KV cache.

`attend` takes a layer's attention (model/layer_attention.py) and rotated queries, keys and values,
and picks one of three ways to compute it from the layer's properties alone:
- plain causal attention, the kernel's own causal mask: nothing is added to a score, every earlier key
  is seen, no remap reaches;
- a bias of the distance alone (ALiBi, T5, KERPLE) over full attention: a Toeplitz matrix, which read
  with the keys in reverse order is a Hankel matrix whose rows are overlapping windows of one vector,
  so each block's (H, Tq, Tk) mask is a strided view (`unfold`) of the bias evaluated once per distance;
- everything else, one block of queries at a time (model/blocks.py): a block meets only the keys its
  queries can see, its mask holds the window, the bias (per pair, or per sequence under randomized
  positions), the content score (CoPE, FoX), and a remap's parts, merged by their log-sum-exps. A KV
  cache is the same loop with an offset: the queries are the newest of the tokens the keys hold.
model/attention_reference.py computes the same attention per pair, from the definitions, for tests and
`posenc inspect`.

SDPA's CPU flash kernel takes a float mask but gives it no gradient: a mask that needs one (a learned
bias) goes through `MaskGradAttention`, which keeps the flash forward and computes the backward itself.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from posenc_cli.model.blocks import in_query_blocks, query_block
from posenc_cli.model.extension.remap import PositionRemap
from posenc_cli.model.extension.rotation import Rotation
from posenc_cli.model.flex import ATTENTION_BACKEND, flex_attend, flex_takes
from posenc_cli.model.layer_attention import LayerAttention
from posenc_cli.model.window import FULL

# Batch elements per step of MaskGradAttention's backward: their H×T×T probabilities stay in cache.
GRAD_CHUNK = 2

Parts = list[tuple[torch.Tensor, torch.Tensor]]  # per part of a remap: the queries and keys moved there


def attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    layer: LayerAttention,
    first: int = 0,
    positions: torch.Tensor | None = None,
    inputs: torch.Tensor | None = None,
    rotation: Rotation | None = None,
) -> torch.Tensor:
    """q: (B, H, Tq, D), the newest Tq of the Tk tokens first..first+Tk-1 whose keys and values k, v
    (B, H, Tk, D) hold, rotated to their own positions -> (B, H, Tq, D). `positions`: (B, Tk) the
    positions the caller gave (randomized training; only a bias reads them); `inputs`: (B, Tk, C) the
    layer's inputs at the keys' tokens (a content score reads them); `rotation`: how q and k were
    rotated (what a remap moves them by)."""
    Tq, Tk = q.size(2), k.size(2)
    end = first + Tk
    if layer.temperature is not None:
        q = layer.temperature.scale(q, torch.arange(end - Tq, end, device=q.device))
    if ATTENTION_BACKEND.get() == "flex" and flex_takes(layer, positions=positions):
        return flex_attend(q, k, v, layer=layer, first=first)
    remap = layer.remap if layer.remap is not None and layer.remap.reaches(end) else None
    whole = Tq == Tk and not first and remap is None and layer.sinks is None and not layer.window.limits(end)
    whole = whole and not layer.replaces_softmax
    if whole and not layer.adds_bias and not layer.reads_content:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    if whole and layer.distance_bias and positions is None and not layer.reads_content:
        return toeplitz_attention(q, k, v, bias=layer.scores.bias)  # type: ignore[union-attr]
    parts = moved_parts(q, k, remap=remap, rotation=rotation, first=first) if remap is not None else [(q, k)]
    return blocked_attention(
        q, v, parts, layer=layer, first=first, positions=positions, inputs=inputs, remap=remap
    )


def toeplitz_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, bias) -> torch.Tensor:
    """Full causal attention plus `bias`(distance) (H, 2T - 1), keys and values read in reverse order."""
    H, T = q.size(1), q.size(2)
    distance = torch.arange(-(T - 1), T, device=q.device)
    by_distance = bias(distance).masked_fill(distance < 0, float("-inf")).to(q.dtype)  # (H, 2T - 1)
    k, v = k.flip(2), v.flip(2)  # key j now sits at T - 1 - j

    def rows(start: int, end: int) -> torch.Tensor:
        # queries start..end-1 see keys 0..end-1, the last `end` reversed keys; query start + a and
        # reversed key c are d = a + c + start - end + 1 apart: by_distance[a + c + T + start - end]
        mask = by_distance[:, T + start - end : T + end - 1].unfold(1, end, 1)[None]  # a view
        return kernel(q[:, :, start:end], k[:, :, T - end :], v[:, :, T - end :], mask=mask)

    return in_query_blocks(T, query_block(T, T, planes=H, window=FULL), rows)


def moved_parts(
    q: torch.Tensor, k: torch.Tensor, *, remap: PositionRemap, rotation: Rotation | None, first: int
) -> Parts:
    """Per part of the remap, the queries and keys moved from their own positions to the part's."""
    if rotation is None:
        raise ValueError("a remap moves rotated queries and keys: the executor needs their rotation")
    Tq, Tk = q.size(2), k.size(2)
    tokens = torch.arange(first, first + Tk, device=q.device)
    return [
        (rotation.move(q, at_query[Tk - Tq :], tokens[Tk - Tq :]), rotation.move(k, at_key, tokens))
        for at_query, at_key in remap.positions(tokens)
    ]


def blocked_attention(
    q: torch.Tensor,
    v: torch.Tensor,
    parts: Parts,
    *,
    layer: LayerAttention,
    first: int,
    positions: torch.Tensor | None,
    inputs: torch.Tensor | None,
    remap: PositionRemap | None,
) -> torch.Tensor:
    """The general path, a block of queries at a time: `parts` holds the queries and keys as scored (one
    part, their own, without a remap)."""
    (B, H, Tq, _), Tk = q.shape, v.size(2)
    offset = Tk - Tq  # the first query's index among the keys
    tokens = torch.arange(first, first + Tk, device=q.device)
    per_sequence = positions is not None or layer.reads_content
    per_sequence = per_sequence or layer.replaces_softmax
    per_head = layer.adds_bias or layer.reads_content or layer.sinks is not None or layer.replaces_softmax
    planes = len(parts) * (H if per_head else 1) * (B if per_sequence else 1)
    planes *= 4 if layer.replaces_softmax else 1  # its logits, log β, the sums and the weights
    planes *= 1 if layer.distance_bias or not layer.adds_bias else 2  # a bias built per pair: its temporaries
    keys = parts[0][1]

    def rows(start: int, end: int) -> torch.Tensor:
        query = tokens[offset + start : offset + end]
        lo, hi = max(layer.window.first_key(int(query[0])) - first, 0), offset + end
        seen = layer.window.visible(query[:, None], tokens[lo:hi])
        given = (
            None if positions is None else (positions[:, offset + start : offset + end], positions[:, lo:hi])
        )
        added = added_scores(
            layer, q[:, :, start:end], keys[:, :, lo:hi], query=query, key=tokens[lo:hi], seen=seen, positions=given,
            inputs=None if inputs is None else inputs[:, lo:hi],
        )  # fmt: skip
        if layer.replaces_softmax:
            own = query[:, None] == tokens[None, lo:hi]
            return weighed(
                q[:, :, start:end],
                keys[:, :, lo:hi],
                v[:, :, lo:hi],
                layer=layer,
                seen=seen,
                own=own,
                added=added,
            )
        if remap is None and layer.sinks is None:
            mask = seen if added is None else added
            return kernel(q[:, :, start:end], keys[:, :, lo:hi], v[:, :, lo:hi], mask=mask)
        if remap is None:
            block = (q[:, :, start:end], keys[:, :, lo:hi], v[:, :, lo:hi])
            return with_sinks(*block, sinks=layer.sinks.logits, seen=seen, added=added)  # type: ignore[union-attr]
        sinks = None if layer.sinks is None else layer.sinks.logits
        return remapped_rows(
            parts, v, remap, rows=slice(start, end), query=query, keys=(lo, hi), seen=seen, added=added,
            first=first, sinks=sinks,
        )  # fmt: skip

    return in_query_blocks(Tq, query_block(Tq, Tk, planes=planes, window=layer.window), rows)


def remapped_rows(
    parts: Parts,
    v: torch.Tensor,
    remap: PositionRemap,
    *,
    rows: slice,
    query: torch.Tensor,
    keys: tuple[int, int],
    seen: torch.Tensor,
    added: torch.Tensor | None,
    first: int,
    sinks: torch.Tensor | None,
) -> torch.Tensor:
    """One block of queries (`rows`, at tokens `query`) against keys lo..hi-1: each part over the keys it
    can meet, masked to its own pairs, then merged; the sinks' logits (H,) as one more piece, whose
    value is zero."""
    lo, hi = keys
    pieces = []
    if sinks is not None:
        shape = (v.size(0), v.size(1), query.numel())
        lse = sinks.to(v.dtype)[None, :, None].expand(shape)
        pieces.append((v.new_zeros(*shape, v.size(-1)), lse, torch.ones(query.numel(), dtype=torch.bool)))
    for part, (moved_q, moved_k) in enumerate(parts):
        low, high = remap.keys(part, int(query[0]), int(query[-1]) + 1)
        low, high = max(low - first, lo), min(high - first, hi)
        if high <= low:
            continue
        key = torch.arange(first + low, first + high, device=v.device)
        own = seen[:, low - lo : high - lo] & remap.region(query[:, None], key[None]).eq(part)
        if added is None:
            mask = torch.zeros(own.shape, dtype=moved_q.dtype, device=v.device).masked_fill_(
                ~own, float("-inf")
            )
        else:
            mask = added[..., low - lo : high - lo].masked_fill(~own, float("-inf"))
        out, lse = kernel_with_lse(moved_q[:, :, rows], moved_k[:, :, low:high], v[:, :, low:high], mask=mask)
        pieces.append((out, lse, own.any(-1)))
    return merged(pieces)


def weighed(q, k, v, *, layer: LayerAttention, seen: torch.Tensor, own: torch.Tensor, added) -> torch.Tensor:
    """Attention whose scheme weighs the keys itself (stick-breaking): its weights times the values."""
    logits = (q @ k.mT) * q.size(-1) ** -0.5
    logits = logits.masked_fill(~seen, float("-inf")) if added is None else logits + added
    return layer.scores.weigh(logits, seen=seen, own=own) @ v  # type: ignore[union-attr,operator]


def with_sinks(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, sinks: torch.Tensor, seen: torch.Tensor, added
) -> torch.Tensor:
    """The kernel with one more key in front: its value zero, its score the head's sink logit (H,), so
    the sink joins every query's softmax denominator and adds nothing to the output."""
    B, H, Tq, D = q.shape
    if added is None:
        added = torch.zeros(seen.shape, dtype=q.dtype, device=q.device).masked_fill_(~seen, float("-inf"))
        added = added.expand(1, H, *seen.shape)
    sink = sinks.to(q.dtype)[None, :, None, None].expand(added.size(0), H, Tq, 1)
    zero = k.new_zeros(B, H, 1, D)
    return kernel(
        q, torch.cat([zero, k], dim=2), torch.cat([zero, v], dim=2), mask=torch.cat([sink, added], dim=-1)
    )


def added_scores(
    layer: LayerAttention,
    q: torch.Tensor,
    k: torch.Tensor,
    *,
    query: torch.Tensor,
    key: torch.Tensor,
    seen: torch.Tensor,
    positions: tuple[torch.Tensor, torch.Tensor] | None,
    inputs: torch.Tensor | None,
) -> torch.Tensor | None:
    """(1 or B, H, Tq, Tk): what the layer adds to the scores of queries at tokens `query` (Tq,) for keys
    at tokens `key` (Tk,), -inf where unseen; None where it adds nothing (the mask is `seen` alone).
    `positions`: the (B, Tq) and (B, Tk) given positions of the queries and keys, which the bias reads
    instead of the token indices."""
    rule = layer.scores
    if rule is None or not (layer.adds_bias or layer.reads_content):
        return None
    added = None
    if layer.adds_bias:
        if positions is None:
            added = rule.query_bias(query[:, None], query[:, None] - key)[None]  # type: ignore[index]
        else:
            at_query, at_key = positions
            distance = at_query[:, :, None] - at_key[:, None, :]
            added = rule.query_bias(at_query[:, :, None], distance).movedim(0, 1)  # type: ignore[union-attr]
    if layer.reads_content:
        content = rule.content_bias(q, k, inputs, seen=seen)  # type: ignore[arg-type]
        added = content if added is None else content + added.to(content.dtype)
    return added.masked_fill(~seen, float("-inf")).to(q.dtype)  # type: ignore[union-attr]


def merged(pieces: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]) -> torch.Tensor:
    """The parts' outputs weighted by each part's share of the softmax, exp(lse_p - lse_all): one softmax
    over every key, as if computed at once."""
    lse = torch.stack([piece_lse.float().masked_fill(~has, float("-inf")) for _, piece_lse, has in pieces])
    weights = (lse - lse.logsumexp(0)).exp().nan_to_num(0.0)  # a part no query of the block meets: 0
    total = sum(w[..., None] * out.float().nan_to_num(0.0) for w, (out, _, _) in zip(weights, pieces))
    return total.to(pieces[0][0].dtype)  # type: ignore[union-attr]


def kernel(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, mask: torch.Tensor) -> torch.Tensor:
    """SDPA with a boolean (seen) or float (added, -inf unseen) mask: the one wrapper of the kernel."""
    if q.device.type != "cpu":  # GPU kernels want a dense mask, and give it a gradient themselves
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask.contiguous())
    if mask.requires_grad:
        return MaskGradAttention.apply(q, k, v, mask)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def kernel_with_lse(q, k, v, *, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The kernel's output and the log-sum-exp of each query's scores (what `merged` weighs parts by)."""
    if q.device.type == "cpu":
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, attn_mask=mask)
        return out, lse
    lse = ((q @ k.mT) * q.size(-1) ** -0.5 + mask).logsumexp(-1)  # other devices: the scores once more
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask), lse


class MaskGradAttention(torch.autograd.Function):
    """SDPA's CPU flash forward, and a backward that also gives the (1 or B, H, Tq, Tk) mask its gradient.

    The backward recomputes the probabilities P = exp(q·kᵀ/√D + mask - logsumexp) GRAD_CHUNK batch
    elements at a time, then applies the softmax backward dS = P ∘ (dO·vᵀ - rowsum(dO ∘ O)); the mask's
    gradient is dS summed over the batch. Matmuls run in the inputs' dtype (bf16 under autocast, as in
    SDPA's math path), the softmax algebra in fp32. Measured in docs/performance.md."""

    @staticmethod
    def forward(ctx, q, k, v, mask):
        out, logsumexp = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, attn_mask=mask)
        ctx.save_for_backward(q, k, v, mask, out, logsumexp)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, mask, out, logsumexp = ctx.saved_tensors
        scale = q.size(-1) ** -0.5
        bias = mask.float()
        per_batch = mask.size(0) > 1  # one mask per sequence (randomized positions, content), else shared
        grad_mask = torch.zeros_like(bias)
        grad_q, grad_k, grad_v = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        for start in range(0, q.size(0), GRAD_CHUNK):
            b = slice(start, start + GRAD_CHUNK)
            chunk_bias = bias[b] if per_batch else bias
            probs = (q[b] @ k[b].mT).float().mul_(scale).add_(chunk_bias).sub_(logsumexp[b, ..., None]).exp_()
            grad_scores = (grad_out[b] @ v[b].mT).float()
            grad_scores.sub_((grad_out[b].float() * out[b].float()).sum(-1, keepdim=True)).mul_(probs)
            if per_batch:
                grad_mask[b] = grad_scores
            else:
                grad_mask += grad_scores.sum(0, keepdim=True)
            grad_v[b] = probs.to(v.dtype).mT @ grad_out[b]
            grad_scores = grad_scores.to(q.dtype)
            grad_q[b] = (grad_scores @ k[b]).mul_(scale)
            grad_k[b] = (grad_scores.mT @ q[b]).mul_(scale)
        return grad_q, grad_k, grad_v, grad_mask.to(mask.dtype)
