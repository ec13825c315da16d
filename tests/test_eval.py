"""Evaluation: windowing, perplexity arithmetic, the verdicts, and `posenc eval` end to end."""

from __future__ import annotations

import ast
import hashlib
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn

import posenc_cli
from conftest import assert_refused, column, evaluate, invoke, train
from posenc_cli.core.errors import UsageError
from posenc_cli.data.vocab import Vocab
from posenc_cli.evaluation.labels import Label, Variant, scheme_order
from posenc_cli.evaluation.perplexity import (
    LogitsScorer,
    bits_per_byte,
    evaluate_length,
    parse_lengths,
    parse_overflow,
    plan_pieces,
    plan_windows,
    scored_span,
)
from posenc_cli.report.tables import comparison, ppl_pivot
from posenc_cli.report.verdict import NO_VERDICT, has_learned, verdict


def scored_targets(windows, length):
    """(target index, tokens of context it sees) for every scored target."""
    return [(w.start + p, p) for w in windows for p in range(length - w.scored, length)]


@pytest.mark.parametrize("span, length", [(64, 8), (64, 64), (96, 32)])
def test_nonoverlap_scores_every_target_once_with_its_position_as_context(span, length):
    scored = scored_targets(plan_windows(span, length), length)
    assert sorted(t for t, _ in scored) == list(range(span))
    assert all(context == t % length for t, context in scored)


@given(st.integers(1, 300), st.integers(0, 700))
def test_nonoverlap_a_length_that_does_not_divide_the_span_ends_with_a_tail_window(length, extra):
    span = length + extra
    windows = plan_windows(span, length)
    scored = scored_targets(windows, length)
    assert sorted(t for t, _ in scored) == list(range(span))  # every target exactly once
    assert all(w.start >= 0 and w.start + length <= span for w in windows)
    whole = span - span % length  # targets before the tail keep their position as context
    assert all(context == t % length for t, context in scored if t < whole)


@pytest.mark.parametrize("lengths", [[256, 384, 1024], [256, 768, 2048], [100, 256, 1000]])
@pytest.mark.parametrize("mode", ["nonoverlap", "sliding"])
def test_every_length_scores_the_same_number_of_targets_even_when_lengths_do_not_divide(lengths, mode):
    span = scored_span(n_tokens=40_000, lengths=lengths, max_tokens=32_768)
    assert span == 32_768 - 32_768 % max(lengths)
    for length in lengths:
        assert sum(w.scored for w in plan_windows(span, length, mode)) == span


@pytest.mark.parametrize("span, length, stride", [(64, 16, 8), (64, 16, 4), (70, 16, 6), (64, 16, 16)])
def test_sliding_scores_every_target_once_with_at_least_length_minus_stride_context(span, length, stride):
    windows = plan_windows(span, length, "sliding", stride=stride)
    scored = scored_targets(windows, length)
    assert sorted(t for t, _ in scored) == list(range(span))
    for t, context in scored:
        assert context == t if t < length else context >= length - stride
    assert all(w.start >= 0 and w.start + length <= span for w in windows)


def test_the_same_span_is_scored_at_every_length():
    span = scored_span(n_tokens=10_000, lengths=[256, 512, 2048], max_tokens=5000)
    assert span == 4096
    for length in (256, 512, 2048):
        assert sum(w.scored for w in plan_windows(span, length)) == span
    with pytest.raises(UsageError, match="has 1000 tokens"):
        scored_span(n_tokens=1000, lengths=[2048], max_tokens=5000)


class FixedDistribution(nn.Module):
    """A 'model' whose next-token distribution is always the same: probabilities p."""

    def __init__(self, p):
        super().__init__()
        self.logp = torch.log(torch.tensor(p))
        self.scheme = type("NoPositions", (), {"max_len": None})()

    def forward(self, idx):
        return self.logp.expand(*idx.shape, len(self.logp)).clone()


def test_perplexity_by_hand():
    # targets after the first token: 0, 1, 2, 0 -> NLL = ln 2, ln 4, ln 4, ln 2 -> mean ln(2√2 · ... )
    model = FixedDistribution([0.5, 0.25, 0.25])
    tokens = torch.tensor([0, 0, 1, 2, 0])
    result = evaluate_length(LogitsScorer(model), tokens, span=4, length=2)
    expected = (math.log(2) + math.log(4) + math.log(4) + math.log(2)) / 4
    assert result.tokens == 4
    assert result.nll == pytest.approx(expected)
    assert result.ppl == pytest.approx(math.sqrt(8))
    assert result.position_nll.tolist() == pytest.approx([(math.log(2) + math.log(4)) / 2] * 2)


def test_bits_per_byte_by_hand():
    # characters of 1, 2 and 3 UTF-8 bytes under a uniform model: each target costs ln 3 nats; the
    # six targets "é€aé€a" are 12 bytes, so bpb = 6 ln 3 / ln 2 / 12 = log2(3) / 2
    vocab = Vocab.from_text("aé€")
    tokens = vocab.encode("aé€aé€a")
    per_id = torch.tensor(np.stack([vocab.byte_counts, vocab.char_counts]), dtype=torch.float64)
    result = evaluate_length(
        LogitsScorer(FixedDistribution([1 / 3] * 3)),
        tokens,
        span=6,
        length=3,
        weights=lambda start, n: per_id[:, tokens[start : start + n]],
    )
    assert (result.tokens, result.bytes, result.chars) == (6, 12, 6)
    assert result.bpb == pytest.approx(math.log2(3) / 2)
    assert bits_per_byte(8 * math.log(2), 4) == pytest.approx(2.0)  # 8 bits over 4 bytes
    assert math.isnan(bits_per_byte(1.0, math.nan))  # ids without a tokenizer: bytes unknown


@pytest.mark.parametrize("text", ["", "0", "-5", "512,abc", "1.5", "512,,1024"])
def test_parse_lengths_rejects_malformed_lists(text):
    with pytest.raises(UsageError):
        parse_lengths(text)


@pytest.mark.parametrize(
    "span, length, context, mode",
    [
        (96, 32, 8, "nonoverlap"),
        (96, 32, 12, "nonoverlap"),
        (100, 32, 8, "sliding"),
        (64, 16, 16, "nonoverlap"),
    ],
)
def test_window_overflow_scores_every_target_once_with_at_most_context_tokens(span, length, context, mode):
    """--learned-overflow window: a window of `length` past a table of `context` rows is scored through
    sub-windows of `context` tokens inside it; every target once, seeing at most `context` tokens and,
    once the window has that many, at least context − context/2 (the sub-windows' stride)."""
    windows = plan_windows(span, length, mode)
    pieces = plan_pieces(windows, length, context)
    plain = scored_targets(windows, length)  # (target, context it would see in its whole window)
    seen = [(p.start + i, i) for p in pieces for i in range(p.first_scored, min(length, context))]
    assert sorted(t for t, _ in seen) == sorted(t for t, _ in plain) == list(range(span))
    whole = dict(plain)
    for target, tokens_before in seen:
        assert tokens_before <= context - 1 and tokens_before <= whole[target]
        assert tokens_before >= min(whole[target], context - context // 2)
    assert all(p.offset + min(length, context) <= length for p in pieces)
    if context >= length:
        assert [(p.start, p.first_scored) for p in pieces] == [(w.start, length - w.scored) for w in windows]


def test_window_overflow_never_shows_the_model_more_than_its_table():
    class Widths(FixedDistribution):
        def forward(self, idx):
            self.widths.add(idx.size(1))
            return super().forward(idx)

    model = Widths([0.5, 0.25, 0.25])
    model.widths = set()
    tokens = torch.randint(0, 3, (97,), generator=torch.Generator().manual_seed(0))
    capped = evaluate_length(LogitsScorer(model), tokens, span=96, length=32, context=8)
    assert model.widths == {8} and capped.tokens == 96
    assert capped.nll == pytest.approx(
        evaluate_length(LogitsScorer(model), tokens, span=96, length=32).nll
    )  # same targets
    assert capped.position_count.tolist() == [3.0] * 32  # per position inside the 32-token windows
    assert parse_overflow("window, dash") == ["window", "dash"]
    with pytest.raises(
        UsageError, match="--learned-overflow truncate is not known; choose from: dash, window"
    ):
        parse_overflow("truncate")


def test_parse_lengths():
    assert parse_lengths(" 1024, 512,512") == [512, 1024]


@pytest.mark.parametrize(
    "stability, quality, word",
    [
        (1.0, 1.0, "very strong"),
        (1.3, 1.0, "strong"),
        (2.0, 1.0, "medium"),
        (5.0, 1.0, "weak"),
        (50, 1.0, "fails"),
        (math.nan, math.nan, "fails"),  # past a learned table
        (1.0, 1.2, "strong"),
        (1.0, 1.5, "medium"),
        (1.0, 3.0, "weak"),
        (1.0, 8.0, "fails"),
        (2.0, 1.2, "medium"),
    ],
)
def test_the_verdict_is_the_lower_of_the_stability_and_the_quality_grade(stability, quality, word):
    assert verdict(stability, quality) == word


@given(st.floats(0.5, 100), st.floats(1.0, 100))
def test_a_scheme_more_than_a_quarter_worse_than_the_best_is_never_strong(stability, quality):
    if quality > 1.25:
        assert verdict(stability, quality) not in ("strong", "very strong")
    assert verdict(stability, quality) != "none"  # never the name of the scheme `none`


def test_a_run_that_has_not_learned_gets_no_verdict_however_flat():
    assert not has_learned(train_ppl=17.7, unigram_ppl=15.96)  # a 20-step smoke model
    assert not has_learned(train_ppl=0.81 * 16, unigram_ppl=16)  # below, but not clearly
    assert has_learned(train_ppl=6.0, unigram_ppl=15.96)
    assert verdict(1.0, 1.0, learned=False) == NO_VERDICT


def ppl_rows(scheme, ppls, seed=0, unigram_ppl=16.0, train_len=256):
    """ppl.csv rows for one run: {eval_len: ppl}."""
    return [
        dict(
            run=f"{scheme}{seed}",
            scheme=column(scheme) if isinstance(scheme, str) else scheme,
            seed=seed,
            train_len=train_len,
            eval_len=L,
            mode="nonoverlap",
            tokens=4096,
            nll=math.log(p),
            ppl=p,
            unigram_ppl=unigram_ppl,
            note="",
        )
        for L, p in ppls.items()
    ]


def table_rows(text):
    return {
        line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
        for line in text.splitlines()
        if line.startswith("| ")
    }


def test_comparison_grades_a_flat_but_poor_scheme_below_strong_and_an_unlearned_one_not_at_all():
    # the demo's shape: NoPE flat (1.11x) but 2.5x the best at 2048; a 20-step model flat at ppl 17.7
    df = pd.DataFrame(
        ppl_rows("none", {256: 6.0, 2048: 6.67})
        + ppl_rows("alibi", {256: 2.66, 2048: 2.63})
        + ppl_rows("rope", {256: 17.7, 2048: 17.8})
    )
    text = comparison(df, {})
    lines = table_rows(text)
    assert lines[""] == ["none", "rope", "alibi"]
    assert lines["stability: ppl(2048) / own ppl(256)"] == ["1.11×", "1.01×", "0.99×"]
    assert lines["quality: ppl(2048) / best's (alibi)"] == ["2.54×", "6.77×", "1.00×"]
    assert lines["extrapolation, measured"] == ["weak", NO_VERDICT, "very strong"]
    assert "no verdict for rope: its ppl at 256 (17.70) is not clearly below the unigram perplexity" in text
    assert "Perplexity on 4,096 validation tokens" in text and "not that it uses them" in text


def test_across_tokenizers_quality_compares_perplexity_per_byte_not_per_token():
    """A BPE token covers several characters, so its perplexity is higher for the same text: two runs
    with the same bits per byte are equally good, whatever their token perplexities."""
    rows = []
    for scheme, tokenizer, ppls, bpb in (
        (column("alibi", tokenizer="char"), "char", {128: 8.1, 1024: 8.0}, 3.0),
        (column("alibi", tokenizer="bpe"), "bpe", {128: 56.0, 1024: 55.0}, 3.0),
        (column("rope", tokenizer="bpe"), "bpe", {128: 54.0, 1024: 70.0}, 3.3),
    ):
        for row in ppl_rows(scheme, ppls, train_len=128, unigram_ppl=500.0):
            rows.append(row | dict(tokenizer=tokenizer, bpb=bpb, bytes=4096.0, chars=4096.0))
    lines = table_rows(comparison(pd.DataFrame(rows), {}))
    (quality,) = [key for key in lines if key.startswith("quality: per-byte ppl(1024) = 2^bpb")]
    assert lines[quality] == ["1.23×", "1.00×", "1.00×"]  # 2^(3.3 - 3.0); token ppl 55 vs 8 is no gap
    assert lines["extrapolation, measured"][1:] == ["very strong", "very strong"]


def test_comparison_table_aggregates_seeds_and_echoes_the_claims():
    rows = []
    for seed, ppl in ((0, 4.0), (1, 6.0)):
        rows += [
            dict(
                run=f"r{seed}",
                scheme=column("alibi"),
                seed=seed,
                train_len=256,
                eval_len=256,
                mode="nonoverlap",
                tokens=100,
                nll=math.log(ppl),
                ppl=ppl,
                note="",
            ),
            dict(
                run=f"r{seed}",
                scheme=column("alibi"),
                seed=seed,
                train_len=256,
                eval_len=1024,
                mode="nonoverlap",
                tokens=100,
                nll=math.log(ppl),
                ppl=ppl,
                note="",
            ),
        ]
    rows += [
        dict(
            run="l",
            scheme=column("learned"),
            seed=0,
            train_len=256,
            eval_len=256,
            mode="nonoverlap",
            tokens=100,
            nll=1.0,
            ppl=math.e,
            note="",
        ),
        dict(
            run="l",
            scheme=column("learned"),
            seed=0,
            train_len=256,
            eval_len=1024,
            mode="nonoverlap",
            tokens=0,
            nll=math.nan,
            ppl=math.nan,
            note="learned cannot represent positions ≥ max_len=256",
        ),
    ]
    text = comparison(
        pd.DataFrame(rows),
        {
            column("alibi"): {"positional_params": 0, "relative": "explicit"},
            column("learned"): {"positional_params": 32768, "relative": "none"},
        },
        lang="zh",
    )
    lines = {
        line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
        for line in text.splitlines()
        if line.startswith("| ")
    }
    assert lines[""] == ["learned", "alibi"]
    assert lines["ppl @ 256 (training length)"] == ["2.72", "5.00 ± 1.41"]
    assert lines["ppl @ 1024 (4×)"] == ["—", "5.00 ± 1.41"]
    assert lines["extrapolation, measured"] == ["fails", "very strong"]
    assert lines["extrapolation, chapters' claim"] == ["none", "very strong"]
    assert lines["外推能力（章节原话）"] == ["无", "极强"]
    assert lines["positional parameters"] == ["32,768", "0"]
    assert lines["used by"] == ["GPT-2", "BLOOM"]
    assert "cannot represent positions ≥ max_len=256" in text and "alibi n=2" in text


@pytest.mark.tiny_run  # make test keeps it: one of its few tiny CLI runs
def test_eval_end_to_end(smoke_sweep, tmp_path, monkeypatch):
    out = tmp_path / "ev"
    df = evaluate(tmp_path, str(smoke_sweep), "--lengths", "128,256", "--max-tokens", "1024", out="ev")
    for name in (
        "ppl.csv",
        "ppl.md",
        "comparison.md",
        "loss_by_position.csv",
        "ppl_vs_length.png",
        "loss_by_position.png",
    ):
        assert (out / name).is_file(), name
    assert list(df.columns[:10]) == [
        "run",
        "model_id",
        "scheme",
        "seed",
        "train_len",
        "eval_len",
        "mode",
        "tokens",
        "nll",
        "ppl",
    ]
    assert sorted(df["eval_len"].unique()) == [64, 128, 256]  # the training length is always included
    learned = df[df.scheme == "learned"].set_index("eval_len")
    assert (
        learned.loc[64, "ppl"] > 1
        and math.isnan(learned.loc[128, "ppl"])
        and math.isnan(learned.loc[256, "ppl"])
    )
    assert (df[df.scheme != "learned"]["tokens"] == 1024).all()
    assert "—" in (out / "comparison.md").read_text() and "max_len=64" in (out / "comparison.md").read_text()
    assert df["differs"].isna().all()  # a sweep's runs differ in their scheme alone: no note, as before
    assert "different trainings" not in (out / "comparison.md").read_text()
    # with no run named it picks the latest sweep under ./outputs
    monkeypatch.chdir(smoke_sweep.parents[2])
    again = invoke("eval", "--lengths", "128", "--max-tokens", "512", "--out", str(tmp_path / "ev2"))
    assert again.code == 0, again.stderr
    assert "latest sweep" in again.stderr


def test_sliding_mode_end_to_end(smoke_sweep, tmp_path):
    run = smoke_sweep / "3_rope_seed0"
    options = ["--lengths", "128", "--mode", "sliding", "--stride", "32", "--max-tokens", "512"]
    df = evaluate(tmp_path, str(run), *options)
    assert set(df["mode"]) == {"sliding"} and (df["tokens"] == 512).all()


def test_the_schemes_beyond_the_chapters_evaluate_past_training_length(beyond_chapters_sweep, tmp_path):
    options = ["--lengths", "256", "--max-tokens", "1024", "--rope-scaling", "none,ntk"]
    df = evaluate(tmp_path, str(beyond_chapters_sweep), *options)
    assert set(df["scheme"]) == {
        "t5",
        "kerple",
        "xpos",
        "xpos+ntk",
    }  # xpos reuses RoPE's rotation and scaling
    assert df["ppl"].notna().all() and (df["ppl"] > 1).all()
    comparison = (tmp_path / "eval" / "comparison.md").read_text(encoding="utf-8")
    assert "| extrapolation, chapters' claim | not in the chapters | not in the chapters |" in comparison
    assert "| positional parameters | 64 | 0 | 0 | 4 |" in comparison  # kerple 2·h, t5 32·h, xpos 0 (h = 2)
    assert "| relative position | explicit | explicit | explicit | explicit |" in comparison


@pytest.mark.slow  # trains runs or starts processes
def test_trained_composite_and_interleaved_runs_evaluate_like_any_other(tmp_path):
    """End to end: sinusoidal+learned and the chapter's interleaved RoPE train, and eval scores them;
    --learned-overflow window fills the table's "—" with learned+window numbers, labelled so."""
    train(tmp_path, "scheme=sinusoidal+learned", run="runs/sinusoidal+learned")
    train(tmp_path, "scheme=rope", "scheme.layout=interleaved", run="runs/rope")
    options = ["--lengths", "128", "--learned-overflow", "dash,window", "--max-tokens", "1024"]
    df = evaluate(tmp_path, "runs/sinusoidal+learned", "runs/rope", *options, out="ev")
    ppl = df.set_index(["scheme", "eval_len"])["ppl"]
    assert ppl[("sinusoidal+learned", 128)] != ppl[("sinusoidal+learned", 128)]  # NaN: past its table of 64
    assert ppl[("sinusoidal+learned+window", 64)] == ppl[("sinusoidal+learned", 64)]
    assert 1 < ppl[("sinusoidal+learned+window", 128)] < 40 and 1 < ppl[("rope+interleaved", 128)] < 40
    assert "sliding windows of 64 tokens" in (tmp_path / "ev" / "comparison.md").read_text()


def test_two_evals_into_different_directories_do_not_interfere(smoke_sweep, tmp_path):
    """Two processes at once: real subprocesses."""
    import os
    import subprocess
    import sys

    from conftest import ROOT

    args = [
        sys.executable,
        "-m",
        "posenc_cli",
        "eval",
        str(smoke_sweep),
        "--lengths",
        "128",
        "--max-tokens",
        "512",
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    jobs = [
        subprocess.Popen(
            [*args, "--out", str(tmp_path / name)],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in ("a", "b")
    ]
    assert all(job.wait(timeout=300) == 0 for job in jobs), [job.stderr.read() for job in jobs]
    a, b = (pd.read_csv(tmp_path / name / "ppl.csv").drop(columns="run") for name in ("a", "b"))
    pd.testing.assert_frame_equal(a, b)
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == sorted(
        p.name for p in (tmp_path / "b").iterdir()
    )
    assert not list(tmp_path.glob("*/.*.tmp"))  # no temporary file left behind by the atomic writes


def drawn_colours(df, monkeypatch):
    """{scheme: colour} of the lines plot_ppl_vs_length draws for df."""
    from matplotlib.colors import to_hex

    from posenc_cli.report import plots as report

    drawn = []
    monkeypatch.setattr(report, "save_figure", lambda fig, path: drawn.append(fig))
    report.plot_ppl_vs_length(df, None)
    colours = {c.get_label(): to_hex(c.lines[0].get_color()) for c in drawn[0].axes[0].containers}
    report.pyplot().close(drawn[0])
    return colours


def test_each_scheme_keeps_one_colour_blind_safe_colour_in_every_figure(monkeypatch):
    from posenc_cli.report.styles import SCHEME_STYLES, scheme_style

    assert len({colour for colour, _ in SCHEME_STYLES.values()}) == len(SCHEME_STYLES)  # distinct per scheme
    everything = pd.DataFrame(sum((ppl_rows(s, {256: 3.0, 1024: 4.0}) for s in SCHEME_STYLES), []))
    some = everything[
        everything.scheme.isin([column(s) for s in ("none", "rope", "alibi")])
    ]  # learned etc. out
    assert drawn_colours(some, monkeypatch) == {
        s: c for s, c in drawn_colours(everything, monkeypatch).items() if s in ("none", "rope", "alibi")
    }
    assert (
        scheme_style(column("rope", "yarn"))["color"] == scheme_style(column("rope"))["color"]
    )  # a variant: its base's colour,
    yarn, rope = scheme_style(column("rope", "yarn")), scheme_style(column("rope"))
    assert yarn["linestyle"] != rope["linestyle"]  # another line style


def test_a_scheme_registered_without_a_style_line_takes_a_palette_colour_by_registry_order_never_grey(
    monkeypatch,
):
    from posenc_cli.model import positional
    from posenc_cli.report.styles import SCHEME_STYLES, SPARE_STYLES, UNKNOWN_STYLE, scheme_style

    assert not {c for c, _ in SPARE_STYLES} & {c for c, _ in (*SCHEME_STYLES.values(), UNKNOWN_STYLE)}
    monkeypatch.setitem(positional.SCHEMES, "newer", positional.SCHEMES["rope"])
    monkeypatch.setitem(positional.SCHEMES, "newest", positional.SCHEMES["rope"])
    newer, newest = scheme_style(column("newer")), scheme_style(column("newest"))
    assert newer["color"] != newest["color"] and UNKNOWN_STYLE[0] not in (newer["color"], newest["color"])
    assert newer["color"] not in {c for c, _ in SCHEME_STYLES.values()}


MIXED_COLUMNS = [
    (column("rope"), "char", 256),
    (column("rope", "yarn"), "char", 256),
    (column("alibi"), "bpe", 256),
    *((column("rope", v, model="smollm2"), "hf:smollm2", 8192) for v in ("", "linear", "ntk", "yarn")),
    *((column("rope", v, model="qwen"), "hf:qwen", 4096) for v in ("", "yarn")),
]


def mixed_results() -> tuple[pd.DataFrame, pd.DataFrame]:
    """ppl rows and per-position rows for posenc runs and two pretrained models with scaled variants."""
    rows, positions = [], []
    for i, (label, tokenizer, context) in enumerate(MIXED_COLUMNS):
        for length in (2048, 16384):
            rows += [
                row | dict(tokenizer=tokenizer)
                for row in ppl_rows(label, {length: 20.0 + i * (1 + length / context)}, train_len=context)
            ]
        positions += [
            dict(scheme=label, seed=0, eval_len=16384, position=q, nll=3.0 + i / 10, tokens=4)
            for q in range(0, 16384, 128)
        ]
    return pd.DataFrame(rows), pd.DataFrame(positions)


def test_every_line_of_a_mixed_figure_is_told_apart_by_colour_line_style_or_marker():
    """Colour by scheme for posenc's runs and by model for pretrained ones (never grey), line style by
    variant, marker by tokenizer: no two columns share all three."""
    from posenc_cli.report.styles import UNKNOWN_STYLE, figure_styles

    columns = [label for label, _, _ in MIXED_COLUMNS]
    styles = figure_styles(columns, {label: tokenizer for label, tokenizer, _ in MIXED_COLUMNS})
    looks = [(st["color"], str(st["linestyle"]), st["marker"]) for st in styles.values()]
    assert len(set(looks)) == len(columns) and UNKNOWN_STYLE[0] not in {c for c, _, _ in looks}
    smollm2, yarn, qwen = (
        styles[column("rope", v, model=m)] for v, m in (("", "smollm2"), ("yarn", "smollm2"), ("", "qwen"))
    )
    rope = styles[column("rope")]
    assert smollm2["color"] == yarn["color"] != qwen["color"] != rope["color"] != smollm2["color"]
    assert yarn["linestyle"] == styles[column("rope", "yarn")]["linestyle"] != smollm2["linestyle"]
    assert rope["marker"] != styles[column("alibi")]["marker"]  # char against bpe
    assert smollm2["marker"] == yarn["marker"] != qwen["marker"]  # each model's own tokenizer


def test_mixed_figures_mark_every_context_read_their_axes_and_draw_every_column(monkeypatch):
    from posenc_cli.report import plots as report

    df, positions = mixed_results()
    drawn = []
    monkeypatch.setattr(report, "save_figure", lambda fig, path: drawn.append(fig))
    report.plot_ppl_vs_length(df, None)
    report.plot_loss_by_position(positions, df, None)
    for fig in drawn:
        (ax,) = fig.axes
        labels = ax.get_legend_handles_labels()[1]
        marks = [text for text in labels if text.startswith("training length")]
        assert [m.split(":")[0] for m in marks] == [f"training length {c}" for c in ("256", "4,096", "8,192")]
        assert len(labels) - len(marks) == len(MIXED_COLUMNS)  # loss by position too: every column
        assert ax.get_legend().get_bbox_to_anchor().x0 > ax.get_window_extent().x1  # outside the axes
        report.pyplot().close(fig)


def test_a_narrow_log_axis_still_has_three_labelled_ticks():
    from posenc_cli.report.plots import plain_log_axis, pyplot

    fig, ax = pyplot().subplots()
    ax.set_yscale("log")
    plain_log_axis(ax.yaxis, [31.9, 32.5, 36.0])
    assert len(ax.yaxis.get_major_locator()()) >= 3
    pyplot().close(fig)


def test_a_run_whose_loss_is_not_finite_is_a_cell_saying_so_and_never_leaves_the_mean():
    diverged = ppl_rows("rope", {256: math.nan, 1024: math.nan}, seed=1)
    df = pd.DataFrame(ppl_rows("rope", {256: 4.0, 1024: 5.0}) + diverged + ppl_rows("nope", {256: math.nan}))
    lines = table_rows(comparison(df, {}))
    assert lines["ppl @ 256 (training length)"] == [
        "nan (non-finite loss in 1 of 2 seeds)",
        "nan (non-finite loss)",
    ]
    assert lines["extrapolation, measured"][0] == "fails"  # the finite seed alone is not the evidence
    header, rows = ppl_pivot(df)
    assert rows[0][2:] == ["nan (non-finite loss in 1 of 2 seeds)"] * 2


def test_a_label_shows_what_sets_its_runs_apart_and_sorts_lengths_by_size():
    short, long = (column("rope", distinct=(("train.block_size", v),)) for v in ("64", "128"))
    assert str(long) == "rope (train.block_size=128)" and long != column("rope")
    assert scheme_order([long, short, column("alibi")]) == [short, long, column("alibi")]


def test_a_schemes_variants_come_in_the_order_asked_never_alphabetical():
    rope, linear, ntk, yarn = (column("rope", v) for v in ("", "linear", "ntk", "yarn"))
    alibi = column("alibi")
    assert scheme_order([alibi, rope, ntk, linear]) == [rope, ntk, linear, alibi]
    assert scheme_order([yarn, alibi, rope, linear, yarn]) == [yarn, rope, linear, alibi]
    hf = [column("rope", v, model="smollm2") for v in ("ntk", "")]
    assert scheme_order([*hf, ntk, rope]) == [ntk, rope, *hf]  # posenc's runs first, then by model


# Methods of str that read a text's parts, and the one reader allowed to use them on a label's text: a
# results.json from before Variant keeps nothing else to read a column's parts from.
TEXT_READERS = {"split", "rsplit", "partition", "rpartition", "startswith", "endswith", "removeprefix"}
LABEL_WORDS = ("label", "variant", "scheme", "positional", "family", "column")
SLICED_WORDS = ("label", "positional")  # a Label's scheme is a tuple of names, which may be sliced
LEGACY_READER = ("report/results_file.py", "legacy_label")


def label_text_reads(path: Path) -> list[str]:
    """Where `path` splits or tests what names a column (a text method called on an expression that
    mentions a label word), or slices a label's text; the legacy reader aside."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    legacy = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef)
        and node.name == LEGACY_READER[1]
        and path.as_posix().endswith(LEGACY_READER[0])
    ]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            read, words = node.func.value, LABEL_WORDS if node.func.attr in TEXT_READERS else ()
        elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Slice):
            read, words = node.value, SLICED_WORDS
        else:
            continue
        if any(word in ast.unparse(read).lower() for word in words) and not any(
            f.lineno <= node.lineno <= (f.end_lineno or f.lineno) for f in legacy
        ):
            found.append(f"{path}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_label_text_is_parsed_anywhere_in_posenc_cli():
    """A column's parts travel as a Label's fields: nothing in the package cuts them back out of a label's,
    a variant's or a scheme label's text (the legacy results.json reader aside)."""
    package = Path(posenc_cli.__file__).parent
    assert [hit for path in sorted(package.rglob("*.py")) for hit in label_text_reads(path)] == []


def test_a_label_is_built_of_fields_never_of_text_and_equal_only_field_for_field():
    """Two columns that would show the same text are still two columns; a text is no Label."""
    scaled, option = column("rope", "yarn"), Label(("rope",), Variant(options=("yarn",)))
    assert str(scaled) == str(option) == "rope+yarn" and scaled != option and len({scaled, option}) == 2
    assert scaled != "rope+yarn" and scaled == column("rope", "yarn")
    with pytest.raises(TypeError):
        Label("rope+yarn")


@pytest.mark.slow
def test_eval_puts_rope_scaling_columns_in_the_order_given(smoke_sweep, tmp_path):
    run = str(smoke_sweep / "3_rope_seed0")
    options = ["--lengths", "128", "--max-tokens", "512"]
    for methods in ("none,linear,ntk", "ntk,none,linear"):
        evaluate(tmp_path, run, *options, "--rope-scaling", methods, out=methods)
        columns = [f"rope+{m}" if m != "none" else "rope" for m in methods.split(",")]
        lines = (tmp_path / methods / "ppl.md").read_text(encoding="utf-8").splitlines()
        assert [line.split(" | ")[0].lstrip("| ") for line in lines[4:7]] == columns  # ppl.md: a row each
        comparison = (tmp_path / methods / "comparison.md").read_text(encoding="utf-8")
        assert "|  | " + " | ".join(columns) + " |" in comparison


@pytest.fixture(scope="module")
def rope_trainings(tmp_path_factory):
    """rope at block_size 64 (seeds 0 and 1) and 128 (seed 0); the newest single runs of rope (4 steps)
    and alibi (6 steps) under outputs/runs, as the default eval selects them."""
    cwd = tmp_path_factory.mktemp("pooling")
    train(cwd, "scheme=rope", "train.max_steps=4", run="outputs/runs/2026-01-01_00-00-01_rope")
    train(cwd, "scheme=alibi", "train.max_steps=6", run="outputs/runs/2026-01-01_00-00-02_alibi")
    train(cwd, "scheme=rope", "train.max_steps=4", "seed=1", run="seed1")
    train(cwd, "scheme=rope", "train.max_steps=4", "train.block_size=128", run="long")
    return cwd


@pytest.mark.slow
def test_runs_that_differ_in_block_size_are_two_columns_never_seeds_and_the_note_names_it(rope_trainings):
    rope = "outputs/runs/2026-01-01_00-00-01_rope"
    df = evaluate(rope_trainings, rope, "long", "--lengths", "256", "--max-tokens", "512")
    assert set(df["scheme"]) == {"rope (train.block_size=64)", "rope (train.block_size=128)"}
    text = (rope_trainings / "eval" / "comparison.md").read_text(encoding="utf-8")
    lines = table_rows(text)
    assert lines[""] == ["rope (train.block_size=64)", "rope (train.block_size=128)"]
    assert "±" not in text and "one seed each" in text
    assert "ppl @ 256 (4× 64; 2× 128)" in text  # a multiple of each column's own training length
    assert (
        "they differ in train.block_size (rope (train.block_size=64) 64; rope (train.block_size=128) 128)"
        in text
    )


@pytest.mark.slow
def test_runs_equal_but_for_the_seed_still_pool_as_seeds(rope_trainings):
    rope = "outputs/runs/2026-01-01_00-00-01_rope"
    df = evaluate(rope_trainings, rope, "seed1", "--lengths", "128", "--max-tokens", "512")
    assert set(df["scheme"]) == {"rope"} and df["differs"].isna().all()
    text = (rope_trainings / "eval" / "comparison.md").read_text(encoding="utf-8")
    assert "±" in table_rows(text)["ppl @ 128 (2×)"][0] and "rope n=2" in text
    assert "different trainings" not in text


@pytest.mark.slow
def test_the_default_eval_says_when_the_latest_runs_budgets_differ(rope_trainings):
    df = evaluate(rope_trainings, "--lengths", "128", "--max-tokens", "512")
    assert set(df["scheme"]) == {"rope", "alibi"}
    text = (rope_trainings / "eval" / "comparison.md").read_text(encoding="utf-8")
    assert "they differ in train.max_steps (alibi 6; rope 4)" in text or (
        "they differ in train.max_steps (rope 4; alibi 6)" in text
    )


def test_a_run_counted_twice_is_refused_never_a_second_seed():
    from types import SimpleNamespace

    from posenc_cli.evaluation.labels import refuse_repeats

    def run(path, run_id, seed):
        return SimpleNamespace(path=path, seed=seed, record=SimpleNamespace(run_id=run_id))

    a, copy, other_seed, rerun = run("a", "1", 0), run("a-copy", "1", 0), run("b", "2", 1), run("c", "3", 0)
    settings = {id(r): {"scheme.name": "rope"} for r in (a, copy, other_seed, rerun)}
    refuse_repeats([a, other_seed], settings)
    with pytest.raises(UsageError, match="a and a-copy are the same run"):
        refuse_repeats([a, other_seed, copy], settings)
    with pytest.raises(UsageError, match="a and c are both seed 0 of one training setting"):
        refuse_repeats([a, rerun], settings)


def test_the_default_eval_takes_each_schemes_newest_finished_run_never_hiding_it_behind_a_failed_one(
    tmp_path,
):
    from posenc_cli.rundir.selection import latest_runs

    for name, scheme, status in (
        ("2026-01-01_00-00-01_r", "rope", "finished"),
        ("2026-01-01_00-00-02_r", "rope", "failed"),
        ("2026-01-01_00-00-03_a", "alibi", "finished"),
    ):
        (tmp_path / "runs" / name).mkdir(parents=True)
        (tmp_path / "runs" / name / "summary.json").write_text(
            json.dumps({"scheme": scheme, "status": status})
        )
    (tmp_path / "sweeps" / "2026-01-02_00-00-00" / "0_rope_seed0").mkdir(parents=True)  # newer, interrupted
    (tmp_path / "sweeps" / "2026-01-02_00-00-00" / "0_rope_seed0" / "summary.json").write_text(
        '{"status": "interrupted"}'
    )
    runs, _ = latest_runs(tmp_path)
    assert [r.name for r in runs] == ["2026-01-01_00-00-01_r", "2026-01-01_00-00-03_a"]


def test_a_context_longer_than_every_length_asked_is_not_evaluated_and_the_longest_asked_is_the_reference():
    from posenc_cli.evaluation.perplexity import target_lengths

    inside = target_lengths(8192, [256, 512, 1024], add_context=False)
    assert (inside.lengths, inside.reference, inside.added) == ([256, 512, 1024], 1024, None)
    asked = target_lengths(8192, [256, 512, 1024], add_context=True)
    assert (asked.lengths, asked.reference, asked.added) == ([256, 512, 1024, 8192], 8192, 8192)
    short = target_lengths(256, [512, 1024], add_context=False)  # cheap, and the reference: added, said
    assert (short.lengths, short.reference, short.added) == ([256, 512, 1024], 256, 256)
    between = target_lengths(8192, [2048, 16384], add_context=False)
    assert (between.lengths, between.reference) == ([2048, 8192, 16384], 8192)


def test_max_tokens_is_a_bound_never_raised_to_the_longest_length():
    with pytest.raises(UsageError, match="--max-tokens 4096 is fewer than the longest length 8192"):
        scored_span(n_tokens=100_000, lengths=[256, 8192], max_tokens=4096)
    assert scored_span(n_tokens=100_000, lengths=[256, 1024], max_tokens=4096) == 4096


@settings(suppress_health_check=[HealthCheck.too_slow])  # 600 widths an example: slow on a loaded machine
@given(st.lists(st.integers(1, 6), min_size=600, max_size=600), st.sampled_from([16, 32, 64]))
def test_every_column_scores_the_same_bytes_to_less_than_a_token_at_each_end(widths, longest):
    """A char-like column (1 byte a token) and a coarse one (widths bytes a token): the coarse one scores
    whole windows within --max-tokens, and both score the bytes (first token's end, B]."""
    from posenc_cli.evaluation.eval_text import same_bytes_spans

    fine = torch.ones(sum(widths), dtype=torch.float64)
    coarse = torch.tensor(widths, dtype=torch.float64)
    streams = {
        key: (list(range(len(w))), lambda start, n, w=w: torch.stack([w[start : start + n]] * 2))
        for key, w in (("fine", fine), ("coarse", coarse))
    }
    spans = same_bytes_spans(
        streams,
        longest={"fine": longest, "coarse": longest},
        max_tokens=256,
        names={"fine": "f", "coarse": "c"},
    )
    assert spans["coarse"] == 256 // longest * longest  # whole windows: what --max-tokens bounds
    scored = {key: float(w[1 : spans[key] + 1].sum()) for key, w in (("fine", fine), ("coarse", coarse))}
    assert 0 <= scored["fine"] - scored["coarse"] < coarse[0]  # only the coarse first token's bytes differ


def test_a_runs_own_training_text_is_scored_on_its_validation_split_for_every_column():
    from types import SimpleNamespace

    from posenc_cli.evaluation.eval_text import held_out_text
    from posenc_cli.rundir.loading import LoadedRun

    text = "".join(chr(97 + i % 26) for i in range(1000))

    def run_on(data: dict) -> LoadedRun:
        run = object.__new__(LoadedRun)
        run.path = "runs/rope"
        record = SimpleNamespace(corpus_sha256=hashlib.sha256(text.encode()).hexdigest(), data=data)
        run.checkpoint = SimpleNamespace(record=record)
        return run

    run = run_on({"name": "text", "path": "corpus.txt", "val_fraction": 0.1})
    held = held_out_text(text, "corpus.txt", [run])
    assert held.text == text[900:] and "characters 900–1,000 (the validation split" in held.name
    assert held_out_text(text + "x", "other.txt", [run]).text == text + "x"  # another text: whole
    ids = run_on({"name": "bin", "train": "train.bin", "val": "val.bin"})  # a record without a val_fraction
    with pytest.raises(UsageError, match="states no data.val_fraction"):
        held_out_text(text, "corpus.txt", [ids])


def test_ntk_and_dynamic_without_a_factor_are_one_computation_shown_once():
    from posenc_cli.model.extension.method import ContextMethod
    from posenc_cli.model.positional.rope_scaling import RopeScaling
    from posenc_cli.report.run_eval import DYNAMIC_AS_NTK, same_computation

    for length in (512, 1000, 4096):
        ntk = RopeScaling("ntk", 256).frequencies(64, 10000.0, length)[0]
        dynamic = RopeScaling("dynamic", 256).frequencies(64, 10000.0, length)[0]
        assert torch.allclose(ntk, dynamic, rtol=1e-12)
    none, ntk, dynamic = (ContextMethod(m) for m in ("none", "ntk", "dynamic"))
    methods, standing = same_computation([none, ntk, dynamic], None)
    assert (
        methods == [none, ntk] and standing == {"ntk"} and "dynamic is shown once, as ntk" in DYNAMIC_AS_NTK
    )
    assert same_computation([ntk, dynamic], 4.0) == ([ntk, dynamic], set())  # a factor: they differ
    with_logn = [ContextMethod("ntk", logn=True), ContextMethod("dynamic", logn=True)]
    assert same_computation(with_logn, None)[0] == with_logn[:1]  # the same extension on both
    assert same_computation([ntk, ContextMethod("dynamic", logn=True)], None)[1] == set()  # another one


def context_rows_of(scheme, ppls, *, train_len, context, reference):
    return [
        row | dict(context=context, reference_len=reference)
        for row in ppl_rows(scheme, ppls, train_len=train_len, unigram_ppl=500.0)
    ]


def test_no_extrapolation_verdict_without_a_length_past_the_models_real_context():
    inside = context_rows_of(
        column("rope", model="m"), {512: 20.0, 1024: 19.0}, train_len=8192, context=8192, reference=1024
    )
    pretended = context_rows_of(
        column("rope", model="p", distinct=(("hf-context", "256"),)),
        {256: 20.0, 1024: 20.5},
        train_len=256,
        context=8192,
        reference=256,
    )
    text = comparison(pd.DataFrame(inside + pretended), {})
    lines = table_rows(text)
    assert lines["extrapolation, measured"] == ["not measured", "not measured"]
    assert lines["context (training length)"] == ["8,192", "256 (--hf-context; its config: 8,192)"]
    assert lines["reference length"] == ["1,024 (the longest length asked, inside the context)", "256"]
    assert "no length past its own context (8,192) was evaluated" in text
    assert "--hf-context 256 pretends a shorter one" in text
    past = context_rows_of(
        column("rope", model="m"), {8192: 20.0, 16384: 21.0}, train_len=8192, context=8192, reference=8192
    )
    assert table_rows(comparison(pd.DataFrame(past), {}))["extrapolation, measured"] == ["very strong"]


def test_multiples_are_of_each_columns_own_context():
    rows = ppl_rows("rope", {256: 5.0, 16384: 9.0}, train_len=256)
    rows += ppl_rows(column("rope", model="m"), {8192: 20.0, 16384: 21.0}, train_len=8192)
    (label,) = [
        key for key in table_rows(comparison(pd.DataFrame(rows), {})) if key.startswith("ppl @ 16384")
    ]
    assert "64× 256; 2× 8,192" in label


@pytest.mark.slow
def test_learned_overflow_window_without_a_position_table_among_the_targets_is_refused(smoke_sweep, tmp_path):
    """--learned-overflow window changes nothing for runs without a table (rope): refused by name, not
    silently ignored; with a learned run among the targets it is read."""
    rope = str(next(p for p in smoke_sweep.iterdir() if p.name.endswith("rope_seed0")))
    for overflow in ("window", "dash,window"):
        result = invoke(
            "eval", rope, "--learned-overflow", overflow, "--lengths", "64", "--out", str(tmp_path / "e")
        )
        assert_refused(result.code, result.stderr, "--learned-overflow window", "no target here has one")
    assert not (tmp_path / "e").exists()
