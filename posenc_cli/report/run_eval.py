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

from posenc_cli.core.device import resolve_device
from posenc_cli.core.errors import UsageError
from posenc_cli.core.file_sets import SetKind
from posenc_cli.core.option_groups import EvalOptions, HfLoading, ProbeOptions
from posenc_cli.core.options import check_given, given, options_of, refuse_unread
from posenc_cli.evaluation.eval_runs import check_windows, evaluate_runs, rope_methods
from posenc_cli.evaluation.eval_text import eval_text
from posenc_cli.evaluation.labels import Label
from posenc_cli.evaluation.perplexity import parse_lengths, parse_overflow
from posenc_cli.evaluation.task_accuracy import task_accuracy, task_targets
from posenc_cli.hf.models import is_hf
from posenc_cli.hf.options import hf_options
from posenc_cli.hf.targets import load_targets, named_runs
from posenc_cli.model.extension.method import ContextMethod, ExtensionSettings
from posenc_cli.report.effective_length import LengthRule, with_ppl_length
from posenc_cli.report.output_sets import write_eval_outputs
from posenc_cli.report.results_file import provenance
from posenc_cli.report.task_tables import write_task_outputs
from posenc_cli.rundir.destinations import default_out, owned_out

HF_READ = tuple(f.name for f in fields(HfLoading))  # read only to load hf: models
TASKS_READ = (
    "lengths",
    "out",
    "device",
    "force",
)  # all a task eval reads besides RUNS: exact match by length


def extension_settings(options: EvalOptions | ProbeOptions) -> ExtensionSettings:
    """The model layer's settings of the extensions (--self-extend-group, ...): the extension group whole."""
    return ExtensionSettings(**asdict(options.extension))


def refuse_hf_options_without_hf(options: EvalOptions | ProbeOptions, names: list[str]) -> None:
    """--hf-context, --dtype and --device-map load hf: models; with none among the targets they are refused."""
    if not any(is_hf(name) for name in names):
        refuse_unread(
            options, HF_READ, why="without an hf: model among the targets (posenc runs score in fp32)"
        )


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
    check_given(o)
    s, t = o.scoring, o.text
    out = owned_out(o.outputs.out, SetKind.EVALUATION, force=o.outputs.force)
    wanted, overflows = parse_lengths(s.lengths), parse_overflow(s.learned_overflow)
    methods = rope_methods(o.scaling.rope_scaling, o.scaling.rope_factor, extension_settings(o))
    check_windows(s.mode, s.stride, s.max_tokens)
    LengthRule(**asdict(o.rule))  # checked here, applied by the writers (rule_of)
    if t.documents and t.data is None:
        raise UsageError("--documents needs --data hf:DATASET...: the documents to score, each alone")
    if not str(t.data or "").startswith("hf:"):
        refuse_unread(o, ("text_field",), why="without --data hf:DATASET (a column of a dataset's rows)")
    names = named_runs(o.runs, t.data)
    refuse_hf_options_without_hf(o, names)
    return CheckedEval(out, names, wanted, overflows, methods, resolve_device(o.running.device))


def run_eval(options: EvalOptions, *, write: bool = True) -> Evaluation:
    """Every target of `options` at every length; the output set in --out (outputs/eval/<time> when it is
    not given), or none when `write` is False and no --out is given (posenc.evaluate without `out`)."""
    o, c = options, checked_eval(options)
    s, t = o.scoring, o.text
    loaded, why, skipped = load_targets(c.names, "evaluate", hf_loading(o, c.device))
    tasks = task_targets(loaded)
    if tasks is not None:  # task runs: --lengths are instance lengths, scored by exact match
        unread = [f.name for f in options_of(EvalOptions) if f.name not in TASKS_READ]
        refuse_unread(o, unread, why="for task runs, scored by exact match")
        accuracy = task_accuracy(tasks, c.lengths, device=c.device)
        out = c.out or (default_out("eval") if write else None)  # made only once the work is done
        made = provenance(loaded, options=given(o), data_path=t.data, device=c.device)
        written = write_task_outputs(accuracy, out, made=[made]) if out is not None else []
        return Evaluation(pd.DataFrame(), pd.DataFrame(), {}, out, written, tasks=accuracy)
    if "window" in c.overflows and all(target.max_len is None for target in loaded):
        raise UsageError(
            "--learned-overflow window scores past a position table, and no target here has one (learned); drop it"
        )
    text = eval_text(t.data, loaded, text_field=t.text_field, documents=t.documents) if t.data else None
    df, positions, info = evaluate_runs(
        loaded,
        lengths=c.lengths,
        mode=s.mode,
        stride=s.stride,
        max_tokens=s.max_tokens,
        text=text,
        device=c.device,
        rope_scaling=c.methods,
        rope_factor=o.scaling.rope_factor,
        why=why,
        learned_overflow=c.overflows,
        add_context=o.running.add_context,
    )
    df = with_ppl_length(df, LengthRule(**asdict(o.rule)))  # ppl.csv's rows, written or not
    out = c.out or (default_out("eval") if write else None)  # made only once the work is done
    if out is None:
        return Evaluation(df, positions, info, None)
    made = provenance(loaded, options=given(o), data_path=t.data, device=c.device, text=text)
    written = write_eval_outputs(
        df, positions, info, out=out, made=[made], lang=o.outputs.lang, skipped=skipped
    )
    return Evaluation(df, positions, info, out, written)


def hf_loading(options: EvalOptions | ProbeOptions, device: Any) -> dict:
    """How hf: targets are loaded, from the hf: group, checked (hf.options)."""
    h = options.hf
    return hf_options(h.hf_context, device, h.dtype, device_map=h.device_map)
