"""t5, xpos and kerple: each scheme's defining property, and each one trained and evaluated via the CLI."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
import torch

from conftest import SMOKE, run_cli
from posenc_cli.model import GPT, ModelConfig
from posenc_cli.model.positional import build_scheme
from posenc_cli.model.positional.t5 import t5_bucket

NEW_SCHEMES = ["t5", "xpos", "kerple"]


def test_t5_buckets_by_hand():
    # 32 causal buckets, max distance 128: distances 0..15 exact; beyond, 16 + floor(log(d/16)/log(8)·16)
    # d=20: 16 + floor(0.107·16) = 17; d=32: 16 + floor(16/3) = 21; d=64: 16 + floor(32/3) = 26;
    # d=127: 16 + floor(15.94) = 31; d >= 128 caps at 31. Keys after the query (d < 0) count as 0.
    distances = torch.tensor([-3, 0, 1, 15, 16, 20, 32, 64, 127, 128, 1000])
    assert t5_bucket(distances).tolist() == [0, 0, 1, 15, 16, 17, 21, 26, 31, 31, 31]


def test_t5_bias_is_its_table_read_at_each_distance_bucket():
    t5 = build_scheme("t5", 32, 4, 64)
    torch.nn.init.normal_(t5.table.weight)
    positions = torch.arange(300)
    bias = t5.bias(positions[:, None] - positions[None, :])
    assert bias.shape == (4, 300, 300)
    i, j = 250, 10
    torch.testing.assert_close(bias[:, i, j], t5.table.weight[t5_bucket(torch.tensor(i - j))])
    torch.testing.assert_close(bias[:, 250, 10], bias[:, 299, 59])  # same distance, same bias


def test_t5_has_one_table_shared_by_every_layer():
    model = GPT(ModelConfig(vocab_size=10, block_size=16, n_layer=3, n_head=4, n_embd=32, scheme="t5"))
    assert model.n_positional_params == 32 * 4
    assert [name for name, _ in model.named_parameters() if "table" in name] == ["scheme.table.weight"]


def logits(scheme, q: torch.Tensor, k: torch.Tensor, T: int) -> torch.Tensor:
    """(T, T) q_m·k_n for the same q and k vectors placed at every position."""
    qs, ks = (v.expand(1, 1, T, v.numel()) for v in (q, k))
    q_rot, k_rot = scheme.rotate(qs, ks, torch.arange(T))
    return (q_rot[0, 0] @ k_rot[0, 0].T).double()


def test_xpos_logits_depend_only_on_m_minus_n():
    xpos = build_scheme("xpos", 32, 2, 64)
    scores = logits(xpos, torch.randn(16), torch.randn(16), 200)
    for shift in (1, 37, 150):
        torch.testing.assert_close(scores[shift:, shift:], scores[:-shift, :-shift], rtol=1e-4, atol=1e-5)


def test_xpos_is_rope_times_a_decay_in_distance():
    xpos, rope = build_scheme("xpos", 32, 2, 64), build_scheme("rope", 32, 2, 64)
    j = 1  # one rotary pair: dims j and j + 8 of a 16-dim head
    q, k = torch.zeros(16), torch.zeros(16)
    q[[j, j + 8]], k[[j, j + 8]] = torch.tensor([0.6, -0.8]), torch.tensor([1.0, 0.3])
    T = 600
    ratio = logits(xpos, q, k, T) / logits(rope, q, k, T)
    zeta = (2 * j / 16 + 0.4) / 1.4
    m, n = torch.meshgrid(torch.arange(T), torch.arange(T), indexing="ij")
    torch.testing.assert_close(ratio, zeta ** ((m - n).double() / 512), rtol=2e-3, atol=0)
    along_row = ratio[T - 1, : T - 1].flip(0)  # distances 1, 2, ..., T-1 from the last query
    assert (along_row.diff() < 0).all() and along_row[-1] < 0.6


def test_kerple_bias_is_minus_p_log_one_plus_a_distance():
    kerple = build_scheme("kerple", 32, 2, 64)
    with torch.no_grad():
        kerple.log_p.copy_(torch.tensor([2.0, 0.5]).log())
        kerple.log_a.copy_(torch.tensor([0.5, 3.0]).log())
    bias = kerple.bias(torch.arange(10)[:, None] - torch.arange(10)[None, :])
    # head 0, distance 2: -2·log(1 + 0.5·2) = -2 log 2; head 1, distance 3: -0.5·log(10)
    assert bias[0, 5, 3].item() == pytest.approx(-2 * math.log(2), rel=1e-6)
    assert bias[1, 9, 6].item() == pytest.approx(-0.5 * math.log(10), rel=1e-6)


def test_kerple_bias_is_a_non_positive_decreasing_function_of_distance():
    kerple = build_scheme("kerple", 32, 4, 64)
    positions = torch.arange(500)
    bias = kerple.bias(positions[:, None] - positions[None, :])
    assert (bias <= 0).all() and (bias.diagonal(dim1=1, dim2=2) == 0).all()
    torch.testing.assert_close(bias[:, 400, 100], bias[:, 499, 199])
    from_last = bias[:, 499, :].flip(1)  # distances 0..499
    assert (from_last.diff(dim=1) < 0).all()
    assert kerple.positional_params == 2 * 4


@pytest.mark.parametrize("name", ["t5", "kerple"])
def test_bias_schemes_reach_the_attention_scores(name):
    torch.manual_seed(0)
    model = GPT(ModelConfig(vocab_size=10, block_size=16, n_layer=1, n_head=2, n_embd=16, scheme=name))
    assert model.scheme.adds_bias
    idx = torch.randint(0, 10, (1, 16))
    before = model(idx)
    with torch.no_grad():
        for p in model.scheme.parameters():
            p.copy_(torch.randn_like(p))  # random, not a constant shift, which softmax would ignore
    assert not torch.allclose(before, model(idx))


@pytest.fixture(scope="module")
def new_sweep(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("more")
    result = run_cli("train", "-m", f"scheme={','.join(NEW_SCHEMES)}", *SMOKE, cwd=cwd)
    assert result.returncode == 0, result.stderr
    (sweep,) = (cwd / "outputs" / "sweeps").iterdir()
    return sweep


def test_new_schemes_train_end_to_end(new_sweep):
    summaries = [json.loads(p.read_text()) for p in sorted(new_sweep.glob("*/summary.json"))]
    assert sorted(s["scheme"] for s in summaries) == sorted(NEW_SCHEMES)
    for summary in summaries:
        assert summary["status"] == "finished" and math.isfinite(summary["final_val_loss"])


def test_new_schemes_evaluate_past_training_length(new_sweep, tmp_path):
    out = tmp_path / "eval"
    result = run_cli(
        "eval",
        str(new_sweep),
        "--lengths",
        "256",
        "--max-tokens",
        "1024",
        "--rope-scaling",
        "none,ntk",
        "--out",
        str(out),
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    df = pd.read_csv(out / "ppl.csv")
    assert set(df["scheme"]) == {
        "t5",
        "kerple",
        "xpos",
        "xpos+ntk",
    }  # xpos reuses RoPE's rotation and scaling
    assert df["ppl"].notna().all() and (df["ppl"] > 1).all()
    comparison = (out / "comparison.md").read_text(encoding="utf-8")
    assert "| extrapolation, chapters' claim | not in the chapters | not in the chapters |" in comparison
    assert "| positional parameters | 64 | 0 | 0 | 4 |" in comparison  # kerple 2·h, t5 32·h, xpos 0 (h = 2)
    assert "| relative position | explicit | explicit | explicit | explicit |" in comparison


def test_schemes_lists_the_new_ones(tmp_path):
    result = run_cli("schemes", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    for name in NEW_SCHEMES:
        assert name in result.stdout
