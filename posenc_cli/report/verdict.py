"""The verdict rules, the science of the table: how a perplexity ratio becomes a grade, and when a model
has learned enough to be graded at all."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from posenc_cli.evaluation.labels import Label, scheme_order

GRADES = (
    "very strong",
    "strong",
    "medium",
    "weak",
    "fails",
)  # best first; "fails", never the scheme name "none"


# The upper bound of each grade's band. Stability: ppl(longest) / the scheme's own ppl at the training
# length. Quality: ppl(longest) / the best scheme's ppl(longest), so above 1.25x is never "strong".
STABILITY_BANDS = [
    (1.10, "very strong"),
    (1.50, "strong"),
    (3.0, "medium"),
    (10.0, "weak"),
    (math.inf, "fails"),
]


QUALITY_BANDS = [(1.10, "very strong"), (1.25, "strong"), (2.0, "medium"), (5.0, "weak"), (math.inf, "fails")]


# A run has learned when its ppl at the training length is at most this fraction of the unigram
# perplexity of the text it scores (0.8: at least ln 1.25 = 0.22 nats a token below the unigram entropy).
LEARNED_BELOW_UNIGRAM = 0.8


NO_VERDICT = "no verdict"


NOT_COMPUTED = "not computed"  # a column the model cannot compute (its note says why): nothing to grade
NOT_MEASURED = "not measured"  # no length past the model's own context: there was no extrapolation to grade


def grade(ratio: float, bands: list[tuple[float, str]]) -> str:
    """The band a ratio falls in; a ratio that cannot be measured (past a learned table) fails."""
    if not math.isfinite(ratio):
        return "fails"
    return next(word for bound, word in bands if ratio <= bound)


def has_learned(train_ppl: float, unigram_ppl: float) -> bool:
    """Clearly below the unigram perplexity at the training length (unknown unigram: given the benefit)."""
    return not train_ppl > LEARNED_BELOW_UNIGRAM * unigram_ppl


def verdict(stability: float, quality: float, learned: bool = True, *, past_context: bool = True) -> str:
    """The lower of the stability and the quality grade: a flat but poor model is not a strong extrapolator;
    none without a length past the model's own context (nothing was extrapolated)."""
    if not past_context:
        return NOT_MEASURED
    if not learned:
        return NO_VERDICT
    return max(grade(stability, STABILITY_BANDS), grade(quality, QUALITY_BANDS), key=GRADES.index)


@dataclass(frozen=True)
class Extrapolation:
    """One scheme's row of evidence for its verdict (means over seeds)."""

    train_ppl: float  # at its reference length (its training length, or the longest length inside it)
    longest_ppl: float
    unigram_ppl: float
    longest_compared: float  # what quality compares at the longest length (see `compared_perplexity`)
    best_longest_compared: float  # the same for the best learned scheme
    past_context: bool = True  # whether the longest length is past the model's own (real) context
    computed: bool = True  # whether any token of the column was scored (a refused column: none)

    @property
    def stability(self) -> float:
        return self.longest_ppl / self.train_ppl

    @property
    def quality(self) -> float:
        return self.longest_compared / self.best_longest_compared

    @property
    def learned(self) -> bool:
        return has_learned(self.train_ppl, self.unigram_ppl)

    @property
    def verdict(self) -> str:
        if not self.computed:
            return NOT_COMPUTED
        return verdict(self.stability, self.quality, self.learned, past_context=self.past_context)


def per_byte(df: pd.DataFrame) -> bool:
    """Whether the table mixes tokenizers: their tokens differ, so only perplexity per byte compares."""
    return "tokenizer" in df and "bpb" in df and df["tokenizer"].fillna("char").nunique() > 1


def compared_perplexity(df: pd.DataFrame) -> pd.Series:
    """What quality compares across columns: token perplexity, or per UTF-8 byte (2^bpb) when the
    table mixes tokenizers (a BPE token's perplexity is not a character's)."""
    return 2.0 ** df["bpb"] if per_byte(df) else df["ppl"]


def mean_of_all(values: pd.Series) -> float:
    """The mean over seeds, nan if any seed's is: a diverged seed is never left out of the evidence."""
    return float(values.mean(skipna=False))


def per_column(df: pd.DataFrame, column: str) -> pd.Series:
    """A column's one value per scheme, the training length where a ppl.csv from before eval wrote it."""
    return df.groupby("scheme")[column if column in df else "train_len"].min()


def extrapolation(df: pd.DataFrame, longest: int) -> tuple[dict[Label, Extrapolation], Label | None]:
    """Per scheme, the evidence for its verdict (against its own reference length: models from the hub
    have their own context), and the best learned scheme at the longest length."""
    means = df.groupby(["scheme", "eval_len"])["ppl"].agg(mean_of_all)
    compared = df.assign(compared=compared_perplexity(df)).groupby(["scheme", "eval_len"])["compared"]
    compared = compared.agg(mean_of_all)
    own, context = per_column(df, "reference_len"), per_column(df, "context")
    unigram = df.groupby("scheme")["unigram_ppl"].mean() if "unigram_ppl" in df else {}
    facts = {
        s: (
            means.get((s, own[s]), math.nan),
            means.get((s, longest), math.nan),
            unigram.get(s, math.nan),
            compared.get((s, longest), math.nan),
        )
        for s in scheme_order(df["scheme"])
    }
    learned = {s: f[3] for s, f in facts.items() if has_learned(f[0], f[2]) and math.isfinite(f[3])}
    best = min(learned, key=learned.get) if learned else None
    best_compared = learned[best] if best else math.nan
    computed = computed_columns(df)
    return {
        s: Extrapolation(
            *f, best_longest_compared=best_compared, past_context=longest > context[s], computed=s in computed
        )
        for s, f in facts.items()
    }, best


def computed_columns(ppl: pd.DataFrame) -> set:
    """The columns any token was scored in: a column the model cannot compute (a refused --rope-scaling
    method, its note says why) scores none at any length."""
    if "tokens" not in ppl:
        return set(ppl["scheme"])
    return set(ppl.loc[ppl["tokens"] > 0, "scheme"]) | set(ppl.loc[ppl["ppl"].notna(), "scheme"])


def bands_text(bands: list[tuple[float, str]]) -> str:
    return "(" + ", ".join(f"≤ {b:g}× {w}" if math.isfinite(b) else f"above: {w}" for b, w in bands) + ")"
