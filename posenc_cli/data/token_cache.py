"""The token cache: a corpus's ids memory-mapped from `data.cache_dir` (nanoGPT's train.bin idea), built
there once by `stream.encode_splits`.

Entries are keyed by the text's sha256, the split and the tokenizer's fingerprint, so an edited file or
another tokenizer can never reuse stale tokens; an entry appears whole or not at all (written beside,
then renamed), and is never trusted unread: its meta.json records each array's size, sha256 and mtime,
checked on every use (`verified_meta`).

    <cache_dir>/<sha256[:24]>/tokens-<key[:24]>/{train,val}.bin, meta.json
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

try:
    import fcntl
except ImportError:  # no advisory locks on this platform: stale builds are then left for the user
    fcntl = None

from posenc_cli.core.atomic import write_text
from posenc_cli.core.errors import UsageError
from posenc_cli.data import stream
from posenc_cli.data.binary import file_sha256
from posenc_cli.data.tokenizers import short

BUILD_LOCK = ".building"  # held (fcntl) inside a cache entry's build directory while it is built
UNLOCKED_GRACE_S = 60  # a build directory without its lock file yet is a build just starting
log = logging.getLogger(__name__)


def token_arrays(
    tokenizer, source: stream.TextSource, sha: str, *, cut: int, n_chars: int, cache: Path | None
):
    """(train ids, val ids, meta): memory-mapped from the cache (built there first if missing, rebuilt
    if damaged: see `verified_meta`), or in memory when there is no cache (the generated corpus)."""
    if cache is None:
        arrays, meta = stream.encode_splits(tokenizer, source, cut, n_chars=n_chars, folder=None)
        return arrays["train"], arrays["val"], meta
    key = hashlib.sha256(
        json.dumps(
            {
                "format": stream.FORMAT,
                "text_sha256": sha,
                "cut": cut,
                "n_chars": n_chars,
                "tokenizer": tokenizer.fingerprint,
            },
            sort_keys=True,
        ).encode()
    ).hexdigest()
    folder = cache / sha[:24] / f"tokens-{key[:24]}"
    folder.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_builds(folder.parent)
    dtype = stream.dtype_for(len(tokenizer)).name
    meta = verified_meta(folder, key, dtype)
    if meta is None:
        build_entry(tokenizer, source, cut, n_chars=n_chars, folder=folder, key=key)
        meta = verified_meta(folder, key, dtype)
        if meta is None:  # torn down again at once: a disk that does not keep what is written
            raise UsageError(f"the token cache entry {folder} cannot be verified right after it was written")
    train, val = (memmap(folder / f"{split}.bin", meta["dtype"]) for split in ("train", "val"))
    return train, val, meta


def build_entry(
    tokenizer, source: stream.TextSource, cut: int, *, n_chars: int, folder: Path, key: str
) -> None:
    """Write the entry beside `folder` and rename it into place, the arrays' sizes, sha256 and mtimes in
    its meta.json. The build directory stays locked (`BUILD_LOCK`) while this process builds it, so that
    `remove_stale_builds` removes only what a killed build left."""
    building = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    lock = os.open(building / BUILD_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if fcntl is not None:
            fcntl.flock(lock, fcntl.LOCK_EX)
        _, meta = stream.encode_splits(tokenizer, source, cut, n_chars=n_chars, folder=building)
        meta["files"] = {split: file_facts(building / f"{split}.bin") for split in ("train", "val")}
        write_text(building / "meta.json", json.dumps({**meta, "key": key}, indent=1) + "\n")
        (building / BUILD_LOCK).unlink()
        if folder.exists():  # a damaged entry: moved aside (a reader's open maps stay valid), then removed
            aside = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
            os.rename(folder, aside / "damaged")
            shutil.rmtree(aside, ignore_errors=True)
        try:
            os.rename(building, folder)
        except OSError:  # another job built the same entry meanwhile: theirs is identical
            pass
    finally:
        os.close(lock)
        shutil.rmtree(building, ignore_errors=True)


def file_facts(path: Path) -> dict:
    """What meta.json records of a cached array, to verify it by: size, sha256 and mtime."""
    stat = path.stat()
    return {"size": stat.st_size, "sha256": file_sha256(path), "mtime_ns": stat.st_mtime_ns}


def verified_meta(folder: Path, key: str, dtype: str) -> dict | None:
    """The entry's meta when every array is as it was written: its size always, its sha256 whenever its
    mtime or size differs from the recorded ones (then the new mtime is recorded). None when there is no
    entry; None and a warning naming the file when it is damaged, which the caller rebuilds."""
    path = folder / "meta.json"
    if not folder.is_dir():
        return None
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
        files = meta.get("files")
        if not isinstance(files, dict):
            return damaged(path, "it records no size and sha256 of its arrays: an older posenc wrote it")
        if meta.get("key") != key or meta.get("dtype") != dtype:
            return damaged(path, f"it describes another entry (key, or dtype {short(meta.get('dtype'))})")
        touched = False
        for split in ("train", "val"):
            array, recorded = folder / f"{split}.bin", files[split]
            stat = array.stat()
            if stat.st_size != recorded["size"]:
                return damaged(array, f"{stat.st_size:,} bytes, {recorded['size']:,} when it was written")
            if stat.st_mtime_ns != recorded["mtime_ns"]:
                if file_sha256(array) != recorded["sha256"]:
                    return damaged(array, "its content changed since it was written (sha256 differs)")
                recorded["mtime_ns"], touched = stat.st_mtime_ns, True
    except FileNotFoundError as err:
        return damaged(Path(err.filename or path), "it is missing")
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        return damaged(path, f"it is unreadable ({type(err).__name__})")
    if touched:
        write_text(path, json.dumps(meta, indent=1) + "\n")
    return meta


def damaged(path: Path, why: str) -> None:
    log.warning(f"the token cache file {path} is not what was written ({why}); rebuilding its entry")
    return None


def remove_stale_builds(directory: Path) -> None:
    """Remove the build directories (`.tokens-*`) that a killed build left; one whose lock a live
    process holds is being built and stays (so does one too young to have taken its lock yet)."""
    for leftover in directory.glob(".tokens-*"):
        try:
            lock = os.open(leftover / BUILD_LOCK, os.O_RDWR)
        except FileNotFoundError:  # no lock file: a build killed after its last write, or one just begun
            with contextlib.suppress(OSError):  # gone meanwhile: renamed into place by its builder
                if time.time() - leftover.stat().st_mtime > UNLOCKED_GRACE_S:
                    shutil.rmtree(leftover, ignore_errors=True)
            continue
        except OSError:
            continue
        try:
            if fcntl is not None:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                shutil.rmtree(leftover, ignore_errors=True)
        except OSError:  # locked: a live build
            pass
        finally:
            os.close(lock)


def memmap(path: Path, dtype: str) -> np.ndarray:
    """A read-only memory map of ids (an empty array for an empty file, which numpy cannot map)."""
    if path.stat().st_size == 0:
        return np.zeros(0, dtype=dtype)
    return np.memmap(path, dtype=dtype, mode="r")
