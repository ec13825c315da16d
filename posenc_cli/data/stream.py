"""Text to token arrays in streaming passes, cached on disk and memory-mapped (nanoGPT's train.bin idea).

A source yields its text in blocks of any size and is never held whole: one pass hashes it (sha256 of
its UTF-8 bytes) and counts its characters, the split is a character offset, the tokenizer is trained
on pieces of the training split, and one more pass writes the ids as uint16 (uint32 past 65,536 ids)
into `data.cache_dir`. Entries are keyed by the text's sha256, the split and the tokenizer's
fingerprint, so an edited file or another tokenizer can never reuse stale tokens; an entry appears
whole or not at all (written beside, then renamed), and is never trusted unread: its meta.json
records each array's size, sha256 and mtime, checked on every use (`verified_meta`).

    <cache_dir>/<sha256[:24]>/tokenizer-<kind>-<vocab>-<cut>-<sample>.json   one trained on that split
    <cache_dir>/<sha256[:24]>/tokens-<key[:24]>/{train,val}.bin, meta.json
"""

from __future__ import annotations

import codecs
import contextlib
import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

try:
    import fcntl
except ImportError:  # no advisory locks on this platform: stale builds are then left for the user
    fcntl = None

from posenc_cli.core import ui
from posenc_cli.core.atomic import write_text
from posenc_cli.core.errors import UsageError
from posenc_cli.data.binary import file_sha256
from posenc_cli.data.kinds import TOKENIZER, VOCAB_SIZE
from posenc_cli.data.tokenizers import (
    PIECE_CHARS,
    BpeTokenizer,
    ByteTokenizer,
    from_payload,
    short,
    text_pieces,
)
from posenc_cli.data.vocab import UNK, Vocab, code_points

FORMAT = 2  # 2: pieces of 256k characters (was 1M), so a cache of format 1 is rebuilt, never mixed
BLOCK_BYTES = 16 << 20
BPE_TRAIN_CHARS = 32_000_000  # BPE learns its merges from at most this much of the training split
BATCH_PIECES = 1  # pieces encoded at once: each holds ~100 bytes a token until it is written (peak RSS)
MAX_CODE_POINT = 0x110000
BUILD_LOCK = ".building"  # held (fcntl) inside a cache entry's build directory while it is built
UNLOCKED_GRACE_S = 60  # a build directory without its lock file yet is a build just starting
log = logging.getLogger(__name__)


@dataclass
class TextSource:
    what: str  # names the source in messages, e.g. "data.path=big.txt"
    blocks: Callable[[], Iterator[str]]  # the whole text in order, in blocks of any size
    # the first validation character where the source has its own validation text after its training
    # text (a dataset's validation split); None: the last data.val_fraction is held out (split_point)
    validation_start: int | None = None


def string_source(text: str, what: str) -> TextSource:
    return TextSource(what, lambda: iter((text,)))


def file_source(path: str | Path, what: str = "data.path") -> TextSource:
    """A UTF-8 file read in blocks; every way it can be unusable is one clear line."""
    p = Path(path).expanduser()
    if not p.exists():
        raise UsageError(f"{what}={path} does not exist; give the path of a UTF-8 text file")
    if not p.is_file():
        raise UsageError(f"{what}={path} is not a file; give the path of a UTF-8 text file")

    def blocks() -> Iterator[str]:
        decoder = codecs.getincrementaldecoder("utf-8")()
        offset, seen_text = 0, False
        with open(p, "rb") as f:
            while raw := f.read(BLOCK_BYTES):
                if b"\x00" in raw:
                    raise UsageError(
                        f"{what}={path} looks binary (it contains NUL bytes); give a UTF-8 text file"
                    )
                try:
                    text = decoder.decode(raw)
                except UnicodeDecodeError as err:
                    raise UsageError(
                        f"{what}={path} is not valid UTF-8 (bad byte at offset {offset + err.start}); "
                        "re-encode it as UTF-8"
                    ) from None
                offset += len(raw)
                seen_text = seen_text or bool(raw.strip())
                yield text
        try:
            decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            raise UsageError(
                f"{what}={path} is not valid UTF-8 (it ends inside a character); re-encode it as UTF-8"
            ) from None
        if not seen_text:
            raise UsageError(f"{what}={path} is empty; give a UTF-8 text file with some text in it")

    return TextSource(f"{what}={path}", blocks)


def scan(source: TextSource) -> tuple[str, int]:
    """(sha256 of the UTF-8 text, number of characters), in one pass."""
    digest, n_chars = hashlib.sha256(), 0
    for block in source.blocks():
        digest.update(block.encode("utf-8", "surrogatepass"))
        n_chars += len(block)
    return digest.hexdigest(), n_chars


def pieces(source: TextSource, start: int, end: int) -> Iterator[str]:
    """Characters [start, end) of the source, in `text_pieces` (cuts that depend on the text alone)."""
    buffer, offset = "", 0
    for block in source.blocks():
        part = block[max(0, start - offset) : max(0, end - offset)]
        offset += len(block)
        buffer += part
        if len(buffer) > 4 * PIECE_CHARS:
            *whole, buffer = text_pieces(buffer)
            yield from whole
        if offset >= end:
            break
    if buffer:
        yield from text_pieces(buffer)


def validation_start(source: TextSource, n_chars: int, val_fraction) -> int:
    """Where the validation text begins: the source's own, else the last `val_fraction` of it."""
    return (
        source.validation_start if source.validation_start is not None else split_point(n_chars, val_fraction)
    )


def split_point(n_chars: int, val_fraction) -> int:
    """The first validation character: the last `val_fraction` of the text is the validation split."""
    if (
        not isinstance(val_fraction, (int, float))
        or isinstance(val_fraction, bool)
        or not 0 < val_fraction < 1
    ):
        raise UsageError(f"data.val_fraction must be between 0 and 1 (exclusive), got {val_fraction!r}")
    return int(n_chars * (1 - val_fraction))


def character_counts(chunks: Iterator[str]) -> np.ndarray:
    """How often each code point occurs."""
    counts = np.zeros(MAX_CODE_POINT, dtype=np.int64)
    for chunk in chunks:
        counts += np.bincount(code_points(chunk), minlength=MAX_CODE_POINT)
    return counts


def unigram_entropy(counts: np.ndarray) -> float:
    """Nats per character of a model that knows only character frequencies: the bar to beat."""
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log(p)).sum())


def train_tokenizer(kind: str, vocab_size: int, source: TextSource, *, cut: int, n_chars: int):
    """A tokenizer fitted on the training split [0, cut); char adds <unk> if validation has new characters."""
    if kind == "byte":
        return ByteTokenizer()
    if kind == "bpe":  # merges from the first 32M characters: minutes and bounded memory on any corpus
        return BpeTokenizer.train(pieces(source, 0, min(cut, BPE_TRAIN_CHARS)), vocab_size)
    seen = character_counts(pieces(source, 0, cut)) > 0
    chars = "".join(chr(c) for c in np.flatnonzero(seen))
    unseen = (character_counts(pieces(source, cut, n_chars)) > 0) & ~seen
    return Vocab(tuple(chars) + ((UNK,) if unseen.any() else ()))


def tokenizer_for(data: dict, source: TextSource, sha: str, *, cut: int, n_chars: int, cache: Path | None):
    """The tokenizer `data.tokenizer` asks for, trained on this split once and then read from the cache,
    where it is stored with its fingerprint: a cached tokenizer that is not what was stored is rebuilt."""
    kind, vocab_size = data.get("tokenizer", TOKENIZER), data.get("vocab_size", VOCAB_SIZE)
    if cache is None or kind == "byte":
        return train_tokenizer(kind, vocab_size, source, cut=cut, n_chars=n_chars)
    size, sample = (vocab_size, min(cut, BPE_TRAIN_CHARS)) if kind == "bpe" else (0, cut)
    path = cache / sha[:24] / f"tokenizer-{kind}-{size}-{cut}-{sample}.json"
    cached = cached_tokenizer(path, kind) if path.exists() else None
    if cached is not None:
        return cached
    tokenizer = train_tokenizer(kind, vocab_size, source, cut=cut, n_chars=n_chars)
    write_text(path, json.dumps({"fingerprint": tokenizer.fingerprint, "tokenizer": tokenizer.payload()}))
    return tokenizer


def cached_tokenizer(path: Path, kind: str):
    """The tokenizer cached at `path` if it is the one stored there (of `kind`, its fingerprint the
    stored one); None and a warning naming the file otherwise."""
    try:
        stored = json.loads(path.read_text(encoding="utf-8"))
        tokenizer = from_payload(stored["tokenizer"], str(path))
        if tokenizer.kind == kind and tokenizer.fingerprint == stored["fingerprint"]:
            return tokenizer
        why = "it is not the tokenizer stored there (its fingerprint differs)"
    except (OSError, ValueError, KeyError, TypeError, UsageError) as err:
        why = f"it is unreadable ({' '.join(str(err).split())[:120]})"
    log.warning(f"the cached tokenizer {path} is not what was written ({why}); training it again")
    return None


def dtype_for(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16 if vocab_size <= 1 << 16 else np.uint32)


def write_split(tokenizer, source: TextSource, start: int, *, end: int, out, strict: bool, bar, task) -> dict:
    """Encode characters [start, end) into `out` (a binary file, or a list of arrays); their counts."""
    dtype, counts = dtype_for(len(tokenizer)), {"tokens": 0, "bytes": 0, "chars": 0, "unk": 0}
    characters = np.zeros(MAX_CODE_POINT, dtype=np.int64)
    unk = len(tokenizer) - 1 if getattr(tokenizer, "has_unk", False) else -1
    batch: list[str] = []

    def flush() -> None:
        ids = tokenizer.encode_pieces(batch, strict=strict)
        out.write(ids.astype(dtype).tobytes()) if hasattr(out, "write") else out.append(ids.astype(dtype))
        counts["tokens"] += len(ids)
        counts["bytes"] += sum(len(p.encode("utf-8", "surrogatepass")) for p in batch)
        counts["unk"] += int((ids == unk).sum())
        bar.advance(task, sum(len(p) for p in batch))
        batch.clear()

    for piece in pieces(source, start, end):
        counts["chars"] += len(piece)
        characters += np.bincount(code_points(piece), minlength=MAX_CODE_POINT)
        batch.append(piece)
        if len(batch) >= BATCH_PIECES:
            flush()
    flush()
    counts["unigram_entropy_nats"] = unigram_entropy(characters)
    return counts


def encode_splits(tokenizer, source: TextSource, cut: int, *, n_chars: int, folder: Path | None):
    """Both splits' ids (into folder/{train,val}.bin, or in memory) and meta: counts and the dtype."""
    results, meta = (
        {},
        {"format": FORMAT, "dtype": dtype_for(len(tokenizer)).name, "vocab_size": len(tokenizer)},
    )
    with ui.progress(disable=folder is None) as bar:
        for split, start, end in (("train", 0, cut), ("val", cut, n_chars)):
            task = bar.add_task(
                f"tokenize {split} ({tokenizer.kind})", total=end - start, status="characters"
            )
            if folder is None:
                arrays: list[np.ndarray] = []
                meta[split] = write_split(
                    tokenizer, source, start, end=end, out=arrays, strict=split == "train", bar=bar, task=task
                )
                results[split] = np.concatenate(arrays) if arrays else np.zeros(0, dtype_for(len(tokenizer)))
            else:
                with open(folder / f"{split}.bin", "wb") as f:
                    meta[split] = write_split(
                        tokenizer, source, start, end=end, out=f, strict=split == "train", bar=bar, task=task
                    )
    return results, meta


def token_arrays(tokenizer, source: TextSource, sha: str, *, cut: int, n_chars: int, cache: Path | None):
    """(train ids, val ids, meta): memory-mapped from the cache (built there first if missing, rebuilt
    if damaged: see `verified_meta`), or in memory when there is no cache (the generated corpus)."""
    if cache is None:
        arrays, meta = encode_splits(tokenizer, source, cut, n_chars=n_chars, folder=None)
        return arrays["train"], arrays["val"], meta
    key = hashlib.sha256(
        json.dumps(
            {
                "format": FORMAT,
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
    dtype = dtype_for(len(tokenizer)).name
    meta = verified_meta(folder, key, dtype)
    if meta is None:
        build_entry(tokenizer, source, cut, n_chars=n_chars, folder=folder, key=key)
        meta = verified_meta(folder, key, dtype)
        if meta is None:  # torn down again at once: a disk that does not keep what is written
            raise UsageError(f"the token cache entry {folder} cannot be verified right after it was written")
    train, val = (memmap(folder / f"{split}.bin", meta["dtype"]) for split in ("train", "val"))
    return train, val, meta


def build_entry(tokenizer, source: TextSource, cut: int, *, n_chars: int, folder: Path, key: str) -> None:
    """Write the entry beside `folder` and rename it into place, the arrays' sizes, sha256 and mtimes in
    its meta.json. The build directory stays locked (`BUILD_LOCK`) while this process builds it, so that
    `remove_stale_builds` removes only what a killed build left."""
    building = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    lock = os.open(building / BUILD_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if fcntl is not None:
            fcntl.flock(lock, fcntl.LOCK_EX)
        _, meta = encode_splits(tokenizer, source, cut, n_chars=n_chars, folder=building)
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


def read_text(path: str | Path, what: str) -> str:
    """A whole (small) UTF-8 file, with the same checks as a streamed one."""
    return "".join(file_source(path, what).blocks())
