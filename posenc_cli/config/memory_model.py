"""The memory model: a lower bound of the bytes a run holds at once, checked against what the device has
free before any run starts."""

from __future__ import annotations

from typing import Any

import torch

from posenc_cli.config.forward_memory import Forward
from posenc_cli.config.hydra_args import one_line
from posenc_cli.config.schema import PosencConfig
from posenc_cli.core.device import free_memory
from posenc_cli.core.errors import (
    UsageError,
)
from posenc_cli.model.positional import build_scheme

_scheme_footprints: dict[str, tuple[int | None, int, int, bool]] = {}  # a sweep's points share a few schemes


def scheme_footprint(
    scheme: dict[str, Any], n_embd: int, n_head: int, *, block_size: int, n_layer: int
) -> tuple[int | None, int, int, bool]:
    """(max_len, parameter and buffer elements, bias activations per layer at block_size, whether those
    are per sequence: a bias read from content) of the scheme spread over the model's layers, built on
    the meta device: its constructor checks every option. Memoised, so a 10,000-point sweep builds each
    distinct scheme once."""
    key = repr((sorted(scheme.items()), n_embd, n_head, block_size, n_layer))
    if key not in _scheme_footprints:
        options = dict(scheme)
        name = options.pop("name")
        with torch.device("meta"):
            try:
                built = build_scheme(name, n_embd, n_head, block_size=block_size, **options)
                built.for_layers(n_layer)  # its instances of later layers, where it keeps its own
            except TypeError as err:
                raise UsageError(f"scheme={name}: {one_line(err)}") from None
        size = sum(t.numel() for t in [*built.parameters(), *built.buffers()])
        _scheme_footprints[key] = built.max_len, size, built.bias_activations(block_size), built.reads_content
    return _scheme_footprints[key]


BYTES_PER_CORPUS_CHAR = 40  # a generated corpus: its text, the ids made while encoding, the id arrays (~30)


def memory_needed(
    cfg: PosencConfig, n_chars: int | None, *, positional: int = 0, bias: int = 0, per_sequence: bool = False
) -> dict[str, float]:
    """A rough lower bound of the bytes a run holds at once, by what holds them (fp32, char vocabulary);
    `positional`: the scheme's own parameters and buffers (a learned table of max_len rows); `bias`: the
    floats a layer keeps for its bias (FIRE's MLP over every pair), per sequence with randomized positions
    or where `per_sequence` (a bias read from content: CoPE, FoX)."""
    tc, mc = cfg.train, cfg.model
    d, layers, vocab = mc.n_embd, mc.n_layer, 256
    params = vocab * d + layers * (12 * d * d + 13 * d)
    step = Forward(tc.batch_size, tc.block_size, d, layers, mc.n_head, vocab)  # kept for the backward
    return {
        "model.n_embd/model.n_layer (weights, gradients, optimizer)": 16.0 * params,
        "the scheme's parameters (scheme.max_len, train.max_position, an MLP's size)": 16.0 * positional,
        "train.batch_size x train.block_size (activations)": float(step.activations() + step.logits(3)),
        "the scheme's bias over every pair (its MLP's width and depth)": 4.0
        * layers
        * bias
        * (tc.batch_size if per_sequence or tc.positions == "randomized" else 1),
        "train.eval_batches (validation batches)": 16.0
        * tc.eval_batches
        * tc.batch_size
        * (tc.block_size + 1),
        "data (the corpus)": float(BYTES_PER_CORPUS_CHAR * (n_chars or 0)),  # None: memory-mapped
        # data.random_positions: a float key and an int64 argsort index per (sequence, position)
        "train.batch_size x train.max_position (randomized positions)": 12.0
        * tc.batch_size
        * (tc.max_position or 0),
    }


def check_run_memory(
    cfg: PosencConfig,
    n_chars: int | None,
    device: torch.device,
    *,
    positional: int = 0,
    bias: int = 0,
    per_sequence: bool = False,
) -> None:
    free = free_memory(device)
    needed = memory_needed(cfg, n_chars, positional=positional, bias=bias, per_sequence=per_sequence)
    if free is not None and sum(needed.values()) > free:
        biggest = max(needed, key=needed.get)
        raise UsageError(
            f"this run needs at least {sum(needed.values()) / 2**30:,.1f} GiB but {device} has "
            f"{free / 2**30:,.1f} GiB free; most of it is {biggest}: make it smaller"
        )
