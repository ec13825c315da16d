"""`posenc eval`'s work, once for the command and for `posenc.evaluate`: every option checked before any
model is loaded (the fixed names as the command line checks them while parsing, then every value, then
each option the path taken does not read), the targets loaded, scored (perplexity, or exact match for task
runs), and the output set written (results.json last; its numbers to the runs' trackers, report.tracked).
The command only parses and prints; the Python API only spells its keywords as the command's options."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import pandas as pd

from posenc_cli.core.choices import (
    DEVICES,
    EVAL_MODES,
    HF_DEVICE_MAPS,
    HF_DTYPES,
    INDEXED_DEVICE,
    LANGS,
    LEARNED_OVERFLOWS,
    PPL_TOLERANCE,
    PROBE_TASKS,
    RETRIEVAL_THRESHOLD,
)
from posenc_cli.core.device import resolve_device
from posenc_cli.core.errors import UsageError, option_name, refuse_unread, require_bool, require_choice
from posenc_cli.core.file_sets import SetKind
from posenc_cli.evaluation.eval_runs import check_windows, evaluate_runs, rope_methods
from posenc_cli.evaluation.eval_text import eval_text
from posenc_cli.evaluation.hf_models import is_hf
from posenc_cli.evaluation.hf_options import hf_options
from posenc_cli.evaluation.labels import Label
from posenc_cli.evaluation.perplexity import parse_lengths, parse_overflow
from posenc_cli.evaluation.targets import load_targets, named_runs
from posenc_cli.evaluation.task_accuracy import task_accuracy, task_targets
from posenc_cli.model.extension.method import ContextMethod, ExtensionSettings
from posenc_cli.report.effective_length import LengthRule, with_ppl_length
from posenc_cli.report.output_sets import write_eval_outputs
from posenc_cli.report.results_file import provenance
from posenc_cli.report.task_tables import write_task_outputs
from posenc_cli.rundir.destinations import default_out, owned_out


@dataclass(frozen=True)
class Choice:
    """The fixed names an option takes (a comma list of them, or values matching `also` besides)."""

    names: tuple[str, ...]
    comma_list: bool = False
    also: str = ""


# eval's and probe's fixed-name options, by field: the command line declares each with these (--rope-scaling's
# names joined by + are checked by the one parser of model.extension.method: rope_methods)
CHOICES = {
    "mode": Choice(EVAL_MODES),
    "device": Choice(DEVICES, also=INDEXED_DEVICE),
    "lang": Choice(LANGS),
    "learned_overflow": Choice(LEARNED_OVERFLOWS, comma_list=True),
    "dtype": Choice(HF_DTYPES),
    "device_map": Choice(HF_DEVICE_MAPS),
    "task": Choice(PROBE_TASKS),
}
HF_ONLY = ("hf_context", "dtype", "device_map")  # read only to load hf: models
TASKS_READ = ("runs", "lengths", "out", "device", "force")  # all a task eval reads: exact match by length


def check_choices(options: Any) -> None:
    """Each fixed-name option of `options` (an eval's or a probe's), refused in the command line's words."""
    for item in fields(options):
        value, choice = getattr(options, item.name), CHOICES.get(item.name)
        if choice is not None and value is not None:
            require_choice(
                option_name(item.name), value, choice.names, comma_list=choice.comma_list, also=choice.also
            )


def extension_settings(options: Any) -> ExtensionSettings:
    """The extensions' options of `options` (an eval's or a probe's: --self-extend-group, ...) as one."""
    return ExtensionSettings(**{item.name: getattr(options, item.name) for item in fields(ExtensionSettings)})


def check_flags(options: Any) -> None:
    """Each flag of `options` a real bool: the command line can only give one, but from Python a truthy
    word ("no") would be taken as yes, and --force replaces another output set."""
    for item in fields(options):
        if item.type == "bool":
            require_bool(option_name(item.name), getattr(options, item.name))


def refuse_hf_options_without_hf(options: Any, names: list[str]) -> None:
    """--hf-context, --dtype and --device-map load hf: models; with none among the targets they are refused."""
    if not any(is_hf(name) for name in names):
        refuse_unread(
            options, HF_ONLY, why="without an hf: model among the targets (posenc runs score in fp32)"
        )


@dataclass(frozen=True)
class EvalOptions:
    """Every option of `posenc eval`, as the command spells them (comma lists as text), with the command's
    defaults (tests/test_cli.py holds the two alike); results.json records them as given and defaulted."""

    runs: list[str]
    lengths: str = "512,1024,2048"
    mode: str = "nonoverlap"
    stride: int | None = None
    max_tokens: int = 32768
    out: str | None = None
    data: str | None = None  # a text file, or a dataset's split: hf:NAME[:CONFIG]:SPLIT, hf:DIR[:SPLIT]
    text_field: str = "text"
    documents: bool = False
    device: str = "auto"
    lang: str = "en"
    rope_scaling: str = "none"
    rope_factor: float | None = None
    self_extend_group: int | None = None  # the extensions' options: model.extension.method.ExtensionSettings
    self_extend_window: int | None = None
    rerope_window: int | None = None
    rerope_leak: float | None = None
    dca_chunk: int | None = None
    dca_local: int | None = None
    learned_overflow: str = "dash"
    hf_context: int | None = None
    dtype: str = "fp32"
    device_map: str | None = None
    add_context: bool = False
    ppl_tolerance: float = PPL_TOLERANCE
    retrieval_threshold: float = RETRIEVAL_THRESHOLD
    force: bool = False  # replace another kind of output set in --out (core.file_sets.output_set)


@dataclass(frozen=True)
class Evaluation:
    """What `posenc eval` measures: ppl.csv's and loss_by_position.csv's rows, comparison.md's facts per
    column, the output set's directory and files when one was written; for task runs, task_accuracy.csv's
    rows (`tasks`) instead of perplexities."""

    ppl: pd.DataFrame
    loss_by_position: pd.DataFrame
    info: dict[Label, dict]
    out: Path | None
    written: list[Path] = field(default_factory=list)
    tasks: pd.DataFrame | None = None


@dataclass(frozen=True)
class CheckedEval:
    """An eval's options once checked, parsed as the work takes them."""

    out: Path | None  # --out, owned by this command (None: the default, made once the work is done)
    names: list[str]  # the targets as named (a posenc export as hf:EXPORT)
    lengths: list[int]
    overflows: list[str]
    methods: list[ContextMethod]
    device: Any  # a torch.device


def checked_eval(o: EvalOptions) -> CheckedEval:
    """Every option of `o` checked, before any model is loaded: the flags, the fixed names, the values, the options
    only another path reads (--documents without --data, --text-field without a dataset, hf: options
    without an hf: model), and --out (not another kind of output set, unless --force)."""
    check_flags(o)
    check_choices(o)
    out = owned_out(o.out, SetKind.EVALUATION, force=o.force)
    wanted, overflows = parse_lengths(o.lengths), parse_overflow(o.learned_overflow)
    methods = rope_methods(o.rope_scaling, o.rope_factor, extension_settings(o))
    check_windows(o.mode, o.stride, o.max_tokens)
    LengthRule(o.ppl_tolerance, o.retrieval_threshold)  # checked here, applied by the writers (rule_of)
    if o.documents and o.data is None:
        raise UsageError("--documents needs --data hf:DATASET...: the documents to score, each alone")
    if not str(o.data or "").startswith("hf:"):
        refuse_unread(o, ("text_field",), why="without --data hf:DATASET (a column of a dataset's rows)")
    names = named_runs(o.runs, o.data)
    refuse_hf_options_without_hf(o, names)
    return CheckedEval(out, names, wanted, overflows, methods, resolve_device(o.device))


def run_eval(options: EvalOptions, *, write: bool = True) -> Evaluation:
    """Every target of `options` at every length; the output set in --out (outputs/eval/<time> when it is
    not given), or none when `write` is False and no --out is given (posenc.evaluate without `out`)."""
    o, c = options, checked_eval(options)
    loading = hf_options(o.hf_context, c.device, o.dtype, device_map=o.device_map)
    loaded, why, skipped = load_targets(c.names, "evaluate", loading)
    tasks = task_targets(loaded)
    if tasks is not None:  # task runs: --lengths are instance lengths, scored by exact match
        unread = [f.name for f in fields(o) if f.name not in TASKS_READ]
        refuse_unread(o, unread, why="for task runs, scored by exact match")
        accuracy = task_accuracy(tasks, c.lengths, device=c.device)
        out = c.out or (default_out("eval") if write else None)  # made only once the work is done
        made = provenance(loaded, options=asdict(o), data_path=o.data, device=c.device)
        written = write_task_outputs(accuracy, out, made=[made]) if out is not None else []
        return Evaluation(pd.DataFrame(), pd.DataFrame(), {}, out, written, tasks=accuracy)
    if "window" in c.overflows and all(target.max_len is None for target in loaded):
        raise UsageError(
            "--learned-overflow window scores past a position table, and no target here has one (learned); drop it"
        )
    text = eval_text(o.data, loaded, text_field=o.text_field, documents=o.documents) if o.data else None
    df, positions, info = evaluate_runs(
        loaded,
        lengths=c.lengths,
        mode=o.mode,
        stride=o.stride,
        max_tokens=o.max_tokens,
        text=text,
        device=c.device,
        rope_scaling=c.methods,
        rope_factor=o.rope_factor,
        why=why,
        learned_overflow=c.overflows,
        add_context=o.add_context,
    )
    df = with_ppl_length(df, LengthRule.of(asdict(o)))  # ppl.csv's rows, written or not
    out = c.out or (default_out("eval") if write else None)  # made only once the work is done
    if out is None:
        return Evaluation(df, positions, info, None)
    made = provenance(loaded, options=asdict(o), data_path=o.data, device=c.device, text=text)
    written = write_eval_outputs(df, positions, info, out=out, made=[made], lang=o.lang, skipped=skipped)
    return Evaluation(df, positions, info, out, written)
