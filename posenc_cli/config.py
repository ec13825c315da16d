"""The typed config: one dataclass per Hydra group, registered in Hydra's ConfigStore, and the pre-flight
that checks every job of `posenc train` before Hydra starts one.

HOW TO ADD A KEY: add a field (type, default, a comment) to its group's dataclass below, and its range check
to that dataclass's `__post_init__` with the errors.require_* helpers. Nothing else: Hydra takes the default
from here, `--cfg job` shows it, a typo is refused naming the nearest key, every job is checked before it runs.
A new option of a group (e.g. data=bin): a new dataclass and one line in OPTIONS. Scheme options are the
keyword arguments of the scheme class's __init__ (configs/scheme/*.yaml pick their defaults), checked there.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import re
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Sequence

import torch
from hydra import compose, initialize_config_dir
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra._internal.utils import get_args_parser
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import MISSING, DictConfig, OmegaConf, open_dict
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException

from posenc_cli import composite_configs  # noqa: F401 - registers scheme=A+B with Hydra
from posenc_cli.data import check_tokenizer_options, corpus_kind, require_same_corpus, stream
from posenc_cli.data.synthetic import SyntheticSpec
from posenc_cli.device import PRECISIONS, effective_precision, resolve_device, resumed_precision
from posenc_cli.errors import (
    UsageError,
    nearest,
    require_int,
    require_number,
    require_positive_int,
    require_seed,
)
from posenc_cli.model import ModelConfig
from posenc_cli.model.positional import build_scheme, scheme_options
from posenc_cli.ownership import resumed_config
from posenc_cli.tracking import check_loggers

EXHAUSTIVE_SWEEP_POINTS = 64  # larger sweeps: every value of every key is checked, not every combination
VALUES_CHECKED_PER_KEY = 64  # past this, a key's values are sampled evenly, its first and last included
POSITIONS = ("ordinary", "randomized")


@dataclass
class TrainConfig:
    max_steps: int = 600
    batch_size: int = 16
    block_size: int = 256  # the training length; eval lengths are read against it
    lr: float = 3.0e-3
    min_lr: float = 3.0e-4
    warmup_steps: int = 50
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    log_interval: int = 10
    eval_interval: int = 100
    eval_batches: int = 8
    checkpoint_interval: int = 100  # steps between checkpoints (the last step always saves)
    resume: Optional[str] = None  # a run directory to continue from (true: the newest under outputs/runs)
    precision: str = "auto"  # auto: bf16 autocast on native-bf16 hardware, else fp32 | fp32 | bf16
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
        require_int("train.warmup_steps", self.warmup_steps)
        require_number("train.lr", self.lr, above=0)
        require_number("train.grad_clip", self.grad_clip, above=0)
        require_number("train.min_lr", self.min_lr, at_least=0)
        require_number("train.weight_decay", self.weight_decay, at_least=0)
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
            require_int("train.max_position", self.max_position, at_least=self.block_size)


@dataclass
class ModelSize:
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 128
    embed_std: float = 0.02  # init std of the (tied) token embedding; experiment=probe raises it

    def __post_init__(self) -> None:
        for key in ("n_layer", "n_head", "n_embd"):
            require_positive_int(f"model.{key}", getattr(self, key))
        require_number("model.embed_std", self.embed_std, above=0)


@dataclass
class SyntheticData:
    """The embedded default corpus, generated from data.seed (see posenc_cli/data/synthetic.py)."""

    name: str = "synthetic"  # the generator's own defaults (SyntheticSpec) are the defaults here
    seed: int = SyntheticSpec.seed
    n_chars: int = SyntheticSpec.n_chars
    val_fraction: float = 0.1
    copy_rate: float = SyntheticSpec.copy_rate  # share of segments that repeat earlier text verbatim
    copy_min_distance: int = SyntheticSpec.copy_min_distance  # how far back a copy reaches (log-uniform)
    copy_max_distance: int = SyntheticSpec.copy_max_distance
    passkey_rate: float = SyntheticSpec.passkey_rate  # share of segments that are passkey episodes; 0 = none
    passkey_min_distance: int = SyntheticSpec.passkey_min_distance  # filler between key and question: keep
    passkey_max_distance: int = SyntheticSpec.passkey_max_distance  # it inside train.block_size
    tokenizer: str = "char"  # char | byte | bpe (see TextData)
    vocab_size: int = 4096  # bpe only

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
        check_tokenizer_options(dataclasses.asdict(self))


@dataclass
class TextData:
    """Any UTF-8 text file: data=text data.path=FILE. Tokenized once into data.cache_dir, then memory-mapped."""

    name: str = "text"
    path: Optional[str] = None
    val_fraction: float = 0.1
    # char | byte (UTF-8 bytes, 256 ids) | bpe (byte-level BPE trained on the training split)
    tokenizer: str = "char"
    vocab_size: int = 4096  # bpe only
    cache_dir: str = "outputs/cache"  # token arrays keyed by the text's sha256 and the tokenizer: never stale

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

    name: str = "bin"
    train: Optional[str] = None
    val: Optional[str] = None
    meta: Optional[str] = None  # default: meta.json in data.train's folder


@dataclass
class HfData:
    """A Hugging Face dataset's text column (pip install 'posenc[data]'):
    data=hf data.name=wikitext data.config=wikitext-103-raw-v1 (a Hub name: needs a network), or
    data=hf data.name=DIR (a directory from save_to_disk)."""

    kind: str = "hf"
    name: Optional[str] = None  # the dataset: a Hub name or a save_to_disk directory
    config: Optional[str] = None  # the Hub dataset's configuration, if it has several
    split: str = "train"  # the split read; its last val_fraction is the validation split
    text_field: str = "text"
    val_fraction: float = 0.1
    tokenizer: str = "char"  # char | byte | bpe (see TextData)
    vocab_size: int = 4096
    cache_dir: str = "outputs/cache"

    def __post_init__(self) -> None:
        if not self.name:
            raise UsageError("data=hf needs data.name=DATASET (a Hub name or a save_to_disk directory)")
        require_number("data.val_fraction", self.val_fraction, above=0, below=1)
        check_tokenizer_options(dataclasses.asdict(self))


@dataclass
class PosencConfig:
    """The whole config; `scheme` is a plain mapping whose keys the scheme class checks."""

    scheme: Any = MISSING
    model: ModelSize = MISSING
    data: Any = MISSING
    train: TrainConfig = MISSING
    logger: Any = None  # configs/logger/*.yaml (csv, tensorboard, wandb), checked by tracking.check_loggers
    seed: int = 0
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
    },
}
DATA = {
    "synthetic": SyntheticData,
    "text": TextData,
    "bin": BinData,
    "hf": HfData,
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
    return PosencConfig(
        scheme=dict(scheme),
        model=typed(ModelSize, cfg["model"], "model"),
        data=typed(DATA[corpus_kind(data)], data, "data"),
        train=typed(TrainConfig, cfg["train"], "train"),
        **{k: cfg[k] for k in ("logger", "seed", "device") if k in cfg},
    )


def validate(cfg: DictConfig | dict[str, Any]) -> PosencConfig:
    """Everything checkable without training: keys, ranges, divisibility, scheme options, corpus, lengths,
    and whether the run fits in memory."""
    cfg = OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else cfg
    typed_cfg = check_keys(cfg)
    tc, mc = typed_cfg.train, typed_cfg.model
    ModelConfig(
        vocab_size=1, block_size=tc.block_size, n_layer=mc.n_layer, n_head=mc.n_head, n_embd=mc.n_embd
    )
    max_len, positional = scheme_facts(typed_cfg.scheme, mc.n_embd, mc.n_head, tc.block_size)
    trained_positions = tc.max_position or tc.block_size  # positions 0 .. this - 1 are trained on
    if max_len is not None and max_len < trained_positions:
        given = "train.max_position" if tc.max_position else "train.block_size"
        raise UsageError(
            f"scheme.max_len={max_len} is below {given}={trained_positions}: positions up to "
            f"{trained_positions - 1} are trained on; use scheme.max_len >= {trained_positions} (or null)"
        )
    device = resolve_device(typed_cfg.device)
    effective_precision(device, tc.precision)  # a bad POSENC_CPU_BF16 is one line before any directory
    check_loggers(typed_cfg.logger)
    n_chars, split_len = corpus_size(typed_cfg.data)
    if split_len is not None and tc.block_size + 1 > split_len:
        raise UsageError(
            f"train.block_size={tc.block_size} does not fit the corpus: its smaller split has {split_len} "
            "characters; use "
            + (f"train.block_size <= {split_len - 1}, " if split_len > 1 else "")
            + "a larger corpus or another data.val_fraction"
        )
    cache_dir = getattr(typed_cfg.data, "cache_dir", None)
    if cache_dir is not None:  # the token cache is written while training: a bad place is found now
        from posenc_cli.runs import writable_place

        if Path(writable_place("data.cache_dir", cache_dir)).is_file():
            raise UsageError(f"data.cache_dir={cache_dir} is a file; give a directory for the token cache")
    in_memory = corpus_kind(cfg["data"]) == "synthetic"  # the others stream into a memory-mapped cache
    check_memory(typed_cfg, n_chars if in_memory else None, device, positional)
    if tc.init_from:
        validate_init_from(cfg)
    if tc.resume and (Path(tc.resume) / "summary.json").is_file():  # a changed corpus: before tokenizing
        from posenc_cli.runs import read_summary

        stored = read_summary(Path(tc.resume))
        require_same_corpus(cfg["data"], stored.get("corpus_sha256"), tc.resume)
        saved = (
            stored.get("precision", {}).get("effective")
            if isinstance(stored.get("precision"), dict)
            else None
        )
        if saved is not None:  # the checkpoint's own record is checked again when the resume loads it
            resumed_precision(device, tc.precision, saved, tc.resume)
    return typed_cfg


_scheme_facts: dict[str, tuple[int | None, int]] = {}  # a sweep's points share a few schemes


def scheme_facts(scheme: dict[str, Any], n_embd: int, n_head: int, block_size: int) -> tuple[int | None, int]:
    """(max_len, parameter and buffer elements) of the scheme, built on the meta device: its constructor
    checks every option. Memoised, so a 10,000-point sweep builds each distinct scheme once."""
    key = repr((sorted(scheme.items()), n_embd, n_head, block_size))
    if key not in _scheme_facts:
        options = dict(scheme)
        name = options.pop("name")
        with torch.device("meta"):
            try:
                built = build_scheme(name, n_embd, n_head, block_size, **options)
            except TypeError as err:
                raise UsageError(f"scheme={name}: {one_line(err)}") from None
        size = sum(t.numel() for t in [*built.parameters(), *built.buffers()])
        _scheme_facts[key] = built.max_len, size
    return _scheme_facts[key]


BYTES_PER_CORPUS_CHAR = 40  # a generated corpus: its text, the ids made while encoding, the id arrays (~30)


def memory_needed(cfg: PosencConfig, n_chars: int | None, positional: int = 0) -> dict[str, float]:
    """A rough lower bound of the bytes a run holds at once, by what holds them (fp32, char vocabulary);
    `positional`: the scheme's own parameters and buffers (a learned table of max_len rows)."""
    tc, mc = cfg.train, cfg.model
    d, layers, vocab, tokens = mc.n_embd, mc.n_layer, 256, tc.batch_size * tc.block_size
    params = vocab * d + layers * (12 * d * d + 13 * d)
    return {
        "model.n_embd/model.n_layer (weights, gradients, optimizer)": 16.0 * params,
        "the scheme's positions (scheme.max_len, train.max_position)": 16.0 * positional,
        "train.batch_size x train.block_size (activations)": 4.0 * tokens * (layers * 16 * d + 3 * vocab),
        "train.eval_batches (validation batches)": 16.0
        * tc.eval_batches
        * tc.batch_size
        * (tc.block_size + 1),
        "data (the corpus)": float(BYTES_PER_CORPUS_CHAR * (n_chars or 0)),  # None: memory-mapped
    }


def available_memory(device: torch.device) -> int | None:
    """Bytes free now on the device (CUDA) or in RAM (Linux); None where it cannot be read."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            fields = dict(line.split(":", 1) for line in f)
        return int(fields["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return None


def check_memory(cfg: PosencConfig, n_chars: int | None, device: torch.device, positional: int = 0) -> None:
    free = available_memory(device)
    needed = memory_needed(cfg, n_chars, positional)
    if free is not None and sum(needed.values()) > free:
        biggest = max(needed, key=needed.get)
        raise UsageError(
            f"this run needs at least {sum(needed.values()) / 2**30:,.1f} GiB but {device} has "
            f"{free / 2**30:,.1f} GiB free; most of it is {biggest}: make it smaller"
        )


def config_dir() -> Path:
    """configs/ beside the package in a checkout; the packaged copy in an installed wheel."""
    here = Path(__file__).resolve().parent
    checkout = here.parent / "configs"
    return checkout if (checkout / "config.yaml").is_file() else here / "configs"


def one_line(err: BaseException) -> str:
    """Hydra's message on one line, without the config search path it appends for debugging; a typed
    config's own complaint (wrong type, unknown key) when that is the cause."""
    cause = err.__cause__ if isinstance(err.__cause__, OmegaConfBaseException) else None
    if cause is not None and getattr(cause, "full_key", None):
        owner = getattr(cause, "object_type", None)
        if isinstance(cause, (ConfigKeyError, ConfigAttributeError)) and dataclasses.is_dataclass(owner):
            known = [f.name for f in dataclasses.fields(owner)]
            return f"{cause.full_key} is not a key of {owner.__name__}{nearest(cause.full_key.split('.')[-1], known)}"
        return f"{cause.full_key}: {str(cause).splitlines()[0]}"
    text = str(err).split("Config search path")[0]
    text = re.sub(
        r"Available options in '([^']+)':((?:\s+\S+)+)",
        lambda m: f"Available options in '{m[1]}': {', '.join(m[2].split())}",
        text,
    )
    return " ".join(text.split())


def known_keys() -> list[str]:
    """Every dotted key some option of some group has: what a misspelt key is compared with."""
    keys = [f.name for f in dataclasses.fields(PosencConfig)]
    for group, cls in (("train", TrainConfig), ("model", ModelSize), *(("data", c) for c in DATA.values())):
        keys += [f"{group}.{f.name}" for f in dataclasses.fields(cls)]
    keys += [f"scheme.{option}" for option in [*scheme_options(), "parts"]]
    return sorted(set(keys))


def override_error(err: BaseException) -> UsageError:
    """A composition error as one line; a key Hydra could not find gets the nearest known one."""
    missing = re.search(r"Could not (?:override|delete from config)\S* '([\w.]+)'", str(err))
    if missing and missing[1] not in known_keys():
        return UsageError(
            f"bad override: {missing[1]} is not a posenc key{nearest(missing[1], known_keys())}"
        )
    return UsageError(f"bad override: {one_line(err)}")


@contextmanager
def override_errors() -> Iterator[None]:
    """Hydra's and OmegaConf's errors while composing or resolving a config, as one UsageError line:
    a bad interpolation (hydra.run.dir=${oops}) shows only when it is resolved."""
    try:
        yield
    except (HydraException, OmegaConfBaseException, ValueError) as err:
        raise override_error(err) from None


def preflight(args: list[str]) -> Path | None:
    """Validate every job that `posenc train ARGS` would launch; raise UsageError on the first bad one.
    Returns the directory Hydra will write to (the run's, or the sweep's), read from the first job's
    composition so that claiming it does not compose the config again; None when nothing will run."""
    parsed = parse_hydra_args(args)
    if parsed.help or parsed.hydra_help or parsed.shell_completion:
        return None
    with composing(parsed) as compose_point:
        points = sweep_points(parsed.overrides) if parsed.multirun else [parsed.overrides]
        if parsed.cfg or parsed.info:  # nothing runs: the first point composes or is one line (with -m,
            compose_point(points[0])  # print_sweep composes each point as it prints it)
            return None
        directory = None
        for overrides in points:
            if directory is None:  # with Hydra's own config, which names the directory
                whole = compose_point(overrides, select="")
                with override_errors():
                    directory = Path(str(OmegaConf.select(whole, output_key(parsed))))
                    with open_dict(whole):
                        del whole["hydra"]
                    cfg = OmegaConf.to_container(whole, resolve=True)
            else:
                cfg = compose_point(overrides)
            validate(resumed_config(cfg, overrides) if cfg["train"]["resume"] else cfg)
        return directory


def output_key(parsed) -> str:
    """The Hydra key naming where the command writes: the sweep's directory, or the run's."""
    return "hydra.sweep.dir" if parsed.multirun else "hydra.run.dir"


def print_sweep(args: list[str]) -> None:
    """`posenc train -m ... --cfg job|hydra|all`, which Hydra itself refuses: each job's config in
    sweep order, under a `# job N: overrides` line, printed as it is composed (a bad point stops it with
    one line). --cfg's `--package` is not applied."""
    import sys

    parsed = parse_hydra_args(args)
    with composing(parsed) as compose_point:
        for n, point in enumerate(sweep_points(parsed.overrides, every=True)):
            part = {"job": None, "hydra": "hydra", "all": ""}[parsed.cfg]
            cfg = compose_point(point) if part is None else compose_point(point, select=part)
            with override_errors():
                text = OmegaConf.to_yaml(
                    cfg if isinstance(cfg, (dict, DictConfig)) else {}, resolve=parsed.resolve
                )
            sys.stdout.write(f"# job {n}: {' '.join(point)}\n{text}\n")
            sys.stdout.flush()


def first_sweep_point(args: list[str]) -> list[str]:
    """The overrides of a sweep's first job: what `-m --info` describes (Hydra refuses -m with --info)."""
    parsed = parse_hydra_args(args)
    with composing(parsed):
        return sweep_points(parsed.overrides)[0]


def parse_hydra_args(args: list[str]):
    """Hydra's own command-line parser, with its usage errors as one line instead of a usage block."""
    parser = get_args_parser()

    def error(message: str):
        raise UsageError(
            f"{message}; Hydra flags are -m, --cfg job, --info, -cn/-cp/-cd and the like "
            "(see posenc train --help)"
        )

    parser.error = error
    return parser.parse_args(args)


@contextmanager
def composing(parsed) -> Iterator[Callable[..., Any]]:
    """Hydra's compose API over the config directory the arguments name; bad overrides -> UsageError."""
    directory = Path(parsed.config_dir).resolve() if parsed.config_dir else config_dir()
    name = parsed.config_name or "config"
    composed: dict[tuple[str, ...], DictConfig] = {}  # group choices -> their composition, reused
    groups: set[str] = set()

    def compose_point(overrides: list[str], select: str | None = None) -> Any:
        """The resolved config as plain data, or one resolved key of it (with Hydra's own config).
        Points that share their group choices share one composition; their value overrides are applied
        to a copy as Hydra applies them, so a large sweep costs one composition per distinct choice."""
        with override_errors():
            if select is not None:  # "": the whole config, Hydra's own included
                cfg = compose(config_name=name, overrides=list(overrides), return_hydra_config=True)
                return OmegaConf.select(cfg, select) if select else cfg
            parsed_overrides = OverridesParser.create().parse_overrides(list(overrides))
            if not groups:  # listing the groups costs a config repository: once per command
                groups.update(GlobalHydra.instance().config_loader().list_groups(""))
            choices = tuple(
                o.input_line
                for o in parsed_overrides
                if o.key_or_group.startswith("hydra")
                or ("." not in o.key_or_group and o.key_or_group.split("/")[0] in groups)
            )
            if choices not in composed:
                composed[choices] = compose(config_name=name, overrides=list(choices))
            cfg = copy.deepcopy(composed[choices])
            values = [o for o in parsed_overrides if o.input_line not in choices]
            ConfigLoaderImpl._apply_overrides_to_config(values, cfg)
            return OmegaConf.to_container(cfg, resolve=True)

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(directory), version_base="1.3"):
            yield compose_point
    finally:
        GlobalHydra.instance().clear()


def sweep_points(overrides: list[str], every: bool = False) -> Sequence[list[str]] | Iterator[list[str]]:
    """The sweep's points to check, expanded as the basic sweeper does (a,b, range(), choice(), glob()).
    Up to EXHAUSTIVE_SWEEP_POINTS points: all of them. Beyond: each key's every value at least once
    (point i takes value i mod n of each key), and of a key with more than VALUES_CHECKED_PER_KEY values
    (seed=range(0,10000)) that many, evenly spread, ends included, so any sweep starts in seconds; each
    job checks its own combination again before it trains. Call inside `composing` (glob needs it)."""
    try:
        parser = OverridesParser.create(config_loader=GlobalHydra.instance().config_loader())
        choices: dict[str, list[str]] = {}
        for ov in parser.parse_overrides(overrides):
            key = ov.get_key_element()
            if not ov.is_sweep_override():
                choices[key] = [ov.input_line]
            elif ov.is_discrete_sweep():
                choices[key] = [f"{key}={v}" for v in ov.sweep_string_iterator()]
            elif not any(o.startswith("hydra/sweeper=") for o in overrides):
                raise UsageError(
                    f"bad override: {ov.input_line}: the basic sweeper takes lists, range(), choice() "
                    "and glob(); interval() needs a sweeper plugin (hydra/sweeper=optuna)"
                )
            else:  # interval() under a sweeper plugin, which samples it: check one point inside
                choices[key] = [f"{key}={ov.value().start}"]  # type: ignore[union-attr]
    except HydraException as err:
        raise UsageError(f"bad override: {one_line(err)}") from None
    lists = [values for values in choices.values() if values]
    if not lists:
        return iter([[]]) if every else [[]]
    total = 1
    for values in lists:
        total *= len(values)
    if every:  # all of them, lazily (a 10,000-point sweep prints its first job at once)
        return (list(point) for point in itertools.product(*lists))
    if total <= EXHAUSTIVE_SWEEP_POINTS:
        return [list(point) for point in itertools.product(*lists)]
    lists = [spread(values, VALUES_CHECKED_PER_KEY) for values in lists]
    return [[values[i % len(values)] for values in lists] for i in range(max(map(len, lists)))]


def spread(values: list[str], most: int) -> list[str]:
    """At most `most` of `values`, evenly spaced, the first and the last always among them."""
    if len(values) <= most:
        return values
    return [values[round(i * (len(values) - 1) / (most - 1))] for i in range(most)]


def validate_init_from(cfg: dict[str, Any]) -> None:
    """train.init_from: RUN exists and its weights fit this run (same scheme, shape and vocabulary)."""
    from posenc_cli.data import load_corpus
    from posenc_cli.init_from import check_same_model, initial_state, saved_tokenizer, source_checkpoint
    from posenc_cli.model import GPT
    from posenc_cli.train import model_config

    source, saved = source_checkpoint(cfg["train"]["init_from"])
    same_data = saved.get("data") == cfg["data"]
    tokenizer = saved_tokenizer(source, saved) if same_data else load_corpus(cfg["data"]).tokenizer
    with torch.device("meta"):
        model = GPT(model_config(cfg, len(tokenizer)))
    check_same_model(source, saved, model.cfg.to_dict(), tokenizer)
    initial_state(source, saved, model)


def corpus_size(data: Any) -> tuple[int | None, int | None]:
    """(characters in the corpus, characters in its smaller split, training or validation), read in a streaming pass
    without tokenizing: the split bounds its tokens for char and bpe (a BPE token covers at least one
    character). None where there is nothing to bound (byte tokens; pre-tokenized arrays, checked here by
    loading their headers and checked again once loaded)."""
    values = dataclasses.asdict(data)
    kind = corpus_kind(values)
    if kind == "bin":
        from posenc_cli.data.binary import load_bin

        load_bin(values)
        return None, None
    if kind == "synthetic":
        n = data.n_chars
    elif kind == "text":
        n = stream.scan(stream.file_source(data.path))[1]
    else:
        from posenc_cli.data.hf import hf_source

        n = stream.scan(hf_source(values)[0])[1]
    first_val = stream.split_point(n, data.val_fraction)
    return n, None if data.tokenizer == "byte" else min(first_val, n - first_val)
