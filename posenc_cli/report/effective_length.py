"""An effective context length, one number per column: the chapters' "extrapolation" row as a length.

A column holds at a length when its perplexity there is within a tolerance of its value at its
reference length (its training length, or the longest length inside it), and, where it was probed, when
it retrieves at least a threshold of keys there (depths and seeds averaged). Its effective length is the
longest length tried up to which it held at every length tried (RULER's "effective length" reads
retrieval the same way, against a fixed threshold). Lengths shorter than the reference are not read:
they are inside the context, and shorter windows give every model a higher perplexity.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, Sequence

import pandas as pd

from posenc_cli.core.choices import PPL_TOLERANCE, RETRIEVAL_THRESHOLD
from posenc_cli.core.errors import require_number
from posenc_cli.evaluation.labels import Label
from posenc_cli.report.verdict import computed_columns, mean_of_all, per_column


@dataclass(frozen=True)
class LengthRule:
    """What "held" means at a length: `--ppl-tolerance` and `--retrieval-threshold`."""

    ppl_tolerance: float = PPL_TOLERANCE  # perplexity at most (1 + this) x its value at the reference length
    retrieval_threshold: float = RETRIEVAL_THRESHOLD  # at least this share of keys retrieved, where probed

    def __post_init__(self) -> None:
        require_number("--ppl-tolerance", self.ppl_tolerance, at_least=0)
        require_number("--retrieval-threshold", self.retrieval_threshold, above=0, at_most=1)

    @classmethod
    def of(cls, options: dict[str, Any]) -> LengthRule:
        """The rule an eval or probe was asked for, from the options its results.json records (a set from
        before the options existed: the defaults)."""
        return cls(**{f.name: options[f.name] for f in fields(cls) if options.get(f.name) is not None})

    def text(self, *, perplexity: bool = True, probed: bool) -> str:
        held = (
            [f"perplexity within {self.ppl_tolerance:.0%} of its value at the reference length"]
            if perplexity
            else []
        )
        if probed:
            where = "where probed, " if perplexity else ""
            held.append(f"{where}at least {self.retrieval_threshold:.0%} of keys retrieved")
        return (
            f"effective length: the longest length tried up to which every length tried held ({' and '.join(held)}); "
            "≥ L: it held at every length tried"
        )


@dataclass(frozen=True)
class EffectiveLength:
    """One column's effective length, and why it stops where it does."""

    held: int | None  # the longest length up to which every length tried held; None: not the first one
    tried: int  # the longest length tried
    failed: int | None = None  # the first length that did not hold
    why: str = ""  # what did not hold there

    def __str__(self) -> str:
        if self.failed is None:
            return f"≥ {self.tried}"
        return f"{self.held}" if self.held is not None else f"< {self.failed}"


NOT_SCORED = "not scored there"  # nan: past a learned table, or a seed that could not be scored


def failures(
    ppl: pd.DataFrame | None, passkey: pd.DataFrame | None, rule: LengthRule
) -> dict[Label, dict[int, str | None]]:
    """Per column and length read: what did not hold there, or None where it held."""
    checks: dict[Label, dict[int, str | None]] = {}
    if ppl is not None:
        ppl = ppl[ppl["scheme"].isin(computed_columns(ppl))]  # a refused column has no length, held or not
        means = ppl.groupby(["scheme", "eval_len"])["ppl"].agg(mean_of_all)
        reference = per_column(ppl, "reference_len")
        for (scheme, length), value in means.items():
            base = means.get((scheme, reference[scheme]), math.nan)
            if length >= reference[scheme]:
                ratio = value / base
                held = math.isfinite(ratio) and ratio <= 1 + rule.ppl_tolerance
                said = f"perplexity {ratio:.2f}× its value at {reference[scheme]}"
                checks.setdefault(scheme, {})[int(length)] = (
                    None if held else said if math.isfinite(ratio) else NOT_SCORED
                )
    if passkey is not None:
        retrieved = passkey.groupby(["scheme", "length"])["accuracy"].agg(mean_of_all)
        for (scheme, length), share in retrieved.items():
            at = checks.setdefault(scheme, {})
            if not share >= rule.retrieval_threshold:  # nan (past a learned table) does not hold
                said = f"{share:.0%} of keys retrieved" if math.isfinite(share) else NOT_SCORED
                at[int(length)] = at.get(int(length)) or said
            else:
                at.setdefault(int(length), None)
    return checks


def effective_lengths(
    ppl: pd.DataFrame | None, passkey: pd.DataFrame | None, rule: LengthRule
) -> dict[Label, EffectiveLength]:
    """Each column's effective length, from eval's ppl rows and probe's rows (either may be absent)."""
    lengths = {}
    for scheme, at in failures(ppl, passkey, rule).items():
        tried = sorted(at)
        failed = next((L for L in tried if at[L] is not None), None)
        held = [L for L in tried if failed is None or L < failed]
        lengths[scheme] = EffectiveLength(
            held=held[-1] if held else None,
            tried=tried[-1],
            failed=failed,
            why="" if failed is None else f"at {failed}: {at[failed]}",
        )
    return lengths


def effective_length_row(
    ppl: pd.DataFrame | None, passkey: pd.DataFrame | None, schemes: list, *, rule: LengthRule
) -> tuple[list[str], str]:
    """comparison.md's row, and its note: the rule, and where and why each column stopped."""
    found = effective_lengths(ppl, passkey, rule)
    row = ["effective length"] + [str(found[s]) if s in found else "—" for s in schemes]
    stops = [f"{s} {found[s].why}" for s in schemes if s in found and found[s].why]
    note = rule.text(probed=passkey is not None) + (
        f". Where each stopped: {'; '.join(stops)}." if stops else "."
    )
    return row, note


def rule_of(made: Sequence[Any]) -> LengthRule:
    """The rule of an output set: its first provenance's options (report.results_file.Provenance)."""
    return LengthRule.of(made[0].options if made else {})


def with_effective_length(
    df: pd.DataFrame, found: dict[Label, EffectiveLength], *, column: str
) -> pd.DataFrame:
    """`df` with its column's effective length on every row (nan where none held) and whether that is only
    a lower bound (it held at every length tried): ppl.csv's by perplexity, probe.csv's by retrieval."""
    held = {s: math.nan if e.held is None else e.held for s, e in found.items()}
    bound = {s: e.failed is None for s, e in found.items()}
    return df.assign(**{column: df["scheme"].map(held), f"{column}_at_least": df["scheme"].map(bound)})


def with_ppl_length(ppl: pd.DataFrame, rule: LengthRule) -> pd.DataFrame:
    """ppl.csv's rows: eval's rows with each column's effective length by perplexity."""
    return with_effective_length(ppl, effective_lengths(ppl, None, rule), column="effective_len_ppl")


def with_retrieval_length(passkey: pd.DataFrame, rule: LengthRule) -> pd.DataFrame:
    """probe.csv's rows: probe's rows with each column's effective length by retrieval."""
    found = effective_lengths(None, passkey, rule)
    return with_effective_length(passkey, found, column="effective_len_retrieval")
