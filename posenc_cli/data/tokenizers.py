"""Tokenizers: text <-> ids, and how many bytes and characters each id stands for (for bits per byte).

- char (`Vocab`, vocab.py, the default): one id per character of the training split.
- byte: the 256 UTF-8 byte values; any text is representable.
- bpe: a byte-level BPE (GPT-2's scheme, Hugging Face `tokenizers`) trained on the training split.
  Training samples nothing, so the same text and `data.vocab_size` always give the same tokenizer.
- ids: pre-tokenized data (`data=bin`) whose meta json names no tokenizer: ids only, so no bytes
  (bpb is NaN) and no text to encode (no probe, no `eval --data`).

Every tokenizer is plain data for a checkpoint (`payload`, `from_payload`); its `fingerprint` keys the
token cache and checks that a run's tokenizer.json is the one it was trained with.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np

from posenc_cli.core.choices import TOKENIZERS
from posenc_cli.core.errors import UsageError
from posenc_cli.core.install import install_hint
from posenc_cli.data.tokenizer_base import TokenizerBase
from posenc_cli.data.vocab import UNK, Vocab

PIECE_CHARS = 1 << 18  # BPE encodes text in pieces cut after a newline (`text_pieces`); small = less memory


def utf8_char_starts(data: bytes) -> int:
    """Characters whose first byte is in `data`: every byte but the continuation bytes 0x80-0xBF."""
    return sum(1 for b in data if not 0x80 <= b < 0xC0)


def text_pieces(text: str, size: int = PIECE_CHARS) -> Iterator[str]:
    """`text` in pieces of at most `size` characters, each cut after its last newline when it has one.
    The cuts depend on the text alone, so every path that encodes a text (corpus, cache, eval) agrees."""
    start = 0
    while len(text) - start > size:
        cut = text.rfind("\n", start, start + size) + 1
        cut = cut if cut > start else start + size
        yield text[start:cut]
        start = cut
    if start < len(text) or not text:
        yield text[start:]


class ByteTokenizer(TokenizerBase):
    kind = "byte"

    def encode_array(self, text: str, strict: bool = True) -> np.ndarray:
        return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.int64)

    def token_ends(self, text: str) -> tuple[np.ndarray, np.ndarray]:
        lengths = [len(c.encode("utf-8")) for c in text]
        return self.encode_array(text), np.repeat(np.arange(1, len(text) + 1), lengths)

    def decode(self, ids) -> str:
        return bytes(int(i) for i in ids).decode("utf-8", errors="replace")

    @cached_property
    def byte_counts(self) -> np.ndarray:
        return np.ones(256, dtype=np.int64)

    @cached_property
    def char_counts(self) -> np.ndarray:
        return np.array([utf8_char_starts(bytes([b])) for b in range(256)], dtype=np.int64)

    def payload(self) -> dict:
        return {"kind": "byte"}


def hf_tokenizers():
    """The Hugging Face `tokenizers` package (the `data` extra), or one line saying how to get it."""
    try:
        import tokenizers
    except ImportError:
        raise UsageError(
            f"data.tokenizer=bpe needs the Hugging Face tokenizers package: {install_hint('data')}"
        ) from None
    return tokenizers


def byte_level_alphabet() -> dict[str, int]:
    """GPT-2's byte-level alphabet: the printable character that stands for each byte in BPE tokens."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    shifted = [b for b in range(256) if b not in printable]
    chars = [chr(b) for b in printable] + [chr(256 + i) for i in range(len(shifted))]
    return dict(zip(chars, printable + shifted))


class BpeTokenizer(TokenizerBase):
    kind = "bpe"

    def __init__(self, hf) -> None:
        self.hf = hf

    @classmethod
    def train(cls, pieces: Iterable[str], vocab_size: int) -> BpeTokenizer:
        hf_ = hf_tokenizers()
        models, pre_tokenizers, trainers = hf_.models, hf_.pre_tokenizers, hf_.trainers
        hf = hf_.Tokenizer(models.BPE())
        hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        hf.decoder = hf_.decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            special_tokens=[],
            show_progress=False,
        )
        hf.train_from_iterator(pieces, trainer=trainer)
        return cls(hf)

    @classmethod
    def from_json(cls, text: str, where: str) -> BpeTokenizer:
        library = hf_tokenizers()
        try:
            tokenizer = cls(library.Tokenizer.from_str(text))
            tokenizer.byte_counts  # only byte-level vocabularies say what bytes their tokens stand for
        except Exception as err:  # the library raises plain Exceptions for a bad file
            raise UsageError(
                f"{where} is not a byte-level BPE tokenizer.json ({' '.join(str(err).split())[:100]})"
            ) from None
        return tokenizer

    def to_json(self) -> str:
        return self.hf.to_str()

    def encode_pieces(self, pieces: list[str], strict: bool = True) -> np.ndarray:
        # encode_batch_fast skips the character offsets nothing here reads: the same ids, far less memory
        encode = getattr(self.hf, "encode_batch_fast", self.hf.encode_batch)
        ids = [np.asarray(e.ids, dtype=np.int64) for e in encode([p for t in pieces for p in text_pieces(t)])]
        return np.concatenate(ids) if ids else np.zeros(0, dtype=np.int64)

    def encode_array(self, text: str, strict: bool = True) -> np.ndarray:
        return self.encode_pieces([text], strict)

    def token_ends(self, text: str) -> tuple[np.ndarray, np.ndarray]:
        ids, ends, base = [], [], 0
        for piece in text_pieces(text):
            encoding = self.hf.encode(piece)
            ids += encoding.ids
            ends += [base + end for _, end in encoding.offsets]
            base += len(piece)
        return np.asarray(ids, dtype=np.int64), np.asarray(ends, dtype=np.int64)

    def decode(self, ids) -> str:
        return self.hf.decode([int(i) for i in ids])

    @cached_property
    def _token_bytes(self) -> list[bytes]:
        alphabet = byte_level_alphabet()
        by_id = {i: token for token, i in self.hf.get_vocab().items()}
        try:
            return [bytes(alphabet[c] for c in by_id[i]) for i in range(self.hf.get_vocab_size())]
        except KeyError as err:
            raise ValueError(f"token {err} is not written in the byte-level alphabet") from None

    @cached_property
    def byte_counts(self) -> np.ndarray:
        return np.array([len(b) for b in self._token_bytes], dtype=np.int64)

    @cached_property
    def char_counts(self) -> np.ndarray:
        return np.array([utf8_char_starts(b) for b in self._token_bytes], dtype=np.int64)

    def payload(self) -> dict:
        return {"kind": "bpe", "json": self.to_json()}


class IdsOnly(TokenizerBase):
    """Pre-tokenized ids with no tokenizer: counted, never encoded or decoded."""

    kind = "ids"

    def __init__(self, vocab_size: int) -> None:
        self.vocab_size = vocab_size

    def __len__(self) -> int:
        return self.vocab_size

    def encode_array(self, text: str, strict: bool = True) -> np.ndarray:
        raise UsageError(
            "this run was trained on pre-tokenized ids without a tokenizer (data=bin with no "
            "tokenizer in its meta json), so no text can be encoded for it"
        )

    token_ends = encode_array

    def decode(self, ids) -> str:
        return " ".join(str(int(i)) for i in ids)

    @property
    def byte_counts(self) -> np.ndarray:
        return np.full(self.vocab_size, np.nan)

    char_counts = byte_counts

    def payload(self) -> dict:
        return {"kind": "ids", "vocab_size": self.vocab_size}


def from_payload(payload, where: str):
    """The tokenizer a checkpoint, cache entry or meta json describes; one line naming `where` and what
    is wrong when the payload is not one (no chars, chars that are not characters, a vocab_size that
    is not a positive integer, a BPE json that is not text)."""
    kind = payload.get("kind") if isinstance(payload, dict) else None
    if kind == "char":
        chars = payload.get("chars")
        if not isinstance(chars, list) or not chars or not all(isinstance(c, str) and c for c in chars):
            raise UsageError(
                f"{where}: its char tokenizer's chars must be a non-empty list of characters, got {short(chars)}"
            )
        if (
            len(set(chars)) != len(chars)
            or any(len(c) != 1 for c in chars[:-1])
            or not (len(chars[-1]) == 1 or chars[-1] == UNK)
        ):
            raise UsageError(
                f"{where}: its char tokenizer's chars repeat or hold more than one character each"
            )
        return Vocab(tuple(chars))
    if kind == "byte":
        return ByteTokenizer()
    if kind == "bpe":
        if not isinstance(payload.get("json"), str):
            raise UsageError(
                f"{where}: its bpe tokenizer holds no tokenizer.json text, got {short(payload.get('json'))}"
            )
        return BpeTokenizer.from_json(payload["json"], where)
    if kind == "ids":
        size = payload.get("vocab_size")
        if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
            raise UsageError(
                f"{where}: its ids tokenizer's vocab_size must be a positive integer, got {short(size)}"
            )
        return IdsOnly(size)
    raise UsageError(
        f"{where} names tokenizer kind {short(kind)}; this posenc knows {', '.join(TOKENIZERS)} and ids"
    )


def short(value) -> str:
    """A value as an error message quotes it: its repr, cut to 60 characters."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


TOKENIZER_FILE = "tokenizer.json"  # a bpe run's tokenizer, in its run directory


def read_json_text(path: Path) -> str:
    """A tokenizer.json's text; one line naming the file when it cannot be read as UTF-8."""
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise UsageError(
            f"{path} is not UTF-8 text (bad byte at offset {err.start}); it is not a tokenizer.json"
        ) from None
    except OSError as err:
        raise UsageError(f"{path} cannot be read ({err.strerror})") from None


def run_payload(tokenizer) -> dict:
    """What a checkpoint stores: the tokenizer itself, or for bpe its fingerprint (the tokenizer is the
    run directory's tokenizer.json, which `run_tokenizer` checks against it)."""
    if tokenizer.kind == "bpe":
        return {"kind": "bpe", "fingerprint": tokenizer.fingerprint}
    return tokenizer.payload()


def run_tokenizer(stored: dict, run_dir: Path):
    """The tokenizer a run was trained with, from its checkpoint's `run_payload` and its directory."""
    if stored.get("kind") != "bpe":
        return from_payload(stored, str(run_dir))
    path = run_dir / TOKENIZER_FILE
    if not path.is_file():
        raise UsageError(
            f"{run_dir} was trained with a BPE tokenizer but has no {TOKENIZER_FILE}; "
            "copy the run directory whole"
        )
    tokenizer = BpeTokenizer.from_json(read_json_text(path), str(path))
    if tokenizer.fingerprint != stored.get("fingerprint"):
        raise UsageError(
            f"{path} is not the tokenizer {run_dir} was trained with (its fingerprint differs); "
            "restore the run's own tokenizer.json"
        )
    return tokenizer
