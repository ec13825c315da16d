"""`posenc sample`: the same text for the same seed, exactly the tokens asked for, learned stopping at
its table unless the context slides, and bad input refused in one line."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from conftest import assert_refused, invoke, posenc, run_cli
from posenc_cli.core.errors import UsageError
from posenc_cli.data.tokenizers import ByteTokenizer, IdsOnly
from posenc_cli.evaluation.sample import SamplePlan, Sampling, generate, pick, plan, stream_text
from posenc_cli.rundir.loading import load_run

PROMPT = "the "
ONE_THREAD = {"OMP_NUM_THREADS": "1"}  # one token at a time gains nothing from threads


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def run_of(sweep: Path, scheme: str) -> Path:
    return next(
        r
        for r in sorted(sweep.iterdir())
        if (r / "summary.json").is_file() and json.loads((r / "summary.json").read_text())["scheme"] == scheme
    )


def sampled(run, seed: int, tokens: int = 80, window: int | None = None) -> list[int]:
    ids = run.tokenizer.encode(PROMPT)
    return list(
        generate(
            run.model, ids, tokens, sampling=Sampling(0.8, 5, seed), window=window, device=torch.device("cpu")
        )
    )


def test_a_seed_gives_the_same_tokens_and_another_seed_others(smoke_sweep):
    run = load_run(run_of(smoke_sweep, "rope"))
    first, again, other = sampled(run, 0), sampled(run, 0), sampled(run, 1)
    assert len(first) == 80 and first == again and first != other
    assert all(0 <= t < len(run.tokenizer) for t in first)


def test_top_k_never_picks_outside_the_k_most_likely_and_temperature_zero_is_greedy():
    logits = torch.tensor([0.0, 3.0, 1.0, 2.0, -1.0])
    generator = torch.Generator().manual_seed(0)
    assert {pick(logits, 5.0, 2, generator=generator) for _ in range(200)} == {1, 3}
    assert pick(logits, 0.0, None, generator=generator) == 1


def test_a_temperature_that_underflows_samples_as_greedy_never_fails():
    """logits / 1e-40 overflowed to inf and torch.multinomial refused the NaNs; shifted first, it is greedy."""
    logits = torch.tensor([0.0, 30.0, 1.0, 29.0, -1.0])
    generator = torch.Generator().manual_seed(0)
    for temperature in (1e-40, 1e-300, 5e-324):
        assert {pick(logits, temperature, None, generator=generator) for _ in range(20)} == {1}
        assert pick(logits, temperature, 2, generator=generator) == 1


def test_learned_stops_at_its_table_unless_the_window_slides(smoke_sweep):
    run = load_run(run_of(smoke_sweep, "learned"))
    limit = run.model.scheme.max_len
    stopped = plan(run, len(PROMPT), 1000, window=None)
    assert stopped.tokens == limit + 1 - len(PROMPT) and f"--window {limit}" in stopped.stopped_early
    assert len(sampled(run, 0, stopped.tokens)) == stopped.tokens  # the last one still has a position
    assert plan(run, len(PROMPT), 1000, window=limit) == SamplePlan(1000, None)
    assert len(sampled(run, 0, 3 * limit, window=limit)) == 3 * limit
    with pytest.raises(UsageError, match=f"--window {limit + 1} is past learned's table"):
        plan(run, len(PROMPT), 10, window=limit + 1)
    assert plan(load_run(run_of(smoke_sweep, "rope")), len(PROMPT), 1000, window=None) == SamplePlan(
        1000, None
    )


def test_sample_streams_the_text_and_writes_it_with_out(smoke_sweep, tmp_path):
    learned = run_of(smoke_sweep, "learned")
    result = run_cli(
        "sample",
        str(learned),
        "--prompt",
        PROMPT,
        "--tokens",
        "500",
        "--seed",
        "3",
        "--top-k",
        "5",
        "--out",
        "sample.txt",
        "--device",
        "cpu",
        cwd=tmp_path,
        env=ONE_THREAD,
    )
    assert result.returncode == 0, result.stderr
    table = load_run(learned).model.scheme.max_len
    written = (tmp_path / "sample.txt").read_text(encoding="utf-8")
    assert result.stdout == written + "\n" and written.startswith(PROMPT) and len(written) == table + 1
    assert "learned stopped after" in result.stderr and f"--window {table}" in result.stderr


@pytest.mark.parametrize("kind", ["symlink", "fifo"])
def test_sample_never_replaces_a_link_or_a_device_with_its_output(smoke_sweep, tmp_path, kind):
    run = next(p for p in smoke_sweep.iterdir() if p.name.endswith("rope_seed0"))
    target = tmp_path / "out.txt"
    if kind == "symlink":
        (tmp_path / "notes.txt").write_text("mine")
        target.symlink_to(tmp_path / "notes.txt")
    else:
        os.mkfifo(target)
    code, stderr = posenc("sample", str(run), "--prompt", "a", "--tokens", "3", "--out", str(target))
    assert_refused(code, stderr, str(target), "symbolic link" if kind == "symlink" else "not a regular file")
    assert target.is_symlink() if kind == "symlink" else not target.is_file()


def test_without_a_prompt_samples_start_from_a_newline_or_space_and_each_sample_has_its_seed(
    smoke_sweep, tmp_path, monkeypatch
):
    rope = run_of(smoke_sweep, "rope")
    start = "\n" if not load_run(rope).tokenizer.missing("\n") else " "
    monkeypatch.chdir(tmp_path)
    args = ["sample", str(rope), "--tokens", "12", "--device", "cpu"]
    assert invoke(*args, "--seed", "4", "--num-samples", "3", "--out", "three.txt").code == 0
    texts = (tmp_path / "three.txt").read_text(encoding="utf-8").split("\n---------------\n")
    assert len(texts) == 3 and all(t.startswith(start) for t in texts)
    for i, text in enumerate(texts):  # the i-th sample is what --seed 4+i draws alone
        assert invoke(*args, "--seed", str(4 + i), "--out", f"one{i}.txt").code == 0
        assert (tmp_path / f"one{i}.txt").read_text(encoding="utf-8") == text
    assert_refused(*posenc("sample", str(rope), "--num-samples", "0"), "--num-samples", "between 1 and 100")


@pytest.mark.parametrize("tokenizer", [ByteTokenizer(), IdsOnly(50)], ids=["bytes", "ids"])
def test_text_decoded_as_it_comes_joins_to_the_whole_texts_decoding(tokenizer):
    """Multi-byte characters split over byte tokens, a cut-off one at the end, ids joined by spaces:
    the pieces add up to decoding every id at once."""
    ids = list("naïve 日本 ok".encode()) + [0xE6] if isinstance(tokenizer, ByteTokenizer) else [3, 14, 15, 9]
    pieces = list(stream_text(SimpleNamespace(tokenizer=tokenizer), iter(ids)))
    assert "".join(pieces) == tokenizer.decode(ids) and len(pieces) > 1


@pytest.mark.parametrize(
    ("scheme", "window"), [("rope", None), ("alibi", 7), ("learned", 16), ("sinusoidal", None)]
)
def test_the_kv_cache_samples_the_same_tokens_as_the_whole_context_for_a_seed(smoke_sweep, scheme, window):
    """Growing past the training length, and sliding a window (cached until it is full, then whole)."""
    run = load_run(run_of(smoke_sweep, scheme))
    ids = run.tokenizer.encode(PROMPT)
    sampling = Sampling(0.8, 5, 0)
    with_cache, without = (
        list(
            generate(
                run.model, ids, 60, sampling=sampling, window=window, device=torch.device("cpu"), cached=c
            )
        )
        for c in (True, False)
    )
    assert with_cache == without and len(with_cache) == 60


@pytest.mark.slow  # trains a run, exports it and samples both in processes
def test_an_export_sampled_as_hf_draws_the_runs_own_text_for_a_seed_and_asks_nothing(tmp_path):
    """`posenc sample hf:EXPORT` (issue #35): transformers' model in its own tokenizer gives, for a seed, the
    text `posenc sample RUN` gives, greedy and sampled, without transformers asking to trust its code."""
    pytest.importorskip("transformers")
    from conftest import train

    run = train(tmp_path, "scheme=rope")
    assert run_cli("export", str(run), "--out", str(tmp_path / "export"), cwd=tmp_path).returncode == 0
    for temperature in ("0", "0.8"):
        drawn = [
            run_cli(
                "sample", target, "--tokens", "24", "--seed", "3", "--temperature", temperature, cwd=tmp_path
            )
            for target in (str(run), f"hf:{tmp_path / 'export'}")
        ]
        assert all(d.returncode == 0 for d in drawn), drawn[1].stderr
        assert drawn[0].stdout == drawn[1].stdout and "custom code" not in drawn[1].stderr + drawn[1].stdout
    refused = run_cli("sample", f"hf:{tmp_path / 'export'}", "--window", "8", cwd=tmp_path)
    assert refused.returncode == 2 and "drop --window" in refused.stderr


def test_an_hf_model_with_a_learned_table_stops_at_its_end_as_a_run_does(tmp_path):
    """GPT-2's n_positions is a learned table: `posenc sample hf:` streamed text, then an IndexError past it.
    It stops where the table does and says so; a prompt already past it is refused before anything is shown."""
    pytest.importorskip("transformers")
    from test_hf_files import passkey_tokenizer, tiny_model

    from posenc_cli.evaluation.sample import generate_hf
    from posenc_cli.hf.model_loading import load_hf_model

    model = tiny_model(tmp_path / "gpt2", passkey_tokenizer(), kind="gpt2", n_positions=16)
    hf = load_hf_model(f"hf:{model}")
    greedy = Sampling(0.0, None, 0)
    assert len(list(generate_hf(hf, [1, 2, 3], 100, sampling=greedy))) == 16 + 1 - 3
    assert len(list(generate_hf(hf, [1, 2, 3], 5, sampling=greedy))) == 5
    with pytest.raises(
        UsageError, match=r"--prompt is 17 tokens but hf:.* positions stop at 15; shorten it$"
    ):
        generate_hf(hf, [1] * 17, 5, sampling=greedy)
    stopped = invoke("sample", f"hf:{model}", "--tokens", "100", "--temperature", "0")
    assert stopped.code == 0, stopped.stderr
    assert f"hf:{model} stopped after" in stopped.stderr and "its table has 16 positions" in stopped.stderr


@pytest.mark.parametrize("sinks", [0, 1, 4])
def test_streamingllms_context_keeps_the_first_sink_tokens_and_the_most_recent_ones(sinks):
    """--window 8 --sink-tokens K: the first K tokens of the text and its last 8 − K, in order, run at
    positions 0..7 (the paper's cache); a text within the window is seen whole."""
    from posenc_cli.evaluation.sample import kept_context

    text = torch.arange(30)
    kept = kept_context(text, 8, sinks)
    assert kept.tolist() == list(range(sinks)) + list(range(30 - (8 - sinks), 30))
    assert torch.equal(kept_context(text[:8], 8, sinks), text[:8])
    assert torch.equal(kept_context(text, None, 0), text)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"sinks": 4, "window": None}, "add --window W"),
        ({"sinks": 8, "window": 8}, "leaves no room"),
        ({"sinks": -1, "window": 8}, "--sink-tokens"),
    ],
)
def test_sink_tokens_without_a_window_or_filling_it_are_refused_in_one_line(options, message):
    from posenc_cli.evaluation.sample import check_sinks

    with pytest.raises(UsageError, match=message):
        check_sinks(options["sinks"], options["window"])
