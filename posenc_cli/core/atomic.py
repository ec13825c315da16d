"""Atomic writes: a reader sees the old file or the new one, never half of one. A write the disk refuses
(full, over a quota or a file-size limit, a name too long) is one line naming the file, and a set of
writes that fails (journal) leaves none of its files behind."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable, Iterator

from posenc_cli.core.errors import UsageError

TMP_PREFIX = ".posenc-tmp-"  # every temporary posenc makes starts so: nobody else's file is ever cleaned
_journal: dict[Path, list[Path]] = {}  # files written so far into a set being written, by its directory


def fsync_dir(directory: Path) -> None:
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
    if path.is_symlink() or (path.exists() and not path.is_file()):
        what = (
            "a symbolic link"
            if path.is_symlink()
            else "a directory"
            if path.is_dir()
            else "not a regular file"
        )
        raise UsageError(f"{path} is {what} where posenc writes a file; move it away and run again")
    with refused_by_disk(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        # the target's name cut to 64 bytes: a temporary of any legal name (255 bytes) still fits NAME_MAX
        short = os.fsencode(path.name)[:64].decode(errors="ignore")
        fd, name = tempfile.mkstemp(prefix=f"{TMP_PREFIX}{short}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
    tmp = Path(name)
    umask = os.umask(0)
    os.umask(umask)
    try:
        with refused_by_disk(path):
            yield tmp
            os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600 (and a writer may make its file anew)
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())
            os.replace(tmp, path)
        fsync_dir(path.parent)
        _journal.get(path.parent.resolve(), []).append(path)
    finally:
        tmp.unlink(missing_ok=True)


DISK_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)  # no room: the disk, a quota, `ulimit -f`


@contextlib.contextmanager
def refused_by_disk(path: Path) -> Iterator[None]:
    """An OSError that the disk, not posenc, causes (full, over a quota or `ulimit -f`, a name too long)
    as one line naming the file and the cause; any other error as it is."""
    try:
        yield
    except OSError as err:
        if err.errno not in (*DISK_FULL, errno.ENAMETOOLONG):
            raise
        advice = "make room there or give another place" if err.errno in DISK_FULL else "give a shorter path"
        raise UsageError(f"cannot write {path}: {err.strerror}; {advice}, and run again") from None


def remove_leftovers(directory: str | os.PathLike) -> None:
    """Delete temporaries that a process killed mid-write (SIGKILL skips every cleanup) left behind:
    posenc's own names only (TMP_PREFIX), never a user's `.notes.tmp`."""
    for leftover in Path(directory).glob(f"{TMP_PREFIX}*"):
        if leftover.is_dir() and not leftover.is_symlink():
            shutil.rmtree(leftover, ignore_errors=True)
        else:
            leftover.unlink(missing_ok=True)


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_with(path: str | os.PathLike, writer: Callable[[Path], None]) -> None:
    """Atomic write through any function that writes to a path (pandas, matplotlib, torch.save)."""
    with atomic_path(path) as tmp:
        writer(tmp)


@contextlib.contextmanager
def journal(out: Path) -> Iterator[None]:
    """Note every file written into `out` meanwhile (atomic_path); if the set fails, remove them: a half
    set never stands where a complete one stood."""
    key = out.resolve()
    _journal[key] = []
    try:
        yield
    except BaseException:
        for path in _journal[key]:
            path.unlink(missing_ok=True)
        raise
    finally:
        _journal.pop(key, None)
