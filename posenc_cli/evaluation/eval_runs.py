"""`posenc eval`'s work: every target at every length, once per variant, into tidy ppl rows, per-position
rows and the facts each column's report needs; every input is checked before any scoring."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd  # imported where it is used: `posenc eval` only

from posenc_cli.core import ui
from posenc_cli.core.errors import UsageError, require_number, require_positive_int
from posenc_cli.core.ui import announce
from posenc_cli.evaluation.eval_plan import RunPlan, Scoring, plan_runs
from posenc_cli.evaluation.eval_scoring import score_variant, unscored_row
from posenc_cli.evaluation.eval_text import EvalText
from posenc_cli.evaluation.labels import (
    Label,
    distinctions,
    mixes_own_tokenizers,
    pretended_context,
    with_tokenizer,
)
from posenc_cli.evaluation.target import EvalTarget, RefusedColumn
from posenc_cli.model.extension.method import ContextMethod, ExtensionSettings, parse_methods
from posenc_cli.model.positional.rope_scaling import MAX_FACTOR, METHODS

SCALINGS = tuple(m for m in METHODS if ContextMethod(m).scales)  # the methods a --rope-factor applies to
DYNAMIC_AS_NTK = (
    "a +ntk column also stands for dynamic NTK: with no --rope-factor both give base·(T/L)^(d/(d−2)) for every "
    "full window of T tokens, so dynamic is shown once, as ntk (posenc scores whole windows; "
    "in generation dynamic would grow with the position instead)"
)


def rope_methods(
    rope_scaling: str, rope_factor: float | None, settings: ExtensionSettings
) -> list[ContextMethod]:
    """--rope-scaling's methods, parsed once with the extensions' options, and --rope-factor bounded: it
    applies to a method's frequency scaling, so with none among them it is refused."""
    if rope_factor is not None:
        require_number("--rope-factor", rope_factor, at_least=1, at_most=MAX_FACTOR)
    methods = parse_methods(rope_scaling, settings)
    if rope_factor is not None and not any(method.scales for method in methods):
        raise UsageError(
            f"--rope-factor {rope_factor:g} applies only with a frequency scaling in --rope-scaling; add e.g. "
            "--rope-scaling yarn (or yarn+self_extend) or drop it"
        )
    return methods


def check_windows(mode: str, stride: int | None, max_tokens: int) -> None:
    """--mode, --stride and --max-tokens, checked together before any model is loaded."""
    if stride is not None:
        if mode != "sliding":
            raise UsageError(
                f"--stride {stride} is only used with --mode sliding; drop it or add --mode sliding"
            )
        require_positive_int("--stride", stride)
    require_positive_int("--max-tokens", max_tokens)


def overflow_variants(run, overflows: list[str]) -> list[tuple[str, int | None]]:
    """(label overflow, context cap) pairs: a run with a position table once per choice, `window` for the
    one scored past its table through windows of max_len tokens; any other run once, as it is."""
    limit = run.max_len
    if limit is None:
        return [("", None)]
    return [("window", limit) if choice == "window" else ("", None) for choice in overflows]


def column_label(run: EvalTarget, variant, overflow: str, *, distinct, rope_factor, mixed: bool) -> Label:
    """The column a run is scored as: its variant (evaluation time only: the checkpoint is untouched),
    overflow, what sets it apart from the table's other runs, the --rope-factor, its tokenizer."""
    label = run.use_variant(variant)
    factor = rope_factor if label.variant.scaling in SCALINGS else None
    computed = replace(label.variant, factor=factor, overflow=overflow)
    label = replace(label, variant=computed, distinct=distinct, context=pretended_context(run))
    return with_tokenizer(label, run.tokenizer_name, mixed)


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
    runs: list[EvalTarget],
    *,
    lengths: list[int],
    mode: str,
    stride: int | None,
    max_tokens: int,
    text: EvalText | None,
    device,
    rope_scaling: list[ContextMethod] | None = None,
    rope_factor: float | None = None,
    why: str = "",
    learned_overflow: tuple[str, ...] | list[str] = ("dash",),
    add_context: bool = False,
) -> tuple[pd.DataFrame, pd.DataFrame, dict[Label, dict]]:
    """Every run at each of its lengths (perplexity.target_lengths), rotary runs once per RoPE scaling
    method, runs with a position table once per overflow choice: tidy ppl rows, per-position rows,
    and per-scheme facts (positional parameters, relative-position kind, used by) for the report. Each
    row carries the unigram perplexity of the tokens it scores (unigram_ppl), the bar a model must
    clear to get a verdict. A run is a posenc run (`RunTarget`) or a Hugging Face model (`HFModel`)."""
    import pandas as pd

    scoring = Scoring(mode, stride, device)
    methods, standing = same_computation(rope_scaling or [ContextMethod()], rope_factor)
    plans = plan_runs(  # bad input is found before any work
        runs,
        text,
        lengths=lengths,
        add_context=add_context,
        max_tokens=max_tokens,
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
        for overflow, context in overflow_variants(run, learned_overflow)
    ]
    with ui.progress() as bar:
        task = bar.add_task("eval", total=sum(len(plans[id(job[0])].lengths) for job in jobs), status="")
        for run, variant, overflow, context in jobs:
            scheme = column_label(
                run, variant, overflow, distinct=apart[id(run)].within, rope_factor=rope_factor, mixed=mixed
            )
            info[scheme] = run.facts()
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


def as_trained(run: EvalTarget, column: Label) -> bool:
    """Whether the column computes what the run was trained to: no scaling or extension of eval's own."""
    trained, scored = run.label.variant, column.variant
    return (scored.scaling, scored.extension) == (trained.scaling, trained.extension)


def unscalable_note(label: Label) -> str:
    """What eval's and probe's tables say of a run --rope-scaling cannot scale."""
    return f"{label} takes no RoPE scaling: scored once, as trained"
