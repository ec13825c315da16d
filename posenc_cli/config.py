"""Where the configs live, and the check that turns a bad override into one line before Hydra starts.

Hydra itself runs the job (so -m, launchers, --cfg and run directories all work); this module only
composes each point of the requested sweep with the compose API to validate it, and never runs one.
"""

from __future__ import annotations

import itertools
import math
import re
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import torch
from hydra import compose, initialize_config_dir
from hydra._internal.utils import get_args_parser
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from posenc_cli import composite_configs  # noqa: F401 - registers scheme=A+B with Hydra
from posenc_cli.data import CORPORA, check_tokenizer_options, corpus_kind, stream
from posenc_cli.device import PRECISIONS, resolve_device
from posenc_cli.errors import UsageError, require_positive_int
from posenc_cli.model import ModelConfig
from posenc_cli.model.positional import build_scheme
from posenc_cli.tracking import check_loggers

MAX_SWEEP_POINTS = 10_000


def config_dir() -> Path:
    """configs/ beside the package in a checkout; the packaged copy in an installed wheel."""
    here = Path(__file__).resolve().parent
    checkout = here.parent / "configs"
    return checkout if (checkout / "config.yaml").is_file() else here / "configs"


def one_line(err: Exception) -> str:
    """Hydra's message on one line, without the config search path it appends for debugging."""
    text = str(err).split("Config search path")[0]
    text = re.sub(
        r"Available options in '([^']+)':((?:\s+\S+)+)",
        lambda m: f"Available options in '{m[1]}': {', '.join(m[2].split())}",
        text,
    )
    return " ".join(text.split())


def preflight(args: list[str]) -> None:
    """Validate every job that `posenc train ARGS` would launch; raise UsageError on the first bad one."""
    parsed = parse_hydra_args(args)
    if parsed.help or parsed.hydra_help or parsed.info or parsed.shell_completion:
        return
    points = sweep_points(parsed.overrides) if parsed.multirun else [parsed.overrides]
    with composing(parsed) as compose_point:
        for overrides in points:
            validate(compose_point(overrides))


def resolved_run_dir(args: list[str]) -> str:
    """The directory Hydra would give this single run, with ${now:...} and the rest resolved now."""
    parsed = parse_hydra_args(args)
    with composing(parsed) as compose_point:
        return str(compose_point(parsed.overrides, select="hydra.run.dir"))


def parse_hydra_args(args: list[str]):
    """Hydra's own command-line parser, with its usage errors as one line instead of a usage block."""
    parser = get_args_parser()

    def error(message: str):
        raise UsageError(
            f"{message}; Hydra flags are -m, --cfg job, --info, -cn/-cp/-cd and the like (see posenc train --help)"
        )

    parser.error = error
    return parser.parse_args(args)


@contextmanager
def composing(parsed) -> Iterator[Callable[..., Any]]:
    """Hydra's compose API over the config directory the arguments name; bad overrides -> UsageError."""
    directory = Path(parsed.config_dir).resolve() if parsed.config_dir else config_dir()
    name = parsed.config_name or "config"

    def compose_point(overrides: list[str], select: str | None = None) -> Any:
        """The resolved config as plain data, or one resolved key of it (with Hydra's own config)."""
        try:
            cfg = compose(config_name=name, overrides=list(overrides), return_hydra_config=select is not None)
            return OmegaConf.select(cfg, select) if select else OmegaConf.to_container(cfg, resolve=True)
        except (HydraException, OmegaConfBaseException, ValueError) as err:
            raise UsageError(f"bad override: {one_line(err)}") from None

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(directory), version_base="1.3"):
            yield compose_point
    finally:
        GlobalHydra.instance().clear()


def sweep_points(overrides: list[str]) -> Iterable[list[str]]:
    """Expand `a=1,2 b=x,y` into the cartesian product of plain overrides, as the basic sweeper does."""
    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except HydraException as err:
        raise UsageError(f"bad override: {one_line(err)}") from None
    choices = []
    for ov in parsed:
        key = ov.get_key_element()
        if ov.is_sweep_override():
            choices.append([f"{key}={v}" for v in ov.sweep_string_iterator()])
        else:
            choices.append([ov.input_line])
    points = list(itertools.islice(itertools.product(*choices), MAX_SWEEP_POINTS))
    return [list(p) for p in points]


def validate(cfg: DictConfig | dict[str, Any]) -> None:
    """Everything checkable without training: sizes, divisibility, scheme options, corpus, lengths."""
    cfg = OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else cfg
    tc, mc, data, scheme = cfg["train"], cfg["model"], cfg["data"], dict(cfg["scheme"])
    for key in (
        "max_steps",
        "batch_size",
        "block_size",
        "eval_interval",
        "eval_batches",
        "log_interval",
        "checkpoint_interval",
    ):
        require_positive_int(f"train.{key}", tc[key])
    for key in ("lr", "grad_clip"):
        _number(f"train.{key}", tc[key], positive=True)
    for key in ("min_lr", "weight_decay"):
        _number(f"train.{key}", tc[key], positive=False)
    if (
        not isinstance(tc["warmup_steps"], int)
        or isinstance(tc["warmup_steps"], bool)
        or tc["warmup_steps"] < 0
    ):
        raise UsageError(f"train.warmup_steps must be an integer >= 0, got {tc['warmup_steps']!r}")
    if not isinstance(cfg["seed"], int) or isinstance(cfg["seed"], bool) or cfg["seed"] < 0:
        raise UsageError(f"seed must be an integer >= 0, got {cfg['seed']!r}")
    for key in ("n_layer", "n_head", "n_embd"):
        require_positive_int(f"model.{key}", mc[key])
    _number("model.embed_std", mc["embed_std"], positive=True)
    if tc.get("threads") is not None:
        require_positive_int("train.threads", tc["threads"])
    ModelConfig(
        vocab_size=1,
        block_size=tc["block_size"],
        n_layer=mc["n_layer"],
        n_head=mc["n_head"],
        n_embd=mc["n_embd"],
    )
    name = scheme.pop("name")
    with torch.device("meta"):
        try:
            built = build_scheme(name, mc["n_embd"], mc["n_head"], tc["block_size"], **scheme)
        except TypeError as err:
            raise UsageError(f"scheme={name}: {one_line(err)}") from None
    validate_positions(tc, built)
    resolve_device(cfg["device"])
    check_loggers(cfg.get("logger"))
    if tc.get("precision", "auto") not in PRECISIONS:
        raise UsageError(
            f"train.precision={tc['precision']} is not known; choose one of: {', '.join(PRECISIONS)}"
        )
    split_len = corpus_split_length(data)
    if split_len is not None and tc["block_size"] + 1 > split_len:
        raise UsageError(
            f"train.block_size={tc['block_size']} does not fit the corpus: its validation split has {split_len} "
            f"characters; use train.block_size <= {split_len - 1} or a larger corpus"
        )
    if tc.get("init_from"):
        validate_init_from(cfg)


POSITIONS = ("ordinary", "randomized")


def validate_positions(tc: dict[str, Any], scheme) -> None:
    """train.positions and train.max_position, and a scheme able to represent every position drawn."""
    positions, max_position = tc.get("positions", "ordinary"), tc.get("max_position")
    if positions not in POSITIONS:
        raise UsageError(f"train.positions={positions} is not known; choose one of: {', '.join(POSITIONS)}")
    if positions == "ordinary":
        if max_position is not None:
            raise UsageError(
                f"train.max_position={max_position} applies only to train.positions=randomized; "
                "add train.positions=randomized or drop train.max_position"
            )
        return
    if not isinstance(max_position, int) or isinstance(max_position, bool) or max_position < tc["block_size"]:
        raise UsageError(
            f"train.positions=randomized needs train.max_position, an integer >= "
            f"train.block_size={tc['block_size']}, got {max_position!r}"
        )
    if scheme.max_len is not None and scheme.max_len < max_position:
        raise UsageError(
            f"scheme.max_len={scheme.max_len} is below train.max_position={max_position}: "
            f"positions up to {max_position - 1} are drawn; use a larger scheme.max_len"
        )


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


def corpus_split_length(data: dict[str, Any]) -> int | None:
    """Characters in the smaller (validation) split, read in a streaming pass without tokenizing: a
    bound on its tokens for char and bpe (a BPE token covers at least one character). None where it
    bounds nothing (byte tokens, pre-tokenized arrays: checked once loaded)."""
    kind = corpus_kind(data)
    if kind not in CORPORA:
        raise UsageError(f"unknown corpus {data.get('name')!r}; choose one of: {', '.join(CORPORA)}")
    if kind == "bin":
        from posenc_cli.data.binary import load_bin

        load_bin(data)
        return None
    check_tokenizer_options(data)
    if kind == "synthetic":
        require_positive_int("data.n_chars", data["n_chars"])
        n = data["n_chars"]
    elif kind == "text":
        if not data.get("path"):
            raise UsageError("data=text needs data.path=FILE (a UTF-8 text file)")
        n = stream.scan(stream.file_source(data["path"]))[1]
    else:
        from posenc_cli.data.hf import hf_source

        n = stream.scan(hf_source(data)[0])[1]
    cut = stream.split_point(n, data.get("val_fraction", 0.1))
    return None if data.get("tokenizer", "char") == "byte" else n - cut


def _number(key: str, value: Any, positive: bool) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < 0 or (positive and value == 0):
        raise UsageError(
            f"{key} must be a finite {'positive' if positive else 'non-negative'} number, got {value!r}"
        )
