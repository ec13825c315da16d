"""What `posenc eval` scores each target on, worked out before any scoring: its tokens (or documents),
lengths, span and variants, every input checked first."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable

import numpy as np

from posenc_cli.core import ui
from posenc_cli.data import token_window
from posenc_cli.evaluation.documents import EncodedDocument, require_documents
from posenc_cli.evaluation.eval_text import EvalText, same_bytes_spans
from posenc_cli.evaluation.perplexity import (
    TargetLengths,
    plan_windows,
    require_text_for,
    require_tokens_for,
    scored_span,
    target_lengths,
    unigram_perplexity,
)
from posenc_cli.evaluation.target import EvalTarget
from posenc_cli.model.positional import past_max_len


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
