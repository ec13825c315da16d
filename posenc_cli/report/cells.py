"""How a number reads in a table cell: mean ± std over seeds, a length as a multiple of the training
length, a ratio, a Markdown table."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from posenc_cli.evaluation.eval_scoring import NON_FINITE

BEYOND_TABLE = "—"


def mean_std(values: pd.Series, digits: int = 2) -> str:
    values = values.dropna()
    if values.empty:
        return BEYOND_TABLE
    if len(values) == 1:
        return f"{values.iloc[0]:.{digits}f}"
    return f"{values.mean():.{digits}f} ± {values.std(ddof=1):.{digits}f}"


def result_cell(rows: pd.DataFrame, value: str = "ppl", digits: int = 2) -> str:
    """mean ± std of `value` over these rows (the seeds of one column at one length). A scored row whose
    loss is not finite is never dropped from the mean: the cell says so instead of a number."""
    scored = rows["tokens"] > 0 if "tokens" in rows else pd.Series(True, index=rows.index)
    failed = int((scored & ~np.isfinite(rows["nll" if "nll" in rows else "ppl"])).sum())
    if failed == len(rows) and failed:
        return f"nan ({NON_FINITE})"
    if failed:
        return f"nan ({NON_FINITE} in {failed} of {len(rows)} seeds)"
    return mean_std(rows[value], digits)


def relative_length(length: int, train_len: int) -> str:
    """How a table names an evaluation length: "training length", or its multiple of it ("2×")."""
    return "training length" if length == train_len else f"{length / train_len:g}×"


def relative_to(length: int, contexts: list[int]) -> str:
    """A length against each context of a table: "2×" for one, "64× 256; 2× 8,192" for several (a
    multiple is always of the column's own context, never of another's)."""
    contexts = sorted(set(contexts))
    if len(contexts) == 1:
        return relative_length(length, contexts[0])
    return "; ".join(f"training length {c:,}" if length == c else f"{length / c:g}× {c:,}" for c in contexts)


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(str(c) for c in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def times(ratio: float) -> str:
    return f"{ratio:.2f}×" if math.isfinite(ratio) else BEYOND_TABLE
