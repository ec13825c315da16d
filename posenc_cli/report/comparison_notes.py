"""The footnotes under comparison.md's table: what was scored, how to read the grades, and why a column
has no verdict or number; each quotes the table's own rows, in the table's order."""

from __future__ import annotations

import json
from typing import Sequence

import pandas as pd

from posenc_cli.evaluation.labels import Label, scheme_order
from posenc_cli.report.cells import BEYOND_TABLE
from posenc_cli.report.passkey_tables import passkey_note
from posenc_cli.report.verdict import (
    LEARNED_BELOW_UNIGRAM,
    NO_VERDICT,
    NOT_MEASURED,
    QUALITY_BANDS,
    STABILITY_BANDS,
    bands_text,
    per_byte,
    per_column,
)
from posenc_cli.rundir.selection import Skipped


def comparison_notes(
    df: pd.DataFrame, schemes: list[Label], evidence: dict, *, passkey: pd.DataFrame | None
) -> list[str]:
    """The footnotes: what was scored, how to read the grades, and why a column has no verdict or number."""
    longest = df["eval_len"].max()
    train_len = own_length(df) or "its reference length"
    own = per_column(df, "reference_len")  # each column's reference length
    seeds = {s: df[df.scheme == s]["seed"].nunique() for s in schemes}
    mode = ", ".join(sorted(df["mode"].unique()))
    notes = [
        f"Perplexity on {scored_text(df)} ({mode} windows), "
        + (
            "so each length has its own documents; "
            if per_document(df)
            else "the same tokens at every length; "
        )
        + (
            "mean ± std over seeds: " + ", ".join(f"{s} n={n}" for s, n in seeds.items())
            if max(seeds.values()) > 1
            else "one seed each"
        )
        + ".",
        f"stability compares a model with itself: near 1× means the tokens past {train_len} do the model no harm, "
        "not that it uses them (a model that ignores far context is flat too; passkey retrieval, `posenc probe`, "
        "asks whether they are used), and it says nothing about how good the model is. quality compares it with "
        f"the best scheme at {longest}"
        + (
            ", per UTF-8 byte, because the table mixes tokenizers and a token's perplexity depends on what a token is."
            if per_byte(df)
            else "."
        ),
        "extrapolation, measured: the lower of two grades, stability "
        + bands_text(STABILITY_BANDS)
        + " and quality "
        + bands_text(QUALITY_BANDS)
        + f"; so a scheme more than 1.25× the best at {longest} "
        "is never strong.",
    ]
    notes += [
        f"{NO_VERDICT} for {s}: its ppl at {own[s]} ({e.train_ppl:.2f}) is not clearly below the unigram "
        f"perplexity of the text ({e.unigram_ppl:.2f}; clearly: at most {LEARNED_BELOW_UNIGRAM:g}×), so it "
        "has not learned enough to grade; its numbers stand as measured."
        for s, e in evidence.items()
        if e.verdict == NO_VERDICT
    ]
    notes += not_measured_notes(df, evidence)
    if passkey is not None:
        notes.append(passkey_note(passkey))
    notes += [note for note in (differences_note(df), precision_note(df)) if note]
    notes += sorted(set(df[df["ppl"].notna()]["note"].dropna()) - {""})  # how a number was measured
    beyond = set(df[df["ppl"].isna() & (df["tokens"] == 0)]["note"].dropna()) - {""}  # why no number
    if beyond:
        notes.append(f"{BEYOND_TABLE}: " + "; ".join(sorted(beyond)) + ".")
    return notes


def not_measured_notes(df: pd.DataFrame, evidence: dict) -> list[str]:
    """Why a column has no extrapolation grade: no length past its own context (and whether
    --hf-context pretended a shorter one)."""
    trained, real = per_column(df, "train_len"), per_column(df, "context")
    longest = df["eval_len"].max()
    notes = []
    for s, e in evidence.items():
        if e.verdict != NOT_MEASURED:
            continue
        pretended = f"; --hf-context {trained[s]:,} pretends a shorter one" if trained[s] != real[s] else ""
        notes.append(
            f"{NOT_MEASURED} for {s}: no length past its own context ({real[s]:,}) was evaluated (the longest is "
            f"{longest:,}{pretended}), so nothing was extrapolated; add a length past it to grade it."
        )
    return notes


def differences_note(df: pd.DataFrame) -> str | None:
    """A footnote naming what the columns' runs differ in besides their scheme (eval's `differs` column:
    training length, steps, corpus...), so that different trainings are never read as like for like;
    None when they differ in nothing else (or the ppl.csv is from before eval recorded it)."""
    if "differs" not in df.columns:
        return None
    columns = df.groupby("scheme")["differs"].first()
    settings = {s: setting_of(columns[s]) for s in scheme_order(columns.index)}
    settings = {s: setting for s, setting in settings.items() if setting}
    keys = sorted({key for setting in settings.values() for key in setting})
    if not keys:
        return None
    parts = [
        f"{key} ({'; '.join(f'{s} {setting[key]}' for s, setting in settings.items() if key in setting)})"
        for key in keys
    ]
    return (
        "the columns are different trainings, not one setting with another scheme: they differ in "
        + ", ".join(parts)
        + ". Runs are pooled as seeds only when their recorded configs are equal but the seed."
    )


def setting_of(differs) -> dict[str, str]:
    """A `differs` cell as the keys and values it names: {} for an empty cell (nan, read back from a
    csv) or one that is not eval's json (a hand-edited csv)."""
    try:
        setting = json.loads(differs) if isinstance(differs, str) and differs else {}
    except json.JSONDecodeError:
        return {}
    return setting if isinstance(setting, dict) else {}


def precision_note(df: pd.DataFrame) -> str | None:
    """A footnote when the table's runs were trained in more than one precision (auto answers fp32 on
    one machine kind and bf16 autocast on another); None when they agree."""
    if "precision" not in df.columns:  # a ppl.csv from before runs recorded it
        return None
    trained = df[df["precision"].fillna("") != ""]
    by_precision = trained.groupby("precision")["scheme"].unique()
    if len(by_precision) < 2:
        return None
    parts = [f"{p} ({', '.join(map(str, scheme_order(schemes)))})" for p, schemes in by_precision.items()]
    return (
        "the runs were trained in different precisions: "
        + "; ".join(parts)
        + ". Evaluation scores every model in fp32; a different precision is another trajectory, like another seed."
    )


def scored_tokens(df: pd.DataFrame, kind: str = "validation tokens") -> str:
    """How many tokens each length scored, read from the table's own rows in its order (columns as the
    table orders them, lengths ascending): one number when every column scored the same at every length."""
    scored = df[df["tokens"] > 0]
    if scored["tokens"].nunique() == 1:
        return f"{int(scored['tokens'].iloc[0]):,} {kind}"
    columns = []
    for scheme in scheme_order(scored["scheme"]):
        by_length = scored[scored["scheme"] == scheme].groupby("eval_len")["tokens"]
        counts = [" / ".join(f"{t:,}" for t in sorted(set(map(int, n)))) + f" @ {L}" for L, n in by_length]
        columns.append(f"{scheme} {', '.join(counts)}")
    return f"{kind} per length: " + "; ".join(columns)


def per_document(df: pd.DataFrame) -> bool:
    """Whether the table was scored with --documents (ppl.csv's documents column holds the counts)."""
    return "documents" in df and df["documents"].notna().any()


def scored_text(df: pd.DataFrame) -> str:
    """What text the columns scored: one --data text (the same bytes for all, to less than a token at
    each end: eval_text), or each run's validation split; old ppl.csv files say validation tokens."""
    if "text" not in df:
        return scored_tokens(df)
    texts = df.groupby("scheme")["text"].first()
    if (texts == "its validation split").all():
        return "each run's validation split: " + scored_tokens(df, "tokens")
    if per_document(df):
        counts = df.dropna(subset=["documents"]).groupby(["scheme", "eval_len"])["documents"].first()
        per_column = "; ".join(
            f"{s}: " + ", ".join(f"{int(n):,} @ {L}" for (c, L), n in counts.items() if c == s)
            for s in dict.fromkeys(c for c, _ in counts.index)
        )
        return (
            f"{texts.iloc[0]}: at each length the documents of at least L + 1 tokens, each scored alone, "
            f"the mean over all their scored tokens (documents: {per_column}), {scored_tokens(df, 'tokens')}"
        )
    scored = df[df["tokens"] > 0]["bytes"].dropna()
    span = f"{scored.min():,.0f}" if scored.nunique() <= 1 else f"{scored.min():,.0f}–{scored.max():,.0f}"
    where = texts.iloc[0] if texts.nunique() == 1 else "; ".join(f"{s}: {t}" for s, t in texts.items())
    return (
        f"{where}: the same {span} bytes of it for every column (a column's first token is only an input, "
        f"and a token crossing the span's end is not scored), {scored_tokens(df, 'tokens')}"
    )


def skipped_notes(skipped: Sequence[Skipped]) -> list[str]:
    """A line per run that was selected but not scored: a named run is never missing without a word."""
    return [f"not scored: {skip.path}, {skip.why}" for skip in skipped]


def skipped_text(skipped: Sequence[Skipped]) -> str:
    """skipped_notes as the list that closes ppl.md or passkey.md ("" when nothing was skipped)."""
    return "".join(f"\n- {note}" for note in skipped_notes(skipped)) + ("\n" if skipped else "")


def own_length(df: pd.DataFrame) -> int | None:
    """The columns' one reference length (their training length, or the longest length inside it), or
    None when they differ."""
    reference = per_column(df, "reference_len")
    return int(reference.iloc[0]) if reference.nunique() == 1 else None
