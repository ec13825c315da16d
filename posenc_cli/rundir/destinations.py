"""Where a command may write: --out checked before any work (never a run's own directory, nor anything
inside one, nor another kind of output set, nor a file of one), the output directory owned by this
command alone while it writes, and the default output directory, claimed for this command alone."""

from __future__ import annotations

from pathlib import Path

from posenc_cli.core.errors import UsageError
from posenc_cli.core.file_sets import (
    DESCRIBED,
    MANIFEST,
    SetKind,
    held_kind,
    listed_names,
    own_directory,
    read_manifest,
)
from posenc_cli.core.paths import timestamped_dir, writable_place
from posenc_cli.rundir.claim import claim_new
from posenc_cli.rundir.layout import holds_run


def run_holding(path: Path) -> Path | None:
    """The run directory that `path` is, or lies inside (symbolic links followed), if any."""
    resolved = path.resolve()
    return next((p for p in (resolved, *resolved.parents) if p.is_dir() and holds_run(p)), None)


def checked_out(out: str | None) -> Path | None:
    """--out as given, checked before any work: not empty, not a file, not under a file, not a run's own
    directory nor inside one, and writable (tried, not guessed from permission bits). Nothing is left
    behind here; None (the default) stays None."""

    if out is None:
        return None
    path = writable_place("--out", out)
    if path.exists() and not path.is_dir():
        raise UsageError(f"--out {out} is a file; give a directory to write to")
    run = run_holding(path)
    if run is not None:
        raise UsageError(
            f"--out {out} is inside the run in {run}, whose directory only training writes; give another directory"
            if run != path.resolve()
            else f"--out {out} holds a run, whose directory only training writes; give another directory"
        )
    return path


def owned_out(out: str | None, kind: SetKind, *, force: bool = False) -> Path | None:
    """checked_out, then the directory owned by this command, which writes a set of `kind` there, until
    it ends: a second posenc writer of it, or a directory holding another kind of set (unless `force`),
    is refused in one line before any work (core.file_sets.own_directory)."""
    path = checked_out(out)
    if path is not None:
        own_directory(path, kind=kind, force=force)
    return path


def checked_out_file(out: str | Path | None, option: str = "--out") -> Path | None:
    """A file to write (sample --out), checked before any work: not empty, not a directory, not under a
        file, not in a run's directory, not a link or a device, in a writable place. An ordinary existing file
    is replaced."""

    if out is None:
        return None
    path = writable_place(option, str(out))
    if path.is_dir() or str(out).endswith("/"):
        raise UsageError(f"{option} {out} is a directory; give the path of a file to write")
    if path.is_symlink() or (path.exists() and not path.is_file()):
        what = "a symbolic link" if path.is_symlink() else "not a regular file (a device, socket or pipe)"
        raise UsageError(f"{option} {out} is {what}, which an atomic write would replace; give a file's path")
    run = run_holding(path.parent)
    if run is not None:
        what = "a file of the run" if path.exists() else "inside the run directory"
        raise UsageError(f"{option} {out} is {what} in {run}, which only training writes; give another path")
    manifest = read_manifest(path.parent)
    kind = held_kind(manifest)
    if kind is not None and path.name in (MANIFEST, *listed_names(manifest)):
        raise UsageError(
            f"{option} {out} is a file of {DESCRIBED[kind]} in {path.parent} (its {MANIFEST} lists it); "
            "give another path"
        )
    return path


def default_out(kind: str) -> Path:
    """A fresh outputs/<kind>/<local time> directory of this command alone (a suffix if the name is taken)."""

    return claim_new(timestamped_dir(kind), given=False)
