"""The typed config: one dataclass per Hydra group, registered in Hydra's ConfigStore; training.preflight
checks every job of `posenc train` with them before Hydra starts one.

HOW TO ADD A KEY: add a field (type, default, a comment) to its group's dataclass below, and its range check
to that dataclass's `__post_init__` with the errors.require_* helpers. Nothing else: Hydra takes the default
from here, `--cfg job` shows it, a typo is refused naming the nearest key, every job is checked before it runs,
and docs/reference/config.md lists it (scripts/config_reference.py). A new option of a group (e.g. data=bin): a new dataclass and one line in OPTIONS. Scheme options are the
keyword arguments of the scheme class's __init__ (configs/scheme/*.yaml pick their defaults), checked there.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from posenc_cli.core.choices import MAX_LENGTH, PRECISIONS, PROBE_TASKS
from posenc_cli.core.errors import (
    UsageError,
    nearest,
    require_int,
    require_number,
    require_positive_int,
    require_seed,
)
from posenc_cli.data import check_tokenizer_options, corpus_kind
from posenc_cli.data.kinds import CACHE_DIR, TOKENIZER, VAL_FRACTION, VOCAB_SIZE
from posenc_cli.data.synthetic_spec import SyntheticSpec

POSITIONS = ("ordinary", "randomized")
MAX_MODEL_SIZE = 2**20  # model.n_layer, n_head, n_embd: past any model a machine holds


@dataclass
class TrainConfig:
    max_steps: int = 600  # optimizer steps of the run
    batch_size: int = 16  # sequences per step (the global batch under torchrun)
    block_size: int = 256  # the training length; eval lengths are read against it
    lr: float = 3.0e-3  # peak learning rate, reached after warmup_steps
    min_lr: float = 3.0e-4  # where the cosine decay ends, at max_steps
    warmup_steps: int = 50  # linear warm-up from 0 to lr
    weight_decay: float = 0.1  # AdamW's, on matrices only (not biases, norms or gains)
    grad_clip: float = 1.0  # the gradient's global norm is clipped to this
    log_interval: int = 10  # steps per metrics.csv row (mean train loss since the last row)
    eval_interval: int = 100  # steps per validation loss
    eval_batches: int = 8  # validation batches, the same windows for every run
    checkpoint_interval: int = 100  # steps between checkpoints (the last step always saves)
    resume: Optional[str] = None  # a run directory to continue from (true: the newest under outputs/runs)
    # auto: on a native-bf16 CPU the fastest of the three, timed at the run's shapes (cached); fp32 where bf16
    # is emulated; bf16 autocast on a bf16 GPU | fp32 | bf16 | bf16-fp32-attention (bf16 autocast, fp32 SDPA)
    precision: str = "auto"
    threads: Optional[int] = None  # torch threads per job; null = torch's default
    # a run whose weights start this new run (fine-tuning, e.g. at a longer block_size)
    init_from: Optional[str] = None
    # ordinary: 0..T-1 | randomized: sorted random positions from [0, max_position)
    positions: str = "ordinary"
    max_position: Optional[int] = None  # L_max for positions=randomized (>= block_size); eval uses 0..L-1

    def __post_init__(self) -> None:
        for key in (
            "max_steps",
            "batch_size",
            "block_size",
            "log_interval",
            "eval_interval",
            "eval_batches",
            "checkpoint_interval",
        ):
            require_positive_int(f"train.{key}", getattr(self, key))
        # a scheme's table or bias is built at these lengths: past MAX_LENGTH torch's sizes overflow
        require_int("train.block_size", self.block_size, at_least=1, at_most=MAX_LENGTH)
        require_int("train.warmup_steps", self.warmup_steps)
        require_number("train.lr", self.lr, above=0)
        require_number("train.grad_clip", self.grad_clip, above=0)
        require_number("train.min_lr", self.min_lr, at_least=0)
        require_number("train.weight_decay", self.weight_decay, at_least=0)
        if self.min_lr > self.lr:
            raise UsageError(
                f"train.min_lr={self.min_lr} is above train.lr={self.lr}: the cosine decay would raise the "
                f"learning rate; use train.min_lr <= {self.lr}"
            )
        if self.threads is not None:
            require_positive_int("train.threads", self.threads)
        if self.precision not in PRECISIONS:
            raise UsageError(
                f"train.precision={self.precision} is not known; choose one of: {', '.join(PRECISIONS)}"
            )
        if self.positions not in POSITIONS:
            raise UsageError(
                f"train.positions={self.positions} is not known; choose one of: {', '.join(POSITIONS)}"
            )
        if self.positions == "ordinary" and self.max_position is not None:
            raise UsageError(
                f"train.max_position={self.max_position} applies only to train.positions=randomized; "
                "add train.positions=randomized or drop train.max_position"
            )
        if self.positions == "randomized":
            require_int("train.max_position", self.max_position, at_least=self.block_size, at_most=MAX_LENGTH)


@dataclass
class ModelSize:
    n_layer: int = 2  # transformer blocks
    n_head: int = 4  # attention heads (n_embd must divide by it)
    n_embd: int = 128  # model width
    embed_std: float = 0.02  # init std of the (tied) token embedding; experiment=probe raises it

    def __post_init__(self) -> None:
        # 0 is "not a positive integer"; past MAX_MODEL_SIZE torch's sizes overflowed before the memory check
        for key in ("n_layer", "n_head", "n_embd"):
            require_positive_int(f"model.{key}", getattr(self, key))
            require_int(f"model.{key}", getattr(self, key), at_least=1, at_most=MAX_MODEL_SIZE)
        require_number("model.embed_std", self.embed_std, above=0)


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
        check_tokenizer_options(dataclasses.asdict(self))


@dataclass
class TextData:
    """Any UTF-8 text file: data=text data.path=FILE. Tokenized once into data.cache_dir, then memory-mapped."""

    local_paths: ClassVar[tuple[str, ...]] = ("path",)  # see anchored_paths

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
        check_tokenizer_options(dataclasses.asdict(self))


@dataclass
class BinData:
    """Pre-tokenized ids, nanoGPT-style: data=bin data.train=train.bin data.val=val.bin, with a meta json
    ({"dtype": "uint16", "vocab_size": N, "tokenizer": "tokenizer.json"}) beside data.train or at data.meta.
    See posenc_cli/data/binary.py, which checks the files."""

    local_paths: ClassVar[tuple[str, ...]] = ("train", "val", "meta")  # see anchored_paths

    name: str = "bin"  # the corpus kind
    train: Optional[str] = None  # the training split's ids (required)
    val: Optional[str] = None  # the validation split's ids (required)
    meta: Optional[str] = None  # default: meta.json in data.train's folder


@dataclass
class HfData:
    """A Hugging Face dataset's text column (pip install 'posenc[data]'):
    data=hf data.name=wikitext data.config=wikitext-103-raw-v1 (a Hub name: needs a network), or
    data=hf data.name=DIR (a directory from save_to_disk)."""

    local_paths: ClassVar[tuple[str, ...]] = ("name",)  # see anchored_paths: a local directory

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
        check_tokenizer_options(dataclasses.asdict(self))


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


@dataclass
class PosencConfig:
    """The whole config; `scheme` is a plain mapping whose keys the scheme class checks."""

    scheme: Any = MISSING
    model: ModelSize = MISSING
    data: Any = MISSING
    train: TrainConfig = MISSING
    logger: Any = None  # configs/logger/*.yaml (csv, tensorboard, wandb), checked by tracking.check_loggers
    seed: int = 0  # model init, batch order and positions; data.seed is the corpus's own
    device: str = "auto"  # auto | cpu | cuda | cuda:N | mps

    def __post_init__(self) -> None:
        require_seed("seed", self.seed)


# group -> option -> the dataclass (or preset instance) Hydra composes for it
OPTIONS: dict[str, dict[str, Any]] = {
    "train": {"default": TrainConfig()},
    "model": {  # tiny: the default, trains in about a minute on a 2-core CPU; small: nanoGPT's CPU size
        "tiny": ModelSize(n_layer=2, n_head=4, n_embd=128),
        "small": ModelSize(n_layer=4, n_head=4, n_embd=128),
        "medium": ModelSize(n_layer=6, n_head=8, n_embd=256),  # for a GPU or a patient CPU
    },
    "data": {
        "synthetic": SyntheticData,
        "synthetic_small": SyntheticData(n_chars=50_000),
        "text": TextData,
        "bin": BinData,
        "hf": HfData,
        "task": TaskData,
    },
}
DATA = {
    "synthetic": SyntheticData,
    "text": TextData,
    "bin": BinData,
    "hf": HfData,
    "task": TaskData,
}  # data.corpus_kind -> its dataclass


def register() -> None:
    """Put the schema and every typed group option in Hydra's ConfigStore (config.yaml names them)."""
    store = ConfigStore.instance()
    store.store(name="posenc_schema", node=PosencConfig)
    for group, options in OPTIONS.items():
        for name, node in options.items():
            store.store(group=group, name=name, node=node)


register()


def typed(cls: type, values: Any, prefix: str) -> Any:
    """`cls(**values)` with unknown keys refused by name (and the nearest known one)."""
    if not isinstance(values, dict):
        raise UsageError(f"{prefix} must be a mapping of keys, got {values!r}")
    known = [f.name for f in dataclasses.fields(cls)]
    for key in values:
        if key not in known:
            raise UsageError(f"{prefix}.{key} is not a key of {prefix}{nearest(key, known)}")
    return cls(**values)


def anchored_paths(cfg: dict[str, Any]) -> dict[str, Any]:
    """The plain config with its corpus's local paths made absolute (data.path, a bin corpus's files, a
    save_to_disk directory, and data.cache_dir): a run records where its files are, so eval, probe and
    resume find them from any working directory. A path that names nothing stays as given, for the
    refusal to name it; so does a Hub dataset's name."""
    data = cfg.get("data")
    kind = DATA.get(corpus_kind(data)) if isinstance(data, dict) else None
    if kind is None:
        return cfg
    anchored = dict(data)
    for key in (*getattr(kind, "local_paths", ()), "cache_dir"):
        value = anchored.get(key)
        if isinstance(value, str) and value and (key == "cache_dir" or Path(value).expanduser().exists()):
            anchored[key] = os.path.abspath(os.path.expanduser(value))
    return {**cfg, "data": anchored}


def check_keys(cfg: dict[str, Any]) -> PosencConfig:
    """The plain config as typed dataclasses: every key known, every value in range (each __post_init__)."""
    top = [f.name for f in dataclasses.fields(PosencConfig)]
    for key in cfg:
        if key not in top:
            raise UsageError(f"{key} is not a posenc key{nearest(key, top)}")
    data = cfg["data"]
    if not isinstance(data, dict) or corpus_kind(data) not in DATA:
        name = corpus_kind(data) if isinstance(data, dict) else data
        raise UsageError(f"unknown corpus {name!r}; choose one of: {', '.join(DATA)}")
    scheme = cfg["scheme"]
    if not isinstance(scheme, dict) or not isinstance(scheme.get("name"), str):
        raise UsageError(f"scheme must be a scheme option such as scheme=rope, got {scheme!r}")
    typed_cfg = PosencConfig(
        scheme=dict(scheme),
        model=typed(ModelSize, cfg["model"], "model"),
        data=typed(DATA[corpus_kind(data)], data, "data"),
        train=typed(TrainConfig, cfg["train"], "train"),
        **{k: cfg[k] for k in ("logger", "seed", "device") if k in cfg},
    )
    if isinstance(typed_cfg.data, TaskData):
        from posenc_cli.data.tasks import TaskSpec

        task = typed_cfg.data
        TaskSpec(task.task, task.max_train_len, task.reversed_digits).check_fits(typed_cfg.train.block_size)
    return typed_cfg
