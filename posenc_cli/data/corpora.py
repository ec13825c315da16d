"""Corpora -> token arrays plus the tokenizer that made them (posenc_cli.data re-exports these).

`load_corpus` is the only door: it takes the `data` config group (and, for a trained run, the run's
own tokenizer) and returns a `Corpus` whose splits are numpy arrays, memory-mapped for files.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import torch

from posenc_cli.core.errors import UsageError
from posenc_cli.data import stream
from posenc_cli.data.binary import load_bin
from posenc_cli.data.corpus import Corpus
from posenc_cli.data.hf_datasets import hf_source
from posenc_cli.data.kinds import CACHE_DIR, CORPORA, VAL_FRACTION, check_tokenizer_options, corpus_kind
from posenc_cli.data.synthetic import generate
from posenc_cli.data.synthetic_spec import SyntheticSpec
from posenc_cli.data.tasks import TaskCorpus, task_spec
from posenc_cli.data.token_cache import token_arrays


def text_source(data_cfg: Mapping[str, Any]) -> tuple[stream.TextSource, dict[str, Any]]:
    """The corpus's text as a stream, and the facts about it a run's summary records."""
    name = corpus_kind(data_cfg)
    if name == "synthetic":
        spec = SyntheticSpec(**{k: v for k, v in data_cfg.items() if k in SyntheticSpec.__dataclass_fields__})
        if spec.n_chars <= 0:
            raise UsageError(f"data.n_chars must be a positive integer, got {spec.n_chars}")
        made = generate(spec)
        return stream.string_source(made.text, "data=synthetic"), {
            "fresh_entropy_nats": made.fresh_entropy,
            "copied_fraction": made.copied_fraction,
            "entropy_floor_nats": made.entropy_floor,
        }
    if name == "text":
        if not data_cfg.get("path"):
            raise UsageError("data=text needs data.path=FILE (a UTF-8 text file)")
        return stream.file_source(data_cfg["path"]), {"path": str(data_cfg["path"])}
    if name == "hf":
        return hf_source(data_cfg)
    raise UsageError(f"unknown corpus {name!r}; choose one of: {', '.join(CORPORA)}")


def corpus_sha256(data_cfg: Mapping[str, Any]) -> str:
    """The sha256 `load_corpus` records, without tokenizing: stream.scan's of the text (the token cache's
    key too), or of a bin corpus's files."""
    if corpus_kind(data_cfg) == "bin":
        return load_bin(data_cfg).sha256
    return stream.scan(text_source(data_cfg)[0])[0]


def require_same_corpus(
    data_cfg: Mapping[str, Any], stored: str | None, where: str, *, now: str | None = None
) -> None:
    """Refuse (one line naming `where`, a run) a corpus whose text changed since the run recorded its sha256
    (`now`, when already known, saves reading it again). Runs from before the fingerprint pass."""
    if stored is None:
        return
    now = now or corpus_sha256(data_cfg)
    if now != stored:
        source = (
            f"data.path={data_cfg.get('path')}" if data_cfg.get("path") else f"data={data_cfg.get('name')}"
        )
        raise UsageError(
            f"{where} was trained on another text than {source} holds now (sha256 {stored[:12]} "
            f"then, {now[:12]} now); restore the file or train again"
        )


def corpus_tokenizer(data_cfg: Mapping[str, Any]):
    """The tokenizer `load_corpus` would train (or read from the cache) for this corpus, without
    tokenizing the corpus: what init_from compares with its run's vocabulary before any work."""
    if corpus_kind(data_cfg) == "bin":
        return load_bin(data_cfg).tokenizer
    if corpus_kind(data_cfg) == "task":
        return task_spec(data_cfg).vocab
    text = read_text_plan(data_cfg)
    return stream.tokenizer_for(
        dict(data_cfg), text.source, text.sha, cut=text.cut, n_chars=text.n_chars, cache=text.cache
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


def read_text_plan(data_cfg: Mapping[str, Any]) -> TextPlan:
    check_tokenizer_options(data_cfg)
    source, stats = text_source(data_cfg)
    sha, n_chars = stream.scan(source)
    cut = stream.validation_start(source, n_chars, data_cfg.get("val_fraction", VAL_FRACTION))
    cache = None if corpus_kind(data_cfg) == "synthetic" else Path(data_cfg.get("cache_dir") or CACHE_DIR)
    return TextPlan(source, stats, sha, n_chars, cut, cache)


def load_corpus(data_cfg: Mapping[str, Any], tokenizer=None) -> Corpus:
    """The corpus `data_cfg` describes, tokenized by `tokenizer` (a run's) or by one trained on its
    training split. Files and datasets go through the token cache; the generated corpus stays in memory."""
    kind = corpus_kind(data_cfg)
    if kind == "bin":
        return load_bin(data_cfg, tokenizer)
    if kind == "task":  # instances are made per batch, in the task's own vocabulary
        return TaskCorpus(task_spec(data_cfg))
    text = read_text_plan(data_cfg)
    where = dict(cut=text.cut, n_chars=text.n_chars, cache=text.cache)
    tokenizer = tokenizer or stream.tokenizer_for(dict(data_cfg), text.source, text.sha, **where)
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
    return Corpus(kind, train, val, tokenizer, stats)


def random_positions(
    batch_size: int, block_size: int, max_position: int, *, generator: torch.Generator
) -> torch.Tensor:
    """Randomized positional encodings (Ruoss et al. 2023): each sequence's positions are a sorted random
    subset of block_size distinct positions from [0, max_position), so training visits every position
    up to max_position while sequences stay block_size long. (batch_size, block_size), int64."""
    keys = torch.rand(batch_size, max_position, generator=generator)
    return keys.argsort(dim=1)[:, :block_size].sort(dim=1).values
