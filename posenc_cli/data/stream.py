"""Text to token ids in streaming passes.

A source yields its text in blocks of any size and is never held whole: one pass hashes it (sha256 of
its UTF-8 bytes) and counts its characters, the split is a character offset, the tokenizer is trained
on pieces of the training split (and cached beside the token cache's entries), and one more pass
writes the ids as uint16 (uint32 past 65,536 ids), into a file of the token cache (`token_cache`) or
into memory.

    <cache_dir>/<sha256[:24]>/tokenizer-<kind>-<vocab>-<cut>-<sample>.json   one trained on that split
"""

from __future__ import annotations

import codecs
import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from posenc_cli.core import ui
from posenc_cli.core.atomic import write_text
from posenc_cli.core.errors import UsageError
from posenc_cli.data.corpus_config import TextCorpus
from posenc_cli.data.tokenizers import (
    PIECE_CHARS,
    BpeTokenizer,
    ByteTokenizer,
    from_payload,
    text_pieces,
)
from posenc_cli.data.vocab import UNK, Vocab, code_points

FORMAT = 2  # 2: pieces of 256k characters (was 1M), so a cache of format 1 is rebuilt, never mixed
BLOCK_BYTES = 16 << 20
BPE_TRAIN_CHARS = 32_000_000  # BPE learns its merges from at most this much of the training split
BATCH_PIECES = 1  # pieces encoded at once: each holds ~100 bytes a token until it is written (peak RSS)
MAX_CODE_POINT = 0x110000
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


def tokenizer_for(
    data: TextCorpus, source: TextSource, sha: str, *, cut: int, n_chars: int, cache: Path | None
):
    """The tokenizer `data.tokenizer` asks for, trained on this split once and then read from the cache,
    where it is stored with its fingerprint: a cached tokenizer that is not what was stored is rebuilt."""
    kind, vocab_size = data.tokenizer, data.vocab_size
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


def read_text(path: str | Path, what: str) -> str:
    """A whole (small) UTF-8 file, with the same checks as a streamed one."""
    return "".join(file_source(path, what).blocks())
