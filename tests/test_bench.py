"""`posenc bench --quick` runs end to end and writes its tables; the FLOP count is the stated formula."""

from __future__ import annotations

import pandas as pd
import pytest

from conftest import assert_one_line_error, run_cli
from posenc_cli.bench import flops_per_token
from posenc_cli.model import GPT, ModelConfig


def test_bench_quick_writes_csv_and_markdown(tmp_path):
    result = run_cli("bench", "--quick", "--scheme", "rope", "--scheme", "alibi", "--out", "bench", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    df = pd.read_csv(tmp_path / "bench" / "bench.csv")
    assert set(df["section"]) == {"gemm", "train", "eval"}
    assert (df.loc[df["section"] == "gemm", "gflops"] > 0).all()
    train = df[df["section"] == "train"]
    assert set(zip(train["config"], train["scheme"])) == {(c, s) for c in ("default", "nanogpt-cpu") for s in ("rope", "alibi")}
    assert (train["tokens_per_s"] > 0).all() and (train["mfu"] > 0).all()
    evals = df[df["section"] == "eval"]
    assert sorted(evals["multiple"].unique()) == [1, 8, 32]
    assert (evals["peak_rss_mib"] > evals["eval_rss_mib"]).all()
    assert (df.loc[df["scheme"] == "rope", "vs_rope"] == 1).all()
    markdown = (tmp_path / "bench" / "bench.md").read_text(encoding="utf-8")
    for heading in ("## Training", "## Evaluation", "## Targets"):
        assert heading in markdown
    assert "## Targets" in result.stdout


def test_bench_rejects_an_unknown_scheme(tmp_path):
    assert_one_line_error(run_cli("bench", "--quick", "--scheme", "nope", cwd=tmp_path), "--scheme nope", "rope")


@pytest.mark.parametrize("scheme", ["learned", "rope"])
def test_flops_per_token_counts_non_positional_parameters_once(scheme):
    V, L, d, T = 11, 3, 16, 24
    model = GPT(ModelConfig(vocab_size=V, block_size=T, n_layer=L, n_head=2, n_embd=d, scheme=scheme))
    # tied embedding once; per block qkv 3d², proj d², MLP 8d², two LayerNorms 4d; final LayerNorm 2d
    n = V * d + L * (12 * d * d + 4 * d) + 2 * d
    assert flops_per_token(model, T) == 6 * n + 12 * L * d * T
