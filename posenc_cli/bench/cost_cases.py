"""The rows of the cost table (scheme_costs.py) and the budget each is held to.

Every scheme asked for is a row as registered. Beside rope come what a user adds to it: attention sinks
(`scheme.sinks=true`) on a full layer and on a sliding-window one (with the window alone, so the sinks'
own share shows), and the training-free extensions' evaluation (`--rope-scaling string`, `self_extend`,
`dca`, each at its paper's defaults for the training length) against the same model evaluated plain.

The budget: no row's training step past STEP_BUDGET × rope's, and no evaluation past EVAL_BUDGET × rope's
plain attention's, unless its note says why (WHY, by what the row adds, or its scheme).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from posenc_cli.config.hydra_args import with_layer_options

STEP_BUDGET = 1.5  # a row's training step, at most this many times rope's
EVAL_BUDGET = 2.0  # a row's evaluation at 8x, at most this many times rope's plain attention's
EXTENSIONS = ("string", "self_extend", "dca")  # --rope-scaling columns timed against rope evaluated plain
SINKS = "scheme.sinks=true"

# why a row costs more than its budget, by what the row adds (or its scheme): each one found past it by
# `posenc bench --costs` on the AVX2 EPYC (2026-12-04); the note gives the ratio of the run that prints it
REMAP = (
    "{parts} parts, each a masked attention of its own moved queries and keys over the query blocks, merged "
    "by their log-sum-exps (the moved copies held at once: the memory), where plain attention is one causal "
    "SDPA call"
)
WHY = {
    "stickbreaking": (
        "its weights are computed per pair in the query-block loop (log σ of every logit, then a cumulative "
        "sum of softplus over each query's keys, four (B, H, rows, keys) planes held for the backward) with "
        "no fused kernel, where rope's is one SDPA call"
    ),
    "cope": (
        "its positions are read from content: per pair a gate σ(q·k), a cumulative sum of the gates over each "
        "query's keys and an interpolation of q·E between integer positions, all per (B, H, query, key) in "
        "the block loop, where rope's is one SDPA call"
    ),
    "fire": (
        "its bias is an MLP of each pair's distance over ψ of the query's position: past L it depends on "
        "the query, not on the distance alone, so it is built per query block, never once per distance "
        "(alibi's and t5's strided trick)"
    ),
    "string": REMAP.format(parts="two"),
    "self_extend": REMAP.format(parts="two"),
    "dca": REMAP.format(parts="three"),
}


@dataclass(frozen=True)
class CostCase:
    """One row: `scheme` with scheme `options` as `posenc train` takes them, or (`method`) rope's own
    model evaluated with that --rope-scaling method, its step not timed (training-free). `adds`: what the
    row adds to its scheme, WHY's key ("" for a scheme as registered)."""

    scheme: str
    options: tuple[str, ...] = ()
    method: str | None = None
    adds: str = ""

    @property
    def variant(self) -> str:
        """What the table shows after the scheme's name: `scheme.sinks=true`, `--rope-scaling string`."""
        return f"--rope-scaling {self.method}" if self.method else " ".join(self.options)

    @property
    def overrides(self) -> list[str]:
        """The scheme and its options as Hydra composes them (a layer option needs `++`)."""
        return [f"scheme={self.scheme}", *with_layer_options(list(self.options))]


def cost_cases(schemes: list[str], block_size: int) -> list[CostCase]:
    """Each scheme's row, in the order asked; after rope's, its sinks, window and extension rows."""
    window = f"scheme.window={max(1, block_size // 4)}"  # a quarter of the training length
    beside_rope = [
        CostCase("rope", (SINKS,), adds="sinks"),
        CostCase("rope", (window,), adds="window"),
        CostCase("rope", (window, SINKS), adds="window+sinks"),
        *(CostCase("rope", method=method, adds=method) for method in EXTENSIONS),
    ]
    cases = []
    for scheme in schemes:
        cases += [CostCase(scheme), *(beside_rope if scheme == "rope" else [])]
    return cases


def budget_note(case: CostCase, found: dict[str, float]) -> str:
    """Where the row is past its budget: by how much, and why (WHY), or that no reason is recorded."""
    limits = (("step_vs_rope", "step", STEP_BUDGET), ("eval_vs_rope", "eval", EVAL_BUDGET))
    over = [
        f"{what} {found[key]:.2f}× > {limit:g}×"
        for key, what, limit in limits
        if not math.isnan(found.get(key, math.nan)) and found[key] > limit
    ]
    if not over:
        return ""
    return f"{', '.join(over)}: {WHY.get(case.adds or case.scheme, 'over budget, no reason recorded')}"
