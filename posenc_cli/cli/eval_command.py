"""`posenc eval`: perplexity at lengths past the training length, and the chapters' table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.table import Table

from posenc_cli.cli.app import app, runs_argument, with_options
from posenc_cli.core import ui
from posenc_cli.core.option_groups import EvalOptions
from posenc_cli.core.options import build


@app.command("eval")
@with_options(EvalOptions, runs_argument(": hub id or local directory; needs --data"))
def eval_command(runs: list[str] | None, **given: Any) -> None:
    """Perplexity at lengths past the training length, and the chapters' comparison table, measured.

    Writes ppl.csv, ppl.md, comparison.md, loss_by_position.csv, ppl_vs_length.png,
    loss_by_position.png and results.json (how it was made, every number: posenc report reads it). With no RUNS it takes the newest sweep under outputs/sweeps if it is newer
    than every single run, otherwise the newest single run of each scheme under outputs/runs.
    """
    # imported when the command runs, so that --help leaves torch unimported
    from posenc_cli.report.run_eval import run_eval

    result = run_eval(build(EvalOptions, given, runs=list(runs or [])))
    if result.tasks is not None:
        show_task_eval(result.tasks, result.out, result.written)
    else:
        show_eval(result.ppl, result.out, result.written, mode=given["mode"])


def show_task_eval(df, out: Path, written: list[Path]) -> None:
    """Task runs: accuracy by instance length on stdout, what was written on stderr."""
    # imported when the command runs, so that --help leaves torch unimported
    from posenc_cli.report.task_tables import task_tables

    ui.out.print(task_tables(df), markup=False, highlight=False, soft_wrap=True)
    ui.err.print(f"wrote {', '.join(p.name for p in written if p.exists())} to {out}")


def show_eval(df, out: Path, written: list[Path], *, mode: str) -> None:
    """The perplexity table and comparison.md on stdout, what was written on stderr."""
    # imported when the command runs, so that --help leaves torch unimported
    from posenc_cli.report.tables import ppl_pivot

    header, rows = ppl_pivot(df)
    counts = df.loc[df["tokens"] > 0, "tokens"].unique()
    scored = f"{int(counts[0]):,} tokens per length" if len(counts) == 1 else "the same text for every column"
    table = Table(title=f"Perplexity ({mode}, {scored})")
    for column in header:
        table.add_column(column, justify="right")
    for row in rows:
        table.add_row(*row)
    ui.out.print(table)
    ui.out.print(
        (out / "comparison.md").read_text(encoding="utf-8"), markup=False, highlight=False, soft_wrap=True
    )
    ui.err.print(f"wrote {', '.join(p.name for p in written if p.exists())} to {out}")
