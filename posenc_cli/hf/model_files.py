"""Reading the files of a model directory posenc did not write, so that what is checked is what is loaded:
a JSON read with a size cap (a 30 GB sparse file was a MemoryError); a file read without following a
link and only when it is a regular file (a link swapped after the check, a FIFO that blocks); and the
private directory (mode 0700, removed after loading) that transformers loads from, holding only the
bytes posenc read and checked, so that nothing swapped in the model's own directory afterwards, and no
file beside it (a GGUF's neighbour tokenizer.json), is ever read by transformers."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from posenc_cli.core.errors import UsageError

JSON_CAP = 128 * 2**20  # far above any config or tokenizer a model directory holds
CHUNK = 1 << 20
NO_LINK = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK  # O_NONBLOCK: opening a FIFO never waits
COPY_NAME = "posenc_model"  # the copy's own name: transformers caches posenc's module under it


def local_path(source: str) -> Path:
    """An `hf:` source as a local path, `~` expanded; a `~user` that names no user is one line."""
    try:
        return Path(source).expanduser()
    except RuntimeError:  # pathlib: "Could not determine home directory."
        raise UsageError(f"{source}: {source.split('/')[0]} names no user's home directory here") from None


def too_large(path: Path, size: int) -> UsageError:
    return UsageError(
        f"{path} holds {size:,} bytes, more than the {JSON_CAP // 2**20} MiB posenc reads of a JSON file; "
        "no model's config is that large: remove it or give a directory without it"
    )


def json_bytes(path: Path) -> bytes:
    """A JSON file's bytes, refused in one line when it is over JSON_CAP (checked by its size first,
    then by reading no more than one byte past the cap, for a file that grows meanwhile)."""
    size = path.stat().st_size
    if size > JSON_CAP:
        raise too_large(path, size)
    with open(path, "rb") as f:
        data = f.read(JSON_CAP + 1)
    if len(data) > JSON_CAP:
        raise too_large(path, len(data))
    return data


JSON_ERRORS = (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError)  # what json_value raises


def json_value(path: Path) -> Any:
    """A JSON file's value, its bytes capped as json_bytes caps them; the caller words its own line for
    JSON_ERRORS (a missing, unreadable, non-UTF-8, malformed or too deeply nested file)."""
    return json.loads(json_bytes(path).decode("utf-8"))


def open_regular(directory_fd: int, name: str, shown: Path) -> int | None:
    """A descriptor of the regular file `name` in the directory open as `directory_fd`, never through a
    link; None when there is none. `shown`: the path a refusal names."""
    try:
        fd = os.open(name, NO_LINK, dir_fd=directory_fd)
    except FileNotFoundError:
        return None
    except OSError as err:  # ELOOP: a symbolic link
        if os.path.islink(shown):
            raise UsageError(
                f"{shown} is a symbolic link; posenc loads a model it must trust only from its own regular "
                "files (a link can be pointed elsewhere once checked): put the file itself there"
            ) from None
        raise UsageError(f"{shown} cannot be read ({err.strerror})") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise UsageError(
            f"{shown} is not a regular file (a directory, a FIFO or a device); posenc reads none"
        )
    return fd


def copy_regular(directory_fd: int, name: str, *, source: Path, into: Path) -> dict | None:
    """Copy the regular file `name` (read once, without following a link) into the directory `into`;
    its sha256 and size as read, or None when there is no such file."""
    fd = open_regular(directory_fd, name, source / name)
    if fd is None:
        return None
    digest, size = hashlib.sha256(), 0
    try:
        with os.fdopen(fd, "rb") as f, open(into / name, "xb") as out:
            for chunk in iter(lambda: f.read(CHUNK), b""):
                digest.update(chunk)
                out.write(chunk)
                size += len(chunk)
    except OSError as err:  # a full temporary disk: one line, naming where
        raise UsageError(
            f"{source / name} cannot be copied into {into} ({err.strerror}); free space there or set TMPDIR"
        ) from None
    return {"sha256": digest.hexdigest(), "size": size}


@contextmanager
def open_directory(directory: Path) -> Iterator[int]:
    """`directory` open once: every file read through it is in that one directory, whatever is renamed."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as err:
        raise UsageError(f"{directory} cannot be read as a directory ({err.strerror})") from None
    try:
        yield fd
    finally:
        os.close(fd)


@contextmanager
def private_directory() -> Iterator[Path]:
    """An empty directory only this user can read (mkdtemp: mode 0700), named COPY_NAME, removed with
    all it holds on leaving (the model's weights are in memory by then)."""
    try:
        parent = Path(tempfile.mkdtemp(prefix="posenc-"))
    except OSError as err:
        raise UsageError(
            f"cannot make a private directory to load a model from ({err}); set TMPDIR"
        ) from None
    try:
        (parent / COPY_NAME).mkdir(mode=0o700)
        yield parent / COPY_NAME
    finally:
        shutil.rmtree(parent, ignore_errors=True)


@contextmanager
def gguf_alone(path: Path) -> Iterator[Path]:
    """`path` (a GGUF file) seen by transformers alone: a private directory holding only a link to it, so
    that no tokenizer.json, tokenizer_config.json or config.json beside it changes what is loaded."""
    with private_directory() as directory:
        (directory / path.name).symlink_to(path.resolve())
        yield directory / path.name
