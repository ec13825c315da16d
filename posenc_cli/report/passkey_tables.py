"""The passkey tables: retrieval by length and by depth, as mean ± std [lowest–highest seed] over seeds."""

from __future__ import annotations

import pandas as pd

from posenc_cli.data.passkey import KEY_DIGITS as PASSKEY_DIGITS
from posenc_cli.evaluation.labels import scheme_order
from posenc_cli.report.cells import BEYOND_TABLE, markdown_table, mean_std, relative_length, relative_to


def retrieval_by_length(passkey: pd.DataFrame) -> pd.DataFrame:
    """Percent retrieved per scheme, seed and length, averaged over depths (NaN past a learned table)."""
    return (passkey.groupby(["scheme", "seed", "length"])["accuracy"].mean() * 100).reset_index()


def passkey_rows(passkey: pd.DataFrame, schemes: list[str]) -> list[list[str]]:
    """Rows "passkey @ L": % of trials retrieved exactly, mean ± std over seeds."""
    by_length = retrieval_by_length(passkey)
    contexts = [int(c) for c in passkey.groupby("scheme")["train_len"].min()]
    rows = []
    for L in sorted(by_length["length"].unique()):
        label = f"passkey @ {L} ({relative_to(L, contexts)})"
        cells = by_length[by_length.length == L]
        rows.append(
            [label] + [mean_std(cells[cells.scheme == str(s)]["accuracy"], digits=0) for s in schemes]
        )
    return rows


def seed_spread(values: pd.Series) -> str:
    """'mean ± std [min–max]' of percentages over seeds: retrieval is learned in a phase change, so
    seeds split (one retrieves every key, the next none) and a mean alone hides the split."""
    values = values.dropna()
    if len(values) < 2:
        return mean_std(values, digits=0)
    return f"{mean_std(values, digits=0)} [{values.min():.0f}–{values.max():.0f}]"


def passkey_by_depth(passkey: pd.DataFrame) -> str:
    """passkey.md: per scheme, % retrieved at every depth and length with the spread over seeds, and
    how many seeds retrieve at least half the keys (depths averaged)."""
    train_len = int(passkey["train_len"].min())
    sections = [
        "# Passkey retrieval by depth and length\n\n"
        f"% of {int(passkey['trials'].max())} trials retrieved exactly (`posenc probe`); cells are "
        "mean ± std [min–max] over seeds. Depth is where the key sits in the filler: 0.1 is far from the "
        "question, 0.9 near it.\n"
    ]
    for scheme in scheme_order(passkey["scheme"]):
        sub = passkey[passkey.scheme == str(scheme)].assign(percent=lambda d: d["accuracy"] * 100)
        lengths = sorted(sub["length"].unique())
        header = ["depth"] + [f"{L} ({relative_length(L, train_len)})" for L in lengths]
        rows = [
            [f"{depth:g}"]
            + [seed_spread(sub[(sub.length == L) & (sub.depth == depth)]["percent"]) for L in lengths]
            for depth in sorted(sub["depth"].unique())
        ]
        per_seed = sub.groupby(["length", "seed"])["percent"].mean()
        rows.append(["all depths"] + [seed_spread(per_seed[L]) for L in lengths])
        rows.append(
            ["seeds retrieving ≥ 50 %"]
            + [
                f"{int((per_seed[L] >= 50).sum())} of {len(per_seed[L])}"
                if per_seed[L].notna().any()
                else BEYOND_TABLE
                for L in lengths
            ]
        )
        seeds = ", ".join(str(s) for s in sorted(sub["seed"].unique()))
        sections.append(f"## {scheme} (seeds {seeds})\n\n" + markdown_table(header, rows))
    return "\n".join(sections)


def passkey_note(passkey: pd.DataFrame) -> str:
    depths = ", ".join(f"{d:g}" for d in sorted(passkey["depth"].unique()))
    return (
        f"passkey: % of {int(passkey['trials'].max())} trials per depth (depths {depths}) whose "
        f"{PASSKEY_DIGITS}-digit key greedy decoding reproduced exactly (`posenc probe`)."
    )
