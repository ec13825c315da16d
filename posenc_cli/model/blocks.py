"""The one memory budget of attention, and the one loop over blocks of queries that keeps to it.

Every path of the executor (model/attention.py) that cannot hand the whole (Tq, Tk) score matrix to a
kernel attends one block of queries at a time; a block's masks stay below MASK_BUDGET floats, so
evaluation memory grows linearly with the length, not quadratically. The memory models read the same
rule (`query_block`), so what they predict is what the loop holds.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from posenc_cli.model.window import AttentionWindow

# floats of one block's (heads, rows, keys) masks: 16 MiB in fp32
MASK_BUDGET = 1 << 22


def query_block(queries: int, keys: int, *, planes: int, window: AttentionWindow) -> int:
    """Rows of one block of `queries` queries against `keys` keys: as many as keep the block's `planes`
    masks (one per head where a bias differs by head, times sequences or parts where the caller's masks
    have them) within MASK_BUDGET. Under a window a block is at most its span tall, and meets at most
    twice the span of keys."""
    span = window.span(keys)
    met = keys if span >= keys else min(keys, 2 * span)
    return max(1, min(queries, span, MASK_BUDGET // (planes * met)))


def in_query_blocks(queries: int, rows: int, attend_rows: Callable[[int, int], torch.Tensor]) -> torch.Tensor:
    """attend_rows(start, end) for each block of `rows` queries, concatenated along the query axis (2)."""
    return torch.cat(
        [attend_rows(start, min(start + rows, queries)) for start in range(0, queries, rows)], dim=2
    )
