"""Where a command may write: --out checked before any work (never a run's own directory or file), and
the default output directory, claimed for this command alone."""

from __future__ import annotations

from pathlib import Path

from posenc_cli.core.errors import UsageError
from posenc_cli.core.paths import timestamped_dir, writable_place
from posenc_cli.rundir.claim import claim_new
from posenc_cli.rundir.layout import holds_run


def checked_out(out: str | None) -> Path | None:
    """--out as given, checked before any work: not empty, not a file, not under a file, not a run's own
    directory, and writable (tried, not guessed from permission bits). Nothing is left behind here; None
    (the default) stays None."""

    if out is None:
        return None
    path = writable_place("--out", out)
    if path.exists() and not path.is_dir():
        raise UsageError(f"--out {out} is a file; give a directory to write to")
    if path.is_dir() and holds_run(path):
        raise UsageError(
            f"--out {out} holds a run, whose directory only training writes; give another directory"
        )
    return path


def checked_out_file(out: str | Path | None, option: str = "--out") -> Path | None:
    """A file to write (sample --out), checked before any work: not empty, not a directory, not under a
    file, not one of a run's own files, in a writable place. An ordinary existing file is replaced."""

    if out is None:
        return None
    path = writable_place(option, str(out))
    if path.is_dir() or str(out).endswith("/"):
        raise UsageError(f"{option} {out} is a directory; give the path of a file to write")
    if path.exists() and holds_run(path.parent):
        raise UsageError(f"{option} {out} is a file of the run in {path.parent}; give another path")
    return path


def default_out(kind: str) -> Path:
    """A fresh outputs/<kind>/<local time> directory of this command alone (a suffix if the name is taken)."""

    return claim_new(timestamped_dir(kind), given=False)
