"""Figures a paper reader can read: one colour and marker per scheme (Okabe-Ito), a line style per
variant, plain log axes, the training length marked, PNG and SVG."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Iterable

import numpy as np
import pandas as pd

from posenc_cli.core.plotting import pyplot, save_figure
from posenc_cli.evaluation.labels import Label, as_label, scheme_order
from posenc_cli.report.cells import BEYOND_TABLE
from posenc_cli.report.passkey_tables import retrieval_by_length

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
    "fire": ("#882255", "p"),  # Tol's wine: Okabe & Ito's yellow is too faint on white
}


UNKNOWN_STYLE = ("#666666", "h")


VARIANT_LINES = {"": "-", "linear": "--", "ntk": "-.", "dynamic": ":", "yarn": (0, (5, 1, 1, 1, 1, 1))}


HEATMAP_CMAP = "viridis"  # sequential, perceptually uniform, not red-green


POSITION_BUCKETS = 32  # loss_by_position.png: buckets across the longest window


def plot_probe_heatmap(passkey: pd.DataFrame, scheme: str, path: Path) -> None:
    """Length x depth accuracy for one scheme, like the needle-in-a-haystack figures: a sequential
    colour map readable in grey and by red-green colour-blind readers, a colour bar, the number in each cell."""
    plt = pyplot()
    grid = (
        passkey[passkey.scheme == str(scheme)].pivot_table(
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
    seeds = passkey[passkey.scheme == str(scheme)]["seed"].nunique()
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
    return {"color": colour, "marker": marker, "linestyle": VARIANT_LINES.get(label.beyond_family, "--")}


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
        stats = df[df.scheme == str(scheme)].groupby(x)[y].agg(["mean", "std", "min", "max"])
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
        sums = sub[sub.scheme == str(scheme)].groupby("bucket")[["nll_sum", "tokens"]].sum()
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
