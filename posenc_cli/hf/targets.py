"""What eval and probe work on: posenc runs and `hf:` models, loaded as evaluation targets."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

from posenc_cli.core.errors import UsageError
from posenc_cli.core.option_groups import EvalOptions, HfLoading, ProbeOptions
from posenc_cli.core.options import refuse_unread
from posenc_cli.evaluation.run_target import RunTarget
from posenc_cli.evaluation.target import EvalTarget
from posenc_cli.hf.export_loading import is_export
from posenc_cli.hf.model_loading import load_hf_model
from posenc_cli.hf.models import PREFIX, is_hf
from posenc_cli.rundir.loading import load_run
from posenc_cli.rundir.selection import Skipped, finished_runs

HF_READ = tuple(f.name for f in fields(HfLoading))  # read only to load hf: models


def load_targets(
    names: list[str], verb: str, hf_options: dict
) -> tuple[list[EvalTarget], str, list[Skipped]]:
    """What eval and probe work on: the posenc runs among `names` (the latest runs when nothing is
    named) and each `hf:ID_OR_PATH` (a posenc export too: exports_as_hf), loaded; why those; the runs
    skipped as unfinished."""
    names = exports_as_hf(names)

    hf_names = list(dict.fromkeys(n for n in names if is_hf(n)))
    paths = [n for n in names if not is_hf(n)]
    if not paths and hf_names:
        return [load_hf_model(name, **hf_options) for name in hf_names], "the models you named", []
    finished, why, skipped = finished_runs(paths, verb)
    runs = [RunTarget.of(load_run(p)) for p in finished]
    return [*runs, *(load_hf_model(name, **hf_options) for name in hf_names)], why, skipped


def exports_as_hf(names: list[str]) -> list[str]:
    """`names`, each posenc export among them (`posenc export RUN`) as `hf:EXPORT`: it is scored as
    transformers loads it (its column and tokenizer rows say hf:)."""
    return [PREFIX + name if not is_hf(name) and is_export(Path(name)) else name for name in names]


def named_runs(runs: list[str], data: Path | None) -> list[str]:
    """RUNS as given (a posenc export as hf:EXPORT); an hf: model needs --data, the text it is scored on
    in its own tokenizer."""
    named = exports_as_hf(list(runs))
    hf_named = [(given, name) for given, name in zip(runs, named) if is_hf(name)]
    if hf_named and data is None:
        given, name = hf_named[0]
        export = f"{given} is a posenc export, scored as {name}, which " if given != name else f"{name} "
        raise UsageError(f"{export}needs --data FILE: the text to evaluate it on (its own tokenizer is used)")
    return named


def refuse_hf_options_without_hf(options: EvalOptions | ProbeOptions, names: list[str]) -> None:
    """--hf-context, --dtype and --device-map load hf: models; with none among the targets they are refused."""
    if not any(is_hf(name) for name in names):
        refuse_unread(
            options, HF_READ, why="without an hf: model among the targets (posenc runs score in fp32)"
        )
