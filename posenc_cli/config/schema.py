"""The typed config: one dataclass per Hydra group, composed here and registered in Hydra's ConfigStore;
training.preflight checks every job of `posenc train` with them before Hydra starts one. Each group's
dataclass lives in the layer that uses it: `train` here (TrainConfig), `model` in model/shape.py
(ModelSize), `data` in data/corpus_config.py (one dataclass per corpus kind).

HOW TO ADD A KEY: add a field (type, default, a comment) to its group's dataclass, and its range check to
that dataclass's `__post_init__` with the errors.require_* helpers. Nothing else: Hydra takes the default
from there, `--cfg job` shows it, a typo is refused naming the nearest key, every job is checked before it
runs, and docs/reference/config.md lists it (scripts/config_reference.py). A new option of a group (e.g.
data=bin): a new dataclass (for a corpus, in data/corpus_config.py with its line in CORPUS_CONFIGS) and one
line in OPTIONS. Scheme options are the keyword arguments of the scheme class's __init__
(configs/scheme/*.yaml pick their defaults), checked there.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from posenc_cli.core.choices import MAX_LENGTH, PRECISIONS
from posenc_cli.core.errors import (
    UsageError,
    nearest,
    require_int,
    require_number,
    require_positive_int,
    require_seed,
)
from posenc_cli.data.corpus_config import (
    CORPUS_CONFIGS,
    BinData,
    DataConfig,
    HfData,
    SyntheticData,
    TaskData,
    TextData,
    corpus_kind,
)
from posenc_cli.model.shape import ModelSize

POSITIONS = ("ordinary", "randomized")


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
class PosencConfig:
    """The whole config. `scheme` is a mapping, its `name` and the keyword arguments of that scheme class's
    __init__ (configs/scheme/*.yaml), which the class checks: a dataclass per scheme would copy each
    class's signature. `logger` maps each tracker (csv, tensorboard, wandb: configs/logger/*.yaml) to its
    options, the keyword arguments of training/tracking.py's logger classes, checked by check_loggers
    there (config/ sits below training/, so it cannot name their types)."""

    scheme: dict[str, Any] = MISSING
    model: ModelSize = MISSING
    data: DataConfig = MISSING
    train: TrainConfig = MISSING
    logger: Optional[dict[str, Any]] = None
    seed: int = 0  # model init, batch order and positions; data.seed is the corpus's own
    device: str = "auto"  # auto | cpu | cuda | cuda:N | mps

    def __post_init__(self) -> None:
        require_seed("seed", self.seed)

    @property
    def scheme_name(self) -> str:
        return self.scheme["name"]

    @property
    def scheme_options(self) -> dict[str, Any]:
        """The scheme's options: its class's keyword arguments."""
        return {k: v for k, v in self.scheme.items() if k != "name"}


@dataclass
class HydraSchema(PosencConfig):
    """PosencConfig as Hydra's schema node (posenc_schema): OmegaConf types no union of dataclasses, so
    `data` is open here; each data option is its own dataclass, and check_keys types the whole."""

    data: Any = MISSING


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
DATA = CORPUS_CONFIGS  # data.corpus_kind -> its dataclass (data/corpus_config.py)


def register() -> None:
    """Put the schema and every typed group option in Hydra's ConfigStore (config.yaml names them)."""
    store = ConfigStore.instance()
    store.store(name="posenc_schema", node=HydraSchema)
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
