"""The text the columns of one `posenc eval` score: with --data, the same bytes for every column whatever
its tokenizer, so that bits per byte compare models on the same text.

The span is chosen once per table, in bytes of the text: B, the bytes that the column whose tokens are
longest covers in --max-tokens targets (rounded down to a multiple of its longest length, so it scores
whole windows: the cost of a large model is what --max-tokens bounds). Every other target scores the
same bytes, in as many of its own tokens as they take: its tokens that end at or before byte B. Where a window boundary falls inside a
token: a token is scored when it ends at or before B, so a token crossing B is left out whole; the
text's first token is only ever an input. Columns therefore score the same bytes up to less than one
token at each end (the first token's bytes and the part of a token that crosses B), and each row counts
the bytes its own tokens cover exactly (ppl.csv's `bytes`), which is what its bpb divides by.

When --data is the very text a posenc run was trained on (its recorded sha256), the text is cut to that
run's validation split (the last data.val_fraction of its characters) for every column: a run is never
scored on its training text.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from posenc_cli.core.errors import UsageError
from posenc_cli.data.corpus_config import HfData, TextCorpus
from posenc_cli.data.hf_datasets import HfText, hf_rows, parse_hf_text
from posenc_cli.data.stream import read_text, scan, split_point, string_source
from posenc_cli.evaluation.target import EvalTarget


@dataclass(frozen=True)
class EvalText:
    """The text every target tokenizes, and how a table names it; with --documents, its documents (a
    dataset's rows), each scored alone (evaluation.documents)."""

    text: str
    name: str  # e.g. "shakespeare.txt, characters 1,003,854–1,115,394 (the validation split of ...)"
    documents: list[str] | None = None


def eval_text(data: str, runs: list[EvalTarget], *, text_field: str, documents: bool) -> EvalText:
    """--data as the table scores it: a text file (cut to a run's validation split where it is that run's
    training text), or a dataset's split (`hf:...`, its rows each followed by a newline; with
    --documents, its rows as documents)."""
    if not data.startswith("hf:"):
        if documents:
            raise UsageError(
                f"--documents needs --data hf:DATASET...: a dataset's rows are its documents, and {data} is one "
                "stream of text; drop --documents or name a dataset"
            )
        return held_out_text(read_text(data, what="--data"), data, runs)
    spec = parse_hf_text(data, text_field)
    rows = hf_rows(spec)
    refuse_training_split(spec, runs)
    if not rows:
        raise UsageError(f"--data {spec.spec} has no rows of text in its column {spec.text_field}")
    text = "".join(f"{row}\n" for row in rows)
    unit = "documents" if documents else "rows"
    return EvalText(text, f"{spec.spec} ({len(rows):,} {unit})", rows if documents else None)


def refuse_training_split(spec: HfText, runs: list[EvalTarget]) -> None:
    """A dataset split a posenc run was trained on (or the whole of a dataset without splits it was trained
    on) is never its evaluation text."""
    for run in runs:
        trained = run.trained_text.data if run.trained_text else None
        if not isinstance(trained, HfData) or not same_dataset(str(trained.name), spec.name):
            continue
        if spec.split is None or spec.split == (trained.split or "train"):
            raise UsageError(
                f"--data {spec.spec} holds the text {run.path} was trained on; evaluate it on its validation "
                "split (no --data) or on another split"
            )


def same_dataset(a: str, b: str) -> bool:
    """Two data.name values for one dataset: the same Hub name, or the same local directory."""
    return a == b or Path(a).expanduser().resolve() == Path(b).expanduser().resolve()


def held_out_text(text: str, path: str, runs: list[EvalTarget]) -> EvalText:
    """--data's text, cut to the validation split of every posenc run trained on it (the latest cut)."""
    digest = scan(string_source(text, "--data"))[0]
    trained_on = [run for run in runs if run.trained_text and run.trained_text.corpus_sha256 == digest]
    if not trained_on:
        return EvalText(text, Path(path).name)
    cut = max(split_point(len(text), validation_share(run, path)) for run in trained_on)
    names = ", ".join(str(Path(run.path).name) for run in trained_on)
    return EvalText(
        text[cut:],
        f"{Path(path).name}, characters {cut:,}–{len(text):,} (the validation split of the text {names} "
        "was trained on; --data is that text)",
    )


def validation_share(run: EvalTarget, path: str) -> float:
    """The run's recorded data.val_fraction; a record without one cannot say where its validation starts."""
    data = run.trained_text.data if run.trained_text else None
    share = data.val_fraction if isinstance(data, TextCorpus) else None
    if not isinstance(share, (int, float)):
        raise UsageError(
            f"--data {path} is the text {run.path} was trained on, and its record states no data.val_fraction, "
            "so its validation split is unknown; evaluate it without --data, or give a held-out text"
        )
    return float(share)


def token_ends(weights, n_tokens: int) -> np.ndarray:
    """The byte offset, from the text's start, at which each token ends."""
    return np.cumsum(weights(0, n_tokens)[0].numpy())


def same_bytes_spans(streams: dict, *, longest: dict, max_tokens: int, names: dict) -> dict[int, int]:
    """Per target (by key), how many targets it scores so that every target scores the same B bytes
    (see the module docstring); refuses, naming it, a target whose tokens there are too few for its
    longest window."""
    ends = {key: token_ends(weights, len(tokens)) for key, (tokens, weights) in streams.items()}
    whole = {key: min(max_tokens, len(e) - 1) // longest[key] * longest[key] for key, e in ends.items()}
    bound = max(float(e[whole[key]]) for key, e in ends.items())
    spans = {}
    for key, e in ends.items():
        span = int(np.searchsorted(e, bound, side="right")) - 1  # its first token is only an input
        if span < longest[key]:
            raise UsageError(
                f"{names[key]}: the {bound:,.0f} bytes of text every column scores (--max-tokens "
                f"{max_tokens} of the longest tokens) hold {span + 1} of its tokens, too few for a window of "
                f"{longest[key]}; give a longer --data or shorter --lengths"
            )
        spans[key] = span
    return spans
