"""Run directories are never lost, overwritten or trusted blindly: refused commands change no byte,
new runs never share a directory, a run is continued only by resuming it, a lock keeps a second writer
out, nothing stored in a run directory runs code, and a run's corpus is checked before it is scored."""

from __future__ import annotations

import fcntl
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml

from conftest import ROOT, SMOKE, assert_one_line_error, assert_refused, invoke, posenc, run_cli
from posenc_cli.core.file_sets import MANIFEST, output_set
from posenc_cli.rundir.claim import claim_new
from posenc_cli.rundir.layout import CHECKPOINT, LOCK, SUMMARY
from posenc_cli.rundir.selection import select_runs

pytestmark = pytest.mark.slow  # trains or starts real processes: `make test-fast` leaves it out

TINY = [
    *SMOKE,
    "device=cpu",
    "train.threads=1",
    "train.max_steps=4",
    "train.eval_interval=2",
    "train.checkpoint_interval=2",
]


def snapshot(directory: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()
    }


@pytest.fixture
def run(smoke_sweep, tmp_path, monkeypatch) -> Path:
    """A private copy of a finished tiny rope run, in the working directory."""
    monkeypatch.chdir(tmp_path)
    copy = tmp_path / "run"
    shutil.copytree(next(p for p in smoke_sweep.iterdir() if p.name.endswith("rope_seed0")), copy)
    return copy


@pytest.mark.parametrize(
    "change",
    [
        "model.n_embd=64",
        "data.seed=5",
        "seed=1",
        "data=text",
        "scheme=alibi",
        "train.block_size=32",
        "hydra.run.dir=elsewhere",
        "+foo=1",
    ],
)
def test_a_refused_resume_leaves_every_file_of_the_run_byte_identical(run, change):
    before = snapshot(run)
    assert_refused(*posenc("train", f"train.resume={run}", change), "train.resume")
    assert snapshot(run) == before
    assert sorted(p.name for p in run.parent.iterdir()) == ["run"]


def test_a_directory_holding_a_run_is_never_started_over(run):
    before = snapshot(run)
    assert_refused(
        *posenc("train", *SMOKE, f"hydra.run.dir={run}"),
        "already holds a run",
        f"posenc train train.resume={run}",
    )
    assert snapshot(run) == before


def test_default_run_directories_never_collide(tmp_path):
    first, second = claim_new(tmp_path / "runs" / "same", False), claim_new(tmp_path / "runs" / "same", False)
    assert first != second and first.is_dir() and second.is_dir()
    assert second.name == "same_2"


@pytest.mark.parametrize(
    "args, where",
    [([], "outputs/runs"), (["-m", "seed=0,1"], "outputs/sweeps"), (["hydra.run.dir=mine"], "mine")],
)
def test_the_run_directory_is_claimed_without_composing_the_config_again(tmp_path, monkeypatch, args, where):
    import hydra

    from posenc_cli.config import hydra_args
    from posenc_cli.rundir.claim import claim
    from posenc_cli.training.launch import train_request
    from posenc_cli.training.preflight import preflight

    monkeypatch.chdir(tmp_path)
    composed = []
    monkeypatch.setattr(hydra_args, "compose", lambda *a, **k: composed.append(k) or hydra.compose(*a, **k))
    directory = preflight(train_request([*args, *SMOKE])).directory
    checked = len(composed)  # one composition per job
    assert checked == (2 if args[:1] == ["-m"] else 1)
    assert directory == Path("mine") if where == "mine" else directory.parent == Path(where)
    claimed = claim(train_request([*args, *SMOKE]), directory)
    assert len(composed) == checked and (tmp_path / directory).is_dir()
    key = "hydra.sweep.dir" if args[:1] == ["-m"] else "hydra.run.dir"
    assert claimed == [] if where == "mine" else claimed == [f"{key}={directory}"]


def test_two_trainings_started_together_get_two_directories(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "posenc_cli", "train", *TINY],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    for proc in procs:
        _, stderr = proc.communicate(timeout=300)
        assert proc.returncode == 0, stderr
    runs = sorted((tmp_path / "outputs" / "runs").iterdir())
    assert len(runs) == 2
    assert all(json.loads((r / "summary.json").read_text())["status"] == "finished" for r in runs)


def test_a_run_being_trained_refuses_a_second_writer(run):
    fd = os.open(run / LOCK, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)  # what a training process holds: a second process must be refused
    try:
        before = snapshot(run)
        result = run_cli("train", f"train.resume={run}", cwd=run.parent)
        assert_one_line_error(result, "being trained by another process")
        assert snapshot(run) == before
    finally:
        os.close(fd)


def test_a_foreign_checkpoint_is_refused_by_every_command_that_reads_a_run(run, smoke_sweep, tmp_path):
    other = next(p for p in smoke_sweep.iterdir() if p.name.endswith("alibi_seed0"))
    shutil.copy(other / CHECKPOINT, run / CHECKPOINT)
    before = snapshot(run)
    for args in (
        ["train", f"train.resume={run}"],
        ["train", *SMOKE, f"train.init_from={run}", f"hydra.run.dir={tmp_path / 'child'}"],
        ["eval", str(run), "--lengths", "64", "--out", str(tmp_path / "ev")],
        ["probe", str(run), "--out", str(tmp_path / "pr")],
        ["export", str(run), "--out", str(tmp_path / "ex")],
        ["sample", str(run), "--prompt", "the "],
        ["inspect", "--run", str(run)],
    ):
        assert_refused(*posenc(*args), "belongs to another run")
    assert snapshot(run) == before
    assert not any((tmp_path / name).exists() for name in ("child", "ev", "pr", "ex"))


def test_resume_never_reads_hydra_files_so_they_cannot_run_code(run):
    marker = run.parent / "ran"
    overrides = run / ".hydra" / "overrides.yaml"
    overrides.write_text(
        yaml.safe_dump(
            [
                "+hydra.callbacks.x._target_=pathlib.Path.touch",
                f"+hydra.callbacks.x.self={marker}",
                "model.n_layer=3",
            ]
        )
    )
    (run / ".hydra" / "config.yaml").write_text("model: {_target_: os.system, command: 'touch ran'}\n")
    result = run_cli("train", f"train.resume={run}", "train.max_steps=22", "train.threads=1", cwd=run.parent)
    assert result.returncode == 0, result.stderr
    assert not marker.exists()
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 22 and summary["config"]["model"]["n_layer"] == 1  # the stored config, resumed


BAD_SUMMARIES = {
    "corrupt": b"{not json",
    "truncated": b'{"status": "fin',
    "list": b"[]",
    "null": b"null",
    "latin-1": '{"status": "finished", "x": "é"}'.encode("latin-1"),
}


@pytest.mark.parametrize("kind", BAD_SUMMARIES)
def test_an_unreadable_summary_is_one_line_and_skipped_among_many(run, smoke_sweep, kind):
    (run / "summary.json").write_bytes(BAD_SUMMARIES[kind])
    assert_refused(*posenc("eval", str(run), "--lengths", "64"), "summary.json")
    assert_refused(*posenc("train", f"train.resume={run}"), "summary.json")
    good = next(p for p in smoke_sweep.iterdir() if p.name.endswith("none_seed0"))
    assert select_runs([str(run), str(good)])[0] == [run, good]
    code, stderr = posenc(
        "eval",
        str(run),
        str(good),
        "--lengths",
        "64",
        "--max-tokens",
        "128",
        "--device",
        "cpu",
        "--out",
        "ev",
    )
    assert code == 0, stderr
    assert f"skipping {run}" in " ".join(stderr.split())
    assert set(pd.read_csv("ev/ppl.csv")["run"]) == {str(good)}


@pytest.mark.parametrize(
    "field, value",
    [("tokenizer", 5), ("train_len", "abc"), ("data", None), ("seed", "x"), ("tokenizer", [1, 2])],
)
def test_a_checkpoint_with_wrong_field_types_is_one_line_naming_the_file(run, field, value):
    damage_checkpoint(run, field, value)
    assert_refused(*posenc("eval", str(run), "--lengths", "64"), str(run / CHECKPOINT))


def test_the_same_run_named_twice_counts_once(run):
    assert select_runs([str(run), str(run.parent / ".." / run.parent.name / "run")])[0] == [run]


def test_eval_and_probe_refuse_a_corpus_file_that_changed_since_training(tmp_path):
    text = tmp_path / "corpus.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 300, encoding="utf-8")
    trained = run_cli("train", "data=text", f"data.path={text}", *TINY, "hydra.run.dir=run", cwd=tmp_path)
    assert trained.returncode == 0, trained.stderr
    ok = run_cli("eval", "run", "--lengths", "64", "--max-tokens", "128", "--out", "ev", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    text.write_text(
        "the quick brown fox jumps over the lazy cat. " * 300, encoding="utf-8"
    )  # same vocabulary
    for command in (["eval", "run", "--lengths", "64", "--out", "ev2"], ["train", "train.resume=run"]):
        result = run_cli(*command, cwd=tmp_path)
        assert_one_line_error(result, "sha256")
    assert not (tmp_path / "ev2").exists()


def test_a_run_trained_on_a_relative_path_is_read_and_resumed_from_any_directory(tmp_path):
    (tmp_path / "corpus.txt").write_text("the quick brown fox jumps over the lazy dog. " * 300, "utf-8")
    trained = run_cli("train", "data=text", "data.path=corpus.txt", *TINY, "hydra.run.dir=run", cwd=tmp_path)
    assert trained.returncode == 0, trained.stderr
    recorded = json.loads((tmp_path / "run" / "summary.json").read_text())["config"]["data"]
    assert Path(recorded["path"]) == tmp_path / "corpus.txt" and Path(recorded["cache_dir"]).is_absolute()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    scored = run_cli("eval", str(tmp_path / "run"), "--lengths", "64", "--max-tokens", "128", cwd=elsewhere)
    assert scored.returncode == 0, scored.stderr
    restated = ["data=text", "data.path=corpus.txt", "train.max_steps=20", "train.resume=run"]
    assert run_cli("train", *restated, cwd=tmp_path).returncode == 0  # the same file, named as it was
    resumed = run_cli("train", "train.max_steps=24", f"train.resume={tmp_path / 'run'}", cwd=elsewhere)
    assert resumed.returncode == 0, resumed.stderr


def test_an_output_set_is_complete_only_with_its_manifest_and_stale_temporaries_go(tmp_path):
    out = tmp_path / "ev"
    with output_set(out, ["run"]) as result:
        (out / "a.csv").write_text("1")
        result.written.append(out / "a.csv")
    assert list(json.loads((out / MANIFEST).read_text())["files"]) == ["a.csv"]
    (out / ".posenc-tmp-b.png.123.tmp").write_text("half")  # what a kill -9 mid-write leaves
    with pytest.raises(RuntimeError), output_set(out, ["run"]):
        (out / "a.csv").write_text("2")
        raise RuntimeError("killed before the set was complete")
    assert not (out / MANIFEST).exists() and not list(out.glob(".*.tmp"))


def test_kill_9_during_eval_leaves_a_complete_or_clearly_incomplete_set(smoke_sweep, tmp_path):
    run = next(p for p in smoke_sweep.iterdir() if p.name.endswith("rope_seed0"))
    args = ["eval", str(run), "--lengths", "64,128", "--max-tokens", "256", "--device", "cpu", "--out", "ev"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "posenc_cli", *args],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    while not (tmp_path / "ev" / "ppl.csv").exists() and proc.poll() is None:
        pass  # kill while the set is being written
    proc.kill()
    proc.wait()
    manifest = tmp_path / "ev" / MANIFEST
    if manifest.exists():
        assert all((tmp_path / "ev" / name).is_file() for name in json.loads(manifest.read_text())["files"])
    again = run_cli(*args, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert "ppl_vs_length.png" in json.loads(manifest.read_text())["files"]
    assert not list((tmp_path / "ev").glob(".*.tmp"))


@pytest.mark.parametrize(
    "args",
    [
        ["+train.resume={run}", "model.n_embd=64"],
        ["++train.resume={run}", "seed=3"],
        ["train.resume={run}", "~seed"],
        ["train.resume=false", *SMOKE, "hydra.run.dir={run}"],
    ],
)
def test_no_spelling_of_train_resume_bypasses_the_resume_rules(run, args):
    """+/++ prefixes, ~KEY and false-like values are read as the plain key: refused, no byte changed,
    no other directory made (a bypass once trained a copy of the run elsewhere, ignoring the overrides)."""
    before = snapshot(run)
    code, stderr = posenc("train", *(a.format(run=run) for a in args))
    assert_refused(code, stderr, str(run))
    assert snapshot(run) == before
    assert sorted(p.name for p in run.parent.iterdir()) == ["run"]


@pytest.mark.parametrize("value", ["", "."])
def test_a_run_never_writes_into_the_current_directory(run, value):
    assert_refused(*posenc("train", *SMOKE, f"hydra.run.dir={value}"), "current directory")
    assert_refused(
        *posenc("train", "-m", *SMOKE, "seed=0,1", f"hydra.sweep.dir={value}"), "current directory"
    )
    assert sorted(p.name for p in run.parent.iterdir()) == ["run"]


def test_outputs_never_go_into_a_run_directory_or_over_its_files(run):
    before = snapshot(run)
    for args in (
        ["eval", str(run), "--lengths", "64", "--out", str(run)],
        ["probe", str(run), "--out", str(run)],
        ["export", str(run), "--out", str(run)],
        ["sample", str(run), "--prompt", "the ", "--out", str(run / "summary.json")],
        ["sample", str(run), "--prompt", "the ", "--out", str(run / CHECKPOINT)],
    ):
        assert_refused(*posenc(*args), str(run))
    assert snapshot(run) == before


def damage_checkpoint(run: Path, field: str, value) -> None:
    """Give the run's checkpoint a field of the wrong type (None: remove the field)."""
    payload = torch.load(run / CHECKPOINT, weights_only=True)
    if value is None:
        del payload["record"][field]
    else:
        payload["record"][field] = value
    torch.save(payload, run / CHECKPOINT)


@pytest.mark.parametrize("field, value", [("model_config", [1]), ("train_len", "abc"), ("data", None)])
def test_a_resume_never_trusts_a_checkpoint_with_wrong_field_types(run, field, value):
    damage_checkpoint(run, field, value)
    before = snapshot(run)
    assert_refused(*posenc("train", f"train.resume={run}"), str(run / CHECKPOINT), field)
    assert snapshot(run) == before


def test_a_resume_may_restate_the_runs_own_values_and_a_change_names_both(run):
    from posenc_cli.training.launch import train_request
    from posenc_cli.training.preflight import preflight

    restated = [f"train.resume={run}", *SMOKE, "scheme=rope", "seed=0", "train.max_steps=30"]
    assert preflight(train_request(restated)).directory == run
    before = snapshot(run)
    assert_refused(
        *posenc("train", f"train.resume={run}", "scheme=rope", "scheme.base=500"),
        "its scheme.base is 10000",
        "gives 500",
    )
    assert_refused(*posenc("train", f"train.resume={run}", *SMOKE, "seed=1"), "its seed is 0", "gives 1")
    assert snapshot(run) == before


def test_a_trained_run_whose_checkpoint_was_deleted_is_never_retrained_from_step_0(run):
    (run / CHECKPOINT).unlink()
    before = snapshot(run)
    assert_refused(*posenc("train", f"train.resume={run}"), "trained 20 steps", "is missing")
    assert snapshot(run) == before


@pytest.mark.parametrize("replacement", ["directory", "symbolic link"])
def test_a_run_file_replaced_by_a_directory_or_a_link_is_one_line_and_nothing_changes(
    run, tmp_path, replacement
):
    outside = tmp_path / "outside.csv"
    (run / "metrics.csv").rename(outside)
    if replacement == "directory":
        (run / "metrics.csv").mkdir()
    else:
        (run / "metrics.csv").symlink_to(outside)
    before, kept = snapshot(run), outside.read_bytes()
    assert_refused(*posenc("train", f"train.resume={run}"), "metrics.csv is not a plain file")
    assert snapshot(run) == before and outside.read_bytes() == kept
    assert json.loads((run / "summary.json").read_text())["status"] == "finished"


def test_a_run_whose_path_has_hydras_special_characters_resumes_with_the_command_it_prints(tmp_path):
    import shlex

    from posenc_cli.config.hydra_args import hydra_quoted

    place = tmp_path / "c,r=[x]{y}(z) é it's q\"b\\s"  # every character Hydra's grammar treats specially
    args = [*TINY, "train.max_steps=2", "train.warmup_steps=1", f"hydra.run.dir={hydra_quoted(str(place))}"]
    assert run_cli("train", *args, cwd=tmp_path).returncode == 0
    refused = run_cli("train", *args, cwd=tmp_path)  # a second start prints how to continue it
    assert refused.returncode == 2, refused.stderr
    printed = " ".join(refused.stderr.split()).split("continue it with: ")[1].split("  (or")[0]
    command = shlex.split(printed.split(" (or choose")[0])
    assert command[:2] == ["posenc", "train"]
    resumed = run_cli(*command[1:], "train.max_steps=3", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads((place / "summary.json").read_text())["steps"] == 3


def test_a_resume_keeps_every_code_version_that_trained_the_run(run):
    summary = json.loads((run / "summary.json").read_text())
    (run / "summary.json").write_text(json.dumps({**summary, "code_version": "posenc 0.0.1"}))
    result = run_cli("train", f"train.resume={run}", "train.max_steps=22", "train.threads=1", cwd=run.parent)
    assert result.returncode == 0, result.stderr
    after = json.loads((run / "summary.json").read_text())
    assert (
        after["code_versions"] == ["posenc 0.0.1", after["code_version"]] and after["checkpoint_step"] == 22
    )


def test_a_fresh_run_that_fails_after_claiming_its_directory_is_marked_failed_and_resumable(tmp_path):
    (tmp_path / "two.txt").write_text("ab" * 40)
    args = ["data=text", "data.path=two.txt", "data.tokenizer=bpe", "train.block_size=4"]
    result = run_cli("train", *TINY, *args, "hydra.run.dir=r", cwd=tmp_path)  # too few tokens, known late
    assert result.returncode == 2 and "does not fit the corpus" in result.stderr
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["status"] == "failed" and "failed to start" in summary["message"]
    assert "posenc train train.resume=" in summary["message"]
    assert not (tmp_path / "r" / CHECKPOINT).exists()


def test_a_run_stopped_by_an_error_mid_training_is_marked_failed_and_resumable(tmp_path, monkeypatch):
    from hydra import compose, initialize_config_dir

    from posenc_cli.config.location import config_dir
    from posenc_cli.rundir import claim
    from posenc_cli.training import loop
    from posenc_cli.training.preflight import validate

    real_save, saved = loop.save, []

    def save_then_fail(s, elapsed):  # the second checkpoint cannot be written: a full disk, say
        if saved:
            raise OSError(28, "No space left on device")
        saved.append(real_save(s, elapsed))

    monkeypatch.setattr(loop, "save", save_then_fail)
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        cfg = compose("config", overrides=[*TINY, "train.max_steps=6"])
    (tmp_path / "r").mkdir()  # claimed, as `posenc train` claims it
    with pytest.raises(OSError, match="No space left"):
        loop.train(validate(cfg), tmp_path / "r")
    message = json.loads((tmp_path / "r" / "summary.json").read_text())["message"]
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["status"] == "failed"
    assert "stopped by an error at step 4 (" in message and "No space left on device" in message
    assert "its checkpoint of step 2 is kept" in message and "posenc train train.resume=" in message
    os.close(claim._held.pop((tmp_path / "r").resolve()))  # the lock a process's exit would release
    resumed = run_cli("train", f"train.resume={tmp_path / 'r'}", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["status"] == "finished"


def test_init_from_a_run_still_being_trained_is_refused(run, tmp_path):
    fd = os.open(run / LOCK, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert_refused(
            *posenc("train", *SMOKE, f"train.init_from={run}", f"hydra.run.dir={tmp_path / 'child'}"),
            "is being trained right now",
        )
    finally:
        os.close(fd)
    assert not (tmp_path / "child").exists()


def test_reading_a_run_still_being_trained_says_so_and_names_the_step_it_read(run, tmp_path):
    fd = os.open(run / LOCK, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        sampled = invoke("sample", str(run), "--prompt", "the", "--tokens", "4")
        inspected = invoke("inspect", "--run", str(run), "--out", str(tmp_path / "figures"))
        assert_refused(*posenc("export", str(run), "--out", str(tmp_path / "export")), "is being trained")
    finally:
        os.close(fd)
    step = json.loads((run / "summary.json").read_text())["checkpoint_step"]
    for result, doing in ((sampled, "sampling"), (inspected, "inspecting")):
        assert result.code == 0, result.stderr
        assert f"is being trained right now; {doing} its checkpoint of step {step}" in result.stderr
    assert f"(trained, step {step})" in inspected.stdout


def test_a_refused_init_from_tokenizes_no_corpus(run, tmp_path):
    (tmp_path / "text.txt").write_text("some other text " * 200)
    cache = tmp_path / "cache"
    args = ["data=text", "data.path=text.txt", f"data.cache_dir={cache}", "model.n_embd=64"]
    code, stderr = posenc("train", *SMOKE, *args, f"train.init_from={run}", "hydra.run.dir=child")
    assert_refused(code, stderr, "model.n_embd")
    assert not list(cache.rglob("tokens-*")) and not (tmp_path / "child").exists()


@pytest.mark.parametrize("chain", [5, "xyz", [1]])
def test_init_from_a_run_whose_recorded_ancestry_is_damaged_is_refused_before_any_directory(
    run, tmp_path, chain
):
    summary = json.loads((run / "summary.json").read_text())
    (run / "summary.json").write_text(json.dumps({**summary, "init_chain": chain}))
    code, stderr = posenc("train", *SMOKE, f"train.init_from={run}", f"hydra.run.dir={tmp_path / 'child'}")
    assert_refused(code, stderr, "init_chain")
    assert not (tmp_path / "child").exists()


def test_init_from_a_run_whose_summary_was_deleted_is_refused_before_any_directory(run, tmp_path):
    (run / "summary.json").unlink()
    code, stderr = posenc("train", *SMOKE, f"train.init_from={run}", f"hydra.run.dir={tmp_path / 'child'}")
    assert_refused(code, stderr, "has no summary.json")
    assert not (tmp_path / "child").exists()


SLOW_START = """
import sys, time
from pathlib import Path
from posenc_cli.training import start
def choose_slowly(*args, **options):  # the precision calibration, long enough to be signalled in
    Path("starting").touch()
    time.sleep(120)
start.choose_precision = choose_slowly
sys.argv = ["posenc", *sys.argv[1:]]
from posenc_cli.cli.main import console_main
console_main()
"""


def test_a_run_terminated_while_it_starts_is_marked_interrupted_and_its_resume_chooses_afresh(tmp_path):
    """SIGTERM during the start (the precision calibration here) ends the process as Ctrl-C does: exit
    130, the summary says interrupted (not "running" forever), and the resume, with no checkpoint to
    keep a precision from, chooses one as a new run does."""
    args = [*TINY, "hydra.run.dir=r"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "POSENC_CPU_BF16": "emulated"}
    with subprocess.Popen(
        [sys.executable, "-c", SLOW_START, "train", *args], cwd=tmp_path, env=env, stderr=subprocess.PIPE
    ) as process:
        for _ in range(600):
            if (tmp_path / "starting").exists() or process.poll() is not None:
                break
            time.sleep(0.1)
        process.terminate()
        stderr = process.communicate(timeout=60)[1].decode()
    assert process.returncode == 130 and "posenc: interrupted" in stderr, stderr
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["status"] == "interrupted" and "posenc train train.resume=" in summary["message"]
    resumed = run_cli("train", "train.resume=r", cwd=tmp_path)
    assert resumed.returncode == 0 and "no checkpoint yet" in resumed.stderr, resumed.stderr
    precision = json.loads((tmp_path / "r" / "summary.json").read_text())["precision"]
    assert precision["reason"] == "this CPU emulates bf16 (no AVX-512-BF16 or AMX)"


def refusing_writes_past(size: int):
    """A preexec_fn: `ulimit -f` in bytes, so that a write past `size` fails (EFBIG) as on a full disk."""

    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # else the signal kills the process before the error
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))

    return limit


def train_on_a_full_disk(cwd: Path, size: int, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1", "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "posenc_cli", "train", *TINY, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        preexec_fn=refusing_writes_past(size),
    )


def test_a_start_the_disk_refuses_is_one_line_is_not_a_run_and_a_new_run_takes_its_place(tmp_path):
    """hydra.run.dir on a full disk once ended in Hydra's _save_config traceback and left .hydra/ behind,
    which the next `posenc train` called a run to resume, and that resume failed (no summary.json)."""
    refused = train_on_a_full_disk(tmp_path, 1024, "hydra.run.dir=r")
    assert_one_line_error(refused, "cannot write ", "r/.hydra/", "File too large")
    left = [str(p.relative_to(tmp_path / "r")) for p in (tmp_path / "r").rglob("*")]
    assert SUMMARY not in left and ".hydra/hydra.yaml" not in left and not any("tmp" in p for p in left)
    code, stderr = posenc("train", f"train.resume={tmp_path / 'r'}")
    assert_refused(code, stderr, "is not a run: it holds only the start of one", "hydra.run.dir=")
    again = run_cli("train", *TINY, "hydra.run.dir=r", cwd=tmp_path)  # the way on that refusal gives
    assert again.returncode == 0 and "never wrote its summary" in again.stderr, again.stderr
    assert json.loads((tmp_path / "r" / SUMMARY).read_text())["status"] == "finished"


def test_a_checkpoint_the_disk_refuses_is_one_line_naming_it_and_the_run_is_marked_failed_and_resumable(
    tmp_path,
):
    """torch.save onto a full disk raised a RuntimeError traceback ("unexpected pos"), and the failed
    summary that marking the run then could not write hid even that."""
    refused = train_on_a_full_disk(tmp_path, 64 * 1024, "hydra.run.dir=r")  # the checkpoint is larger
    last = refused.stderr.strip().splitlines()[-1]  # after the lines training printed
    assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr
    assert last.startswith("posenc: error: cannot write ") and f"r/{CHECKPOINT}: File too large" in last
    summary = json.loads((tmp_path / "r" / SUMMARY).read_text())
    assert summary["status"] == "failed" and CHECKPOINT in summary["message"]
    assert not (tmp_path / "r" / CHECKPOINT).exists() and not list((tmp_path / "r").glob(".posenc-tmp-*"))
    resumed = run_cli("train", f"train.resume={tmp_path / 'r'}", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads((tmp_path / "r" / SUMMARY).read_text())["status"] == "finished"
