"""How a number reads in a table cell: mean ± std over seeds, a length as a multiple of the training
length, a ratio, a Markdown table."""

from __future__ import annotations

import math

import pandas as pd

BEYOND_TABLE = "—"


def mean_std(values: pd.Series, digits: int = 2) -> str:
    values = values.dropna()
    if values.empty:
        return BEYOND_TABLE
    if len(values) == 1:
        return f"{values.iloc[0]:.{digits}f}"
    return f"{values.mean():.{digits}f} ± {values.std(ddof=1):.{digits}f}"


def relative_length(length: int, train_len: int) -> str:
    """How a table names an evaluation length: "training length", or its multiple of it ("2×")."""
    return "training length" if length == train_len else f"{length / train_len:g}×"


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(str(c) for c in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def times(ratio: float) -> str:
    return f"{ratio:.2f}×" if math.isfinite(ratio) else BEYOND_TABLE
