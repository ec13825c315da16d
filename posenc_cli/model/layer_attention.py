"""How one layer attends, as a typed value built once with the model: the seam between a positional
scheme and the executor (model/attention.py).

A scheme says what positions add (`embed`, `rotate`, and a score rule: `bias`, `query_bias`,
`content_bias`). A layer's attention says how it attends: that score rule, which keys its queries see
(window and chunk), the factor on its queries (temperature) and the positions its pairs meet at (a
remap: a training-free extension). An eval-time extension builds a new LayerAttention (`extended`);
nothing changes a built scheme or a built LayerAttention.

Windows and temperatures count tokens, never positions: under randomized training positions the keys
in view and a query's factor are those of its token index; only a bias reads the given positions.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Protocol

import torch

from posenc_cli.model.extension import ContextExtension
from posenc_cli.model.extension.remap import PositionRemap
from posenc_cli.model.extension.rotation import Rotation
from posenc_cli.model.sinks import AttentionSinks
from posenc_cli.model.temperature import LogN, QueryTemperature
from posenc_cli.model.window import FULL, AttentionWindow


class ScoreRule(Protocol):
    """What a layer's scheme adds to attention scores (positional/base.py PositionalScheme implements it;
    each flag is derived there from the hooks the scheme overrides, never declared)."""

    @property
    def adds_bias(self) -> bool: ...

    @property
    def bias_reads_query(self) -> bool: ...

    @property
    def reads_content(self) -> bool: ...

    @property
    def replaces_softmax(self) -> bool: ...

    def weigh(
        self, logits: torch.Tensor, *, seen: torch.Tensor, own: torch.Tensor
    ) -> torch.Tensor | None: ...

    def bias(self, distance: torch.Tensor) -> torch.Tensor | None: ...

    def query_bias(self, query: torch.Tensor, distance: torch.Tensor) -> torch.Tensor | None: ...

    def content_bias(
        self, q: torch.Tensor, k: torch.Tensor, x: torch.Tensor, *, seen: torch.Tensor
    ) -> torch.Tensor | None: ...

    def rotation(self, seq_len: int) -> Rotation | None: ...


@dataclass(frozen=True)
class LayerAttention:
    """`scores`: the layer's score rule (its scheme); None: q·k alone (a transformers model's layer).
    `window`: the keys a query sees. `temperature`: the factor on its queries (None: 1). `remap`: the
    positions its query–key pairs meet at (None: their own). `sinks`: a learned logit per head that
    joins each softmax's denominator (None: none)."""

    scores: ScoreRule | None = None
    window: AttentionWindow = FULL
    temperature: QueryTemperature | None = None
    remap: PositionRemap | None = None
    sinks: AttentionSinks | None = None

    @classmethod
    def of(cls, scheme, *, sinks: AttentionSinks | None = None) -> LayerAttention:
        """A layer as its scheme was built for it: its score rule and the attention options it was given
        (scheme.window, scheme.temperature, scheme.sinks: the layer's own `sinks`, fresh where none is
        given)."""
        if scheme.has_sinks and sinks is None:
            sinks = AttentionSinks(scheme.n_head)
        return cls(scheme, scheme.window, scheme.temperature, sinks=sinks if scheme.has_sinks else None)

    @property
    def adds_bias(self) -> bool:
        return self.scores is not None and self.scores.adds_bias

    @property
    def reads_content(self) -> bool:
        return self.scores is not None and self.scores.reads_content

    @property
    def replaces_softmax(self) -> bool:
        return self.scores is not None and self.scores.replaces_softmax

    @property
    def distance_bias(self) -> bool:
        """A bias of the distance alone: one vector per distance serves every pair (the Toeplitz path)."""
        return self.adds_bias and not (self.scores is not None and self.scores.bias_reads_query)

    def rotation(self, seq_len: int) -> Rotation | None:
        """How the layer's scheme rotated a sequence of `seq_len` tokens (None: it does not rotate by
        RoPE): what a remap moves queries and keys by."""
        return None if self.scores is None else self.scores.rotation(seq_len)

    def extension_refusal(self, extension: ContextExtension) -> str | None:
        """Why this layer computes as trained under `extension`, or None where it takes it: a remap only
        on a full-attention RoPE layer; log-n (a query temperature, no position moved) on any layer where
        no temperature already scales its queries (a NoPE or DroPE model's inference-time scaling)."""
        if extension.remap is not None and self.rotation(1) is None:
            return "has no RoPE rotation to extend"
        if extension.remap is not None and not self.window.full:
            return f"attends within a window ({', '.join(self.window.options)}), which already bounds its distances"
        if extension.logn_len is not None and self.temperature is not None:
            return (
                f"already scales its queries (temperature={self.temperature.name}); log-n would scale them "
                "a second time"
            )
        return None

    def extended(self, extension: ContextExtension) -> LayerAttention:
        """This layer under `extension`: its remap, and its log-n as the layer's query temperature."""
        temperature = LogN(extension.logn_len) if extension.logn_len is not None else self.temperature
        return replace(self, temperature=temperature, remap=extension.remap)

    @classmethod
    def of_extension(cls, extension: ContextExtension) -> LayerAttention:
        """A transformers model's rotary layer under `extension`: plain scores, remapped."""
        return cls().extended(extension)
