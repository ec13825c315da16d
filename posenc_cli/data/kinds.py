"""What a `data` config names, checked without torch: the corpus kind and the tokenizer options (the
typed config validates them while composing, before anything heavy is imported)."""

from __future__ import annotations

from typing import Any, Mapping

from posenc_cli.core.choices import TOKENIZERS
from posenc_cli.core.errors import UsageError, require_positive_int

CORPORA = ("synthetic", "text", "bin", "hf", "task")
# The text corpora's defaults: config.schema's data options take theirs from here.
TOKENIZER = "char"
VOCAB_SIZE = 4096  # bpe only
VAL_FRACTION = 0.1  # the last share of the text, held out for validation
CACHE_DIR = "outputs/cache"  # token arrays keyed by the text's sha256 and the tokenizer


def check_tokenizer_options(data_cfg: Mapping[str, Any]) -> None:
    kind = data_cfg.get("tokenizer", TOKENIZER)
    if kind not in TOKENIZERS:
        raise UsageError(f"data.tokenizer={kind} is not known; choose one of: {', '.join(TOKENIZERS)}")
    vocab_size = data_cfg.get("vocab_size", VOCAB_SIZE)
    require_positive_int("data.vocab_size", vocab_size)  # in range even where unused
    if kind == "bpe":
        if vocab_size < 257:
            raise UsageError(
                "data.vocab_size must be at least 257 for data.tokenizer=bpe (256 byte tokens "
                f"plus merges), got {data_cfg['vocab_size']}"
            )


def corpus_kind(data_cfg: Mapping[str, Any]) -> str:
    """synthetic, text, bin or hf: `data.kind` where a group sets it (hf, whose data.name is the
    dataset's), else `data.name`."""
    return data_cfg.get("kind") or data_cfg.get("name")
