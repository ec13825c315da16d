"""Corpora -> token arrays plus the tokenizer that made them (posenc_cli.data re-exports these).

`load_corpus` is the only door: it takes the `data` config group (a data.corpus_config dataclass, and
for a trained run the run's own tokenizer) and returns a `Corpus` whose splits are numpy arrays,
memory-mapped for files.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from posenc_cli.core.errors import UsageError
from posenc_cli.data import stream
from posenc_cli.data.binary import load_bin
from posenc_cli.data.corpus import Corpus
from posenc_cli.data.corpus_config import (
    BinData,
    DataConfig,
    HfData,
    SyntheticData,
    TaskData,
    TextCorpus,
    TextData,
    kind_of,
)
from posenc_cli.data.hf_datasets import hf_source
from posenc_cli.data.synthetic import generate
from posenc_cli.data.tasks import TaskCorpus, TaskSpec
from posenc_cli.data.token_cache import token_arrays


def text_source(data: TextCorpus) -> tuple[stream.TextSource, dict[str, Any]]:
    """The corpus's text as a stream, and the facts about it a run's summary records."""
    if isinstance(data, SyntheticData):
        made = generate(data.spec())
        return stream.string_source(made.text, "data=synthetic"), {
            "fresh_entropy_nats": made.fresh_entropy,
            "copied_fraction": made.copied_fraction,
            "entropy_floor_nats": made.entropy_floor,
        }
    if isinstance(data, HfData):
        return hf_source(data)
    return stream.file_source(data.path), {"path": str(data.path)}


def corpus_sha256(data: DataConfig) -> str:
    """The sha256 `load_corpus` records, without tokenizing: stream.scan's of the text (the token cache's
    key too), or of a bin corpus's files."""
    if isinstance(data, BinData):
        return load_bin(data).sha256
    return stream.scan(text_source(data)[0])[0]


def require_same_corpus(data: DataConfig, stored: str | None, where: str, *, now: str | None = None) -> None:
    """Refuse (one line naming `where`, a run) a corpus whose text changed since the run recorded its sha256
    (`now`, when already known, saves reading it again). Runs from before the fingerprint pass."""
    if stored is None:
        return
    now = now or corpus_sha256(data)
    if now != stored:
        source = f"data.path={data.path}" if isinstance(data, TextData) else f"data={data.name}"
        raise UsageError(
            f"{where} was trained on another text than {source} holds now (sha256 {stored[:12]} "
            f"then, {now[:12]} now); restore the file or train again"
        )


def task_spec(data: DataConfig) -> TaskSpec | None:
    """The task a run's data config names, or None for a text corpus."""
    if not isinstance(data, TaskData):
        return None
    return TaskSpec(data.task, data.max_train_len, data.reversed_digits)


def corpus_tokenizer(data: DataConfig):
    """The tokenizer `load_corpus` would train (or read from the cache) for this corpus, without
    tokenizing the corpus: what init_from compares with its run's vocabulary before any work."""
    if isinstance(data, BinData):
        return load_bin(data).tokenizer
    if isinstance(data, TaskData):
        return task_spec(data).vocab
    text = read_text_plan(data)
    return stream.tokenizer_for(
        data, text.source, text.sha, cut=text.cut, n_chars=text.n_chars, cache=text.cache
    )


@dataclass(frozen=True)
class TextPlan:
    """A text corpus read once (its sha256 and length): where it splits, where its tokens are cached."""

    source: Any  # a stream.TextSource
    stats: dict[str, Any]
    sha: str
    n_chars: int
    cut: int
    cache: Path | None  # None: the generated corpus, tokenized in memory


def read_text_plan(data: TextCorpus) -> TextPlan:
    source, stats = text_source(data)
    sha, n_chars = stream.scan(source)
    cut = stream.validation_start(source, n_chars, data.val_fraction)
    cache = None if isinstance(data, SyntheticData) else Path(data.cache_dir)
    return TextPlan(source, stats, sha, n_chars, cut, cache)


def load_corpus(data: DataConfig, tokenizer=None) -> Corpus:
    """The corpus `data` describes, tokenized by `tokenizer` (a run's) or by one trained on its
    training split. Files and datasets go through the token cache; the generated corpus stays in memory."""
    if isinstance(data, BinData):
        return load_bin(data, tokenizer)
    if isinstance(data, TaskData):  # instances are made per batch, in the task's own vocabulary
        return TaskCorpus(task_spec(data))
    text = read_text_plan(data)
    where = dict(cut=text.cut, n_chars=text.n_chars, cache=text.cache)
    tokenizer = tokenizer or stream.tokenizer_for(data, text.source, text.sha, **where)
    train, val, meta = token_arrays(tokenizer, text.source, text.sha, **where)
    stats = text.stats
    stats.update(
        sha256=text.sha,
        chars=text.n_chars,
        train_tokens=len(train),
        val_tokens=len(val),
        chars_per_token=round(text.n_chars / max(len(train) + len(val), 1), 4),
        val_unk_chars=meta["val"]["unk"],
        unigram_entropy_nats=meta["train"]["unigram_entropy_nats"],
    )
    return Corpus(kind_of(data), train, val, tokenizer, stats)


def random_positions(
    batch_size: int, block_size: int, max_position: int, *, generator: torch.Generator
) -> torch.Tensor:
    """Randomized positional encodings (Ruoss et al. 2023): each sequence's positions are a sorted random
    subset of block_size distinct positions from [0, max_position), so training visits every position
    up to max_position while sequences stay block_size long. (batch_size, block_size), int64."""
    keys = torch.rand(batch_size, max_position, generator=generator)
    return keys.argsort(dim=1)[:, :block_size].sort(dim=1).values
