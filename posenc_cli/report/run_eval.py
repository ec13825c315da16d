"""`posenc eval`'s work, its one home, which the command and `posenc.evaluate` both call: every option checked before any
model is loaded (the fixed names as the command line checks them while parsing, then every value, then
each option the path taken does not read), the targets loaded, scored (perplexity, or exact match for task
runs), and the output set written (results.json last; its numbers to the runs' trackers, report.tracked).
The command only parses and prints; the Python API only spells its keywords as the command's options."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from posenc_cli.core import ui
from posenc_cli.core.device import resolve_device
from posenc_cli.core.errors import UsageError
from posenc_cli.core.file_sets import SetKind
from posenc_cli.core.option_groups import EvalOptions, ProbeOptions
from posenc_cli.core.options import check_given, given, options_of, refuse_unread
from posenc_cli.core.ui import announce
from posenc_cli.evaluation.columns import (
    as_trained,
    asked_methods,
    column_label,
    unscalable_note,
)
from posenc_cli.evaluation.eval_plan import RunPlan, Scoring, plan_runs
from posenc_cli.evaluation.eval_scoring import score_variant, unscored_row
from posenc_cli.evaluation.eval_text import EvalText, eval_text
from posenc_cli.evaluation.labels import Label, distinctions, mixes_own_tokenizers
from posenc_cli.evaluation.perplexity import check_windows, parse_lengths, parse_overflow
from posenc_cli.evaluation.run_target import RunTarget
from posenc_cli.evaluation.target import EvalTarget, RefusedColumn
from posenc_cli.evaluation.task_accuracy import task_accuracy, task_targets
from posenc_cli.hf.export_target import ExportModel
from posenc_cli.hf.loading_options import hf_options
from posenc_cli.hf.targets import load_targets, named_runs, refuse_hf_options_without_hf
from posenc_cli.model.extension.method import ContextMethod
from posenc_cli.model.flex import ATTENTION_BACKEND, attention_backend, flex_takes
from posenc_cli.report.effective_length import LengthRule, with_ppl_length
from posenc_cli.report.output_sets import write_eval_outputs
from posenc_cli.report.results_file import provenance
from posenc_cli.report.task_tables import write_task_outputs
from posenc_cli.rundir.destinations import default_out, owned_out

TASKS_READ = (
    "lengths",
    "out",
    "device",
    "force",
)  # all a task eval reads besides RUNS: exact match by length


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
    """An eval's options once checked, parsed as the work takes them: what run_eval reads past the checks."""

    out: Path | None  # --out, owned by this command (None: the default, made once the work is done)
    names: list[str]  # the targets as named (a posenc export as hf:EXPORT)
    lengths: list[int]
    overflows: list[str]
    methods: list[ContextMethod]
    device: Any  # a torch.device
    scoring: Scoring  # --mode and --stride (check_windows) on the device
    max_tokens: int  # checked with them
    rope_factor: float | None  # bounded, and only with a frequency scaling (rope_methods)
    add_context: bool
    backend: str  # --attention-backend, auto resolved for the device (resolved_backend)
    hf: dict  # how hf: targets are loaded, checked (hf.loading_options)


def checked_eval(o: EvalOptions) -> CheckedEval:
    """Every option of `o` checked, before any model is loaded: the flags, the fixed names, the values, the options
    only another path reads (--documents without --data, --text-field without a dataset, hf: options
    without an hf: model), --out (not another kind of output set, unless --force), and how hf: models load."""
    check_given(o)
    s, t = o.scoring, o.text
    out = owned_out(o.outputs.out, SetKind.EVALUATION, force=o.outputs.force)
    wanted, overflows = parse_lengths(s.lengths), parse_overflow(s.learned_overflow)
    methods = asked_methods(o.scaling, o.extension)
    check_windows(s.mode, s.stride, s.max_tokens)
    LengthRule(**asdict(o.rule))  # checked here, applied by the writers (rule_of)
    if t.documents and t.data is None:
        raise UsageError("--documents needs --data hf:DATASET...: the documents to score, each alone")
    if not str(t.data or "").startswith("hf:"):
        refuse_unread(o, ("text_field",), why="without --data hf:DATASET (a column of a dataset's rows)")
    names = named_runs(o.runs, t.data)
    refuse_hf_options_without_hf(o, names)
    device = resolve_device(o.running.device)
    backend = resolved_backend(o.running.attention_backend, device)
    hf = hf_loading(o, device)
    scoring = Scoring(s.mode, s.stride, device)
    return CheckedEval(
        out, names, wanted, overflows, methods, device, scoring, s.max_tokens, o.scaling.rope_factor,
        o.running.add_context, backend, hf,
    )  # fmt: skip


def run_eval(options: EvalOptions, *, write: bool = True) -> Evaluation:
    """Every target of `options` at every length; the output set in --out (outputs/eval/<time> when it is
    not given), or none when `write` is False and no --out is given (posenc.evaluate without `out`)."""
    o, c = options, checked_eval(options)
    t = o.text
    loaded, why, skipped = load_targets(c.names, "evaluate", c.hf)
    tasks = task_targets(loaded)
    if tasks is not None:  # task runs: --lengths are instance lengths, scored by exact match
        unread = [f.name for f in options_of(EvalOptions) if f.name not in TASKS_READ]
        refuse_unread(o, unread, why="for task runs, scored by exact match")
        accuracy = task_accuracy(tasks, c.lengths, device=c.device)
        out = c.out or (default_out("eval") if write else None)  # made only once the work is done
        made = provenance(loaded, options=given(o), data_path=None, device=c.device)  # --data refused above
        written = write_task_outputs(accuracy, out, made=[made]) if out is not None else []
        return Evaluation(pd.DataFrame(), pd.DataFrame(), {}, out, written, tasks=accuracy)
    if "window" in c.overflows and all(target.max_len is None for target in loaded):
        raise UsageError(
            "--learned-overflow window scores past a position table, and no target here has one (learned); drop it"
        )
    text = eval_text(t.data, loaded, text_field=t.text_field, documents=t.documents) if t.data else None
    with attention_backend(c.backend):
        df, positions, info = evaluate_runs(loaded, c, text=text, why=why)
    df = with_ppl_length(df, LengthRule(**asdict(o.rule)))  # ppl.csv's rows, written or not
    out = c.out or (default_out("eval") if write else None)  # made only once the work is done
    if out is None:
        return Evaluation(df, positions, info, None)
    made = provenance(loaded, options=given(o), data_path=t.data, device=c.device, text=text)
    written = write_eval_outputs(
        df, positions, info, out=out, made=[made], lang=o.outputs.lang, skipped=skipped
    )
    return Evaluation(df, positions, info, out, written)


def resolved_backend(asked: str, device) -> str:
    """--attention-backend auto: FlexAttention on CUDA, where it is compiled once and pays at once; on a
    CPU the executor's own kernels, as a compile there costs about a minute before the first window."""
    if asked != "auto":
        return asked
    return "flex" if torch.device(device).type == "cuda" else "sdpa"


def computed_by(run: EvalTarget) -> str:
    """What computed a column's attention (results.json's `attention`): FlexAttention for the layers it
    expresses and the executor for the others (`flex (2 of 6 layers), sdpa`), the executor alone, or an
    hf: model's own kernels."""
    model = (
        run.gpt
        if isinstance(run, ExportModel)
        else (run.active or run.model)
        if isinstance(run, RunTarget)
        else None
    )
    if model is None:
        return "transformers"
    flexed = (
        sum(flex_takes(layer, positions=None) for layer in model.attention)
        if ATTENTION_BACKEND.get() == "flex"
        else 0
    )
    if not flexed:
        return "sdpa"
    return (
        "flex"
        if flexed == len(model.attention)
        else f"flex ({flexed} of {len(model.attention)} layers), sdpa"
    )


def hf_loading(options: EvalOptions | ProbeOptions, device: Any) -> dict:
    """How hf: targets are loaded, from the hf: group, checked (hf.loading_options)."""
    h = options.hf
    return hf_options(h.hf_context, device, h.dtype, device_map=h.device_map)


DYNAMIC_AS_NTK = (
    "a +ntk column also stands for dynamic NTK: with no --rope-factor both give base·(T/L)^(d/(d−2)) for every "
    "full window of T tokens, so dynamic is shown once, as ntk (posenc scores whole windows; "
    "in generation dynamic would grow with the position instead)"
)


def overflow_variants(run, overflows: list[str]) -> list[tuple[str, int | None]]:
    """(label overflow, context cap) pairs: a run with a position table once per choice, `window` for the
    one scored past its table through windows of max_len tokens; any other run once, as it is."""
    limit = run.max_len
    if limit is None:
        return [("", None)]
    return [("window", limit) if choice == "window" else ("", None) for choice in overflows]


def same_computation(methods: list[ContextMethod], rope_factor) -> tuple[list[ContextMethod], set[str]]:
    """The methods to score, and the scalings of the columns that stand for a dropped one: with no
    --rope-factor, dynamic NTK is ntk at every full window (both give base·(T/L)^(d/(d-2)) for a window of
    T tokens), so it is scored once, as ntk (ContextMethod.whole_window_twin: `dynamic+logn` as
    `ntk+logn`)."""
    methods = list(methods)
    if rope_factor is not None:
        return methods, set()
    twins = [m.whole_window_twin for m in methods if m.whole_window_twin in methods]
    return [m for m in methods if m.whole_window_twin not in methods], {twin.scaling for twin in twins}


def evaluate_runs(
    runs: list[EvalTarget], checked: CheckedEval, *, text: EvalText | None, why: str = ""
) -> tuple[pd.DataFrame, pd.DataFrame, dict[Label, dict]]:
    """Every run at each of its lengths (perplexity.target_lengths), rotary runs once per RoPE scaling
    method, runs with a position table once per overflow choice: tidy ppl rows, per-position rows,
    and per-scheme facts (positional parameters, relative-position kind, used by) for the report. Each
    row carries the unigram perplexity of the tokens it scores (unigram_ppl), the bar a model must
    clear to get a verdict. A run is a posenc run (`RunTarget`) or a Hugging Face model (`HFModel`)."""
    c, scoring, rope_factor = checked, checked.scoring, checked.rope_factor
    methods, standing = same_computation(c.methods or [ContextMethod()], rope_factor)
    plans = plan_runs(  # bad input is found before any work
        runs,
        text,
        lengths=c.lengths,
        add_context=c.add_context,
        max_tokens=c.max_tokens,
        scoring=scoring,
        rope_scaling=methods,
        rope_factor=rope_factor,
    )
    mixed = mixes_own_tokenizers(runs)  # then columns say which: "rope [bpe]"
    apart = distinctions(runs, mixed)  # runs pool as seeds only when equal but the seed
    announce([run.path for run in runs], why, "evaluating")
    rows, position_rows, info = [], [], {}
    jobs = [  # each column of each run
        (run, variant, overflow, context)
        for run in runs
        for variant in plans[id(run)].variants
        for overflow, context in overflow_variants(run, c.overflows)
    ]
    with ui.progress() as bar:
        task = bar.add_task("eval", total=sum(len(plans[id(job[0])].lengths) for job in jobs), status="")
        for run, variant, overflow, context in jobs:
            scheme = column_label(
                run, variant, overflow, distinct=apart[id(run)].within, rope_factor=rope_factor, mixed=mixed
            )
            info[scheme] = run.facts() | {"attention": computed_by(run)}
            scored, positions = score_column(
                run, scheme, plan := plans[id(run)], variant=variant, context=context, scoring=scoring, bar=bar, task=task
            )  # fmt: skip
            note = column_note(run, scheme, plan, methods=methods, standing=standing)
            rows += [
                {**row, "note": row["note"] or note, "differs": apart[id(run)].differs} for row in scored
            ]
            position_rows += positions
    return pd.DataFrame(rows), pd.DataFrame(position_rows), info


def score_column(
    run: EvalTarget, column: Label, plan: RunPlan, *, variant, context, scoring: Scoring, bar, task
) -> tuple[list[dict], list[dict]]:
    """One column's ppl.csv and per-position rows: scored, or for a refused column one unscored row per
    length, its note saying why (shown, never dropped)."""
    if not isinstance(variant, RefusedColumn):
        return score_variant(run, column, plan, context=context, scoring=scoring, bar=bar, task=task)
    note = f"{column} not computed: --rope-scaling {variant.method.text}: {variant.why}"
    bar.advance(task, len(plan.lengths))
    rows = [unscored_row(run, column, plan, length=length, mode=scoring.mode) for length in plan.lengths]
    return [{**row, "note": note} for row in rows], []


def column_note(
    run: EvalTarget, column: Label, plan: RunPlan, *, methods: list[ContextMethod], standing: set[str]
) -> str:
    """What the table says of a column as a whole: ntk standing for dynamic too (its scaling in
    `standing`: same_computation), or that
    --rope-scaling asked for a method the run cannot take (no rotary scheme: its one column's variant
    is the trained one), so it was scored once, as trained."""
    asked = not all(method.as_trained for method in methods)
    if asked and len(plan.variants) == 1 and as_trained(run, column):
        return unscalable_note(run.label)
    return DYNAMIC_AS_NTK if column.variant.scaling in standing else ""
