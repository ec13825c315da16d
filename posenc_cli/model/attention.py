"""Causal attention with an additive score bias (ALiBi, T5, KERPLE), fast in evaluation and training.

Two facts shape it:
- A bias that depends only on the distance d = i - j is a Toeplitz matrix; read with the keys in
  reverse order it is a Hankel matrix, whose rows are overlapping windows of one vector. So the
  (H, Tq, Tk) mask is a strided view (`unfold`) of the bias evaluated once per distance, -inf for
  future keys included. Attention does not depend on the order of the keys (softmax sums over them),
  so reversing k and v once replaces building a T×T mask per layer.
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


def biased_causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scheme: PositionalScheme) -> torch.Tensor:
    """q, k, v: (B, H, T, D) -> (B, H, T, D), scores plus scheme.bias(i - j), keys j <= i only."""
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
        outputs.append(attend(q[:, :, start:end], k[:, :, T - end :], v[:, :, T - end :], mask))
    return torch.cat(outputs, dim=2)


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    if q.device.type != "cpu":  # GPU kernels want a dense mask, and give it a gradient themselves
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask.contiguous())
    if mask.requires_grad:
        return MaskGradAttention.apply(q, k, v, mask)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


class MaskGradAttention(torch.autograd.Function):
    """SDPA's CPU flash forward, and a backward that also gives the (1, H, Tq, Tk) mask its gradient.

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
        bias = mask[0].float()
        grad_mask = torch.zeros_like(bias)
        grad_q, grad_k, grad_v = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        for start in range(0, q.size(0), GRAD_CHUNK):
            b = slice(start, start + GRAD_CHUNK)
            probs = (q[b] @ k[b].mT).float().mul_(scale).add_(bias).sub_(logsumexp[b, ..., None]).exp_()
            grad_scores = (grad_out[b] @ v[b].mT).float()
            grad_scores.sub_((grad_out[b].float() * out[b].float()).sum(-1, keepdim=True)).mul_(probs)
            grad_mask += grad_scores.sum(0)
            grad_v[b] = probs.to(v.dtype).mT @ grad_out[b]
            grad_scores = grad_scores.to(q.dtype)
            grad_q[b] = (grad_scores @ k[b]).mul_(scale)
            grad_k[b] = (grad_scores.mT @ q[b]).mul_(scale)
        return grad_q, grad_k, grad_v, grad_mask[None].to(mask.dtype)
