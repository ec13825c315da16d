"""LongRoPE (Ding et al. 2024) on posenc's own runs: one factor per rotary pair past the training length,
from a file (--longrope-factors) or by the rule that seeds LongRoPE's search (YaRN's ramp as factors), with
transformers' attention factor sqrt(1 + ln s / ln L); within L the run's own RoPE. The file is read as
posenc reads every file: bounded, parsed strictly, never executed, refused in one line otherwise.
"""

from __future__ import annotations

import math
import os

import pytest
import torch
from test_combinations import TRAIN_LEN, tiny_run

from conftest import assert_refused, evaluate, posenc, train
from posenc_cli.core.errors import UsageError
from posenc_cli.evaluation.columns import rope_methods
from posenc_cli.evaluation.longrope_file import MAX_FACTORS_BYTES, parse_factors, read_factors
from posenc_cli.model.extension.method import ContextMethod, ExtensionSettings
from posenc_cli.model.positional.rope_scaling import LongRopeFactors, RopeScaling, longrope_rule


def seed_factors(d: int, base: float, L: int, s: float) -> list[float]:
    """microsoft/LongRoPE's seed, written from its code: jquesnelle's YaRN (beta_fast 32, beta_slow 1,
    floor/ceil) gives inv_freq_mask = 1 - ramp; the factors are s·(1 - mask) + 1·mask."""

    def corr(rotations: float) -> float:
        return d * math.log(L / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = max(math.floor(corr(32)), 0), min(math.ceil(corr(1)), d - 1)
    high = high + 0.001 if low == high else high
    mask = [1 - min(max((i - low) / (high - low), 0.0), 1.0) for i in range(d // 2)]
    return [s * (1 - m) + 1.0 * m for m in mask]


@pytest.mark.parametrize(
    "d, base, L, s", [(64, 10000.0, 256, 4.0), (96, 10000.0, 4096, 32.0), (16, 500.0, 64, 2.5)]
)
def test_the_rules_factors_are_1_at_high_frequency_s_at_low_non_decreasing_and_the_searchs_seed(
    d, base, L, s
):
    factors = longrope_rule(d, base, L, s=s)
    assert factors.shape == (d // 2,)
    assert factors[0] == 1.0 and factors[-1] == pytest.approx(s)
    assert (factors.diff() >= 0).all() and (factors >= 1).all()
    torch.testing.assert_close(factors, torch.tensor(seed_factors(d, base, L, s), dtype=torch.float64))


def test_within_the_training_length_it_is_the_runs_own_rope_and_past_it_one_long_set():
    scaling = RopeScaling("longrope", 64)
    own = 10000.0 ** (-torch.arange(0, 16, 2, dtype=torch.float64) / 16)
    inv_freq, factor = scaling.frequencies(16, 10000.0, 64)
    assert torch.equal(inv_freq, own) and factor == 1.0
    inv_freq, factor = scaling.frequencies(16, 10000.0, 256)  # s = 4
    torch.testing.assert_close(inv_freq, own / longrope_rule(16, 10000.0, 64, s=4.0))
    assert factor == pytest.approx(math.sqrt(1 + math.log(4) / math.log(64)))


def turn_half(x: torch.Tensor, angle: torch.Tensor) -> torch.Tensor:
    """rotate_half's pairs (i, i + D/2) of x (..., T, D) turned by angle (T, D/2)."""
    a, b = x.double().chunk(2, -1)
    return torch.cat([a * angle.cos() - b * angle.sin(), b * angle.cos() + a * angle.sin()], -1)


@pytest.mark.parametrize("given", [None, "file"])
def test_an_own_runs_longrope_column_rotates_as_rope_scaled_per_dimension(given):
    """The column's rotation at 3L: each pair's angle position·base^(-2i/d)/λ_i, cos and sin ×
    sqrt(1 + ln 3 / ln L), λ the rule's at s = 3 or the file's; at L the run's own rotation."""
    run = tiny_run("rope", {})
    d = run.model.scheme.rotary_dims
    factors = None if given is None else LongRopeFactors(tuple(1.0 + i for i in range(d // 2)), "f.txt")
    (method,) = rope_methods("longrope", None, ExtensionSettings())
    (column,) = run.variants(
        [method if factors is None else ContextMethod("longrope", long_factors=factors)], None
    )
    run.use_variant(column)
    scheme = run.active.scheme
    base = scheme.base
    lam = longrope_rule(d, base, TRAIN_LEN, s=3.0) if factors is None else torch.tensor(factors.values)
    q, k = torch.randn(2, 1, 2, 3 * TRAIN_LEN, d, generator=torch.Generator().manual_seed(0))
    for T, scale, temperature in (
        (3 * TRAIN_LEN, lam, math.sqrt(1 + math.log(3) / math.log(TRAIN_LEN))),
        (TRAIN_LEN, 1.0, 1.0),
    ):
        positions = torch.arange(T)
        angle = positions[:, None].double() * base ** (-torch.arange(0, d, 2).double() / d) / scale
        got_q, got_k = scheme.rotate(q[..., :T, :], k[..., :T, :], positions)
        torch.testing.assert_close(
            got_q.double(), turn_half(q[..., :T, :], angle) * temperature, atol=1e-5, rtol=1e-5
        )
        torch.testing.assert_close(
            got_k.double(), turn_half(k[..., :T, :], angle) * temperature, atol=1e-5, rtol=1e-5
        )


# -- the factors file --------------------------------------------------------------------------------


def test_a_file_of_one_factor_a_line_is_read_as_given(tmp_path):
    path = tmp_path / "factors.txt"
    path.write_text("1.0\n1\n1.5\n2e0\n4.25\n")
    assert read_factors(str(path)).values == (1.0, 1.0, 1.5, 2.0, 4.25)


@pytest.mark.parametrize(
    "text, needles",
    [
        ("1.0\n2.0\n1.5\n", ["line 3", "1.5 is below the line before (2)", "non-decreasing"]),
        ("1.0\nnan\n", ["line 2", "'nan' is not a decimal number"]),
        ("1.0\ninf\n", ["line 2", "'inf' is not a decimal number"]),
        ("1.0\n__import__('os')\n", ["line 2", "is not a decimal number"]),
        ("1.0\n1+1\n", ["line 2", "'1+1' is not a decimal number"]),
        ("1.0\n\n2.0\n", ["line 2", "'' is not a decimal number"]),
        ("0.5\n1.0\n", ["line 1", "0.5 is outside [1, 10000]"]),
        ("", ["no factors"]),
    ],
)
def test_a_malformed_or_non_monotone_file_is_refused_in_one_line_naming_the_line(tmp_path, text, needles):
    with pytest.raises(UsageError) as refused:
        parse_factors(text, "f.txt")
    assert "\n" not in str(refused.value) and "--longrope-factors f.txt" in str(refused.value)
    for needle in needles:
        assert needle in str(refused.value)


def test_a_huge_file_or_a_fifo_is_refused_unread(tmp_path):
    huge = tmp_path / "huge.txt"
    huge.write_text("1.0\n" * (MAX_FACTORS_BYTES // 4 + 1))
    with pytest.raises(UsageError, match="larger than 64 KiB"):
        read_factors(str(huge))
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(UsageError, match="not a regular file"):
        read_factors(str(fifo))  # opened without waiting for a writer


def test_a_file_of_the_wrong_length_for_the_run_is_refused_before_any_scoring():
    run = tiny_run("rope", {})
    pairs = run.model.scheme.rotary_dims // 2
    wrong = ContextMethod("longrope", long_factors=LongRopeFactors((1.0,) * (pairs + 1), "f.txt"))
    with pytest.raises(UsageError) as refused:
        run.variants([wrong], None)
    message = str(refused.value)
    assert "\n" not in message and f"{pairs + 1} factors, the model rotates {pairs} pairs" in message


def test_factors_without_longrope_are_refused_by_name(tmp_path):
    path = tmp_path / "f.txt"
    path.write_text("1.0\n")
    with pytest.raises(UsageError, match="--longrope-factors .* applies only with --rope-scaling longrope"):
        rope_methods("none,yarn", None, ExtensionSettings(), longrope_factors=str(path))


def test_the_command_line_refuses_a_bad_factors_file_with_exit_2(tmp_path):
    path = tmp_path / "f.txt"
    path.write_text("2.0\n1.0\n")
    code, stderr = posenc("eval", "RUN", "--rope-scaling", "none,longrope", "--longrope-factors", str(path))
    assert_refused(code, stderr, f"--longrope-factors {path} line 2", "non-decreasing")


@pytest.mark.slow  # trains a smoke run
def test_eval_scores_a_rope_run_with_none_and_longrope_from_the_command_line(tmp_path):
    run = train(tmp_path, "scheme=rope", run="runs/rope")
    options = ["--lengths", "64,128", "--max-tokens", "512", "--rope-scaling", "none,longrope"]
    df = evaluate(tmp_path, str(run), *options)
    ppl = df.set_index(["scheme", "eval_len"])["ppl"]
    assert set(df["scheme"]) == {"rope", "rope+longrope"} and df["ppl"].notna().all()
    assert ppl["rope", 64] == pytest.approx(ppl["rope+longrope", 64], rel=1e-6)  # within L: its own RoPE
    assert ppl["rope", 128] != pytest.approx(ppl["rope+longrope", 128], rel=1e-6)
    factors = tmp_path / "factors.txt"
    factors.write_text("".join(f"{1 + i / 2}\n" for i in range(8)))  # head_dim 16: 8 pairs
    filed = evaluate(tmp_path, str(run), *options, "--longrope-factors", str(factors), out="filed")
    assert filed["ppl"].notna().all()
