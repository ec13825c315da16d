"""Figures a paper reader can read, whatever targets they show: a colour per scheme (Okabe-Ito) for
posenc's runs and per model for `hf:` models, a line style per variant, a marker per tokenizer, plain
log axes with labelled ticks, every column's context marked, the legend outside the axes when it is
long, PNG and SVG. Styles (report.styles) are read from each column's `Label`, never from its text."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Iterable

import numpy as np
import pandas as pd

from posenc_cli.core.plotting import pyplot, save_figure
from posenc_cli.evaluation.labels import Label, scheme_order
from posenc_cli.report.cells import BEYOND_TABLE
from posenc_cli.report.passkey_tables import probe_columns, retrieval_by_length, tasks
from posenc_cli.report.styles import figure_styles

LEGEND_INSIDE = 6  # more entries than this go beside the axes, where they hide no line


HEATMAP_CMAP = "viridis"  # sequential, perceptually uniform, not red-green


OCTAVE_BUCKETS = 4  # loss_by_position.png: buckets per doubling of the position (a log 2 axis)


def plot_probe_heatmap(passkey: pd.DataFrame, scheme: Label, path: Path) -> None:
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
    what = ", ".join(tasks(passkey))
    ax.set_title(f"{scheme}: {what} retrieved (%){of_seeds}, trained at {int(passkey['train_len'].min())}")
    fig.colorbar(image, ax=ax, label="% retrieved")
    save_figure(fig, path)


def plot_probe_summary(passkey: pd.DataFrame, path: Path) -> None:
    """Accuracy vs length, one line per column (each RoPE scaling its own, in the order asked), mean and
    min–max over seeds (depths averaged)."""
    names = tasks(passkey)
    what = "passkey" if names == ["passkey"] else ", ".join(names)
    plot_by_length(
        retrieval_by_length(passkey),
        x="length",
        y="accuracy",
        contexts=column_contexts(passkey),
        path=path,
        xlabel="prompt length (tokens)",
        ylabel=f"{what} retrieved (%)",
        title=f"{what[0].upper() + what[1:]} retrieval: mean over seeds, bars from lowest to highest",
        percent=True,
        order=probe_columns(passkey),
    )


def plot_ppl_vs_length(df: pd.DataFrame, path: Path) -> None:
    plot_by_length(
        df,
        x="eval_len",
        y="ppl",
        contexts=column_contexts(df),
        path=path,
        xlabel="evaluation length (tokens)",
        ylabel="perplexity",
        title="Perplexity past the training length",
        log_y=True,
    )


def column_tokenizers(df: pd.DataFrame) -> dict:
    """Each column's tokenizer (its first row's), {} for results that do not record one."""
    return df.groupby("scheme")["tokenizer"].first().to_dict() if "tokenizer" in df else {}


def column_contexts(df: pd.DataFrame) -> dict[int, list[str]]:
    """Each training length (context) of the columns, with the models or schemes that have it."""
    contexts: dict[int, list[str]] = {}
    for label, length in df.groupby("scheme")["train_len"].min().items():
        owners = contexts.setdefault(int(length), [])
        if (label.model or label.family) not in owners:
            owners.append(label.model or label.family)
    return dict(sorted(contexts.items()))


def plain_log_axis(axis, values: Iterable[float]) -> None:
    """Log ticks labelled as plain numbers (2, 5, 10, not 2×10⁰): 1-2-5 steps, finer when the range is narrow."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, MaxNLocator, NullFormatter, NullLocator

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
    if len(ticks) < 3:  # a narrow range (28 to 40): evenly spaced round numbers inside it
        ticks = [
            t
            for t in MaxNLocator(nbins=5, steps=[1, 2, 2.5, 5, 10]).tick_values(lo / 1.05, hi * 1.05)
            if t > 0
        ]
    axis.set_major_locator(FixedLocator(ticks))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_locator(NullLocator())
    axis.set_minor_formatter(NullFormatter())


CONTEXT_LINES = (":", "--", "-.", (0, (1, 3)))  # one per context a figure marks


def mark_contexts(ax, contexts: dict[int, list[str]]) -> None:
    """A vertical line at each column's context, named with the columns that have it when they differ."""
    for i, (length, columns) in enumerate(contexts.items()):
        whose = (
            "" if len(contexts) == 1 else ": " + ", ".join(columns[:2]) + (", …" if len(columns) > 2 else "")
        )
        ax.axvline(
            length,
            color="grey",
            linestyle=CONTEXT_LINES[i % len(CONTEXT_LINES)],
            linewidth=1.2,
            label=f"training length {length:,}{whose}",
        )


def finish_figure(
    fig, ax, *, contexts: dict[int, list[str]], xlabel: str, ylabel: str, title: str, path: Path
) -> None:
    """Mark every column's context, label, put a long legend beside the axes, and write PNG and SVG atomically."""
    mark_contexts(ax, contexts)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="major", color="0.92", linewidth=0.8)
    if len(ax.get_legend_handles_labels()[1]) > LEGEND_INSIDE:
        fig.set_size_inches(fig.get_size_inches()[0] + 4.5, fig.get_size_inches()[1])
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)
    else:
        ax.legend(fontsize=8)
    save_figure(fig, path)


def plot_by_length(
    df: pd.DataFrame,
    *,
    x: str,
    y: str,
    contexts: dict[int, list[str]],
    path: Path,
    xlabel: str,
    ylabel: str,
    title: str,
    log_y: bool = False,
    percent: bool = False,
    order: list | None = None,
) -> None:
    """One line per scheme of y against length x (log 2 axis), the mean over seeds with bars of ± std,
    or for a percentage (`percent`) bars from the lowest seed to the highest: retrieval splits seeds
    into all-or-nothing, where ± std would reach past 0 and 100. Schemes then sit a little apart on x,
    so lines that agree (all at 0) stay visible. `order`: the lines' order (default scheme_order)."""
    from matplotlib.ticker import NullLocator

    fig, ax = pyplot().subplots(figsize=(6.5, 4.2))
    schemes = order or scheme_order(df["scheme"])
    styles = figure_styles(schemes, column_tokenizers(df))
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
            **styles[scheme],
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
    finish_figure(fig, ax, contexts=contexts, xlabel=xlabel, ylabel=ylabel, title=title, path=path)


def log_buckets(rows: pd.DataFrame) -> tuple[pd.Series, pd.Series]:
    """(position, mean NLL) of one column's per-position rows, merged into OCTAVE_BUCKETS buckets per
    doubling of the position (token weighted), each csv bucket counted at its centre."""
    starts = np.sort(rows["position"].unique())  # loss_by_position.csv's buckets: their first positions
    centre = rows["position"] + (np.diff(starts).min() if len(starts) > 1 else 1) / 2
    merged = pd.DataFrame(
        {
            "bucket": np.floor(np.log2(centre) * OCTAVE_BUCKETS),  # even on the log axis
            "nll_sum": rows["nll"] * rows["tokens"],
            "position_sum": centre * rows["tokens"],
            "tokens": rows["tokens"],
        }
    )
    sums = merged.groupby("bucket")[["nll_sum", "position_sum", "tokens"]].sum()
    return sums["position_sum"] / sums["tokens"], sums["nll_sum"] / sums["tokens"]


def plot_loss_by_position(positions: pd.DataFrame, df: pd.DataFrame, path: Path) -> None:
    """Mean NLL by position inside each column's longest window (seeds averaged; log_buckets) on a log 2
    axis of positions: where each scheme or model breaks, against its context."""
    fig, ax = pyplot().subplots(figsize=(6.5, 4.2))
    columns = scheme_order(positions["scheme"])
    styles = figure_styles(columns, column_tokenizers(df))
    for column in columns:
        own = positions[positions.scheme == column]
        longest = int(own["eval_len"].max())
        ax.plot(
            *log_buckets(own[own.eval_len == longest]),
            label=f"{column} @ {longest:,}",
            linewidth=1.6,
            markersize=3.5,
            **styles[column],
        )
    ax.set_xscale("log", base=2)
    plain_log_axis(ax.xaxis, positions["position"] + 1)
    finish_figure(
        fig,
        ax,
        contexts=column_contexts(df),
        xlabel="position inside the window (tokens)",
        ylabel="mean NLL (nats)",
        title="Loss by position: where a scheme breaks",
        path=path,
    )
