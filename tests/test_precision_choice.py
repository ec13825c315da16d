"""train.precision=auto chosen by measurement (training.precision_choice): on a CPU with native bf16 the
fastest precision at the run's shapes, cached per machine and shape; never bf16 where it is emulated."""

from __future__ import annotations

import json
import os
import stat
import threading
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir

from posenc_cli.config.location import config_dir
from posenc_cli.core.device import EFFECTIVE_PRECISIONS
from posenc_cli.training import precision_choice, precision_timing
from posenc_cli.training.precision_choice import PrecisionChoice, cache_path, choose_precision
from posenc_cli.training.precision_timing import time_steps
from posenc_cli.training.preflight import validate

CPU = torch.device("cpu")


def config(*overrides: str):
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        return validate(compose("config", overrides=["experiment=smoke", *overrides]))


class Timings(list):
    """A stand-in for time_steps with fixed ms a step per precision (bf16 autocast with fp32 attention
    slowest unless said); the list holds the batch size of each full measurement, `retimed` the
    precision of each re-timing of a cached choice."""

    def __init__(self, fp32: float, bf16: float, fp32_attention: float = 99.0):
        super().__init__()
        self.ms = {"fp32": fp32, "bf16-autocast": bf16, "bf16-autocast-fp32-attention": fp32_attention}
        self.retimed: list[str] = []

    def __call__(self, cfg, device, vocab_size, *, precisions=EFFECTIVE_PRECISIONS, rounds=None):
        if tuple(precisions) == EFFECTIVE_PRECISIONS:
            self.append(cfg.train.batch_size)
        else:
            self.retimed += precisions
        return {p: self.ms[p] for p in precisions}


def timings(fp32: float, bf16: float, fp32_attention: float = 99.0):
    measure = Timings(fp32, bf16, fp32_attention)
    return measure, measure


@pytest.fixture
def quiet_cache(tmp_path, monkeypatch):
    """A fresh cache file and a machine that is not busy, whatever the host's load."""
    monkeypatch.setenv(precision_choice.CACHE_ENV, str(tmp_path / "precision.json"))
    monkeypatch.setattr(precision_choice, "machine_busy", lambda: None)
    return tmp_path / "precision.json"


@pytest.mark.parametrize(
    ("fp32", "bf16", "fp32_attention", "fastest"),
    [
        (50.0, 40.0, 45.0, "bf16-autocast"),
        (40.0, 50.0, 45.0, "fp32"),
        (50.0, 40.0, 35.0, "bf16-autocast-fp32-attention"),
    ],
)
def test_auto_on_a_native_bf16_cpu_takes_the_precision_that_measured_fastest(
    quiet_cache, monkeypatch, fp32, bf16, fp32_attention, fastest
):
    monkeypatch.setenv("POSENC_CPU_BF16", "native")
    measure, calls = timings(fp32, bf16, fp32_attention)
    choice = choose_precision(config("train.precision=auto"), CPU, vocab_size=30, measure=measure)
    assert (choice.effective, choice.step_ms, len(calls)) == (
        fastest,
        {"fp32": fp32, "bf16-autocast": bf16, "bf16-autocast-fp32-attention": fp32_attention},
        1,
    )
    assert (
        choice.facts() == {"reason": choice.reason, "step_ms": choice.step_ms} and "measured" in choice.reason
    )


def test_auto_never_measures_nor_picks_bf16_where_it_is_emulated_nor_when_a_precision_is_asked_for(
    quiet_cache, monkeypatch
):
    measure, calls = timings(50.0, 1.0, 1.0)  # bf16 "faster": it must not matter
    monkeypatch.setenv("POSENC_CPU_BF16", "emulated")
    assert choose_precision(config(), CPU, vocab_size=30, measure=measure).effective == "fp32"
    monkeypatch.setenv("POSENC_CPU_BF16", "native")
    for asked, effective in (
        ("fp32", "fp32"),
        ("bf16", "bf16-autocast"),
        ("bf16-fp32-attention", "bf16-autocast-fp32-attention"),
    ):
        choice = choose_precision(config(f"train.precision={asked}"), CPU, vocab_size=30, measure=measure)
        assert (choice.effective, choice.reason) == (effective, f"train.precision={asked}")
    several = choose_precision(config(), CPU, vocab_size=30, ranks=2, measure=measure)
    assert several.effective == "bf16-autocast" and "several ranks" in several.reason  # the static rule
    assert calls == [] and not quiet_cache.exists()


def test_a_measured_choice_is_cached_per_shape_and_a_changed_or_foreign_cache_is_measured_again_and_kept(
    quiet_cache, monkeypatch
):
    """A file posenc did not write as it is (hand-edited, another program's) is never trusted nor
    overwritten: measured again every time, the file byte-identical."""
    monkeypatch.setenv("POSENC_CPU_BF16", "native")
    measure, calls = timings(50.0, 40.0)
    first = choose_precision(config(), CPU, vocab_size=30, measure=measure)
    again = choose_precision(config(), CPU, vocab_size=30, measure=measure)
    assert calls == [4] and again.effective == first.effective and "cached" in again.reason
    choose_precision(config("train.batch_size=8"), CPU, vocab_size=30, measure=measure)
    assert calls == [4, 8]  # another shape: measured
    stored = json.loads(quiet_cache.read_text())
    for entry in stored["choices"].values():
        entry["effective"] = "fp32"  # edited by hand: its fingerprint no longer matches
    quiet_cache.write_text(json.dumps(stored))
    assert choose_precision(config(), CPU, vocab_size=30, measure=measure).effective == "bf16-autocast"
    assert calls == [4, 8, 4] and json.loads(quiet_cache.read_text()) == json.loads(json.dumps(stored))
    for foreign in ("not json", json.dumps({"format": "other", "choices": {}}), json.dumps([1])):
        quiet_cache.write_text(foreign)
        choose_precision(config(), CPU, vocab_size=30, measure=measure)
        assert quiet_cache.read_text() == foreign
    assert len(calls) == 6


def test_a_busy_machine_is_not_measured_and_auto_keeps_the_static_rule_uncached(quiet_cache, monkeypatch):
    monkeypatch.setenv("POSENC_CPU_BF16", "native")
    monkeypatch.setattr(precision_choice, "machine_busy", lambda: "load average 6.1 on 2 cores")
    measure, calls = timings(40.0, 50.0)  # fp32 "faster": unmeasured, it must not matter
    choice = choose_precision(config(), CPU, vocab_size=30, measure=measure)
    assert choice.effective == "bf16-autocast" and "busy (load average 6.1 on 2 cores)" in choice.reason
    assert calls == [] and not quiet_cache.exists() and cache_path() == quiet_cache


def test_timing_the_steps_leaves_the_runs_random_streams_as_they_were():
    """The throwaway model and batch draw from forked streams: the run's seeded init is unchanged."""
    torch.manual_seed(7)
    before = torch.get_rng_state()
    ms = time_steps(
        config("model.n_layer=1", "train.batch_size=2", "train.block_size=16"), CPU, vocab_size=30
    )
    assert torch.equal(torch.get_rng_state(), before)
    assert set(ms) == set(EFFECTIVE_PRECISIONS) and all(v > 0 for v in ms.values())
    small = config("model.n_layer=1", "train.batch_size=2", "train.block_size=16")
    assert set(time_steps(small, CPU, vocab_size=30, precisions=("fp32",), rounds=1)) == {"fp32"}


def test_a_cache_too_deep_too_large_with_bool_timings_or_where_no_file_can_go_never_stops_a_run(
    quiet_cache, monkeypatch, tmp_path
):
    monkeypatch.setenv("POSENC_CPU_BF16", "native")
    measure, calls = timings(50.0, 40.0)
    key = precision_choice.shape_key(config(), 30)
    bools = {key: {"effective": "fp32", "step_ms": dict.fromkeys(EFFECTIVE_PRECISIONS, True)}}
    signed = {"format": precision_choice.CACHE_FORMAT, "sha256": precision_choice.entries_sha256(bools)}
    (tmp_path / "target").write_text("kept")
    (tmp_path / "link").symlink_to(tmp_path / "target")
    (tmp_path / "dir").mkdir()
    for name, text in (
        ("deep.json", "[" * 100_000 + "]" * 100_000),  # past json's recursion limit
        ("huge.json", " " * (precision_choice.MAX_CACHE_BYTES + 1) + "{}"),
        ("bools.json", json.dumps({**signed, "choices": bools})),  # fingerprint right, timings not numbers
        ("link", None),
        ("dir", None),
    ):
        if text is not None:
            (tmp_path / name).write_text(text)
        monkeypatch.setenv(precision_choice.CACHE_ENV, str(tmp_path / name))
        choice = choose_precision(config(), CPU, vocab_size=30, measure=measure)
        assert (choice.effective, choice.step_ms["bf16-autocast"]) == ("bf16-autocast", 40.0)
    assert (
        len(calls) == 5 and (tmp_path / "link").is_symlink() and (tmp_path / "target").read_text() == "kept"
    )


def test_an_earlier_posencs_two_precision_cache_is_measured_again_without_a_warning(
    quiet_cache, monkeypatch, caplog
):
    monkeypatch.setenv("POSENC_CPU_BF16", "native")
    entries = {"k": {"effective": "fp32", "step_ms": {"fp32": 1.0, "bf16-autocast": 2.0}}}
    old = {"format": "posenc-precision-choices", "sha256": precision_choice.entries_sha256(entries)}
    quiet_cache.write_text(json.dumps({**old, "choices": entries}))
    measure, calls = timings(50.0, 40.0)
    with caplog.at_level("INFO", logger="posenc.train"):
        choice = choose_precision(config(), CPU, vocab_size=30, measure=measure)
    assert choice.effective == "bf16-autocast" and len(calls) == 1
    assert "earlier posenc" in caplog.text and not [r for r in caplog.records if r.levelname == "WARNING"]
    assert (
        json.loads(quiet_cache.read_text())["format"] == "posenc-precision-choices"
    )  # the older posenc's, kept


@pytest.mark.parametrize(
    ("others", "load", "busy"),
    [
        (2, 0.1, "2 threads of other processes runnable on 2 cores"),
        (1, 9.0, None),  # the load average holds this process's own training a moment ago: not read
        (None, 2.5, "load average 2.5 on 2 cores"),  # no /proc: the load average
        (None, 1.5, None),
    ],
)
def test_the_machine_is_busy_when_other_processes_keep_every_core_busy_not_this_ones_own_work(
    monkeypatch, others, load, busy
):
    monkeypatch.setattr(precision_timing, "other_runnable_threads", lambda: others)
    monkeypatch.setattr(precision_timing, "usable_cores", lambda: 2)
    monkeypatch.setattr(precision_timing.os, "getloadavg", lambda: (load, load, load))
    assert precision_timing.machine_busy() == busy


def test_a_thread_whose_name_holds_parentheses_is_read_by_its_state_and_an_ended_one_is_not_running(tmp_path):
    (tmp_path / "1").mkdir()
    (tmp_path / "1" / "stat").write_text("1 (a) b) R 0 1\n")
    (tmp_path / "2").mkdir()
    (tmp_path / "2" / "stat").write_text("2 (worker) S 0 1\n")
    (tmp_path / "3").mkdir()
    (tmp_path / "3" / "stat").write_bytes(b"3 (\xff\xfe) R 0 1\n")  # a name that is not UTF-8
    running = [precision_timing.thread_running(tmp_path / name) for name in ("1", "2", "3", "gone")]
    assert running == [True, False, True, False]


def test_an_entry_whose_choice_is_not_its_fastest_timing_or_that_has_other_fields_is_not_trusted(
    quiet_cache, monkeypatch
):
    """Its fingerprint recomputed to match (a checksum, not a seal): the summary would otherwise say
    "measured" beside timings that contradict the choice."""
    monkeypatch.setenv("POSENC_CPU_BF16", "native")
    key = precision_choice.shape_key(config(), 30)
    ms = {"fp32": 1.0, "bf16-autocast": 2.0, "bf16-autocast-fp32-attention": 3.0}
    for entry in (
        {"effective": "bf16-autocast", "step_ms": ms},
        {"effective": "fp32", "step_ms": ms, "by": 1},
    ):
        entries = {key: entry}
        signed = {"format": precision_choice.CACHE_FORMAT, "sha256": precision_choice.entries_sha256(entries)}
        quiet_cache.write_text(json.dumps({**signed, "choices": entries}))
        measure, calls = timings(50.0, 40.0)
        choice = choose_precision(config(), CPU, vocab_size=30, measure=measure)
        assert (len(calls), choice.effective) == (1, "bf16-autocast") and "measured:" in choice.reason


def test_a_choice_another_run_cached_while_this_one_measured_is_kept_beside_this_ones(
    quiet_cache, monkeypatch
):
    monkeypatch.setenv("POSENC_CPU_BF16", "native")
    fp32_fastest = {"fp32": 1.0, "bf16-autocast": 2.0, "bf16-autocast-fp32-attention": 3.0}

    def measure(cfg, device, vocab_size):  # meanwhile, a run at other shapes caches its choice
        other = precision_choice.shape_key(config("train.batch_size=8"), 30)
        precision_choice.write_cache(quiet_cache, other, PrecisionChoice("fp32", "measured", fp32_fastest))
        return {"fp32": 3.0, "bf16-autocast": 1.0, "bf16-autocast-fp32-attention": 2.0}

    assert choose_precision(config(), CPU, vocab_size=30, measure=measure).effective == "bf16-autocast"
    stored = json.loads(quiet_cache.read_text())["choices"]
    assert sorted(e["effective"] for e in stored.values()) == ["bf16-autocast", "fp32"]


def write_signed(path, entries: dict) -> None:
    """A cache file with the right format and fingerprint: anyone can write one."""
    signed = {"format": precision_choice.CACHE_FORMAT, "sha256": precision_choice.entries_sha256(entries)}
    path.write_text(json.dumps({**signed, "choices": entries}))


@pytest.mark.parametrize(("entry_ms", "holds"), [(1.0, False), (39.0, True), (55.0, True), (100.0, False)])
def test_a_cached_choice_is_re_timed_and_one_this_machine_does_not_reproduce_is_measured_again_and_said(
    quiet_cache, monkeypatch, caplog, entry_ms, holds
):
    """A forged entry (format and fingerprint right, "bf16 took 1 ms") is a hint: its precision is
    re-timed at the run's shapes, and an entry more than CACHE_TOLERANCE off this machine's 40 ms is
    measured again, in a warning naming the file and in the summary's reason, and replaced."""
    monkeypatch.setenv("POSENC_CPU_BF16", "native")
    key = precision_choice.shape_key(config(), 30)
    ms = {"fp32": 1.25 * entry_ms, "bf16-autocast": entry_ms, "bf16-autocast-fp32-attention": 3 * entry_ms}
    write_signed(quiet_cache, {key: {"effective": "bf16-autocast", "step_ms": ms}})
    measure, calls = timings(50.0, 40.0)  # what this machine takes
    cfg = config()  # composed outside the capture: Hydra logs as it composes
    with caplog.at_level("WARNING", logger="posenc.train"):
        choice = choose_precision(cfg, CPU, vocab_size=30, measure=measure)
    warned = [r for r in caplog.records if r.name == "posenc.train"]
    assert measure.retimed == ["bf16-autocast", "fp32"]
    if holds:
        assert (calls, choice.step_ms, warned) == ([], ms, [])
        assert (
            f"cached; re-timed: bf16-autocast took 40 ms a step now, {entry_ms:g} ms in the cache"
            in choice.reason
        )
        assert choice.reason.endswith(
            f"fp32 took 50 ms a step now, {1.25 * entry_ms:g} ms in the cache; the other precisions' "
            "timings are the cache's)"
        )
        return
    assert calls == [4] and choice.step_ms == measure.ms and "measured: " in choice.reason
    assert "re-measured: the cached choice did not hold" in choice.reason
    assert str(quiet_cache) in caplog.text and "does not hold" in caplog.text
    assert json.loads(quiet_cache.read_text())["choices"][key]["step_ms"] == measure.ms


@pytest.mark.parametrize(
    ("fp32_entry_ms", "fp32_now_ms"),
    [(1000.0, 50.0), (50.0, 35.0)],
    ids=["fp32-forged-slow", "fp32-now-faster"],
)
def test_a_cached_choice_fp32_beats_now_or_whose_fp32_timing_is_forged_is_measured_again(
    quiet_cache, monkeypatch, fp32_entry_ms, fp32_now_ms
):
    """The choice's own timing may be honest while fp32's is forged ("fp32 took 1000 ms"): fp32, the
    precision every choice must beat, is re-timed beside it, and an entry whose fp32 is off, or is faster
    now than the choice, is measured again (a forged entry once steered a run to a 3x slower precision)."""
    monkeypatch.setenv("POSENC_CPU_BF16", "native")
    key = precision_choice.shape_key(config(), 30)
    ms = {"fp32": fp32_entry_ms, "bf16-autocast": 40.0, "bf16-autocast-fp32-attention": 99.0}
    write_signed(quiet_cache, {key: {"effective": "bf16-autocast", "step_ms": ms}})
    measure, calls = timings(fp32_now_ms, 40.0)
    choice = choose_precision(config(), CPU, vocab_size=30, measure=measure)
    assert measure.retimed == ["bf16-autocast", "fp32"] and calls == [4]
    assert "re-measured: the cached choice did not hold" in choice.reason
    assert choice.effective == ("fp32" if fp32_now_ms < 40 else "bf16-autocast")


def test_a_busy_machine_uses_no_cached_choice_it_cannot_re_time(quiet_cache, monkeypatch):
    monkeypatch.setenv("POSENC_CPU_BF16", "native")
    key = precision_choice.shape_key(config(), 30)
    ms = {"fp32": 1.0, "bf16-autocast": 2.0, "bf16-autocast-fp32-attention": 3.0}
    write_signed(quiet_cache, {key: {"effective": "fp32", "step_ms": ms}})
    monkeypatch.setattr(precision_choice, "machine_busy", lambda: "load average 6.1 on 2 cores")
    measure, calls = timings(1.0, 2.0)
    choice = choose_precision(config(), CPU, vocab_size=30, measure=measure)
    assert (choice.effective, choice.step_ms, calls, measure.retimed) == ("bf16-autocast", {}, [], [])
    assert "busy" in choice.reason and "a cached choice is used only once re-timed" in choice.reason


@pytest.mark.skipif(not hasattr(os, "mkfifo") or not Path("/dev/zero").exists(), reason="POSIX FIFOs")
def test_a_cache_path_naming_a_fifo_or_a_device_is_never_read_nor_written_and_is_named(
    quiet_cache, monkeypatch, tmp_path, caplog
):
    """A FIFO once blocked training forever (its open waits for a writer), /dev/zero raised MemoryError."""
    monkeypatch.setenv("POSENC_CPU_BF16", "native")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path in (fifo, Path("/dev/zero")):
        monkeypatch.setenv(precision_choice.CACHE_ENV, str(path))
        measure, calls = timings(50.0, 40.0)
        chosen = []
        worker = threading.Thread(
            target=lambda: chosen.append(choose_precision(config(), CPU, vocab_size=30, measure=measure)),
            daemon=True,
        )
        with caplog.at_level("WARNING", logger="posenc.train"):
            worker.start()
            worker.join(timeout=60)
            if worker.is_alive():  # blocked in the FIFO's open: a writer's open releases it, then fail
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
                worker.join()
        assert chosen and chosen[0].effective == "bf16-autocast" and calls == [4]
        assert f"{path} is not a regular file" in caplog.text
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
