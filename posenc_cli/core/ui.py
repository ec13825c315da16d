"""Terminal output: tables to stdout, progress and messages to stderr (so stdout stays pipeable)."""

from __future__ import annotations

import os
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

BROKEN_PIPE = 128 + 13  # the shell's code for a process ended by SIGPIPE, as `yes | head -1` leaves it
INTERRUPTED = 128 + 2  # the exit code of a Ctrl-C (SIGINT), Typer's and the shell's


class PipeConsole(Console):
    """A console whose reader may stop early (`posenc schemes | head -1`): the rest of its output goes
    to /dev/null, no traceback, and the process ends as a Unix tool ended by SIGPIPE does (141) rather
    than as rich's default, exit 1, which reads as a failure of posenc's own."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, self.file.fileno())
        raise SystemExit(BROKEN_PIPE)


out = PipeConsole()
err = PipeConsole(stderr=True)


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
