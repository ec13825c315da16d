"""The passkey and needle tables: retrieval by length and by depth, as mean ± std [lowest–highest seed]
over seeds, one section per task and column (a RoPE scaling is a column of its own)."""

from __future__ import annotations

import pandas as pd

from posenc_cli.data.needles import RECALLED
from posenc_cli.data.passkey import KEY_DIGITS as PASSKEY_DIGITS
from posenc_cli.evaluation.columns import unscalable_note
from posenc_cli.evaluation.labels import Label, scheme_order
from posenc_cli.report.cells import BEYOND_TABLE, markdown_table, mean_std, relative_length, relative_to


def probe_rows(passkey: pd.DataFrame) -> pd.DataFrame:
    """probe.csv's rows with the columns a file from before the needle tasks lacks: passkey, unscaled."""
    return passkey.assign(
        **{k: v for k, v in {"task": "passkey", "rope_scaling": "none"}.items() if k not in passkey}
    )


def tasks(passkey: pd.DataFrame) -> list[str]:
    return list(dict.fromkeys(probe_rows(passkey)["task"]))


def probe_columns(passkey: pd.DataFrame) -> list:
    """scheme_order, but each run's RoPE scalings in the order --rope-scaling gave them: its rows' order."""
    order = scheme_order(passkey["scheme"])
    rank = {s: i for i, s in enumerate(order)}
    run_rank = passkey.groupby("run", sort=False)["scheme"].agg(lambda s: min(rank[x] for x in s))
    column_rank = {s: run_rank[run] for s, run in passkey.groupby("scheme")["run"].first().items()}
    appearance = {s: i for i, s in enumerate(dict.fromkeys(passkey["scheme"]))}
    return sorted(order, key=lambda s: (column_rank[s], appearance[s]))


def unscaled_columns(passkey: pd.DataFrame, *, scaling_asked: bool) -> dict[Label, str]:
    """The columns --rope-scaling (when it asked for a scaling) could not scale: a run probed once, as
    trained, with eval's note for each."""
    rows = probe_rows(passkey)
    if not scaling_asked:
        return {}
    per_run = rows.groupby("run")["scheme"].nunique()
    alone = rows[rows.run.map(per_run).eq(1) & rows.rope_scaling.eq("none")]
    return {s: unscalable_note(s) for s in dict.fromkeys(alone["scheme"])}


def retrieval_by_length(passkey: pd.DataFrame, measure: str = "accuracy") -> pd.DataFrame:
    """Percent retrieved (or RULER's recall) per task, scheme, seed and length, averaged over depths (NaN
    past a learned table)."""
    by = ["task", "scheme", "seed", "length"]
    return (probe_rows(passkey).groupby(by)[measure].mean() * 100).reset_index()


def recalled(passkey: pd.DataFrame) -> list[str]:
    """The tasks probe.csv holds RULER's recall of (vt and cwe)."""
    rows = probe_rows(passkey)
    return [t for t in tasks(rows) if t in RECALLED and "recall" in rows]


def passkey_rows(passkey: pd.DataFrame, schemes: list[Label]) -> list[list[str]]:
    """Rows "passkey @ L" (the task's name @ L): % of trials retrieved exactly, mean ± std over seeds;
    vt and cwe also "vt recall @ L", RULER's recall in %."""
    contexts = [int(c) for c in passkey.groupby("scheme")["train_len"].min()]
    rows = []
    measures = [(t, "accuracy", t) for t in tasks(passkey)]
    measures += [(t, "recall", f"{t} recall") for t in recalled(passkey)]
    for task, measure, name in measures:
        by_length = retrieval_by_length(passkey, measure)
        for L in sorted(by_length["length"].unique()):
            label = f"{name} @ {L} ({relative_to(L, contexts)})"
            cells = by_length[(by_length.length == L) & (by_length.task == task)]
            rows.append([label] + [mean_std(cells[cells.scheme == s][measure], digits=0) for s in schemes])
    return rows


def seed_spread(values: pd.Series) -> str:
    """'mean ± std [min–max]' of percentages over seeds: retrieval is learned in a phase change, so
    seeds split (one retrieves every key, the next none) and a mean alone hides the split."""
    values = values.dropna()
    if len(values) < 2:
        return mean_std(values, digits=0)
    return f"{mean_std(values, digits=0)} [{values.min():.0f}–{values.max():.0f}]"


def passkey_by_depth(passkey: pd.DataFrame, *, scaling_asked: bool = False) -> str:
    """passkey.md: per task and column, % retrieved at every depth and length with the spread over
    seeds, and how many seeds retrieve at least half the keys (depths averaged); `scaling_asked`: the
    probe's --rope-scaling asked for a scaling, so a column probed once says why."""
    rows = probe_rows(passkey)
    asked = tasks(rows)
    title = "Passkey retrieval" if asked == ["passkey"] else f"Needle retrieval ({', '.join(asked)})"
    sections = [
        f"# {title} by depth and length\n\n"
        f"% of {int(rows['trials'].max())} trials retrieved exactly (`posenc probe`); cells are "
        "mean ± std [min–max] over seeds. Depth is where the key sits in the filler: 0.1 is far from the "
        "question, 0.9 near it.\n"
    ]
    notes = unscaled_columns(rows, scaling_asked=scaling_asked)
    for task in asked:
        for scheme in probe_columns(rows):
            sub = rows[(rows.scheme == scheme) & (rows.task == task)]
            if len(sub):
                sections.append(column_section(sub, scheme, task=task, note=notes.get(scheme, "")))
    return "\n".join(sections)


def column_section(sub: pd.DataFrame, scheme, *, task: str, note: str) -> str:
    """One column's table in passkey.md: depth rows, all depths, seeds retrieving at least half."""
    sub = sub.assign(percent=lambda d: d["accuracy"] * 100)
    train_len = int(sub["train_len"].min())
    lengths = sorted(sub["length"].unique())
    header = ["depth"] + [f"{L} ({relative_length(L, train_len)})" for L in lengths]
    rows = [
        [f"{depth:g}"]
        + [seed_spread(sub[(sub.length == L) & (sub.depth == depth)]["percent"]) for L in lengths]
        for depth in sorted(sub["depth"].unique())
    ]
    per_seed = sub.groupby(["length", "seed"])["percent"].mean()
    rows.append(["all depths"] + [seed_spread(per_seed[L]) for L in lengths])
    if task in RECALLED and "recall" in sub:  # RULER's score: the answer's words found, any order
        recall = (sub.groupby(["length", "seed"])["recall"].mean() * 100).dropna()
        rows.append(["RULER recall, all depths"] + [seed_spread(recall.get(L, pd.Series())) for L in lengths])
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
    said = f"{note}.\n\n" if note else ""
    return f"## {scheme} ({task}, seeds {seeds})\n\n" + said + markdown_table(header, rows)


def passkey_note(passkey: pd.DataFrame) -> str:
    depths = ", ".join(f"{d:g}" for d in sorted(passkey["depth"].unique()))
    asked = tasks(passkey)
    what = (
        f"{PASSKEY_DIGITS}-digit key"
        if asked == ["passkey"]
        else f"{PASSKEY_DIGITS}-digit key or keys (all asked)"
    )
    said = (
        f"{', '.join(asked)}: % of {int(passkey['trials'].max())} trials per depth (depths {depths}) whose "
        f"{what} greedy decoding reproduced exactly (`posenc probe`)."
    )
    if recalled(passkey):  # vt's names and cwe's words are answers too; their recall is RULER's score
        said += (
            f" {' and '.join(recalled(passkey))} answer names or words (not keys); their recall rows are "
            "RULER's score: % of the answer's words found in the greedy continuation, in any order."
        )
    return said
