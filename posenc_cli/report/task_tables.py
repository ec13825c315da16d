"""Task accuracy by instance length (posenc eval on task runs): task_accuracy.csv, .md and .png, and
results.json last (how it was made, every row: `posenc report` rebuilds the set from it).

Cells are % exact over seeds as mean ± std [lowest–highest seed]: length generalization on these tasks
is known to swing with the seed (Zhou et al. 2024), and a mean alone hides a split.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from posenc_cli.core.atomic import write_text, write_with
from posenc_cli.core.file_sets import output_set
from posenc_cli.core.plotting import pyplot, save_figure
from posenc_cli.evaluation.labels import scheme_order
from posenc_cli.report.cells import markdown_table, relative_length
from posenc_cli.report.passkey_tables import seed_spread
from posenc_cli.report.results_file import RESULTS, Provenance, ResultsSection, write_results_file
from posenc_cli.report.styles import family_style
from posenc_cli.report.tracked import send_to_trackers


def task_tables(df: pd.DataFrame) -> str:
    """One table per task: a row per scheme (its seeds named), a column per instance length."""
    sections = [
        "# Task accuracy by instance length\n\n"
        "% of instances whose greedy answer is exactly right (`posenc eval` on task runs); cells are "
        "mean ± std [min–max] over seeds; — : positions the scheme cannot represent.\n"
    ]
    for task in sorted(df["task"].unique()):
        sub = df[df.task == task].assign(percent=lambda d: d["accuracy"] * 100)
        train_len = int(sub["train_len"].min())
        lengths = sorted(sub["length"].unique())
        header = ["scheme (seeds)"] + [f"{L} ({relative_length(L, train_len)})" for L in lengths]
        rows = []
        for scheme in scheme_order(sub["scheme"].unique()):
            runs = sub[sub.scheme == scheme]
            seeds = ", ".join(str(s) for s in sorted(runs["seed"].unique()))
            rows.append(
                [f"{scheme} ({seeds})"] + [seed_spread(runs[runs.length == L]["percent"]) for L in lengths]
            )
        sections.append(f"## {task} (trained on lengths 1–{train_len})\n\n" + markdown_table(header, rows))
    return "\n".join(sections)


def plot_task_accuracy(df: pd.DataFrame, path: Path) -> None:
    """Accuracy against instance length, a panel per task: the mean over seeds as a line, the seeds'
    range as a band, the training lengths shaded. Randomized positions are dashed."""
    plt = pyplot()
    tasks = sorted(df["task"].unique())
    fig, axes = plt.subplots(1, len(tasks), figsize=(5.2 * len(tasks), 4.0), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        sub = df[df.task == task]
        ax.axvspan(1, int(sub["train_len"].min()), color="0.9", label="training lengths")
        for scheme in scheme_order(sub["scheme"].unique()):
            colour, marker = family_style(scheme.family)
            by_length = sub[sub.scheme == scheme].groupby("length")["accuracy"]
            mean, low, high = (by_length.agg(f) * 100 for f in ("mean", "min", "max"))
            style = "--" if scheme.variant.randomized else "-"
            ax.plot(mean.index, mean, style, color=colour, marker=marker, label=str(scheme))
            ax.fill_between(mean.index, low, high, color=colour, alpha=0.15, linewidth=0)
        ax.set_xscale("log", base=2)
        lengths = sorted(sub["length"].unique())
        ax.set_xticks([1, *lengths], [str(L) for L in [1, *lengths]])
        ax.set(title=task, xlabel="instance length", ylabel="exact match (%)", ylim=(-3, 103))
    axes[0][-1].legend(fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5))
    save_figure(fig, path)


def write_task_outputs(
    df: pd.DataFrame, out: Path, *, made: list[Provenance], track: bool = True
) -> list[Path]:
    """task_accuracy.csv (tidy), task_accuracy.md, the figure and results.json, as one output set of the
    runs in `df`; then its numbers to the runs' trackers (report.tracked) unless `track` is False."""
    written = [out / "task_accuracy.csv", out / "task_accuracy.md"]
    written += [out / "task_accuracy.png", out / "task_accuracy.svg"]
    with output_set(out, list(df["model_id"].unique())) as result:
        write_with(out / "task_accuracy.csv", lambda p: df.to_csv(p, index=False))
        write_text(out / "task_accuracy.md", task_tables(df))
        plot_task_accuracy(df, out / "task_accuracy.png")
        section = ResultsSection("tasks", {"task_accuracy": df}, {}, made)
        written.append(write_results_file(out, section, result.trusted_input(RESULTS)))
        result.written += written
    if track:
        send_to_trackers(section, written)
    return written
