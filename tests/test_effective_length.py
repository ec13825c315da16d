"""The effective context length: the longest length tried up to which a column held at every length tried,
read from hand-made ppl and probe tables."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from conftest import column
from posenc_cli.core.errors import UsageError
from posenc_cli.report.effective_length import EffectiveLength, LengthRule, effective_lengths

RULE = LengthRule()


def ppl_table(per_scheme: dict[str, list[float]], lengths=(128, 256, 512, 1024), reference=256, seeds=1):
    """ppl.csv's columns that the rule reads: one row per scheme, seed and length."""
    rows = [
        {
            "scheme": column(s),
            "seed": seed,
            "eval_len": L,
            "ppl": p,
            "reference_len": reference,
            "train_len": reference,
        }
        for s, values in per_scheme.items()
        for seed in range(seeds)
        for L, p in zip(lengths, values)
    ]
    return pd.DataFrame(rows)


def probe_table(per_scheme: dict[str, list[float]], lengths=(256, 512, 1024), depths=(0.1, 0.9)):
    rows = [
        {"scheme": column(s), "seed": 0, "length": L, "depth": d, "accuracy": a, "train_len": 256}
        for s, values in per_scheme.items()
        for L, a in zip(lengths, values)
        for d in depths
    ]
    return pd.DataFrame(rows)


def test_a_column_that_holds_at_every_length_tried_is_at_least_the_longest():
    found = effective_lengths(ppl_table({"alibi": [12.0, 10.0, 10.5, 11.0]}), None, RULE)[column("alibi")]
    assert found == EffectiveLength(held=1024, tried=1024) and str(found) == "≥ 1024"


def test_the_effective_length_stops_before_the_first_length_that_does_not_hold_even_if_a_later_one_does():
    found = effective_lengths(ppl_table({"rope": [12.0, 10.0, 11.5, 10.2]}), None, RULE)[column("rope")]
    assert (found.held, found.failed, str(found)) == (256, 512, "256")
    assert found.why == "at 512: perplexity 1.15× its value at 256"


def test_the_tolerance_is_inclusive_and_lengths_inside_the_reference_are_not_read():
    """128 (inside the context, 3x the reference's ppl) is not read; 1.10x at 10 % holds."""
    table = ppl_table({"sinusoidal": [30.0, 10.0, 11.0, 11.0 + 1e-9]})
    assert str(effective_lengths(table, None, RULE)[column("sinusoidal")]) == "512"
    assert (
        str(effective_lengths(table, None, LengthRule(ppl_tolerance=0.2))[column("sinusoidal")]) == "≥ 1024"
    )


def test_a_length_a_model_cannot_score_does_not_hold_and_one_bad_seed_is_enough():
    """nan: past a learned table; the mean over seeds is nan when any seed's is."""
    learned = ppl_table({"learned": [12.0, 10.0, math.nan, math.nan]})
    found = effective_lengths(learned, None, RULE)[column("learned")]
    assert (str(found), found.why) == ("256", "at 512: not scored there")  # once "perplexity nan×"
    seeds = ppl_table({"rope": [12.0, 10.0, 10.0, 10.0]}, seeds=2)
    seeds.loc[(seeds.seed == 1) & (seeds.eval_len == 1024), "ppl"] = math.nan
    assert str(effective_lengths(seeds, None, RULE)[column("rope")]) == "512"


def test_retrieval_below_the_threshold_ends_the_length_where_perplexity_still_holds():
    ppl = ppl_table({"alibi": [12.0, 10.0, 10.0, 10.0]})
    probe = probe_table({"alibi": [1.0, 0.5, 0.2]})
    found = effective_lengths(ppl, probe, RULE)[column("alibi")]
    assert (str(found), found.why) == ("512", "at 1024: 20% of keys retrieved")
    assert (
        str(effective_lengths(ppl, probe, LengthRule(retrieval_threshold=0.2))[column("alibi")]) == "≥ 1024"
    )


def test_a_column_that_never_retrieves_has_no_effective_length_and_a_probe_alone_gives_one():
    never = effective_lengths(None, probe_table({"none": [0.0, 0.0, 0.0]}), RULE)[column("none")]
    assert (never.held, str(never)) == (None, "< 256")
    depths = probe_table({"rope": [0.75, 0.4, 0.0]}, depths=(0.1,))  # the mean over depths and seeds
    assert str(effective_lengths(None, depths, RULE)[column("rope")]) == "256"


@pytest.mark.parametrize(
    ("options", "needle"),
    [
        ({"ppl_tolerance": -0.1}, "--ppl-tolerance"),
        ({"ppl_tolerance": math.nan}, "--ppl-tolerance"),
        ({"retrieval_threshold": 0}, "--retrieval-threshold"),
        ({"retrieval_threshold": 1.5}, "--retrieval-threshold"),
    ],
)
def test_a_rule_outside_its_range_is_refused_naming_the_option(options, needle):
    with pytest.raises(UsageError, match=needle):
        LengthRule(**options)


@pytest.mark.slow  # evaluates and probes trained runs through the CLI
def test_eval_and_probe_into_one_directory_give_one_effective_length_row_with_both_rules(tmp_path):
    """The row is in comparison.md (and the terminal's), ppl.csv holds it by perplexity and probe.csv by
    retrieval, both rules are stated, and a rule out of range is one line before any work."""
    from conftest import evaluate, invoke, train

    passkeys = ("train.block_size=96", "data.passkey_rate=0.3", "data.passkey_max_distance=20")
    run = str(train(tmp_path, "scheme=alibi", *passkeys))
    ppl = evaluate(tmp_path, run, "--lengths", "96,192", "--ppl-tolerance", "1000")
    assert (ppl["effective_len_ppl"] == 192).all() and ppl["effective_len_ppl_at_least"].all()
    probed = invoke("probe", run, "--lengths", "96,192", "--trials", "2", "--out", str(tmp_path / "eval"))
    assert probed.code == 0, probed.stderr
    assert "effective length" in probed.stdout
    probe = pd.read_csv(tmp_path / "eval" / "probe.csv")
    assert {"effective_len_retrieval", "effective_len_retrieval_at_least"} <= set(probe.columns)
    comparison = (tmp_path / "eval" / "comparison.md").read_text()
    row = next(line for line in comparison.splitlines() if line.startswith("| effective length |"))
    assert "perplexity within 10%" in comparison and "at least 50% of keys retrieved" in comparison
    smoke_retrieves = probe["accuracy"].mean() >= 0.5
    assert ("≥ 192" in row) == smoke_retrieves  # the probe's 50 % decides: perplexity held at 1000 %
    refused = invoke("probe", run, "--retrieval-threshold", "0", "--out", str(tmp_path / "never"))
    assert (
        refused.code == 2
        and refused.stderr.strip().count("\n") == 0
        and "--retrieval-threshold" in refused.stderr
    )
    assert not (tmp_path / "never").exists()
