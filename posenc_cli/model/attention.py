"""Causal attention with an additive score bias (ALiBi, T5, KERPLE, FIRE), fast in evaluation and training.

Two facts shape it:
- A bias that depends only on the distance d = i - j is a Toeplitz matrix; read with the keys in
  reverse order it is a Hankel matrix, whose rows are overlapping windows of one vector. So the
  (H, Tq, Tk) mask is a strided view (`unfold`) of the bias evaluated once per distance, -inf for
  future keys included. Attention does not depend on the order of the keys (softmax sums over them),
  so reversing k and v once replaces building a T×T mask per layer. A bias that also reads the
  query's position (FIRE, `bias_reads_query`) has no such vector: it is built per query block, as is
  a score read from content (CoPE, FoX, `content_attention`).
- SDPA's CPU flash kernel takes a float mask but gives it no gradient: a mask that needs one (a
  learned bias) sends SDPA to its math path, which stores B×H×T×T probabilities.
  `MaskGradAttention` keeps the flash forward and computes the backward itself.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from posenc_cli.model.positional import PositionalScheme

# Queries are attended one block at a time so a block's (H, Tq, Tk) mask stays below this many floats:
# evaluation memory then grows linearly with length instead of quadratically.
MASK_BUDGET = 1 << 22
# Batch elements per step of MaskGradAttention's backward: their H×T×T probabilities stay in cache.
GRAD_CHUNK = 2


def biased_causal_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    scheme: PositionalScheme,
    positions: torch.Tensor | None = None,
) -> torch.Tensor:
    """q, k, v: (B, H, T, D) -> (B, H, T, D), scores plus scheme.bias(p_i - p_j), keys j <= i only.
    positions None: p_i = i, the strided fast path below."""
    if positions is not None:
        return attend(q, k, v, mask=dense_bias(scheme, positions))
    if scheme.bias_reads_query:
        return query_block_attention(q, k, v, scheme=scheme)
    H, T = q.size(1), q.size(2)
    distance = torch.arange(-(T - 1), T, device=q.device)
    by_distance = scheme.bias(distance).masked_fill(distance < 0, float("-inf")).to(q.dtype)  # (H, 2T - 1)
    k, v = k.flip(2), v.flip(2)  # key j now sits at T - 1 - j
    block = max(1, min(T, MASK_BUDGET // (H * T)))
    outputs = []
    for start in range(0, T, block):
        end = min(start + block, T)
        # queries start..end-1 see keys 0..end-1, the last `end` reversed keys; query start + a and
        # reversed key c are d = a + c + start - end + 1 apart: by_distance[a + c + T + start - end]
        window = by_distance[:, T + start - end : T + end - 1]
        mask = window.unfold(1, end, 1)[None]  # (1, H, end - start, end), a view
        outputs.append(attend(q[:, :, start:end], k[:, :, T - end :], v[:, :, T - end :], mask=mask))
    return torch.cat(outputs, dim=2)


def query_block_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, scheme: PositionalScheme):
    """Positions 0..T-1 and a bias that reads the query's position too (FIRE): no one vector per
    distance to view, so each query block's (H, Tq, Tk) mask is built from its own pairs, within
    MASK_BUDGET like the blocks above: memory stays linear in the length."""
    H, T = q.size(1), q.size(2)
    block = max(1, min(T, MASK_BUDGET // (H * T)))
    outputs = []
    for start in range(0, T, block):
        end = min(start + block, T)
        query = torch.arange(start, end, device=q.device)[:, None]
        distance = query - torch.arange(end, device=q.device)
        mask = scheme.query_bias(query, distance).masked_fill(distance < 0, float("-inf")).to(q.dtype)
        outputs.append(attend(q[:, :, start:end], k[:, :, :end], v[:, :, :end], mask=mask[None]))
    return torch.cat(outputs, dim=2)


def cached_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, scheme: PositionalScheme, first: int = 0
) -> torch.Tensor:
    """The T newest queries (B, H, T, D) against the L keys a KV cache holds, of tokens first..first+L-1
    (generation): each query's own row of the causal mask within the layer's window, plus of the bias
    where the scheme adds one."""
    T, L = q.size(2), k.size(2)
    query = torch.arange(first + L - T, first + L, device=q.device)[:, None]
    key = torch.arange(first, first + L, device=q.device)
    seen = scheme.window.visible(query, key)
    if not scheme.adds_bias:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=seen)
    distance = query - key
    bias = scheme.query_bias(query, distance) if scheme.bias_reads_query else scheme.bias(distance)
    mask = bias.masked_fill(~seen, float("-inf")).to(q.dtype)
    return attend(q, k, v, mask=mask[None])


def windowed_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    scheme: PositionalScheme,
    positions: torch.Tensor | None = None,
) -> torch.Tensor:
    """q, k, v: (B, H, T, D) -> (B, H, T, D), causal attention within scheme.window (plus its bias). A
    query block meets only the keys its queries can see, so memory and time grow with T·W, not T².
    positions (randomized training, (B, T)): one dense mask, at training lengths."""
    window, (H, T) = scheme.window, q.shape[1:3]
    if positions is not None:
        index = torch.arange(T, device=q.device)
        seen = window.visible(index[:, None], index)
        return attend(
            q,
            k,
            v,
            mask=dense_bias(scheme, positions).masked_fill(~seen, float("-inf"))
            if scheme.adds_bias
            else seen,
        )
    step = min(v for v in (window.chunk, window.size) if v is not None)
    block = max(1, min(step, MASK_BUDGET // (H * (step + window.span(T)))))
    outputs = []
    for start in range(0, T, block):
        end = min(start + block, T)
        lo = window.first_key(start)
        query = torch.arange(start, end, device=q.device)[:, None]
        key = torch.arange(lo, end, device=q.device)
        mask = window.visible(query, key)
        if scheme.adds_bias:
            bias = scheme.query_bias(query, query - key)
            mask = bias.masked_fill(~mask, float("-inf")).to(q.dtype)[None]
        outputs.append(attend(q[:, :, start:end], k[:, :, lo:end], v[:, :, lo:end], mask=mask))
    return torch.cat(outputs, dim=2)


def content_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    inputs: torch.Tensor,
    scheme: PositionalScheme,
    first: int = 0,
) -> torch.Tensor:
    """The newest Tq queries (B, H, Tq, D) against Tk keys and values of tokens first..first+Tk-1, whose
    layer inputs are `inputs` (B, Tk, C): scores plus what the scheme reads from content (`content_bias`, CoPE,
    FoX), causal within the layer's window. One query block at a time, its mask within MASK_BUDGET, so
    memory grows linearly with length; a block's keys run from its first query's first key to its last
    query. Positions are never read (a content scheme has none; a composite's bias parts get token
    distances), so randomized ones change nothing."""
    window, (H, Tq), Tk = scheme.window, q.shape[1:3], k.size(2)
    span, offset = window.span(Tk), first + Tk - Tq  # the most keys a query sees; the first query's token
    block = max(1, min(Tq, span, MASK_BUDGET // (H * min(Tk, 2 * span))))
    outputs = []
    for start in range(0, Tq, block):
        end = min(start + block, Tq)
        lo, hi = window.first_key(offset + start) - first, offset + end - first  # the block's keys
        query = torch.arange(offset + start, offset + end, device=q.device)[:, None]
        key = torch.arange(first + lo, first + hi, device=q.device)
        seen = window.visible(query, key)
        queries, keys = q[:, :, start:end], k[:, :, lo:hi]
        bias = scheme.content_bias(queries, keys, inputs[:, lo:hi], seen=seen)
        if scheme.adds_bias:  # a composite's bias parts too, at token distances
            bias = bias + scheme.query_bias(query, query - key).to(bias.dtype)
        mask = bias.masked_fill(~seen, float("-inf")).to(q.dtype)
        outputs.append(attend(queries, keys, v[:, :, lo:hi], mask=mask))
    return torch.cat(outputs, dim=2)


def dense_bias(scheme: PositionalScheme, positions: torch.Tensor) -> torch.Tensor:
    """(B, T) increasing positions -> the (B, H, T, T) causal mask scheme.bias(p_i - p_j). Distances are no
    longer a function of i - j, so the mask is built per pair: B×H×T×T floats, fine at training lengths
    (train.positions=randomized), which is the only user."""
    T = positions.size(-1)
    distance = positions[:, :, None] - positions[:, None, :]
    future = torch.ones(T, T, dtype=torch.bool, device=positions.device).triu(1)
    bias = (
        scheme.query_bias(positions[:, :, None], distance)
        if scheme.bias_reads_query
        else scheme.bias(distance)
    )
    return bias.movedim(0, 1).masked_fill(future, float("-inf"))


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, mask: torch.Tensor) -> torch.Tensor:
    if q.device.type != "cpu":  # GPU kernels want a dense mask, and give it a gradient themselves
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask.contiguous())
    if mask.requires_grad:
        return MaskGradAttention.apply(q, k, v, mask)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


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
        per_batch = mask.size(0) > 1  # one mask per sequence (randomized positions), else shared
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
