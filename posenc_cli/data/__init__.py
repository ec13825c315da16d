"""Corpora -> token arrays plus the tokenizer that made them.

`load_corpus` (data/corpora.py) is the only door: it takes the `data` config group (a dataclass of
data/corpus_config.py, and for a trained run the run's own tokenizer) and returns a `Corpus` whose
splits are numpy arrays, memory-mapped for files. The package's names are imported on first use (PEP
562), so that importing a torch-free part of it (corpus_config, synthetic, passkey, needles: what the
typed config and the command line need) does not import torch: a refused override answers without it.
"""

from __future__ import annotations

import importlib
from typing import Any

from posenc_cli.data.corpus_config import (  # noqa: F401 (doors)
    CORPORA,
    DataConfig,
    check_tokenizer,
    corpus_kind,
    data_config,
    data_record,
)

LAZY = {  # name -> the module of this package that defines it
    **dict.fromkeys(
        ("text_source", "corpus_sha256", "require_same_corpus", "corpus_tokenizer", "TextPlan"), "corpora"
    ),
    **dict.fromkeys(("read_text_plan", "load_corpus", "random_positions", "task_spec"), "corpora"),
    **dict.fromkeys(("Corpus", "random_batch", "token_window"), "corpus"),
}


def __getattr__(name: str) -> Any:
    if name in LAZY:
        return getattr(importlib.import_module(f"posenc_cli.data.{LAZY[name]}"), name)
    raise AttributeError(f"module 'posenc_cli.data' has no attribute {name!r}")
