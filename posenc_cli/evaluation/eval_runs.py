"""`posenc eval`'s work: every target at every length, once per variant, into tidy ppl rows, per-position
rows and the facts each column's report needs; every input is checked before any scoring."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    import pandas as pd  # imported where it is used: `posenc eval` only

import numpy as np

from posenc_cli.core import ui
from posenc_cli.core.errors import UsageError, require_number, require_positive_int
from posenc_cli.core.ui import announce
from posenc_cli.data import token_window
from posenc_cli.evaluation.documents import EncodedDocument, evaluate_documents, require_documents
from posenc_cli.evaluation.eval_text import EvalText, same_bytes_spans
from posenc_cli.evaluation.labels import (
    Label,
    distinctions,
    mixes_own_tokenizers,
    pretended_context,
    with_tokenizer,
)
from posenc_cli.evaluation.perplexity import (
    TargetLengths,
    evaluate_length,
    plan_windows,
    position_buckets,
    require_text_for,
    require_tokens_for,
    scored_span,
    target_lengths,
    unigram_perplexity,
)
from posenc_cli.evaluation.target import EvalTarget
from posenc_cli.model.positional import past_max_len
from posenc_cli.model.positional.rope_scaling import MAX_FACTOR, METHODS, parse_rope_scaling

SCALINGS = tuple(m for m in METHODS if m != "none")  # the methods a --rope-factor applies to

NON_FINITE = "non-finite loss"  # a row's note where the model's loss is nan or inf: its cell says so


def rope_methods(rope_scaling: str, rope_factor: float | None) -> list[str]:
    """--rope-scaling's methods, with --rope-factor bounded."""
    if rope_factor is not None:
        require_number("--rope-factor", rope_factor, at_least=1, at_most=MAX_FACTOR)
    return parse_rope_scaling(rope_scaling, rope_factor)


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


@dataclass(frozen=True)
class RunPlan:
    """What one eval target is scored on, worked out (and every input checked) before any scoring."""

    tokens: Any  # the token ids scored
    weights: Callable  # weights(start, n): the UTF-8 bytes and characters of tokens start..start+n-1
    unigram_ppl: float  # the bar a model must clear to get a verdict
    lengths: list[int]  # the evaluation lengths (target_lengths: its training length where it is added)
    span: int  # targets scored at every length
    variants: list  # what it is evaluated as: RoPE scalings, or itself once
    reference: int  # the length its longer lengths are read against (its training length, or inside it)
    text: str  # what text it scored, as the table names it
    documents: list[EncodedDocument] | None = None  # --documents: each scored alone (evaluation.documents)


@dataclass(frozen=True)
class Scoring:
    """How every window is cut: the same for every target of one `posenc eval`."""

    mode: str
    stride: int | None
    device: Any


def plan_run(
    run: EvalTarget,
    stream: tuple,
    *,
    lengths: TargetLengths,
    span: int | None,
    max_tokens: int,
    scoring: Scoring,
    rope_scaling,
    rope_factor,
    text: str,
) -> RunPlan:
    """`stream`: its tokens of the text and their weights; `span`: the targets that cover the table's
    bytes (eval_text), None for a run scored on its own validation split."""
    tokens, weights = stream
    run_lengths = lengths.lengths
    span = scored_span(len(tokens), run_lengths, max_tokens) if span is None else span
    for length in run_lengths:
        plan_windows(span, length, scoring.mode, stride=scoring.stride)  # validates mode and stride
    variants = fitting_variants(run, run_lengths, scoring, rope_scaling=rope_scaling, rope_factor=rope_factor)
    unigram = unigram_perplexity(token_window(tokens, 0, span + 1))
    return RunPlan(tokens, weights, unigram, run_lengths, span, variants, lengths.reference, text)


def fitting_variants(
    run: EvalTarget, lengths: list[int], scoring: Scoring, *, rope_scaling, rope_factor
) -> list:
    """What `run` is evaluated as (its RoPE scalings, validated for it), after checking that the lengths it
    can read fit in the device's memory: the part a stream's plan and a documents' plan share."""
    variants = run.variants(list(rope_scaling), rope_factor)
    run.check_fits([L for L in lengths if not past_max_len(run.max_len, L)], scoring.device)
    return variants


def column_label(run: EvalTarget, variant, overflow: str, *, distinct, rope_factor, mixed: bool) -> Label:
    """The column a run is scored as: its variant (evaluation time only: the checkpoint is untouched),
    overflow, what sets it apart from the table's other runs, the --rope-factor, its tokenizer."""
    label = run.use_variant(variant)
    scaled = rope_factor is not None and label.scaling in SCALINGS
    factor = (("s", f"{rope_factor:g}"),) if scaled else ()
    marks = distinct + factor + pretended_context(run)
    return with_tokenizer(replace(label, overflow=overflow, distinct=marks), run.tokenizer_name, mixed)


def same_computation(methods, rope_factor) -> tuple[list[str], str]:
    """The methods to score, and a note: with no --rope-factor, dynamic NTK is ntk at every full window
    (both give base·(T/L)^(d/(d-2)) for a window of T tokens), so it is scored once, as ntk."""
    methods = list(methods)
    if rope_factor is not None or not {"ntk", "dynamic"} <= set(methods):
        return methods, ""
    return [m for m in methods if m != "dynamic"], (
        "a +ntk column also stands for dynamic NTK: with no --rope-factor both give base·(T/L)^(d/(d−2)) for every "
        "full window of T tokens, so dynamic is shown once, as ntk (posenc scores whole windows; "
        "in generation dynamic would grow with the position instead)"
    )


def plan_runs(
    runs, text: EvalText | None, *, lengths: list[int], add_context: bool, max_tokens: int, **options
) -> dict:
    """Every target's RunPlan (by id), every input checked: its lengths (target_lengths, the added ones
    said before any work) and, with a text, the spans of the same bytes."""
    lengths_of = {id(run): target_lengths(run.train_len, lengths, add_context=add_context) for run in runs}
    if text is not None and text.documents is not None:
        return {
            id(run): plan_documents(run, text, lengths=lengths_of[id(run)], max_tokens=max_tokens, **options)
            for run in runs
        }
    streams = {id(run): run.eval_tokens(text.text if text else None) for run in runs}
    longest = {key: max(ls.lengths) for key, ls in lengths_of.items()}
    for key in longest:
        require_text_for(longest[key], len(streams[key][0]))
        require_tokens_for(longest[key], max_tokens)
    spans = (
        same_bytes_spans(
            streams, longest=longest, max_tokens=max_tokens, names={id(r): str(r.path) for r in runs}
        )
        if text
        else dict.fromkeys(streams)
    )
    plans = {
        id(run): plan_run(
            run,
            streams[id(run)],
            lengths=lengths_of[id(run)],
            span=spans[id(run)],
            max_tokens=max_tokens,
            text=text.name if text else "its validation split",
            **options,
        )
        for run in runs
    }
    announce_added(runs, lengths_of)
    return plans


def plan_documents(
    run: EvalTarget, text: EvalText, *, lengths: TargetLengths, max_tokens: int, scoring: Scoring, **variants
) -> RunPlan:
    """A target's plan under --documents: each document in its own tokens, every length checked to have a
    document that qualifies (evaluation.documents) before any scoring; `span` bounds the targets a
    document scores in sliding windows (--max-tokens)."""
    assert text.documents is not None
    documents = [EncodedDocument(*run.eval_tokens(doc)) for doc in text.documents]
    require_documents(documents, lengths.lengths, where=f"{text.name} in {run.path}'s tokens")
    scaled = fitting_variants(run, lengths.lengths, scoring, **variants)
    every = np.concatenate([np.asarray(d.tokens) for d in documents])
    unigram = unigram_perplexity(every)
    plan = RunPlan(every, None, unigram, lengths.lengths, max_tokens, scaled, lengths.reference, text.name)
    return replace(plan, documents=documents)


def announce_added(runs: list[EvalTarget], lengths_of: dict) -> None:
    """Up front, the lengths nobody asked for: each target's training length where it is added."""
    added: dict[int, list[str]] = {}
    for run in runs:
        if lengths_of[id(run)].added is not None:
            added.setdefault(lengths_of[id(run)].added, []).append(str(run.path))
    for length, names in sorted(added.items()):
        ui.err.print(
            f"also evaluating at {length} (not in --lengths): the training length of {', '.join(names)}, "
            "the reference its longer lengths are read against",
            markup=False,
            highlight=False,
        )


def evaluate_runs(
    runs: list[EvalTarget],
    *,
    lengths: list[int],
    mode: str,
    stride: int | None,
    max_tokens: int,
    text: EvalText | None,
    device,
    rope_scaling: tuple[str, ...] | list[str] = ("none",),
    rope_factor: float | None = None,
    why: str = "",
    learned_overflow: tuple[str, ...] | list[str] = ("dash",),
    add_context: bool = False,
) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, dict]]:
    """Every run at each of its lengths (perplexity.target_lengths), rotary runs once per RoPE scaling
    method, runs with a position table once per overflow choice: tidy ppl rows, per-position rows,
    and per-scheme facts (positional parameters, relative-position kind, used by) for the report. Each
    row carries the unigram perplexity of the tokens it scores (unigram_ppl), the bar a model must
    clear to get a verdict. A run is a posenc run (`RunTarget`) or a Hugging Face model (`HFModel`)."""
    import pandas as pd

    scoring = Scoring(mode, stride, device)
    methods, merged = same_computation(rope_scaling, rope_factor)
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
    jobs = [
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
            scored, positions = score_variant(
                run, scheme, plans[id(run)], context=context, scoring=scoring, bar=bar, task=task
            )
            note = column_note(run, scheme, plans[id(run)], methods=methods, merged=merged)
            rows += [
                {**row, "note": row["note"] or note, "differs": apart[id(run)].differs} for row in scored
            ]
            position_rows += positions
    return pd.DataFrame(rows), pd.DataFrame(position_rows), info


def column_note(run: EvalTarget, column: Label, plan: RunPlan, *, methods: list[str], merged: str) -> str:
    """What the table says of a column as a whole: ntk standing for dynamic too (`merged`), or that
    --rope-scaling asked for a scaling the run cannot take (no rotary scheme: its one column's variant
    is the trained one), so it was scored once, as trained."""
    asked = any(method != "none" for method in methods)
    if asked and len(plan.variants) == 1 and column.variant == run.label.variant:
        return unscalable_note(run.label)
    return merged if column.scaling == "ntk" else ""


def unscalable_note(label: Label) -> str:
    """What eval's and probe's tables say of a run --rope-scaling cannot scale."""
    return f"{label} takes no RoPE scaling: scored once, as trained"


def score_variant(
    run, scheme: str, plan: RunPlan, *, context: int | None, scoring: Scoring, bar, task
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """One variant of `run` at each of its lengths: ppl rows and per-position rows, the bar advanced."""
    scorer = run.scorer(scoring.device)
    rows, position_rows = [], []
    for length in plan.lengths:
        bar.update(task, status=f"{scheme} seed {run.seed} @ {length}")
        row, positions = score_length(
            run, scheme, plan, scorer=scorer, length=length, context=context, scoring=scoring
        )
        rows.append(row)
        position_rows += positions
        bar.advance(task)
    return rows, position_rows


def score_length(
    run, scheme, plan: RunPlan, *, scorer, length: int, context: int | None, scoring: Scoring
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One ppl.csv row of `run` at `length` (a note where it cannot be scored), and its per-position rows."""
    row = unscored_row(run, scheme, plan, length=length, mode=scoring.mode)
    unreadable = past_max_len(run.max_len, length)
    if unreadable and context is None:
        row["note"] = f"{scheme} {unreadable}"
        return row, []
    if plan.documents is not None:
        result, row["documents"] = evaluate_documents(
            scorer,
            plan.documents,
            length=length,
            mode=scoring.mode,
            stride=scoring.stride,
            context=context,
            max_tokens=plan.span,
        )
    else:
        result = evaluate_length(
            scorer,
            plan.tokens,
            span=plan.span,
            length=length,
            mode=scoring.mode,
            stride=scoring.stride,
            context=context,
            weights=plan.weights,
        )
    if context is not None and length > context:
        row["note"] = (
            f"{scheme} past max_len={context}: sliding windows of {context} tokens "
            f"(stride {context // 2}), so a token sees at most {context} tokens."
        )
    if not math.isfinite(result.ppl):
        row["note"] = NON_FINITE
    row.update(
        tokens=result.tokens,
        nll=result.nll,
        ppl=result.ppl,
        bytes=result.bytes,
        chars=result.chars,
        bpb=result.bpb,
    )
    positions = [
        {
            "run": str(run.path),
            "model_id": run.model_id,
            "scheme": scheme,
            "seed": run.seed,
            "eval_len": length,
            "position": p,
            "nll": nll,
            "tokens": n,
        }
        for p, nll, n in position_buckets(result)
    ]
    return row, positions


def unscored_row(run, scheme, plan: RunPlan, *, length: int, mode: str) -> dict[str, Any]:
    """A ppl.csv row before scoring: no tokens scored and every measure nan, until there is a number."""
    return {
        "run": str(run.path),
        "model_id": run.model_id,
        "scheme": scheme,
        "seed": run.seed,
        "train_len": run.train_len,
        "eval_len": length,
        "mode": mode,
        "tokens": 0,
        "nll": math.nan,
        "ppl": math.nan,
        "note": "",
        "tokenizer": run.tokenizer_name,
        "bytes": math.nan,
        "chars": math.nan,
        "bpb": math.nan,
        "unigram_ppl": plan.unigram_ppl,
        "precision": run.training_precision,
        "context": run.real_context,  # the model's own, where --hf-context pretends another train_len
        "reference_len": plan.reference,
        "text": plan.text,
        "documents": math.nan,  # --documents: how many qualified at this length
    }
