"""One eval target's variant scored at each of its lengths: its ppl.csv rows (a note where a length
cannot be scored) and its per-position rows."""

from __future__ import annotations

import math
from typing import Any

from posenc_cli.evaluation.documents import evaluate_documents
from posenc_cli.evaluation.eval_plan import RunPlan, Scoring
from posenc_cli.evaluation.labels import Label
from posenc_cli.evaluation.perplexity import evaluate_length, position_buckets
from posenc_cli.model.positional import past_max_len

NON_FINITE = "non-finite loss"  # a row's note where the model's loss is nan or inf: its cell says so


def score_variant(
    run, scheme: Label, plan: RunPlan, *, context: int | None, scoring: Scoring, bar, task
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
