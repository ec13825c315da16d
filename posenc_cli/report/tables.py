"""Tables and figures from evaluation results: ppl.csv, ppl.md, comparison.md, probe.csv and PNG plots.

Everything here is derived from a tidy DataFrame, so an eval directory can be deleted and rebuilt.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import numpy as np
import pandas as pd

from posenc_cli.core.atomic import output_set, write_text, write_with
from posenc_cli.core.plotting import pyplot, save_figure
from posenc_cli.data.passkey import KEY_DIGITS as PASSKEY_DIGITS
from posenc_cli.evaluation.labels import Label, as_label
from posenc_cli.model.positional import SCHEMES, claim_for

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
BEYOND_TABLE = "—"
NO_VERDICT = "no verdict"
# Okabe & Ito's colour-blind-safe palette, one colour (and marker, for print) per scheme in every figure.
SCHEME_STYLES = {
    "none": ("#000000", "o"),
    "sinusoidal": ("#E69F00", "s"),
    "learned": ("#56B4E9", "D"),
    "rope": ("#009E73", "^"),
    "alibi": ("#0072B2", "v"),
    "t5": ("#D55E00", "P"),
    "xpos": ("#CC79A7", "X"),
    "kerple": ("#999999", "*"),
}
UNKNOWN_STYLE = ("#666666", "h")
VARIANT_LINES = {"": "-", "linear": "--", "ntk": "-.", "dynamic": ":", "yarn": (0, (5, 1, 1, 1, 1, 1))}
HEATMAP_CMAP = "viridis"  # sequential, perceptually uniform, not red-green
POSITION_BUCKETS = 32  # loss_by_position.png: buckets across the longest window


def grade(ratio: float, bands: list[tuple[float, str]]) -> str:
    """The band a ratio falls in; a ratio that cannot be measured (past a learned table) fails."""
    if not math.isfinite(ratio):
        return "fails"
    return next(word for bound, word in bands if ratio <= bound)


def has_learned(train_ppl: float, unigram_ppl: float) -> bool:
    """Clearly below the unigram perplexity at the training length (unknown unigram: given the benefit)."""
    return not train_ppl > LEARNED_BELOW_UNIGRAM * unigram_ppl


def verdict(stability: float, quality: float, learned: bool = True) -> str:
    """The lower of the stability and the quality grade: a flat but poor model is not a strong extrapolator."""
    if not learned:
        return NO_VERDICT
    return max(grade(stability, STABILITY_BANDS), grade(quality, QUALITY_BANDS), key=GRADES.index)


@dataclass(frozen=True)
class Extrapolation:
    """One scheme's row of evidence for its verdict (means over seeds)."""

    train_ppl: float
    longest_ppl: float
    unigram_ppl: float
    longest_compared: float  # what quality compares at the longest length (see `compared_perplexity`)
    best_longest_compared: float  # the same for the best learned scheme

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
        return verdict(self.stability, self.quality, self.learned)


def per_byte(df: pd.DataFrame) -> bool:
    """Whether the table mixes tokenizers: their tokens differ, so only perplexity per byte compares."""
    return "tokenizer" in df and "bpb" in df and df["tokenizer"].fillna("char").nunique() > 1


def compared_perplexity(df: pd.DataFrame) -> pd.Series:
    """What quality compares across columns: token perplexity, or per UTF-8 byte (2^bpb) when the
    table mixes tokenizers (a BPE token's perplexity is not a character's)."""
    return 2.0 ** df["bpb"] if per_byte(df) else df["ppl"]


def extrapolation(df: pd.DataFrame, longest: int) -> tuple[dict[str, Extrapolation], str | None]:
    """Per scheme, the evidence for its verdict (against its own training length: models from the hub
    have their own), and the best learned scheme at the longest length."""
    means = df.groupby(["scheme", "eval_len"])["ppl"].mean()
    compared = df.assign(compared=compared_perplexity(df)).groupby(["scheme", "eval_len"])["compared"].mean()
    own = df.groupby("scheme")["train_len"].min()
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
    return {s: Extrapolation(*f, best_longest_compared=best_compared) for s, f in facts.items()}, best


def scheme_order(columns: Iterable[Label | str]) -> list[Label | str]:
    """SCHEMES' order, unknown schemes after, each `rope+yarn`-style variant after its base, each
    scheme's tokenizers side by side; Hugging Face models ('gpt2 (learned)') after posenc's runs, by name."""
    order = list(SCHEMES)

    def key(column: Label | str):
        label = as_label(column)
        rank = order.index(label.family) if label.family in order else len(order)
        rest = label.positional[len(label.family) + 1 :]
        return label.model != "", label.model, rank, label.family, rest, label.tokenizer

    return sorted(dict.fromkeys(columns), key=key)


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
        cells = [mean_std(sub[sub["eval_len"] == L][value], digits) for L in lengths]
        rows.append([str(scheme), str(sub["seed"].nunique()), *ratio, *cells])
    return header, rows


def characters_covered(df: pd.DataFrame, schemes: list[str], length: int) -> str:
    """ "≈ a–b characters": what a window of `length` tokens covers on average, across the columns."""
    covered = [length * chars_per_token(df[df.scheme == s]) for s in schemes]
    covered = [c for c in covered if math.isfinite(c)]
    if not covered:
        return ""
    low, high = min(covered), max(covered)
    return f"≈ {low:,.0f} characters" if round(low) == round(high) else f"≈ {low:,.0f}–{high:,.0f} characters"


def tokenizer_rows(df: pd.DataFrame, schemes: list[str], lengths: list[int]) -> list[list[str]]:
    """Tokenizer and characters per token of each column, and bits per byte when tokenizers mix
    (token perplexities of different tokenizers do not compare; bits per byte do)."""
    rows = [
        ["tokenizer"] + [", ".join(sorted(df[df.scheme == s]["tokenizer"].unique())) for s in schemes],
        ["characters per token"] + [f"{chars_per_token(df[df.scheme == s]):.2f}" for s in schemes],
    ]
    if df["tokenizer"].nunique() > 1:
        for L in lengths:
            at_length = df[df.eval_len == L]
            bpb = [mean_std(at_length[at_length.scheme == s]["bpb"], digits=3) for s in schemes]
            rows.append([f"bpb @ {L}", *bpb])
    return rows


def mixes_tokenizers(df: pd.DataFrame) -> bool:
    """Whether token perplexities in `df` are incomparable, so bits per byte must be shown beside them."""
    return "tokenizer" in df and df["tokenizer"].nunique() > 1


def comparison(
    df: pd.DataFrame, info: dict[str, dict], *, lang: str = "en", passkey: pd.DataFrame | None = None
) -> str:
    """The chapters' table, with measured numbers beside the claims (and passkey rows from a probe)."""
    schemes = scheme_order(df["scheme"])
    lengths = sorted(df["eval_len"].unique())
    train_len = int(df["train_len"].min())
    longest = max(lengths)
    rows: list[list[str]] = []
    for L in lengths:
        where = [relative_length(L, train_len)]
        where += [characters_covered(df, schemes, L)] if subword(df) else []
        label = f"ppl @ {L} ({'; '.join(w for w in where if w)})"
        rows.append([label] + [mean_std(df[(df.scheme == s) & (df.eval_len == L)]["ppl"]) for s in schemes])
    evidence, best = extrapolation(df, longest)
    one_length = df["train_len"].nunique() == 1
    rows.append(
        [f"stability: ppl({longest}) / own ppl({train_len if one_length else 'training length'})"]
        + [times(evidence[s].stability) for s in schemes]
    )
    measure = f"per-byte ppl({longest}) = 2^bpb" if per_byte(df) else f"ppl({longest})"
    rows.append(
        [f"quality: {measure} / best's" + (f" ({best})" if best else "")]
        + [times(evidence[s].quality) for s in schemes]
    )
    if subword(df):
        rows += tokenizer_rows(df, schemes, lengths)
    if passkey is not None:
        rows += passkey_rows(passkey, schemes)
    rows.append(["extrapolation, measured"] + [evidence[s].verdict for s in schemes])
    claims = [claim_for(as_label(s).positional) for s in schemes]
    rows.append(["extrapolation, chapters' claim"] + [claim.extrapolation for claim in claims])
    if lang == "zh":
        rows.append(["外推能力（章节原话）"] + [claim.extrapolation_zh for claim in claims])
    rows.append(
        ["positional parameters"] + [f"{info.get(s, {}).get('positional_params', 0):,}" for s in schemes]
    )
    relative = [info.get(s, {}).get("relative", relative_kind(as_label(s).positional)) for s in schemes]
    rows.append(["relative position", *relative])
    rows.append(
        ["used by"] + [info.get(s, {}).get("used_by", claim.used_by) for s, claim in zip(schemes, claims)]
    )
    seeds = {s: df[df.scheme == s]["seed"].nunique() for s in schemes}
    mode = ", ".join(sorted(df["mode"].unique()))
    notes = [
        f"Perplexity on {scored_tokens(df)} ({mode} windows), the same tokens at every length; "
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
        f"{NO_VERDICT} for {s}: its ppl at {train_len} ({e.train_ppl:.2f}) is not clearly below the unigram "
        f"perplexity of the text ({e.unigram_ppl:.2f}; clearly: at most {LEARNED_BELOW_UNIGRAM:g}×), so it "
        "has not learned enough to grade; its numbers stand as measured."
        for s, e in evidence.items()
        if not e.learned
    ]
    if passkey is not None:
        notes.append(passkey_note(passkey))
    mixed = precision_note(df)
    notes += [mixed] if mixed else []
    notes += sorted(set(df[df["ppl"].notna()]["note"].dropna()) - {""})  # how a number was measured
    beyond = set(df[df["ppl"].isna()]["note"].dropna()) - {""}  # why there is no number
    if beyond:
        notes.append(f"{BEYOND_TABLE}: " + "; ".join(sorted(beyond)) + ".")
    return (
        "# Positional schemes: the chapters' table, measured\n\n"
        + markdown_table([""] + schemes, rows)
        + "\n"
        + "\n".join(f"- {n}" for n in notes)
        + "\n"
    )


def precision_note(df: pd.DataFrame) -> str | None:
    """A footnote when the table's runs were trained in more than one precision (auto answers fp32 on
    one machine kind and bf16 autocast on another); None when they agree."""
    if "precision" not in df.columns:  # a ppl.csv from before runs recorded it
        return None
    trained = df[df["precision"].fillna("") != ""]
    by_precision = trained.groupby("precision")["scheme"].unique()
    if len(by_precision) < 2:
        return None
    parts = [f"{p} ({', '.join(scheme_order(schemes))})" for p, schemes in by_precision.items()]
    return (
        "the runs were trained in different precisions: "
        + "; ".join(parts)
        + ". Evaluation scores every model in fp32; a different precision is another trajectory, like another seed."
    )


def times(ratio: float) -> str:
    return f"{ratio:.2f}×" if math.isfinite(ratio) else BEYOND_TABLE


def bands_text(bands: list[tuple[float, str]]) -> str:
    return "(" + ", ".join(f"≤ {b:g}× {w}" if math.isfinite(b) else f"above: {w}" for b, w in bands) + ")"


def scored_tokens(df: pd.DataFrame) -> str:
    """How many tokens each length scored, exactly: one number when every run scored the same span."""
    scored = df[df["tokens"] > 0].groupby("scheme")["tokens"].unique()
    counts = {s: sorted(int(t) for t in values) for s, values in scored.items()}
    if len({t for values in counts.values() for t in values}) == 1:
        return f"{next(iter(counts.values()))[0]:,} validation tokens"
    return "validation tokens per length: " + ", ".join(
        f"{s} {' / '.join(f'{t:,}' for t in values)}" for s, values in counts.items()
    )


def relative_kind(label: str) -> str:
    """A scheme's relative-position kind from its class, for a label with no run facts at hand."""
    return SCHEMES[label].relative if label in SCHEMES else BEYOND_TABLE


def retrieval_by_length(passkey: pd.DataFrame) -> pd.DataFrame:
    """Percent retrieved per scheme, seed and length, averaged over depths (NaN past a learned table)."""
    return (passkey.groupby(["scheme", "seed", "length"])["accuracy"].mean() * 100).reset_index()


def passkey_rows(passkey: pd.DataFrame, schemes: list[str]) -> list[list[str]]:
    """Rows "passkey @ L": % of trials retrieved exactly, mean ± std over seeds."""
    by_length = retrieval_by_length(passkey)
    train_len = int(passkey["train_len"].min())
    rows = []
    for L in sorted(by_length["length"].unique()):
        label = f"passkey @ {L}" + (" (training length)" if L == train_len else f" ({L / train_len:.3g}×)")
        cells = by_length[by_length.length == L]
        rows.append([label] + [mean_std(cells[cells.scheme == s]["accuracy"], digits=0) for s in schemes])
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
        sub = passkey[passkey.scheme == scheme].assign(percent=lambda d: d["accuracy"] * 100)
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


def plot_probe_heatmap(passkey: pd.DataFrame, scheme: str, path: Path) -> None:
    """Length x depth accuracy for one scheme, like the needle-in-a-haystack figures: a sequential
    colour map readable in grey and by red-green colour-blind readers, a colour bar, the number in each cell."""
    plt = pyplot()
    grid = (
        passkey[passkey.scheme == scheme].pivot_table(
            index="depth", columns="length", values="accuracy", aggfunc="mean", dropna=False
        )
        * 100
    )
    values = grid.to_numpy(dtype=float)
    fig, ax = plt.subplots(figsize=(1.1 * len(grid.columns) + 2.8, 0.55 * len(grid.index) + 1.6))
    image = ax.imshow(values, cmap=HEATMAP_CMAP, vmin=0, vmax=100, aspect="auto")
    ax.set_facecolor("lightgrey")
    for (i, j), value in np.ndenumerate(values):
        ax.text(
            j,
            i,
            BEYOND_TABLE if math.isnan(value) else f"{value:.0f}",
            ha="center",
            va="center",
            fontsize=9,
            color="black" if math.isnan(value) or value > 55 else "white",
        )  # viridis: dark below ~55
    ax.set_xticks(range(len(grid.columns)), [str(c) for c in grid.columns])
    ax.set_yticks(range(len(grid.index)), [f"{d:g}" for d in grid.index])
    ax.set_xlabel("prompt length (tokens)")
    ax.set_ylabel("key depth")
    seeds = passkey[passkey.scheme == scheme]["seed"].nunique()
    of_seeds = f", mean of {seeds} seeds" if seeds > 1 else ""
    ax.set_title(f"{scheme}: passkey retrieved (%){of_seeds}, trained at {int(passkey['train_len'].min())}")
    fig.colorbar(image, ax=ax, label="% retrieved")
    save_figure(fig, path)


def plot_probe_summary(passkey: pd.DataFrame, path: Path) -> None:
    """Accuracy vs length, one line per scheme, mean and min–max over seeds (depths averaged)."""
    plot_by_length(
        retrieval_by_length(passkey),
        x="length",
        y="accuracy",
        train_len=int(passkey["train_len"].min()),
        path=path,
        xlabel="prompt length (tokens)",
        ylabel="passkey retrieved (%)",
        title="Passkey retrieval: mean over seeds, bars from lowest to highest",
        percent=True,
    )


def write_probe_outputs(
    passkey: pd.DataFrame, info: dict[str, dict], out: Path, *, lang: str = "en"
) -> list[Path]:
    """probe.csv, passkey.md, one heatmap per scheme, the summary plot; comparison.md again if eval's
    ppl.csv is here.
    The set is complete once manifest.json is written."""
    with output_set(out):
        write_with(out / "probe.csv", lambda p: passkey.to_csv(p, index=False))
        written = [out / "probe.csv"]
        for scheme in scheme_order(passkey["scheme"]):
            plot_probe_heatmap(passkey, scheme, out / f"probe_{file_safe(scheme)}.png")
            written += [out / f"probe_{file_safe(scheme)}.png", out / f"probe_{file_safe(scheme)}.svg"]
        plot_probe_summary(passkey, out / "probe_summary.png")
        written += [out / "probe_summary.png", out / "probe_summary.svg"]
        write_text(out / "passkey.md", passkey_by_depth(passkey))
        written.append(out / "passkey.md")
        if (out / "ppl.csv").is_file():
            write_text(
                out / "comparison.md",
                comparison(pd.read_csv(out / "ppl.csv"), info, lang=lang, passkey=passkey),
            )
            written.append(out / "comparison.md")
    return written


def file_safe(label: Label | str) -> str:
    """A column label as part of a file name: 'rope+yarn' stays, 'EleutherAI/pythia-160m (rope)' ->
    'EleutherAI_pythia-160m_rope'."""
    return re.sub(r"[^A-Za-z0-9+._-]+", "_", str(label)).strip("_")


def plot_ppl_vs_length(df: pd.DataFrame, path: Path) -> None:
    plot_by_length(
        df,
        x="eval_len",
        y="ppl",
        train_len=int(df["train_len"].min()),
        path=path,
        xlabel="evaluation length (tokens)",
        ylabel="perplexity",
        title="Perplexity past the training length",
        log_y=True,
    )


def scheme_style(label: Label | str) -> dict:
    """Colour and marker by scheme, line style by variant (`rope+yarn`, `sinusoidal+unscaled`): the same
    in every figure whichever schemes it shows, a pretrained model's included."""
    label = as_label(label)
    colour, marker = SCHEME_STYLES.get(label.family, UNKNOWN_STYLE)
    variant = label.positional[len(label.family) + 1 :]
    return {"color": colour, "marker": marker, "linestyle": VARIANT_LINES.get(variant, "--")}


def plain_log_axis(axis, values: Iterable[float]) -> None:
    """Log ticks labelled as plain numbers (2, 5, 10, not 2×10⁰): 1-2-5 steps, finer when the range is narrow."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter, NullLocator

    finite = [v for v in values if v > 0 and math.isfinite(v)]
    if not finite:
        return
    lo, hi = min(finite), max(finite)
    decades = range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 1)
    ticks: list[float] = []
    for steps in ((1, 2, 5), (1, 1.5, 2, 3, 4, 5, 6, 7, 8, 9)):
        candidates = sorted({round(m * 10**d, 10) for d in decades for m in steps})
        ticks = [t for t in candidates if lo / 1.15 <= t <= hi * 1.15]
        if len(ticks) >= 3:
            break
    axis.set_major_locator(FixedLocator(ticks))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_locator(NullLocator())
    axis.set_minor_formatter(NullFormatter())


def finish_figure(fig, ax, *, train_len: int, xlabel: str, ylabel: str, title: str, path: Path) -> None:
    """Mark the training length, label, and write PNG and SVG atomically."""
    ax.axvline(train_len, color="grey", linestyle=":", linewidth=1.2, label=f"training length ({train_len})")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="major", color="0.92", linewidth=0.8)
    ax.legend(fontsize=8)
    save_figure(fig, path)


def plot_by_length(
    df: pd.DataFrame,
    *,
    x: str,
    y: str,
    train_len: int,
    path: Path,
    xlabel: str,
    ylabel: str,
    title: str,
    log_y: bool = False,
    percent: bool = False,
) -> None:
    """One line per scheme of y against length x (log 2 axis), the mean over seeds with bars of ± std,
    or for a percentage (`percent`) bars from the lowest seed to the highest: retrieval splits seeds
    into all-or-nothing, where ± std would reach past 0 and 100. Schemes then sit a little apart on x,
    so lines that agree (all at 0) stay visible."""
    from matplotlib.ticker import NullLocator

    fig, ax = pyplot().subplots(figsize=(6.5, 4.2))
    schemes = scheme_order(df["scheme"])
    for i, scheme in enumerate(schemes):
        stats = df[df.scheme == scheme].groupby(x)[y].agg(["mean", "std", "min", "max"])
        stats = stats.dropna(subset=["mean"])
        if percent:
            bars = [stats["mean"] - stats["min"], stats["max"] - stats["mean"]]
            shift = 2 ** (0.04 * (i - (len(schemes) - 1) / 2))
        else:
            bars, shift = stats["std"].fillna(0), 1.0
        ax.errorbar(
            stats.index * shift,
            stats["mean"],
            yerr=bars,
            capsize=3,
            label=str(scheme),
            **scheme_style(scheme),
        )
    ax.set_xscale("log", base=2)
    lengths = sorted(df[x].unique())
    ax.set_xticks(lengths, [str(L) for L in lengths])
    ax.xaxis.set_minor_locator(NullLocator())
    if log_y:
        ax.set_yscale("log")
        plain_log_axis(ax.yaxis, df[y].dropna())
    if percent:
        ax.set_ylim(-4, 104)
    finish_figure(fig, ax, train_len=train_len, xlabel=xlabel, ylabel=ylabel, title=title, path=path)


def plot_loss_by_position(positions: pd.DataFrame, train_len: int, path: Path) -> None:
    """Mean NLL by position inside the longest window, seeds averaged, in POSITION_BUCKETS buckets (token
    weighted): where a scheme breaks, against the training length."""
    longest = positions["eval_len"].max()
    sub = positions[positions.eval_len == longest].copy()
    width = max(1, math.ceil(longest / POSITION_BUCKETS))
    sub["bucket"] = sub["position"] // width * width
    sub["nll_sum"] = sub["nll"] * sub["tokens"]
    fig, ax = pyplot().subplots(figsize=(6.5, 4.2))
    for scheme in scheme_order(sub["scheme"]):
        sums = sub[sub.scheme == scheme].groupby("bucket")[["nll_sum", "tokens"]].sum()
        style = scheme_style(scheme) | {"marker": None}
        ax.plot(
            sums.index + width / 2, sums["nll_sum"] / sums["tokens"], label=scheme, linewidth=1.6, **style
        )
    finish_figure(
        fig,
        ax,
        train_len=train_len,
        xlabel=f"position inside a window of {longest} tokens ({width}-token buckets)",
        ylabel="mean NLL (nats)",
        title="Loss by position: where a scheme breaks",
        path=path,
    )


def write_eval_outputs(
    df: pd.DataFrame, positions: pd.DataFrame, info: dict[str, dict], out: Path, *, lang: str = "en"
) -> list[Path]:
    """The eval output set; complete once manifest.json is written (see atomic.output_set)."""
    with output_set(out):
        write_with(out / "ppl.csv", lambda p: df.to_csv(p, index=False))
        write_with(out / "loss_by_position.csv", lambda p: positions.to_csv(p, index=False))
        header, rows = ppl_pivot(df)
        text = "# Perplexity by evaluation length\n\n" + markdown_table(header, rows)
        if mixes_tokenizers(df):  # per-token perplexities of different tokenizers do not compare
            header, rows = ppl_pivot(df, "bpb", digits=3)
            text += "\n# Bits per byte by evaluation length\n\n" + markdown_table(header, rows)
        write_text(out / "ppl.md", text)
        passkey = pd.read_csv(out / "probe.csv") if (out / "probe.csv").is_file() else None
        write_text(out / "comparison.md", comparison(df, info, lang=lang, passkey=passkey))
        plot_ppl_vs_length(df, out / "ppl_vs_length.png")
        if not positions.empty:
            plot_loss_by_position(positions, int(df["train_len"].min()), out / "loss_by_position.png")
    figures = ("ppl_vs_length", "loss_by_position") if not positions.empty else ("ppl_vs_length",)
    return [out / n for n in ("ppl.csv", "ppl.md", "comparison.md", "loss_by_position.csv")] + [
        out / f"{name}.{ext}" for name in figures for ext in ("png", "svg")
    ]
