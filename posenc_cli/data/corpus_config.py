"""What a `data` config is: one dataclass per corpus kind (the `data` group's options, which config.schema
composes and registers), each checked by its __post_init__ without torch, before anything heavy is
imported; and a run's record of one read back (`data_config`) and written (`data_record`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping, Optional

from posenc_cli.core.choices import PROBE_TASKS, TOKENIZERS
from posenc_cli.core.errors import UsageError, require_int, require_number, require_positive_int, require_seed
from posenc_cli.data.synthetic_spec import SyntheticSpec

# The text corpora's defaults.
TOKENIZER = "char"
VOCAB_SIZE = 4096  # bpe only
VAL_FRACTION = 0.1  # the last share of the text, held out for validation
CACHE_DIR = "outputs/cache"  # token arrays keyed by the text's sha256 and the tokenizer


def check_tokenizer(tokenizer: str, vocab_size: int) -> None:
    if tokenizer not in TOKENIZERS:
        raise UsageError(f"data.tokenizer={tokenizer} is not known; choose one of: {', '.join(TOKENIZERS)}")
    require_positive_int("data.vocab_size", vocab_size)  # in range even where unused
    if tokenizer == "bpe" and vocab_size < 257:
        raise UsageError(
            "data.vocab_size must be at least 257 for data.tokenizer=bpe (256 byte tokens "
            f"plus merges), got {vocab_size}"
        )


@dataclass
class SyntheticData:
    """The embedded default corpus, generated from data.seed (see posenc_cli/data/synthetic.py)."""

    name: str = "synthetic"  # the generator's own defaults (SyntheticSpec) are the defaults here
    seed: int = SyntheticSpec.seed  # the generator's seed: the same seed, the same corpus
    n_chars: int = SyntheticSpec.n_chars  # characters generated, both splits together
    val_fraction: float = VAL_FRACTION  # the last share of the text, held out for validation
    copy_rate: float = SyntheticSpec.copy_rate  # share of segments that repeat earlier text verbatim
    copy_min_distance: int = SyntheticSpec.copy_min_distance  # how far back a copy reaches (log-uniform)
    copy_max_distance: int = SyntheticSpec.copy_max_distance  # the farthest a copy reaches back
    passkey_rate: float = SyntheticSpec.passkey_rate  # share of segments that are passkey episodes; 0 = none
    passkey_min_distance: int = SyntheticSpec.passkey_min_distance  # least filler between key and question
    # most filler between key and question: keep an episode inside train.block_size
    passkey_max_distance: int = SyntheticSpec.passkey_max_distance
    # the needle task the episodes teach: passkey | multikey | multivalue | multiquery (`posenc probe --task`)
    probe_task: str = SyntheticSpec.probe_task
    tokenizer: str = TOKENIZER  # char | byte | bpe (see TextData)
    vocab_size: int = VOCAB_SIZE  # bpe only

    def __post_init__(self) -> None:
        require_seed("data.seed", self.seed)
        require_positive_int("data.n_chars", self.n_chars)
        require_number("data.val_fraction", self.val_fraction, above=0, below=1)
        for key in ("copy_rate", "passkey_rate"):
            require_number(f"data.{key}", getattr(self, key), at_least=0, at_most=1)
        for kind in ("copy", "passkey"):
            low, high = getattr(self, f"{kind}_min_distance"), getattr(self, f"{kind}_max_distance")
            require_positive_int(f"data.{kind}_min_distance", low)
            require_int(f"data.{kind}_max_distance", high, at_least=low)
        if self.probe_task not in PROBE_TASKS:
            raise UsageError(f"data.probe_task={self.probe_task!r} is not one of {', '.join(PROBE_TASKS)}")
        check_tokenizer(self.tokenizer, self.vocab_size)

    def spec(self) -> SyntheticSpec:
        """The generator's knobs this config sets; the others keep SyntheticSpec's defaults."""
        knobs = {f.name for f in dataclasses.fields(SyntheticSpec)}
        return SyntheticSpec(**{k: v for k, v in dataclasses.asdict(self).items() if k in knobs})


@dataclass
class TextData:
    """Any UTF-8 text file: data=text data.path=FILE. Tokenized once into data.cache_dir, then memory-mapped."""

    local_paths: ClassVar[tuple[str, ...]] = ("path",)  # see config.schema.anchored_paths

    name: str = "text"  # the corpus kind
    path: Optional[str] = None  # the UTF-8 text file (required)
    val_fraction: float = VAL_FRACTION  # the last share of the text, held out for validation
    # char | byte (UTF-8 bytes, 256 ids) | bpe (byte-level BPE trained on the training split)
    tokenizer: str = TOKENIZER
    vocab_size: int = VOCAB_SIZE  # bpe only
    cache_dir: str = CACHE_DIR  # token arrays keyed by the text's sha256 and the tokenizer: never stale

    def __post_init__(self) -> None:
        if not self.path:
            raise UsageError("data=text needs data.path=FILE (a UTF-8 text file)")
        require_number("data.val_fraction", self.val_fraction, above=0, below=1)
        check_tokenizer(self.tokenizer, self.vocab_size)


@dataclass
class BinData:
    """Pre-tokenized ids, nanoGPT-style: data=bin data.train=train.bin data.val=val.bin, with a meta json
    ({"dtype": "uint16", "vocab_size": N, "tokenizer": "tokenizer.json"}) beside data.train or at data.meta.
    See posenc_cli/data/binary.py, which checks the files."""

    local_paths: ClassVar[tuple[str, ...]] = ("train", "val", "meta")  # see config.schema.anchored_paths

    name: str = "bin"  # the corpus kind
    train: Optional[str] = None  # the training split's ids (required)
    val: Optional[str] = None  # the validation split's ids (required)
    meta: Optional[str] = None  # default: meta.json in data.train's folder


@dataclass
class HfData:
    """A Hugging Face dataset's text column (pip install 'posenc[data]'):
    data=hf data.name=wikitext data.config=wikitext-103-raw-v1 (a Hub name: needs a network), or
    data=hf data.name=DIR (a directory from save_to_disk)."""

    local_paths: ClassVar[tuple[str, ...]] = ("name",)  # see config.schema.anchored_paths: a local directory

    kind: str = "hf"  # the corpus kind (data.name is the dataset's)
    name: Optional[str] = None  # the dataset: a Hub name or a save_to_disk directory
    config: Optional[str] = None  # the Hub dataset's configuration, if it has several
    split: str = "train"  # the split trained on
    # the split validated on: auto takes the dataset's validation split, else its test split, else (as
    # null does) the last val_fraction of data.split
    val_split: Optional[str] = "auto"
    text_field: str = "text"  # the column holding the text
    val_fraction: float = VAL_FRACTION  # the last share of data.split, held out where no val_split is used
    tokenizer: str = TOKENIZER  # char | byte | bpe (see TextData)
    vocab_size: int = VOCAB_SIZE  # bpe only
    cache_dir: str = CACHE_DIR  # token arrays keyed by the text's sha256 and the tokenizer

    def __post_init__(self) -> None:
        if not self.name:
            raise UsageError("data=hf needs data.name=DATASET (a Hub name or a save_to_disk directory)")
        require_number("data.val_fraction", self.val_fraction, above=0, below=1)
        check_tokenizer(self.tokenizer, self.vocab_size)


@dataclass
class TaskData:
    """An algorithmic task, its instances made on the fly (posenc_cli/data/tasks.py): data=task
    data.task=copy. train.block_size must hold the longest training sequence."""

    name: str = "task"  # the corpus kind
    task: str = "copy"  # copy | reverse | duplicate | parity | sort | addition | modular
    max_train_len: int = 20  # training instance lengths are drawn from 1..max_train_len
    reversed_digits: bool = False  # addition only: operands and sum least significant digit first

    def __post_init__(self) -> None:
        from posenc_cli.data.tasks import check_task_options  # torch: imported once a task is configured

        check_task_options(self.task, self.max_train_len, self.reversed_digits)


DataConfig = SyntheticData | TextData | BinData | HfData | TaskData
TextCorpus = SyntheticData | TextData | HfData  # read as text, split at val_fraction, then tokenized
CORPUS_CONFIGS: dict[str, type[DataConfig]] = {
    "synthetic": SyntheticData,
    "text": TextData,
    "bin": BinData,
    "hf": HfData,
    "task": TaskData,
}  # corpus_kind -> its dataclass
CORPORA = tuple(CORPUS_CONFIGS)


def corpus_kind(values: Mapping[str, Any]) -> str | None:
    """The corpus kind of a plain data mapping (a composed config or a run's record): `data.kind` where a
    group sets it (hf, whose data.name is the dataset's), else `data.name`."""
    return values.get("kind") or values.get("name")


def kind_of(data: DataConfig) -> str:
    """The corpus kind of a typed data config (CORPUS_CONFIGS' key)."""
    return next(kind for kind, cls in CORPUS_CONFIGS.items() if isinstance(data, cls))


def data_config(record: Mapping[str, Any]) -> DataConfig:
    """A data config as a run (or its export) recorded it, typed again and checked. A key this version
    no longer has is left out; an hf record from before data.val_split validates on its split's tail."""
    kind = corpus_kind(record)
    if kind not in CORPUS_CONFIGS:
        raise UsageError(
            f"the recorded data config names an unknown corpus {kind!r}; posenc knows {', '.join(CORPORA)}"
        )
    cls = CORPUS_CONFIGS[kind]
    known = {f.name for f in dataclasses.fields(cls)}
    values = {k: v for k, v in record.items() if k in known}
    if cls is HfData:
        values.setdefault("val_split", None)
    return cls(**values)


def data_record(data: DataConfig) -> dict[str, Any]:
    """The data config as a run records it (checkpoint.pt's record, summary.json, an export's config.json)."""
    return dataclasses.asdict(data)
