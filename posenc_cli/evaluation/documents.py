"""The per-document protocol of Position Interpolation and YaRN (`posenc eval --documents`): each
document long enough for a length is scored on its own, never across a document boundary, and the
length's perplexity is exp of the mean NLL over every token scored in those documents.

nonoverlap: a document's first L tokens, one window (PI's Table 1 at each context size), so every
document weighs the same. sliding: windows of L with --stride S inside the document, over its first
--max-tokens targets (PI's and YaRN's PG19 and proof-pile numbers use S = 256), so a document shorter
than that weighs by the tokens it has. A document qualifies at L when it has at least L + 1 tokens in the
target's own tokenizer (L inputs and the target after the last), so the set can differ by length and
by tokenizer; each row says how many documents it is over.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from posenc_cli.core.errors import UsageError
from posenc_cli.evaluation.perplexity import LengthResult, evaluate_length


@dataclass(frozen=True)
class Documents:
    """The documents every target scores, and how a table names them."""

    texts: list[str]
    name: str


@dataclass(frozen=True)
class EncodedDocument:
    tokens: torch.Tensor  # (n,) ids in the target's tokenizer
    weights: object  # weights(start, n): the (2, n) UTF-8 bytes and characters of tokens start..start+n-1


def qualifying(documents: list[EncodedDocument], length: int) -> list[EncodedDocument]:
    """The documents with at least `length` + 1 tokens: one window of `length` targets fits."""
    return [d for d in documents if len(d.tokens) > length]


def require_documents(documents: list[EncodedDocument], lengths: list[int], *, where: str) -> None:
    """Every length needs a document that qualifies; one line naming the longest there is otherwise."""
    longest = max((len(d.tokens) for d in documents), default=0)
    for length in lengths:
        if not qualifying(documents, length):
            raise UsageError(
                f"--lengths {length}: no document of {where} has {length + 1} tokens (its longest has "
                f"{longest}); give shorter --lengths or longer documents"
            )


def evaluate_documents(
    scorer,
    documents: list[EncodedDocument],
    *,
    length: int,
    mode: str = "nonoverlap",
    stride: int | None = None,
    context: int | None = None,
    max_tokens: int,
) -> tuple[LengthResult, int]:
    """The qualifying documents' result at `length`, each scored alone (see the module docstring), and how
    many qualified: tokens, bytes and characters summed, the NLL their mean over every scored token."""
    found = qualifying(documents, length)
    if not found:
        raise UsageError(f"no document has {length + 1} tokens")
    results = []
    for doc in found:
        span = length if mode == "nonoverlap" else min(len(doc.tokens) - 1, max(length, max_tokens))
        results.append(
            evaluate_length(
                scorer,
                doc.tokens,
                span=span,
                length=length,
                mode=mode,
                stride=stride,
                context=context,
                weights=doc.weights,
            )
        )
    sums = torch.stack([r.position_nll * r.position_count for r in results]).sum(0)
    counts = torch.stack([r.position_count for r in results]).sum(0)
    mean = LengthResult(
        tokens=sum(r.tokens for r in results),
        nll=math.fsum(r.nll * r.tokens for r in results) / sum(r.tokens for r in results),
        position_nll=sums / counts.clamp(min=1),
        position_count=counts,
        bytes=math.fsum(r.bytes for r in results),
        chars=math.fsum(r.chars for r in results),
    )
    return mean, len(found)
