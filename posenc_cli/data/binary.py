"""`data=bin`: pre-tokenized arrays, nanoGPT-style (`train.bin`, `val.bin`), memory-mapped as they are.

A small json beside them (`meta.json` in data.train's folder, or `data.meta=FILE`) says how to read
them and what the ids mean:

    {"dtype": "uint16", "vocab_size": 50257, "tokenizer": "tokenizer.json"}

`dtype` is uint16 or uint32; `tokenizer` is optional: the path (relative to the json) of a
byte-level BPE tokenizer.json (GPT-2's works), or a tokenizer as runs store it ({"kind": "byte"},
{"kind": "char", "chars": [...]}). Without one, ids are just ids: training and perplexity work, bits
per byte, the probe and `eval --data` need text and do not.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from posenc_cli.core.errors import UsageError
from posenc_cli.data.corpus import Corpus
from posenc_cli.data.corpus_config import BinData
from posenc_cli.data.tokenizers import BpeTokenizer, IdsOnly, from_payload, read_json_text

DTYPES = ("uint16", "uint32")


def read_meta(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise UsageError(
            f"data=bin needs a meta json: {path} does not exist (give data.meta=FILE); it holds "
            '{"dtype": "uint16", "vocab_size": N} and optionally "tokenizer"'
        )
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise UsageError(f"{path} is not valid json ({err})") from None
    if not isinstance(meta, dict) or meta.get("dtype") not in DTYPES:
        raise UsageError(
            f"{path}: dtype must be one of {', '.join(DTYPES)}, got "
            f"{meta.get('dtype') if isinstance(meta, dict) else meta!r}"
        )
    size = meta.get("vocab_size")
    if not isinstance(size, int) or isinstance(size, bool) or not 0 < size <= np.iinfo(meta["dtype"]).max + 1:
        raise UsageError(
            f"{path}: vocab_size must be a positive integer that fits {meta['dtype']}, got {size!r}"
        )
    return meta


def meta_tokenizer(meta: dict[str, Any], path: Path):
    given = meta.get("tokenizer")
    if given is None:
        return IdsOnly(meta["vocab_size"])
    if isinstance(given, dict):
        tokenizer = from_payload(given, str(path))
    else:
        file = path.parent / str(given)
        if not file.is_file():
            raise UsageError(f"{path}: tokenizer file {file} does not exist")
        tokenizer = BpeTokenizer.from_json(read_json_text(file), str(file))
    if len(tokenizer) != meta["vocab_size"]:
        raise UsageError(
            f"{path}: its tokenizer has {len(tokenizer):,} ids but vocab_size is {meta['vocab_size']:,}"
        )
    return tokenizer


def ids_file(given: str, split: str, dtype: str, *, vocab_size: int) -> np.ndarray:
    """data.train's or data.val's (`split`) ids, as `given`."""
    path = Path(given).expanduser()
    if not path.is_file():
        raise UsageError(f"data.{split}={given} does not exist; give a file of {dtype} token ids")
    itemsize = np.dtype(dtype).itemsize
    if path.stat().st_size == 0 or path.stat().st_size % itemsize:
        raise UsageError(
            f"data.{split}={path} has {path.stat().st_size} bytes, not a whole non-zero number of {dtype} ids"
        )
    ids = np.memmap(path, dtype=dtype, mode="r")
    if int(ids.max()) >= vocab_size:
        raise UsageError(f"data.{split}={path} holds id {int(ids.max())}, outside vocab_size {vocab_size}")
    return ids


def file_sha256(*paths: Path) -> str:
    digest = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as f:
            while block := f.read(1 << 24):
                digest.update(block)
    return digest.hexdigest()


def bin_sha256(meta: dict[str, Any], meta_path: Path, *, train: Path, val: Path) -> str:
    """The corpus's fingerprint: its id files and what says how to read them (the meta's dtype,
    vocabulary size and tokenizer, or the tokenizer file it names), so that a meta edited after training
    is another corpus, never the same ids read another way."""
    given = meta.get("tokenizer")
    if isinstance(given, str) and (meta_path.parent / given).is_file():
        given = {"file_sha256": file_sha256(meta_path.parent / given)}
    reading = {"dtype": meta["dtype"], "vocab_size": meta["vocab_size"], "tokenizer": given}
    digest = hashlib.sha256(json.dumps(reading, sort_keys=True).encode())
    for split in (train, val):  # each split on its own, with its size: moving the boundary is another corpus
        digest.update(f"{split.stat().st_size}:{file_sha256(split)}".encode())
    return digest.hexdigest()


def load_bin(data: BinData, tokenizer=None):

    if not data.train or not data.val:
        raise UsageError(
            "data=bin needs data.train=FILE and data.val=FILE (arrays of token ids) and a meta json "
            "beside data.train (meta.json) or data.meta=FILE"
        )
    meta_path = Path(str(data.meta or Path(str(data.train)).expanduser().parent / "meta.json"))
    meta = read_meta(meta_path)
    tokenizer = tokenizer or meta_tokenizer(meta, meta_path)
    train, val = (
        ids_file(str(given), split, meta["dtype"], vocab_size=meta["vocab_size"])
        for given, split in ((data.train, "train"), (data.val, "val"))
    )
    stats = {
        "train": str(data.train),
        "val": str(data.val),
        "train_tokens": len(train),
        "val_tokens": len(val),
        "sha256": bin_sha256(meta, meta_path, train=Path(train.filename), val=Path(val.filename)),
    }
    return Corpus("bin", train, val, tokenizer, stats)
