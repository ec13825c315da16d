"""Corpora -> token tensors plus the vocabulary that made them.

`load_corpus` is the only door: it takes the `data` config group and returns a `Corpus`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Mapping

import torch

from posenc_cli.data.fingerprint import text_sha256
from posenc_cli.data.synthetic import SyntheticSpec, generate
from posenc_cli.data.text import read_text_file
from posenc_cli.data.vocab import Vocab
from posenc_cli.errors import UsageError

CORPORA = ("synthetic", "text")


@dataclass
class Corpus:
    name: str
    train: torch.Tensor
    val: torch.Tensor
    vocab: Vocab
    sha256: str  # of the whole text: a run records it, eval and probe refuse a corpus that changed since
    stats: dict[str, Any] = field(default_factory=dict)


def split_text(text: str, val_fraction: float) -> tuple[str, str]:
    cut = int(len(text) * (1 - val_fraction))
    return text[:cut], text[cut:]


def load_corpus(data_cfg: Mapping[str, Any]) -> Corpus:
    name = data_cfg["name"]
    if name == "synthetic":
        spec = SyntheticSpec(**{k: v for k, v in data_cfg.items() if k in SyntheticSpec.__dataclass_fields__})
        made = generate(spec)
        text = made.text
        stats = {"fresh_entropy_nats": made.fresh_entropy, "copied_fraction": made.copied_fraction,
                 "entropy_floor_nats": made.entropy_floor}
    elif name == "text":
        text = read_text_file(data_cfg["path"])
        stats = {"path": str(data_cfg["path"])}
    else:
        raise UsageError(f"unknown corpus {name!r}; choose one of: {', '.join(CORPORA)}")
    train_text, val_text = split_text(text, data_cfg.get("val_fraction", 0.1))
    vocab = Vocab.from_text(train_text)
    if vocab.missing(val_text):
        vocab = Vocab.from_text(train_text, with_unk=True)  # documented: unseen validation chars -> <unk>
    stats["val_unk_chars"] = sum(1 for c in val_text if c not in vocab.chars)
    stats["unigram_entropy_nats"] = unigram_entropy(train_text)
    return Corpus(name, vocab.encode(train_text), vocab.encode(val_text, strict=False), vocab, text_sha256(text), stats)


def unigram_entropy(text: str) -> float:
    """Nats per character of a model that knows only character frequencies: the bar to beat."""
    counts = torch.tensor(list(Counter(text).values()), dtype=torch.float64)
    p = counts / counts.sum()
    return float(-(p * p.log()).sum())


def random_positions(batch_size: int, block_size: int, max_position: int,
                     generator: torch.Generator) -> torch.Tensor:
    """Randomized positional encodings (Ruoss et al. 2023): each sequence's positions are a sorted random
    subset of block_size distinct positions from [0, max_position), so training visits every position
    up to max_position while sequences stay block_size long. (batch_size, block_size), int64."""
    keys = torch.rand(batch_size, max_position, generator=generator)
    return keys.argsort(dim=1)[:, :block_size].sort(dim=1).values


def random_batch(tokens: torch.Tensor, batch_size: int, block_size: int, generator: torch.Generator):
    """Random windows of block_size+1 tokens -> (inputs, next-token targets)."""
    starts = torch.randint(len(tokens) - block_size, (batch_size,), generator=generator)
    windows = torch.stack([tokens[s : s + block_size + 1] for s in starts.tolist()])
    return windows[:, :-1], windows[:, 1:]
