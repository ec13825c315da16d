"""The executor's attention (model/attention.py) written pair by pair from the definitions: no block, no
kernel, no fast path. Tests hold the executor to it, and `posenc inspect` draws it, so what is drawn is
what the model computes: its window, temperature, remap, sinks and weighing included."""

from __future__ import annotations

import math

import torch

from posenc_cli.model.attention import moved_parts
from posenc_cli.model.extension.rotation import Rotation
from posenc_cli.model.layer_attention import LayerAttention


def reference_weights(
    q: torch.Tensor,
    k: torch.Tensor,
    layer: LayerAttention,
    *,
    first: int = 0,
    positions: torch.Tensor | None = None,
    inputs: torch.Tensor | None = None,
    rotation: Rotation | None = None,
) -> torch.Tensor:
    """(B, H, Tq, Tk): the weights `attend` computes, pair by pair from the definitions, with no block,
    kernel or fast path: each pair scored at its part's positions, plus the bias and content score,
    its query scaled by the temperature, within the window. What tests and `posenc inspect` use."""
    Tq, Tk = q.size(2), k.size(2)
    tokens = torch.arange(first, first + Tk, device=q.device)
    query = tokens[Tk - Tq :]
    if layer.temperature is not None:
        q = layer.temperature.scale(q, query)
    seen = layer.window.visible(query[:, None], tokens)
    scores = q @ k.mT
    if layer.remap is not None and layer.remap.reaches(first + Tk):
        region = layer.remap.region(query[:, None], tokens[None])
        for part, (moved_q, moved_k) in enumerate(
            moved_parts(q, k, remap=layer.remap, rotation=rotation, first=first)
        ):
            scores = torch.where(region == part, moved_q @ moved_k.mT, scores)
        seen = seen & (region >= 0)  # a pair in no part (StreamingLLM's evicted tokens) is never scored
    scores = scores / math.sqrt(q.size(-1))
    rule = layer.scores
    if rule is not None and layer.adds_bias:
        at = tokens[None] if positions is None else positions
        distance = at[:, Tk - Tq :, None] - at[:, None, :]
        scores = scores + rule.query_bias(at[:, Tk - Tq :, None], distance).movedim(0, 1).to(scores.dtype)  # type: ignore[union-attr]
    if rule is not None and layer.reads_content:
        scores = scores + rule.content_bias(q, k, inputs, seen=seen).to(scores.dtype)  # type: ignore[arg-type,union-attr]
    scores = scores.masked_fill(~seen, float("-inf"))
    if layer.replaces_softmax:
        return rule.weigh(scores, seen=seen, own=query[:, None] == tokens[None])  # type: ignore[union-attr]
    if layer.sinks is None:
        return scores.softmax(-1)
    sink = layer.sinks.logits.to(scores.dtype)[None, :, None, None].expand(*scores.shape[:3], 1)
    return torch.cat([scores, sink], dim=-1).softmax(-1)[..., :-1]  # GptOssAttention's softmax
