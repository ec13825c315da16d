"""The tables of evaluation results: ppl.md's pivot and comparison.md's rows (its footnotes:
comparison_notes).

Everything here is derived from a tidy DataFrame, so an eval directory can be deleted and rebuilt.
"""

from __future__ import annotations

import math
from typing import Sequence

import pandas as pd

from posenc_cli.evaluation.labels import Label, scheme_order
from posenc_cli.model.positional import SCHEMES, Claim, claim_for
from posenc_cli.report.cells import (
    BEYOND_TABLE,
    markdown_table,
    relative_to,
    result_cell,
    times,
)
from posenc_cli.report.comparison_notes import comparison_notes, own_length, skipped_notes
from posenc_cli.report.effective_length import LengthRule, effective_length_row
from posenc_cli.report.passkey_tables import passkey_rows
from posenc_cli.report.verdict import extrapolation, per_byte, per_column
from posenc_cli.rundir.selection import Skipped


def subword(df: pd.DataFrame) -> bool:
    """Whether any run's tokens are not characters (then tables say how many characters they cover)."""
    return "tokenizer" in df and bool((df["tokenizer"].fillna("char") != "char").any())


def chars_per_token(sub: pd.DataFrame) -> float:
    scored = sub.dropna(subset=["chars"])
    return float(scored["chars"].sum() / scored["tokens"].sum()) if len(scored) else math.nan


def ppl_pivot(df: pd.DataFrame, value: str = "ppl", digits: int = 2) -> tuple[list[str], list[list[str]]]:
    """Scheme rows, eval-length columns, 'mean ± std' cells of `value` (ppl or bpb) over seeds (and
    characters per token when some run is not character-level)."""
    lengths = sorted(df["eval_len"].unique())
    extra = ["chars/token"] if subword(df) else []
    header = ["scheme", "seeds", *extra]
    header += [f"L={L}" + (" (train)" if L in set(df["train_len"]) else "") for L in lengths]
    rows = []
    for scheme in scheme_order(df["scheme"]):
        sub = df[df["scheme"] == scheme]
        ratio = [f"{chars_per_token(sub):.2f}"] if extra else []
        cells = [result_cell(sub[sub["eval_len"] == L], value, digits) for L in lengths]
        seeds = "—" if scheme.model else str(sub["seed"].nunique())  # a pretrained model has none
        rows.append([str(scheme), seeds, *ratio, *cells])
    return header, rows


def characters_covered(df: pd.DataFrame, schemes: list[Label], length: int) -> str:
    """ "≈ a–b characters": what a window of `length` tokens covers on average, across the columns."""
    covered = [length * chars_per_token(df[df.scheme == s]) for s in schemes]
    covered = [c for c in covered if math.isfinite(c)]
    if not covered:
        return ""
    low, high = min(covered), max(covered)
    return f"≈ {low:,.0f} characters" if round(low) == round(high) else f"≈ {low:,.0f}–{high:,.0f} characters"


def tokenizer_rows(df: pd.DataFrame, schemes: list[Label], lengths: list[int]) -> list[list[str]]:
    """Tokenizer and characters per token of each column, and bits per byte when tokenizers mix
    (token perplexities of different tokenizers do not compare; bits per byte do)."""
    rows = [
        ["tokenizer"] + [", ".join(sorted(df[df.scheme == s]["tokenizer"].unique())) for s in schemes],
        ["characters per token"] + [f"{chars_per_token(df[df.scheme == s]):.2f}" for s in schemes],
    ]
    if df["tokenizer"].nunique() > 1:
        for L in lengths:
            at_length = df[df.eval_len == L]
            bpb = [result_cell(at_length[at_length.scheme == s], "bpb", digits=3) for s in schemes]
            rows.append([f"bpb @ {L}", *bpb])
    return rows


def mixes_tokenizers(df: pd.DataFrame) -> bool:
    """Whether token perplexities in `df` are incomparable, so bits per byte must be shown beside them."""
    return "tokenizer" in df and df["tokenizer"].nunique() > 1


def comparison(
    df: pd.DataFrame,
    info: dict[Label, dict],
    *,
    lang: str = "en",
    passkey: pd.DataFrame | None = None,
    skipped: Sequence[Skipped] = (),
    rule: LengthRule = LengthRule(),
) -> str:
    """The chapters' table, with measured numbers beside the claims (and passkey rows from a probe)."""
    schemes = scheme_order(df["scheme"])
    lengths = sorted(df["eval_len"].unique())
    evidence, best = extrapolation(df, max(lengths))
    rows = context_rows(df, schemes) + length_rows(df, schemes, lengths)
    rows += grade_rows(df, schemes, evidence, best=best)
    effective, effective_note = effective_length_row(df, passkey, schemes, rule=rule)
    rows.append(effective)
    if subword(df):
        rows += tokenizer_rows(df, schemes, lengths)
    if passkey is not None:
        rows += passkey_rows(passkey, schemes)
    rows += claim_rows(info, schemes, evidence, lang=lang)
    notes = (
        comparison_notes(df, schemes, evidence, passkey=passkey) + [effective_note] + skipped_notes(skipped)
    )
    return (
        "# Positional schemes: the chapters' table, measured\n\n"
        + markdown_table([""] + schemes, rows)
        + "\n"
        + "\n".join(f"- {n}" for n in notes)
        + "\n"
    )


def context_rows(df: pd.DataFrame, schemes: list) -> list[list[str]]:
    """Each column's context and reference length, where they are not one training length for all: a
    context --hf-context pretends is marked, and so is a reference inside a longer context."""
    trained, real = per_column(df, "train_len"), per_column(df, "context")
    reference = per_column(df, "reference_len")
    plain = trained.nunique() == 1 and (trained == real).all() and (trained == reference).all()
    if plain:
        return []
    context = [
        f"{trained[s]:,}" + (f" (--hf-context; its config: {real[s]:,})" if trained[s] != real[s] else "")
        for s in schemes
    ]
    rows = [["context (training length)", *context]]
    if (trained != reference).any():
        rows.append(
            ["reference length"]
            + [
                f"{reference[s]:,}"
                + (" (the longest length asked, inside the context)" if reference[s] != trained[s] else "")
                for s in schemes
            ]
        )
    return rows


def length_rows(df: pd.DataFrame, schemes: list[Label], lengths: list[int]) -> list[list[str]]:
    """One "ppl @ L" row per evaluation length, named by its relation to the training lengths."""
    rows = []
    for L in lengths:
        where = [length_relation(df, L)]
        where += [characters_covered(df, schemes, L)] if subword(df) else []
        label = f"ppl @ {L}" + (f" ({'; '.join(w for w in where if w)})" if any(where) else "")
        rows.append([label] + [result_cell(df[(df.scheme == s) & (df.eval_len == L)]) for s in schemes])
    return rows


def grade_rows(
    df: pd.DataFrame, schemes: list[Label], evidence: dict, *, best: Label | None
) -> list[list[str]]:
    """The two measures a verdict is the lower grade of: stability and quality at the longest length."""
    longest = df["eval_len"].max()
    train_len = own_length(df) or "reference length"
    measure = f"per-byte ppl({longest}) = 2^bpb" if per_byte(df) else f"ppl({longest})"
    return [
        [f"stability: ppl({longest}) / own ppl({train_len})"]
        + [times(evidence[s].stability) for s in schemes],
        [f"quality: {measure} / best's" + (f" ({best})" if best else "")]
        + [times(evidence[s].quality) for s in schemes],
    ]


def claim_rows(
    info: dict[Label, dict], schemes: list[Label], evidence: dict, *, lang: str
) -> list[list[str]]:
    """The measured verdict beside the chapters' claim, and each column's facts (from its runs where known)."""
    claims = [claim_for(s.positional) for s in schemes]
    rows = [["extrapolation, measured"] + [evidence[s].verdict for s in schemes]]
    rows.append(["extrapolation, chapters' claim"] + [claim.extrapolation for claim in claims])
    if lang == "zh":
        rows.append(["外推能力（章节原话）"] + [claim.extrapolation_zh for claim in claims])
    rows.append(
        ["positional parameters"] + [f"{info.get(s, {}).get('positional_params', 0):,}" for s in schemes]
    )
    relative = [info.get(s, {}).get("relative", relative_kind(s.positional)) for s in schemes]
    rows.append(["relative position", *relative])
    rows.append(["used by"] + [info.get(s, {}).get("used_by", used_by(s)) for s in schemes])
    return rows


def used_by(label: Label) -> str:
    """Who uses a column's scheme: its own claim's, or for a scheme with options of its own (a preset's
    window, a rope's layout) but no scaling or extension, its scheme's."""
    own = claim_for(label.positional).used_by
    plain = not (label.variant.scaling or label.variant.extension) and len(label.scheme) == 1
    return claim_for(label.scheme[0]).used_by if own == Claim().used_by and plain else own


def length_relation(df: pd.DataFrame, length: int) -> str:
    """How a row names an evaluation length: its multiple of each column's training length ("2×" where
    the columns share one, "64× 256; 2× 8,192" where they do not)."""
    return relative_to(length, [int(c) for c in per_column(df, "train_len")])


def relative_kind(label: str) -> str:
    """A scheme's relative-position kind from its class, for a label with no run facts at hand."""
    return SCHEMES[label].relative if label in SCHEMES else BEYOND_TABLE
