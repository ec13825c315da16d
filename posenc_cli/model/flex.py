"""torch's FlexAttention as a backend of the executor (model/attention.py): one fused kernel for causal
attention within a window or chunk, plus a bias of the distance (ALiBi, T5, KERPLE), as torchtitan and
attention-gym build sliding windows, chunks and ALiBi: `mask_mod` says which keys a query sees (the
layer's AttentionWindow), `score_mod` adds the bias read from one vector per distance, and a BlockMask
skips the blocks no query sees, so a window's cost grows with T·W.

It pays where it is compiled: on CUDA, and on CPU for long evaluations, where its first call compiles
for about a minute (the inductor cache then persists across processes). A layer it cannot express (a
remap, a content score, a bias of the query's position, sinks, stick-breaking, randomized positions)
is computed by the executor's own paths, whatever the backend asked.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from functools import lru_cache

import torch

from posenc_cli.model.layer_attention import LayerAttention

# the backend the executor computes with while set (attention_backend): sdpa (its own kernels) unless asked
ATTENTION_BACKEND: contextvars.ContextVar[str] = contextvars.ContextVar("attention_backend", default="sdpa")


@contextlib.contextmanager
def attention_backend(name: str) -> Iterator[None]:
    """Compute attention with `name` (core.choices.ATTENTION_BACKENDS but auto) inside the block."""
    token = ATTENTION_BACKEND.set(name)
    try:
        yield
    finally:
        ATTENTION_BACKEND.reset(token)


def flex_takes(layer: LayerAttention, *, positions: torch.Tensor | None) -> bool:
    """Whether FlexAttention computes this layer: a window and a bias of the distance are all it adds."""
    plain_scores = not (layer.reads_content or layer.replaces_softmax) and (
        layer.distance_bias or not layer.adds_bias
    )
    return plain_scores and layer.remap is None and layer.sinks is None and positions is None


def eager_flex():
    """flex_attention uncompiled: a reference that materializes the scores (tests, and where asked)."""
    from torch.nn.attention.flex_attention import flex_attention

    return flex_attention


@lru_cache(maxsize=1)
def compiled_flex():
    """flex_attention, compiled once per process."""
    return torch.compile(eager_flex(), dynamic=False)


def flex_attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    layer: LayerAttention,
    first: int,
    compiled: bool = True,
) -> torch.Tensor:
    """q (B, H, Tq, D), the newest of the Tk tokens first..first+Tk-1 that k, v hold -> (B, H, Tq, D)."""
    from torch.nn.attention.flex_attention import create_block_mask

    Tq, Tk = q.size(2), k.size(2)
    offset = first + Tk - Tq  # the first query's token
    window = layer.window

    def mask_mod(b, h, q_idx, kv_idx):
        return window.visible(q_idx + offset, kv_idx + first)

    score_mod = None
    if layer.adds_bias:
        span = offset + Tq - first  # the farthest distance: the last query to the first key
        by_distance = layer.scores.bias(torch.arange(span, device=q.device)).to(q.dtype)  # type: ignore[union-attr]

        def score_mod(score, b, h, q_idx, kv_idx):
            return score + by_distance[h, (q_idx + offset - kv_idx - first).clamp(min=0)]

    block_mask = create_block_mask(mask_mod, None, None, Tq, Tk, device=q.device.type)
    kernel = compiled_flex() if compiled else eager_flex()
    return kernel(q, k, v, score_mod=score_mod, block_mask=block_mask)
