"""Hydra's command line as posenc reads it: argument parsing, composition through Hydra's compose API,
sweep expansion (the points a pre-flight checks), and Hydra's errors as one line."""

from __future__ import annotations

import copy
import dataclasses
import itertools
import re
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from hydra import compose, initialize_config_dir
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra._internal.utils import get_args_parser
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException

from posenc_cli.config import composite_schemes  # noqa: F401 - registers scheme=A+B with Hydra
from posenc_cli.config.location import config_dir
from posenc_cli.config.schema import DATA, PosencConfig, TrainConfig
from posenc_cli.core.choices import LAYER_OPTIONS
from posenc_cli.core.errors import (
    UsageError,
    nearest,
)
from posenc_cli.model.shape import ModelSize

EXHAUSTIVE_SWEEP_POINTS = 64  # larger sweeps: every value of every key is checked, not every combination


VALUES_CHECKED_PER_KEY = 64  # past this, a key's values are sampled evenly, its first and last included


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
    from posenc_cli.model.positional import scheme_options  # torch: only once a key is misspelt

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


def output_key(parsed) -> str:
    """The Hydra key naming where the command writes: the sweep's directory, or the run's."""
    return "hydra.sweep.dir" if parsed.multirun else "hydra.run.dir"


def print_sweep(parsed) -> None:
    """`posenc train -m ... --cfg job|hydra|all` (`parsed` by Hydra's parser), which Hydra itself refuses:
    each job's config in sweep order, under a `# job N: overrides` line, printed as it is composed (a bad
    point stops it with one line). --cfg's `--package` is not applied."""
    import sys

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


def first_sweep_point(parsed) -> list[str]:
    """The overrides of a sweep's first job (`parsed` by Hydra's parser): what `-m --info` describes."""
    with composing(parsed):
        return sweep_points(parsed.overrides)[0]


def check_first_point(args: list[str]) -> DictConfig | None:
    """Compose the first job of `posenc train ARGS` (a sweep's first point): a bad override is refused
    here, before the command imports torch (3 s of a refused override's 3.3 before). The composition,
    Hydra's own config included, is returned for the pre-flight (`preflight(args, first=...)`), and is
    the job's. Flags that run nothing are left to the full pre-flight (None)."""
    parsed = parse_hydra_args(args)
    if parsed.help or parsed.hydra_help or parsed.shell_completion or parsed.info:
        return None
    with composing(parsed) as compose_point:
        return compose_point(
            sweep_points(parsed.overrides)[0] if parsed.multirun else parsed.overrides, select=""
        )


def with_layer_options(args: list[str]) -> list[str]:
    """`scheme.window=64` and the other options every scheme takes (LAYER_OPTIONS) as `++scheme.window=64`:
    a scheme's yaml lists its own options only, and Hydra refuses a key it lacks unless told to add it."""
    pattern = re.compile(rf"scheme\.(?:{'|'.join(LAYER_OPTIONS)})=")
    return [f"++{arg}" if pattern.match(arg) else arg for arg in args]


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


def primary_config_dir(parsed) -> Path:
    """The directory Hydra's job composes from: -cd's, else -cp's (an absolute directory: Hydra reads a
    relative one as a Python module's), else posenc's configs."""
    if parsed.config_dir:
        return Path(parsed.config_dir).resolve()
    if not parsed.config_path or "://" in parsed.config_path:  # pkg:// and file:// are Hydra's to resolve
        return config_dir()
    directory = Path(parsed.config_path).expanduser()
    if not directory.is_absolute():
        raise UsageError(
            f"-cp {parsed.config_path}: give -cp an absolute directory (Hydra reads a relative one as a "
            "Python module), or -cd DIR"
        )
    if not directory.is_dir():
        raise UsageError(f"-cp {parsed.config_path}: no such config directory")
    return directory.resolve()


@contextmanager
def composing(parsed) -> Iterator[Callable[..., Any]]:
    """Hydra's compose API over the config directory the arguments name; bad overrides -> UsageError."""
    directory = primary_config_dir(parsed)
    name = parsed.config_name or "config"
    composed: dict[tuple[str, ...], DictConfig] = {}  # group choices -> their composition, reused
    groups: set[str] = set()

    def compose_point(overrides: list[str], select: str | None = None, *, sweep: bool = False) -> Any:
        """The resolved config as plain data, or one resolved key of it (with Hydra's own config), or
        with `sweep` a sweep's own composition (Hydra's multirun.yaml, of its launcher and directory).
        Points that share their group choices share one composition; their value overrides are applied
        to a copy as Hydra applies them, so a large sweep costs one composition per distinct choice."""
        with override_errors():
            if sweep:
                hydra = GlobalHydra.instance().hydra
                assert hydra is not None
                return hydra.compose_config(name, list(overrides), run_mode=RunMode.MULTIRUN)
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


def hydra_quoted(value: str) -> str:
    """`value` as Hydra's override grammar reads it back unchanged: as it is when plain (a path of
    letters, digits and `_/.-+`), else double-quoted, escaping only what Hydra unescapes (quotes, and
    backslashes before a quote or at the end)."""
    if re.fullmatch(r"[A-Za-z0-9_/.+-]+", value) and not value.startswith("+"):
        return value
    escaped = re.sub(r'(\\*)"', lambda m: m.group(1) * 2 + '\\"', value)
    return '"' + re.sub(r"(\\+)$", lambda m: m.group(1) * 2, escaped) + '"'


def override_key(arg: str) -> str:
    """The key an override sets, whatever its prefix: `+train.resume=X`, `++k=v`, `~k` -> the key."""
    return arg.split("=", 1)[0].lstrip("+~")


def override_value(arg: str) -> str:
    """The value of one `key=value` override as Hydra reads it (quotes and escapes undone); the text
    after `=` when Hydra cannot parse it (a sweep, or a bad override the pre-flight names)."""
    raw = arg.split("=", 1)[1]
    try:
        value = OverridesParser.create().parse_overrides([arg])[0].value()
    except HydraException:
        return raw
    return value if isinstance(value, str) else raw
