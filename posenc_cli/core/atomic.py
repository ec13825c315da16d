"""Atomic writes: a reader sees the old file or the new one, never half of one. An output set (eval's,
probe's, an export) is a directory owned by one writer at a time and complete once its manifest, written
last, lists what that writer wrote (sha256 and size of each file)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from posenc_cli.core.errors import UsageError

TMP_PREFIX = ".posenc-tmp-"  # every temporary posenc makes starts so: nobody else's file is ever cleaned
MANIFEST = "manifest.json"


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
    if path.is_symlink() or (path.exists() and not path.is_file()):
        what = (
            "a symbolic link"
            if path.is_symlink()
            else "a directory"
            if path.is_dir()
            else "not a regular file"
        )
        raise UsageError(f"{path} is {what} where posenc writes a file; move it away and run again")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f"{TMP_PREFIX}{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp)
    umask = os.umask(0)
    os.umask(umask)
    try:
        yield tmp
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600 (and a writer may make its file anew): the usual
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    finally:
        tmp.unlink(missing_ok=True)


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


# -- one writer per output directory ---------------------------------------------------------------

_owned: dict[Path, tuple[int, list[Path]]] = {}  # directory -> (locked fd, directories made for it)


def own_directory(path: Path, option: str = "--out") -> None:
    """Make `path` (created if missing) this process's until release_directories: an advisory lock on
    the directory itself, so a second posenc writer is refused at once and nothing changes on disk for an
    existing directory. Idempotent within a process."""
    key = path.resolve()
    if key in _owned:
        return
    made = [p for p in (path, *path.parents) if not p.exists() and str(p) != "."]
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDONLY)
    except OSError as err:
        raise UsageError(
            f"{option} {path}: cannot create or open it ({err.strerror}); give another"
        ) from None
    try:
        import fcntl

        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        replaced = os.fstat(fd).st_ino != os.stat(path).st_ino  # removed and made again meanwhile
    except ImportError:  # no advisory locks on this platform
        replaced = False
    except OSError:
        replaced = True
    if replaced:
        os.close(fd)
        raise UsageError(
            f"{option} {path} is being written by another posenc command right now; wait for it to finish "
            "or give another directory"
        )
    _owned[key] = (fd, made)


def release_directory(path: Path) -> None:
    """Give up `path`; the directories made for it go again if nothing was written into them."""
    fd, made = _owned.pop(path.resolve(), (None, []))
    for directory in made:  # deepest first
        try:
            directory.rmdir()
        except OSError:
            break
    if fd is not None:
        os.close(fd)


def release_directories() -> None:
    for key in list(_owned):
        release_directory(key)


# -- output sets -----------------------------------------------------------------------------------


def file_entry(data: bytes) -> dict:
    return {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}


def hashed_entry(path: Path) -> dict:
    """sha256 and size of a file, read in chunks (weights can be large)."""
    digest, size = hashlib.sha256(), 0
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
            size += len(chunk)
    return {"sha256": digest.hexdigest(), "size": size}


def read_manifest(out: Path) -> dict:
    """The manifest in `out` as {"runs": [...], "files": {...}, "inputs": {...}}; {} when there is none or
    it is not one posenc wrote (an older format, damaged, hand-made)."""
    try:
        manifest = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return {}
    ok = isinstance(manifest, dict) and manifest.get("complete") is True
    ok = ok and isinstance(manifest.get("runs"), list)
    ok = ok and all(isinstance(manifest.get(k, {}), dict) for k in ("files", "inputs"))
    return manifest if ok else {}


@dataclass
class OutputSet:
    """What one command writes into its directory: the files it wrote, and the files from an earlier
    set it read as inputs, each checked against the manifest that listed it."""

    out: Path
    runs: list[str]
    previous: dict
    written: list[Path] = field(default_factory=list)
    inputs: dict[str, dict] = field(default_factory=dict)

    def trusted_input(self, name: str) -> bytes | None:
        """The bytes of `name` in this directory if the set found here listed it, with this sha256 and
        size, and was about the same runs; None otherwise: a stale file is never read."""
        listed = {**self.previous.get("inputs", {}), **self.previous.get("files", {})}
        if name not in listed or sorted(map(str, self.previous.get("runs", []))) != sorted(self.runs):
            return None
        try:
            data = (self.out / name).read_bytes()
        except OSError:
            return None
        if file_entry(data) != listed[name]:
            return None
        self.inputs[name] = listed[name]
        return data


@contextlib.contextmanager
def output_set(out: Path, runs: list[str], **identity) -> Iterator[OutputSet]:
    """Write one output set into `out`, which this process owns meanwhile (own_directory). The old
    manifest goes first, so a set killed mid-write is clearly incomplete; temporaries a killed write left
    behind are removed. manifest.json, written last, lists only the files this command recorded in
    `written` (and the inputs it trusted); files an older set listed are left unlisted. `runs`: what the
    set is about; `identity`: more fields for the manifest (an export's run_id)."""
    held = out.resolve() in _owned
    own_directory(out)
    try:
        result = OutputSet(out, sorted(map(str, runs)), read_manifest(out))
        remove_leftovers(out)
        (out / MANIFEST).unlink(missing_ok=True)
        yield result
        manifest = {
            "complete": True,
            **identity,
            "runs": result.runs,
            "files": {p.name: hashed_entry(p) for p in result.written},
            "inputs": result.inputs,
        }
        write_text(out / MANIFEST, json.dumps(manifest, indent=2) + "\n")
    finally:
        if not held:
            release_directory(out)
