"""Attention sinks (GPT-OSS's `sinks`; Xiao et al. 2024's "attention sink" as a learned logit): each head
has one logit s_h that joins every query's softmax denominator and carries no value,

    p_ij = exp(z_ij) / (exp(s_h) + Σ_k exp(z_ik)),

so a head can put weight "nowhere" instead of on whichever keys are in view: what a sliding window or a
query with nothing relevant in reach otherwise cannot do. transformers' GptOssAttention concatenates
the sink to the logits before the softmax and drops its column after; the executor adds it as one
extra key whose value is zero and whose score is s_h, which is the same softmax.
"""

from __future__ import annotations

import torch
from torch import nn

SINK_INIT_STD = 0.02  # GptOssConfig's initializer_range, which _init_weights draws the sinks from


class AttentionSinks(nn.Module):
    def __init__(self, n_head: int):
        super().__init__()
        self.logits = nn.Parameter(torch.randn(n_head) * SINK_INIT_STD)

    @property
    def options(self) -> tuple[str, ...]:
        """What a column's label adds: `sinks`."""
        return ("sinks",)
