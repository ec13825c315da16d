"""FIRE (Li et al. 2024, arXiv 2310.04418): a learned bias of the progressively interpolated distance.

score(i, j) gets f_θ(ψ(i − j) / ψ(max(i, L))) for keys j <= i, with ψ(x) = log(c·x + 1) and f_θ a small
MLP (1 -> width -> ... -> one output per head, ReLU). Dividing by ψ of the query's own position maps
every causal distance into [0, 1] whatever the length, so a longer sequence asks the MLP only for
inputs it was trained on; the threshold L keeps short prefixes from being stretched over [0, 1].
c and L are learned (L as a learned multiple of its initial value, as in the authors' code; the
initial c = 0.1 is theirs). Past L the bias depends on the query's position, not on i − j alone
(`bias_reads_query`), so the attention builds it per query block. One FIRE serves every layer, as
the model shares its scheme across blocks, unless `per_layer` gives each block its own (MLP, c and L),
as the authors' code builds one per attention layer.
"""

from __future__ import annotations

import torch
from torch import nn

from posenc_cli.core.choices import MAX_LENGTH
from posenc_cli.core.errors import require_bool, require_int, require_number
from posenc_cli.model.positional.base import Claim, PositionalScheme

EPS = 1e-6  # keeps the normalizer positive where c·max(i, L) underflows
# the paper's MLP is 32 wide and 2 deep; past these the layers alone take long to build, before the
# memory model (bias_activations) can weigh them
MAX_WIDTH, MAX_DEPTH = 4096, 64
# c's initial value, four decades either side of the paper's 0.1: below, ψ(x) = log(cx + 1) is cx within
# float32's resolution (FIRE then interpolates linearly); above, ψ(x) ≈ log c and every distance crowds
# near 1; 1e308 made c·x infinite and the first step NaN
C_RANGE = (1e-4, 1e4)


class FIRE(PositionalScheme):
    name = "fire"
    kind = "bias"
    relative = "explicit"  # below the threshold L; past it the query's position joins in
    param_formula = "66 + 33·h"  # at the default width and depth; an instance states its own
    claim = Claim(used_by="research (Li et al. 2024; Zhou et al. 2024)")

    def __init__(
        self,
        n_embd: int,
        n_head: int,
        block_size: int,
        *,
        mlp_width: int = 32,
        mlp_depth: int = 1,
        c: float = 0.1,
        threshold: float | None = None,
        per_layer: bool = False,
    ):
        super().__init__(n_embd, n_head, block_size)
        require_bool("scheme.per_layer", per_layer)
        require_int("scheme.mlp_width", mlp_width, at_least=1, at_most=MAX_WIDTH)
        require_int("scheme.mlp_depth", mlp_depth, at_least=1, at_most=MAX_DEPTH)
        require_number("scheme.c", c, at_least=C_RANGE[0], at_most=C_RANGE[1])
        if threshold is not None:  # a length in positions (float32 holds it: 1e308 was infinite, NaN at once)
            require_number("scheme.threshold", threshold, at_least=1, at_most=MAX_LENGTH)
        layers: list[nn.Module] = []
        for depth in range(mlp_depth):
            layers += [nn.Linear(1 if depth == 0 else mlp_width, mlp_width), nn.ReLU()]
        self.mlp = nn.Sequential(*layers, nn.Linear(mlp_width, n_head))
        self.c = nn.Parameter(torch.tensor(float(c)))
        self.register_buffer("initial_threshold", torch.tensor(float(threshold or block_size)))
        self.threshold_scale = nn.Parameter(torch.tensor(1.0))
        hidden = (mlp_depth - 1) * (mlp_width * mlp_width + mlp_width)
        self.param_formula = f"{2 * mlp_width + hidden + 2} + {mlp_width + 1}·h"
        self.per_layer = per_layer
        self.layer_options = {"mlp_width": mlp_width, "mlp_depth": mlp_depth, "c": c, "threshold": threshold}
        self.later_layers = nn.ModuleList()  # per_layer: the FIREs of blocks 1.. (for_layers builds them)

    @property
    def label_options(self) -> tuple[str, ...]:
        return ("per-layer",) if self.per_layer else ()

    def for_layers(self, n_layer: int) -> list[PositionalScheme]:
        """per_layer: this FIRE for the first block and a fresh one, its own MLP, c and L, for each other."""
        if not self.per_layer:
            return [self] * n_layer
        self.later_layers = nn.ModuleList(
            FIRE(self.n_embd, self.n_head, self.block_size, **self.layer_options) for _ in range(n_layer - 1)
        )
        self.param_formula = (
            f"{n_layer}·({self.later_layers[0].param_formula})" if n_layer > 1 else self.param_formula
        )
        return [self, *self.later_layers]

    def bias_activations(self, length: int) -> int:
        """The MLP runs on every (query, key) pair: each hidden layer keeps its input and ReLU output."""
        hidden = [layer.out_features for layer in self.mlp if isinstance(layer, nn.Linear)][:-1]
        return length * length * (2 * sum(hidden) + 1 + self.n_head)

    def psi(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log(torch.abs(self.c * x) + 1)

    def normalized_distance(self, query: torch.Tensor, distance: torch.Tensor) -> torch.Tensor:
        """ψ(i − j) / ψ(max(i, L)), in [0, 1] for every key a causal query attends (0 <= i − j <= i)."""
        threshold = torch.abs(self.threshold_scale * self.initial_threshold)
        normalizer = self.psi(torch.maximum(query.to(self.c.dtype), threshold)) + EPS
        return self.psi(distance.clamp(min=0).to(self.c.dtype)) / normalizer

    def query_bias(self, query, distance):
        # in fp32 under bf16 autocast: in bf16 the first layer's gradients were 5-7 % off (docs/tasks.md)
        with torch.autocast(distance.device.type, enabled=False):
            x = self.normalized_distance(query, distance)
            if len(self.mlp) == 3 and not torch.is_grad_enabled():  # one hidden layer, evaluation
                return self.interpolated(x)
            return self.mlp(x[..., None]).movedim(-1, 0)

    def interpolated(self, x: torch.Tensor) -> torch.Tensor:
        """The one-hidden-layer MLP at x in [0, 1], (H, ...), without running it on every pair: a ReLU
        MLP of one scalar is linear between the points where a hidden unit turns on or off (−b/w), so
        its values at those knots, interpolated, are the MLP's own, to float rounding. Evaluation of
        every (query, key) pair then costs a search among w knots instead of a w-wide MLP."""
        first = self.mlp[0]
        weight, bias = first.weight[:, 0], first.bias
        turns = -bias[weight != 0] / weight[weight != 0]
        ends = torch.tensor([0.0, 1.0], dtype=x.dtype, device=x.device)
        knots = torch.cat([turns[(turns > 0) & (turns < 1)].to(x.dtype), ends]).unique()  # sorted
        values = self.mlp(knots[:, None]).T  # (H, K)
        slopes = (values[:, 1:] - values[:, :-1]) / (knots[1:] - knots[:-1])  # (H, K - 1)
        left = (torch.searchsorted(knots, x.contiguous()) - 1).clamp_(0, knots.numel() - 2)
        return slopes[:, left].mul_(x - knots[left]).add_(values[:, left])

    def bias(self, distance):
        """The bias of queries within the threshold (i <= L, training's usual case), where FIRE is a
        function of distance alone: what `posenc inspect` draws."""
        return self.query_bias(torch.zeros((), dtype=torch.long, device=distance.device), distance)
