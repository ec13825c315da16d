"""The per-document protocol (evaluation.documents): documents shorter than a length are left out, the
rest are each scored alone, never across a boundary, and the counts say how many."""

from __future__ import annotations

import json

import pytest
import torch

from posenc_cli.core.errors import UsageError
from posenc_cli.evaluation.documents import EncodedDocument, evaluate_documents, qualifying, require_documents


class TargetIdScorer:
    """A model whose NLL of a target is the target's id, whatever precedes it: sums are easy to read."""

    def batch_size(self, length):
        return 4

    def token_nll(self, inputs, targets):
        return targets.double()


def doc(*ids: int) -> EncodedDocument:
    tokens = torch.tensor(ids)
    return EncodedDocument(tokens, lambda start, n: torch.ones(2, n, dtype=torch.float64))


def test_a_document_qualifies_when_it_has_one_window_and_its_next_token():
    docs = [doc(*range(8)), doc(*range(9)), doc(*range(20))]
    assert [len(d.tokens) for d in qualifying(docs, 8)] == [9, 20]
    with pytest.raises(
        UsageError, match="--lengths 20: no document of pg19 has 21 tokens .its longest has 20."
    ):
        require_documents(docs, [8, 20], where="pg19")
    require_documents(docs, [8, 19], where="pg19")


def test_each_document_scores_its_own_first_window_and_the_result_is_the_mean_over_them():
    """nonoverlap: a document's first L targets (tokens 1..L); the next document's tokens never enter."""
    short, a, b = doc(100, 100), doc(0, 1, 2, 3, 4, 99), doc(10, 20, 30, 40, 50)
    result, n = evaluate_documents(TargetIdScorer(), [short, a, b], length=4, max_tokens=1000)
    assert n == 2 and result.tokens == 8
    assert result.nll == pytest.approx(((1 + 2 + 3 + 4) + (20 + 30 + 40 + 50)) / 8)
    assert result.bytes == result.chars == 8


def test_sliding_windows_stay_inside_their_document_and_score_up_to_max_tokens_of_it():
    a, b = doc(*range(0, 13)), doc(*range(100, 106))  # 12 and 5 targets
    result, n = evaluate_documents(TargetIdScorer(), [a, b], length=4, mode="sliding", stride=2, max_tokens=8)
    assert n == 2 and result.tokens == 8 + 5  # a: its first 8 targets; b: all 5 it has
    assert result.nll == pytest.approx((sum(range(1, 9)) + sum(range(101, 106))) / 13)


@pytest.mark.slow  # scores trained runs through the CLI
def test_eval_documents_scores_each_qualifying_document_of_a_local_split_and_says_how_many(
    smoke_sweep, tmp_path
):
    """`posenc eval RUNS --data hf:DIR:test --documents`: at each length only the documents with at least
    L + 1 characters (char runs) count, the counts are in ppl.csv, and the set rebuilds from results.json."""
    from datasets import Dataset, DatasetDict

    from conftest import evaluate, invoke

    words = "the sun is on the hill and the rain is so near "  # letters the synthetic corpus has
    rows = [(words * 20)[:n] for n in (20, 40, 70, 150, 300, 600)]
    DatasetDict(
        {"train": Dataset.from_dict({"text": rows}), "test": Dataset.from_dict({"text": rows})}
    ).save_to_disk(str(tmp_path / "docs"))
    runs = [str(p) for p in sorted(smoke_sweep.iterdir()) if (p / "summary.json").exists()][:2]
    df = evaluate(
        tmp_path, *runs, "--data", f"hf:{tmp_path / 'docs'}:test", "--documents", "--lengths", "64,128"
    )
    counts = df.groupby("eval_len")["documents"].unique()
    assert [list(counts[L]) for L in (64, 128)] == [
        [4],
        [3],
    ]  # 70, 150, 300, 600 characters; then 150, 300, 600
    assert (df.loc[df.eval_len == 64, "tokens"] == 4 * 64).all()  # nonoverlap: each document's first L
    comparison = (tmp_path / "eval" / "comparison.md").read_text()
    assert "each scored alone" in comparison and "so each length has its own documents" in comparison
    results = json.loads((tmp_path / "eval" / "results.json").read_text())
    assert results["eval"]["provenance"][0]["data"]["text"].endswith(":test (6 documents)")
    rebuilt = invoke("report", str(tmp_path / "eval"), "--out", str(tmp_path / "again"))
    assert rebuilt.code == 0, rebuilt.stderr
    assert (tmp_path / "again" / "comparison.md").read_text() == comparison
