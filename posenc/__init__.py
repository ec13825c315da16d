"""posenc from Python: the few calls a notebook needs, each a thin call into the functions the `posenc`
command runs (no copies), returning pandas objects; a bad value raises the same UsageError (one line,
naming it) that the command prints.

    import posenc
    run = posenc.train(overrides=["experiment=smoke", "scheme=rope", "hydra.run.dir=rope"])
    result = posenc.evaluate([run], lengths=[128, 256])   # result.ppl: ppl.csv's rows
    posenc.schemes(); posenc.inspect("rope"); posenc.probe([run], lengths=[128])
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable
from dataclasses import asdict
from inspect import Parameter, Signature, signature
from pathlib import Path
from typing import Any, Callable, Sequence

import pandas as pd

from posenc_cli import __version__
from posenc_cli.cli.inspect_command import check_options
from posenc_cli.cli.schemes_command import scheme_rows
from posenc_cli.core.device import resolve_device
from posenc_cli.core.errors import UsageError
from posenc_cli.core.option_groups import EvalOptions, ProbeOptions
from posenc_cli.core.options import Option, build, options_of
from posenc_cli.hf.loading_options import hf_options
from posenc_cli.hf.model_loading import load_hf_model
from posenc_cli.inspection.inspect_scheme import inspect_scheme
from posenc_cli.report.results_file import labels_as_text
from posenc_cli.report.run_eval import Evaluation, run_eval
from posenc_cli.report.run_probe import probe_options
from posenc_cli.rundir import loading
from posenc_cli.rundir.loading import LoadedRun
from posenc_cli.training.launch import train_with

__all__ = ["Evaluation", "UsageError", "evaluate", "inspect", "load_hf", "load_run", "probe", "schemes"]
__all__ += ["train", "__version__"]

TARGETS = "a run directory, an hf: name or a loaded run, or a list of them"
TARGET_TYPES = str | os.PathLike | LoadedRun | Iterable[str | os.PathLike | LoadedRun]
LISTED = str | int | float | Iterable  # a comma list's keyword: the list, or the command's text
PATH = str | os.PathLike | None
VALUES = 'a value, a comma list ("a,b") or a list of values'
INSPECT_OPTIONS = ("dim", "heads", "layout", "length", "slopes")  # inspect's keywords besides `out`


def items_of(argument: str, values: Any, kinds: tuple[type, ...], *, allowed: str) -> list:
    """`values` as a list: one value of `kinds` is one item (never its characters); anything else, None,
    bytes or a list holding some other type, one line naming `argument` and what it takes."""
    if isinstance(values, kinds):
        return [values]
    items = list(values) if isinstance(values, Iterable) and not isinstance(values, (bytes, str)) else None
    if items is None or not all(isinstance(item, kinds) for item in items):
        raise UsageError(f"{argument}={values!r} is not {allowed}")
    return items


def train(overrides: str | Sequence[str] = ()) -> Path | None:
    """`posenc train OVERRIDES`: the run (or sweep, with "-m") directory it trained into."""
    return train_with(
        items_of("overrides", overrides, (str,), allowed='an override ("scheme=rope") or a list')
    )


def target_names(targets: str | Path | LoadedRun | Iterable[str | Path | LoadedRun]) -> list[str]:
    """Run directories, `hf:` names or loaded runs, as the command line names them; one string or path
    is one target (never its characters)."""
    names = items_of("targets", targets, (str, os.PathLike, LoadedRun), allowed=TARGETS)
    if not names:
        raise UsageError(f"targets=[] names nothing; give {TARGETS}")
    return [str(t.path) if isinstance(t, LoadedRun) else os.fspath(t) for t in names]


def as_text(argument: str, values: str | int | float | Iterable) -> str:
    """[512, 1024], "512,1024" or 512 -> "512,1024": the command's spelling, parsed by its own parsers."""
    return ",".join(map(str, items_of(argument, values, (str, int, float), allowed=VALUES)))


def path_text(argument: str, value: str | os.PathLike) -> str:
    """A path as the command line gives it: text, or one line naming `argument` for anything else."""
    if not isinstance(value, (str, os.PathLike)):
        raise UsageError(f"{argument}={value!r} is not a path; give a str or a pathlib.Path")
    return os.fspath(value)


def optional_text(argument: str, value: str | Path | None) -> str | None:
    """A path option as the command line gives it: text, or None when left out."""
    return None if value is None else path_text(argument, value)


def load_run(run_dir: str | Path) -> LoadedRun:
    """A run's model rebuilt from its directory alone, as `posenc export` reads it."""
    return loading.load_run(path_text("run_dir", run_dir))


def load_hf(
    id_or_path: str,
    *,
    context: int | None = None,
    device: str = "cpu",
    dtype: str = "fp32",
    device_map: str | None = None,
):
    """`hf:ID_OR_PATH` (the prefix may be left out) as eval scores it, its options checked as the command
    line's --hf-context, --device, --dtype and --device-map are."""
    given = path_text("id_or_path", id_or_path)
    name = given if given.startswith("hf:") else f"hf:{given}"
    options = hf_options(context, resolve_device(device), dtype, device_map=device_map)
    return load_hf_model(name, **options)


def keyword(item: Option) -> Parameter:
    """One option of a group (core.options) as the API's keyword: its name and default, its type widened
    where the API takes more than the command's text (a list for a comma list, a Path for a path)."""
    kind = LISTED if item.spec.listed else PATH if item.spec.path else item.type
    return Parameter(item.name, Parameter.KEYWORD_ONLY, default=item.default, annotation=kind)


def with_keywords(options: type) -> Callable[[Callable], Callable]:
    """A call's signature made from a command's options class: the targets, then every option of its
    groups as a keyword with the command's default, so the keywords are the command's by construction."""

    def made(call: Callable) -> Callable:
        first = Parameter("targets", Parameter.POSITIONAL_OR_KEYWORD, annotation=TARGET_TYPES)
        call.__signature__ = Signature(
            [first, *map(keyword, options_of(options))], return_annotation=call.__annotations__.get("return")
        )
        return call

    return made


def options_from(call: Callable, options: type, targets: Any, keywords: dict[str, Any]) -> Any:
    """The command's options from a call's targets and keywords (an unknown keyword: Python's TypeError),
    each spelled as the command line spells it, so that the command's own checks run on them."""
    bound = signature(call).bind(targets, **keywords)
    bound.apply_defaults()
    values = dict(bound.arguments)
    for item in options_of(options):
        value = values[item.name]
        if item.spec.listed:
            values[item.name] = as_text(item.name, value)
        elif item.spec.path:
            values[item.name] = optional_text(item.name, value)
    return build(options, values, runs=target_names(values["targets"]))


@with_keywords(EvalOptions)
def evaluate(targets: Any, **keywords: Any) -> Evaluation:
    """`posenc eval`, its options as keywords (lists or the command's comma lists), checked by the
    command's own checks: every target at every length (`.tasks` holds task runs' accuracy). With `out`,
    the output set (tables, figures, results.json) is written there too; without it, nothing is written."""
    options = options_from(evaluate, EvalOptions, targets, keywords)
    result = run_eval(options, write=options.outputs.out is not None)
    tasks = None if result.tasks is None else labels_as_text(result.tasks)
    return dataclasses.replace(  # each column as ppl.csv shows it, as a notebook selects it (info: by Label)
        result,
        ppl=labels_as_text(result.ppl),
        loss_by_position=labels_as_text(result.loss_by_position),
        tasks=tasks,
    )


@with_keywords(ProbeOptions)
def probe(targets: Any, **keywords: Any) -> pd.DataFrame:
    """`posenc probe`, its options as keywords, checked by the command's own checks: passkey or needle
    retrieval by length and depth, once per RoPE scaling method; probe.csv's rows (and its output set
    with `out`; without it, nothing is written)."""
    options = options_from(probe, ProbeOptions, targets, keywords)
    return labels_as_text(probe_options(options, write=options.outputs.out is not None).rows)


def schemes() -> pd.DataFrame:
    """`posenc schemes`: one row per positional scheme, its kind, cost and the chapters' claim."""
    return pd.DataFrame(scheme_rows()).set_index("scheme")


def inspect(scheme: str, *, out: str | Path | None = None, **options: Any) -> pd.DataFrame:
    """`posenc inspect SCHEME`: its claims checked, one row each (claim, passed, measured, needs, note);
    the figures drawn are in `.attrs["figures"]`. options: INSPECT_OPTIONS (another is refused)."""
    unknown = next((name for name in options if name not in INSPECT_OPTIONS), None)
    if unknown is not None:
        raise UsageError(f"inspect has no option {unknown!r}; known: {', '.join(INSPECT_OPTIONS)}, out")
    scheme_options = {k: options.pop(k) for k in ("layout", "slopes") if options.get(k) is not None}
    check_options(
        options.get("dim"), options.get("heads"), options.get("length"), run=None, layer=None, head=None
    )
    result = inspect_scheme(
        name=scheme, out=Path(out) if out is not None else None, options=scheme_options, **options
    )
    checks = pd.DataFrame([asdict(check) for check in result.checks])
    checks.attrs["figures"] = list(result.figures)
    return checks
