"""RoPE context extension: each method against values worked out by hand from its formula, the
identity at s = 1, and `posenc eval --rope-scaling` on a trained sweep.

The hand case: d = 8, b = 10000, L = 128, s = 4, so inv_freq = [1, 0.1, 0.01, 0.001].
"""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch

from conftest import evaluate
from posenc_cli.model.positional import build_scheme
from posenc_cli.model.positional.rope_scaling import (
    METHODS,
    RopeScaling,
    rope_inv_freq,
    yarn_ramp,
    yarn_temperature,
)

D, BASE, L, S = 8, 10000.0, 128, 4.0


def freqs(method: str, seq_len: int, factor: float | None = S) -> list[float]:
    """The four inverse frequencies, then the factor on cos/sin."""
    inv_freq, temperature = RopeScaling(method, L, factor).frequencies(D, BASE, seq_len)
    return [*inv_freq.tolist(), temperature]


def test_linear_divides_every_frequency_by_s():
    assert freqs("linear", 512) == pytest.approx([0.25, 0.025, 0.0025, 0.00025, 1.0])


def test_ntk_raises_the_base():
    # b' = 10^4 · 4^(8/6); inv_freq_i = b'^(-i/4) = 10^-i · 4^(-i/3): 1, 0.1/1.5874, 0.01/2.5198, 0.001/4
    assert freqs("ntk", 512) == pytest.approx([1.0, 0.0629961, 0.00396850, 0.00025, 1.0], rel=1e-5)


def test_dynamic_scales_with_the_sequence_length_only_past_l():
    # T = 256: b' = 10^4 · (4·256/128 - 3)^(8/6) = 10^4 · 5^(4/3); inv_freq_i = 10^-i · 5^(-i/3)
    assert freqs("dynamic", 256) == pytest.approx([1.0, 0.0584804, 0.00341995, 0.0002, 1.0], rel=1e-5)
    assert freqs("dynamic", 128) == pytest.approx([1.0, 0.1, 0.01, 0.001, 1.0])


def test_yarn_ramp_interpolates_slow_pairs_and_keeps_fast_ones():
    # correction_dim(32) = 8·ln(128/(2π·32))/(2 ln 10^4) = -0.196 -> low = floor -> clamp 0
    # correction_dim(1)  = 8·ln(128/(2π))/(2 ln 10^4)    =  1.309 -> high = ceil = 2
    assert yarn_ramp(D, BASE, L).tolist() == pytest.approx([0.0, 0.5, 1.0, 1.0])
    # inv·(1 - ramp) + inv/s·ramp: 1, 0.1·(0.5 + 0.5/4), 0.01/4, 0.001/4; temperature 0.1·ln 4 + 1
    assert freqs("yarn", 512) == pytest.approx([1.0, 0.0625, 0.0025, 0.00025, 1.1386294], rel=1e-6)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("seq_len", [64, 128, 1024])
def test_every_method_is_the_identity_at_s_1(method, seq_len):
    unscaled = rope_inv_freq(D, BASE).tolist()
    if method != "dynamic" or seq_len <= L:  # dynamic NTK grows the base with T itself past L
        assert freqs(method, seq_len, factor=1.0) == pytest.approx([*unscaled, 1.0])
    assert freqs(method, min(seq_len, L), factor=None) == pytest.approx([*unscaled, 1.0])


def test_default_factor_is_eval_length_over_training_length():
    assert RopeScaling("yarn", L).scale(512) == 4.0
    assert RopeScaling("yarn", L).scale(64) == 1.0  # never compress below the training length
    assert RopeScaling("dynamic", L).scale(512) == 1.0
    assert freqs("linear", 1024, factor=None) == pytest.approx([1 / 8, 0.1 / 8, 0.01 / 8, 0.001 / 8, 1.0])


def test_linear_scaling_makes_position_s_m_look_like_position_m():
    plain_cos, plain_sin = build_scheme("rope", 32, 4, block_size=L).cos_sin(torch.arange(100))
    cos, sin = build_scheme("rope", 32, 4, block_size=L, scaling="linear", scaling_factor=S).cos_sin(
        torch.arange(400)
    )
    torch.testing.assert_close(cos[::4], plain_cos)
    torch.testing.assert_close(sin[::4], plain_sin)


def test_yarn_temperature_multiplies_logits_by_its_square():
    q, k = torch.randn(2, 1, 4, 1, 8)
    positions = torch.zeros(1, dtype=torch.long)  # angle 0: only the temperature acts
    plain = (lambda a, b: (a * b).sum(-1))(*build_scheme("rope", 32, 4, block_size=L).rotate(q, k, positions))
    yarn = build_scheme("rope", 32, 4, block_size=L, scaling="yarn", scaling_factor=S, scaling_len=L)
    scaled = (lambda a, b: (a * b).sum(-1))(*yarn.rotate(q, k, positions))
    torch.testing.assert_close(scaled, plain * yarn_temperature(S) ** 2)
    assert yarn_temperature(S) == pytest.approx(0.1 * math.log(4) + 1)


def test_eval_adds_one_labelled_column_per_method_and_names_the_runs_it_cannot_scale(smoke_sweep, tmp_path):
    out = tmp_path / "eval"
    df = evaluate(
        tmp_path,
        str(smoke_sweep),
        "--lengths",
        "128",
        "--max-tokens",
        "1024",
        "--rope-scaling",
        "none,linear,yarn",
    )
    assert {"rope", "rope+linear", "rope+yarn", "alibi"} <= set(df["scheme"])
    assert not df["scheme"].str.contains(r"alibi\+|none\+|learned\+").any()  # only rotary runs are scaled
    at_train = df[df.eval_len == df.train_len].set_index("scheme")["ppl"]
    assert at_train["rope+linear"] == pytest.approx(at_train["rope"]) == pytest.approx(at_train["rope+yarn"])
    longer = df[df.eval_len == 128].set_index("scheme")["ppl"]
    assert longer["rope+linear"] != longer["rope"]  # s = 128/64 = 2 changes the model past L
    comparison = (out / "comparison.md").read_text(encoding="utf-8")
    assert "rope+yarn" in comparison.splitlines()[2]
    assert "not in the chapters" in comparison
    assert set(pd.read_csv(out / "loss_by_position.csv")["scheme"]) >= {"rope+linear", "rope+yarn"}
    for unscaled in ("none", "sinusoidal", "learned", "alibi"):  # scored once, and the table says so
        assert f"{unscaled} takes no RoPE scaling: scored once, as trained" in comparison
    assert "rope takes no RoPE scaling" not in comparison


def test_a_given_rope_factor_names_its_columns_so_two_factors_never_share_one(smoke_sweep, tmp_path):
    run = next(p for p in smoke_sweep.iterdir() if p.name.endswith("rope_seed0"))
    schemes = set()
    for factor in ("2", "4"):
        args = [
            "--lengths",
            "128",
            "--max-tokens",
            "512",
            "--rope-scaling",
            "none,linear",
            "--rope-factor",
            factor,
        ]
        df = evaluate(tmp_path, str(run), *args, out=f"eval{factor}")
        schemes |= set(df["scheme"])
    assert schemes == {"rope", "rope+linear (s=2)", "rope+linear (s=4)"}
