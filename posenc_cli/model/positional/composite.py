"""Several schemes at once (`scheme=sinusoidal+learned`): the chapter's "highway" question, for any parts.

Each hook combines the parts' hooks, so the model still sees one scheme through the same three hooks:
- embed: what each part adds to the token embeddings is added, x + Σ (part.embed(x) − x), so the
  order of additive parts does not matter and a part that rescales x (sinusoidal's √d) still does;
- rotate: the parts' rotations applied in order;
- bias: the parts' biases summed (query_bias too, where a part's bias reads the query's position), and
  content_bias the same way.
The facts follow the parts: positional parameters are their sum, max_len the tightest bounded part's,
the rest as base.join_facts and the derived capabilities read them, the same way a schedule's layers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from posenc_cli.core.errors import UsageError
from posenc_cli.model.positional.base import PositionalScheme, join_facts


def part_spec(part: str | Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """A part as written in scheme.parts: a scheme name, or {name: NAME, option: value, ...}."""
    if isinstance(part, str):
        return part, {}
    options = dict(part)
    if "name" not in options:
        raise UsageError(f"scheme.parts entry {options} has no name; write {{name: SCHEME, option: value}}")
    return options.pop("name"), options


class Composite(PositionalScheme):
    kind = "composite"  # replaced per instance by the parts' kind when they share one

    def __init__(
        self,
        n_embd: int,
        n_head: int,
        block_size: int,
        *,
        name: str,
        parts: Sequence[str | Mapping[str, Any]],
        build: Callable[..., PositionalScheme],
    ):
        super().__init__(n_embd, n_head, block_size)
        specs = [part_spec(p) for p in parts]
        written = "+".join(part_name for part_name, _ in specs)
        if written != name:
            raise UsageError(f"scheme.parts lists {written} but the scheme is {name}; use scheme={written}")
        self.parts = nn.ModuleList(
            build(part_name, n_embd, n_head, block_size=block_size, **options) for part_name, options in specs
        )
        self.name = name
        kinds = {p.kind for p in self.parts} - {"none"}
        self.kind = kinds.pop() if len(kinds) == 1 else ("none" if not kinds else "composite")
        self.param_formula = " + ".join(p.param_formula for p in self.parts if p.param_formula != "0") or "0"
        join_facts(self)
        if sum(part.replaces_softmax for part in self.parts) > 1:
            raise UsageError(f"scheme={name}: two parts weigh the keys without a softmax; keep one of them")

    @property
    def members(self) -> tuple[PositionalScheme, ...]:
        return tuple(self.parts)

    @property
    def part_names(self) -> tuple[str, ...]:
        return tuple(part.name for part in self.parts)

    @property
    def max_len(self) -> int | None:
        bounded = [p.max_len for p in self.parts if p.max_len is not None]
        return min(bounded) if bounded else None

    def for_layers(self, n_layer: int) -> list[PositionalScheme]:
        """Shared by every block, as its parts are: a part with its own instance per layer would need a
        composite per layer, which no part asks for yet."""
        for part in self.parts:
            if any(layer is not part for layer in part.for_layers(n_layer)):
                raise UsageError(
                    f"scheme={self.name}: {part.label} keeps its own instance per layer, which a "
                    "composite scheme cannot; train it alone"
                )
        return [self] * n_layer

    def embed(self, x, positions):
        first, *others = self.parts
        return first.embed(x, positions) + sum(part.embed(x, positions) - x for part in others)

    def rotate(self, q, k, positions):
        for part in self.parts:
            q, k = part.rotate(q, k, positions)
        return q, k

    def bias(self, distance):
        biases = [part.bias(distance) for part in self.parts if part.adds_bias]
        return torch.stack(biases).sum(0) if biases else None

    def content_bias(self, q, k, x, *, seen):
        biases = [part.content_bias(q, k, x, seen=seen) for part in self.parts if part.reads_content]
        return torch.stack(biases).sum(0) if biases else None

    def weigh(self, logits, *, seen, own):
        weighing = [part for part in self.parts if part.replaces_softmax]
        return weighing[0].weigh(logits, seen=seen, own=own) if weighing else None

    def query_bias(self, query, distance):
        biases = [part.query_bias(query, distance) for part in self.parts if part.adds_bias]
        return torch.stack(torch.broadcast_tensors(*biases)).sum(0) if biases else None
