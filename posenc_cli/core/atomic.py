"""Atomic writes: a reader sees the old file or the new one, never half of one."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Callable, Iterator


def _fsync_dir(directory: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside `path`; on success fsync it and rename it over `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; give the file the usual permissions
    try:
        yield tmp
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    finally:
        tmp.unlink(missing_ok=True)


def remove_leftovers(directory: str | os.PathLike) -> None:
    """Delete temporaries that a process killed mid-write (SIGKILL skips every cleanup) left behind."""
    for leftover in Path(directory).glob(".*.tmp"):
        leftover.unlink(missing_ok=True)


MANIFEST = "manifest.json"


@contextlib.contextmanager
def output_set(out: Path) -> Iterator[None]:
    """Write the files of one output set into `out`: complete once manifest.json (written last, listing
    every file) is there. The old manifest goes first, so a set killed mid-write is clearly incomplete,
    and temporaries a killed write left behind are removed."""
    out.mkdir(parents=True, exist_ok=True)
    remove_leftovers(out)
    (out / MANIFEST).unlink(missing_ok=True)
    yield
    files = sorted(
        p.name for p in out.iterdir() if p.is_file() and p.name != MANIFEST and not p.name.startswith(".")
    )
    write_text(out / MANIFEST, json.dumps({"complete": True, "files": files}, indent=2) + "\n")


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_with(path: str | os.PathLike, writer: Callable[[Path], None]) -> None:
    """Atomic write through any function that writes to a path (pandas, matplotlib, torch.save)."""
    with atomic_path(path) as tmp:
        writer(tmp)
