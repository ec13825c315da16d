"""`posenc eval`'s work, once for the command and for `posenc.evaluate`: every option checked before any
model is loaded, the targets loaded, scored (perplexity, or exact match for task runs), and the output
set written (results.json last; its numbers to the runs' trackers, report.tracked). The command only
parses and prints; the Python API only spells its keywords as the command's options."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

import pandas as pd

from posenc_cli.core.device import resolve_device
from posenc_cli.core.errors import UsageError
from posenc_cli.evaluation.eval_runs import check_windows, evaluate_runs, rope_methods
from posenc_cli.evaluation.eval_text import eval_text
from posenc_cli.evaluation.hf_options import hf_options
from posenc_cli.evaluation.perplexity import parse_lengths, parse_overflow
from posenc_cli.evaluation.targets import load_targets, named_runs
from posenc_cli.evaluation.task_accuracy import refuse_text_options, task_accuracy, task_targets
from posenc_cli.report.effective_length import LengthRule
from posenc_cli.report.output_sets import write_eval_outputs
from posenc_cli.report.results_file import provenance
from posenc_cli.report.task_tables import write_task_outputs
from posenc_cli.rundir.destinations import default_out, owned_out


@dataclass(frozen=True)
class EvalOptions:
    """Every option of `posenc eval`, as the command spells them (comma lists as text); no defaults here:
    the command's are the ones, and results.json records these as given and defaulted."""

    runs: list[str]
    lengths: str
    mode: str
    stride: int | None
    max_tokens: int
    out: str | None
    data: str | None  # a text file, or a dataset's split: hf:NAME[:CONFIG]:SPLIT, hf:DIR[:SPLIT]
    text_field: str
    documents: bool
    device: str
    lang: str
    rope_scaling: str
    rope_factor: float | None
    learned_overflow: str
    hf_context: int | None
    dtype: str
    device_map: str | None
    add_context: bool
    ppl_tolerance: float
    retrieval_threshold: float


@dataclass(frozen=True)
class Evaluation:
    """What `posenc eval` measures: ppl.csv's and loss_by_position.csv's rows, comparison.md's facts per
    column, the output set's directory and files when one was written; for task runs, task_accuracy.csv's
    rows (`tasks`) instead of perplexities."""

    ppl: pd.DataFrame
    loss_by_position: pd.DataFrame
    info: dict[str, dict]
    out: Path | None
    written: list[Path] = field(default_factory=list)
    tasks: pd.DataFrame | None = None


def run_eval(options: EvalOptions, *, write: bool = True) -> Evaluation:
    """Every target of `options` at every length; the output set in --out (outputs/eval/<time> when it is
    not given), or none when `write` is False and no --out is given (posenc.evaluate without `out`)."""
    o = options
    out_dir = owned_out(o.out)
    wanted, overflows = parse_lengths(o.lengths), parse_overflow(o.learned_overflow)
    methods = rope_methods(o.rope_scaling, o.rope_factor)
    check_windows(o.mode, o.stride, o.max_tokens)
    LengthRule(o.ppl_tolerance, o.retrieval_threshold)  # checked here, applied by the writers (rule_of)
    if o.documents and o.data is None:
        raise UsageError("--documents needs --data hf:DATASET...: the documents to score, each alone")
    device = resolve_device(o.device)
    loading = hf_options(o.hf_context, device, o.dtype, device_map=o.device_map)
    loaded, why, skipped = load_targets(named_runs(o.runs, o.data), "evaluate", loading)
    tasks = task_targets(loaded)
    if tasks is not None:  # task runs: --lengths are instance lengths, scored by exact match
        refuse_text_options(data=o.data, mode=o.mode, stride=o.stride, rope_scaling=o.rope_scaling)
        if o.documents:
            raise UsageError("--documents scores text; task runs are scored by exact match: drop it")
        accuracy = task_accuracy(tasks, wanted, device=device)
        out = out_dir or (default_out("eval") if write else None)  # made only once the work is done
        made = provenance(loaded, options=asdict(o), data_path=o.data, device=device)
        written = write_task_outputs(accuracy, out, made=[made]) if out is not None else []
        return Evaluation(pd.DataFrame(), pd.DataFrame(), {}, out, written, tasks=accuracy)
    text = eval_text(o.data, loaded, text_field=o.text_field, documents=o.documents) if o.data else None
    df, positions, info = evaluate_runs(
        loaded,
        lengths=wanted,
        mode=o.mode,
        stride=o.stride,
        max_tokens=o.max_tokens,
        text=text,
        device=device,
        rope_scaling=methods,
        rope_factor=o.rope_factor,
        why=why,
        learned_overflow=overflows,
        add_context=o.add_context,
    )
    out = out_dir or (default_out("eval") if write else None)  # made only once the work is done
    if out is None:
        return Evaluation(df, positions, info, None)
    made = provenance(loaded, options=asdict(o), data_path=o.data, device=device, text=text)
    written = write_eval_outputs(df, positions, info, out=out, made=[made], lang=o.lang, skipped=skipped)
    return Evaluation(df, positions, info, out, written)
