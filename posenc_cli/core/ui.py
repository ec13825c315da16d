"""Terminal output: tables to stdout, progress and messages to stderr (so stdout stays pipeable)."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

out = Console()
err = Console(stderr=True)


def progress(disable: bool = False) -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[status]}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=err,
        disable=disable,
    )


def announce(paths: list[Path], why: str, doing: str) -> None:
    """Say on stderr which runs a command works on and why those (after its checks passed)."""

    err.print(
        f"{doing} {len(paths)} run(s), {why}:\n" + "\n".join(f"  {path}" for path in paths), highlight=False
    )


def fail(error: Exception) -> None:
    """A refusal as a user sees it: one line on stderr, exit code 2."""
    err.print(f"[bold red]posenc: error:[/] {escape(str(error))}", soft_wrap=True, highlight=False)
    raise SystemExit(2)
