"""Output sets (eval, probe, export): a directory owned by one writer at a time, a manifest of what that
writer wrote (sha256 and size), nothing read that no valid manifest vouches for, and posenc's own
temporaries only ever cleaned."""

from __future__ import annotations

import fcntl
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT, assert_one_line_error, assert_refused, posenc, run_cli
from posenc_cli.core.atomic import MANIFEST, hashed_entry, output_set, remove_leftovers
from posenc_cli.core.errors import UsageError


def a_run(sweep: Path, scheme: str) -> Path:
    return next(p for p in sweep.iterdir() if p.name.endswith(f"{scheme}_seed0"))


def assert_manifest_matches_its_files(out: Path) -> dict:
    manifest = json.loads((out / MANIFEST).read_text())
    for name, entry in manifest["files"].items():
        assert hashed_entry(out / name) == entry, name
    return manifest


def test_a_second_writer_of_an_output_directory_is_refused_before_any_work(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "ppl.csv").write_text("theirs")
    fd = os.open(tmp_path / "busy", os.O_RDONLY)  # what another posenc command's own_directory holds
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    try:
        for command in (["eval", "r"], ["probe", "r"], ["export", "r"], ["bench", "--quick", "--startup"]):
            assert_refused(*posenc(*command, "--out", "busy"), "busy is being written by another posenc")
    finally:
        os.close(fd)
    assert [p.name for p in (tmp_path / "busy").iterdir()] == ["ppl.csv"]
    # a command refused after it took a directory gives it up, and one it made for nothing goes again
    assert_refused(*posenc("eval", "no-such-run", "--out", "new/ev"), "no-such-run")
    assert not (tmp_path / "new").exists()


def test_only_posencs_own_temporaries_are_cleaned_never_a_users_file(tmp_path):
    (tmp_path / ".my-notes.tmp").write_text("mine")
    (tmp_path / ".posenc-tmp-ppl.csv.x1.tmp").write_text("half")
    (tmp_path / ".posenc-tmp-export-x2").mkdir()
    remove_leftovers(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == [".my-notes.tmp"]
    with output_set(tmp_path, ["run"]):
        pass
    assert (tmp_path / ".my-notes.tmp").read_text() == "mine"


def test_a_new_set_lists_only_its_files_and_reads_only_what_a_valid_manifest_vouches_for(tmp_path):
    out = tmp_path / "d"
    with output_set(out, ["A", "B"]) as first:
        for name in ("probe.csv", "probe_B.png"):
            (out / name).write_text(f"{name} of A and B")
            first.written.append(out / name)
    with output_set(out, ["A"]) as second:
        assert second.trusted_input("probe.csv") is None  # of other runs: never read
        (out / "probe.csv").write_text("probe of A")
        second.written.append(out / "probe.csv")
    manifest = assert_manifest_matches_its_files(out)
    assert list(manifest["files"]) == ["probe.csv"] and manifest["runs"] == ["A"]  # probe_B.png unlisted
    with output_set(out, ["A"]) as third:
        assert third.trusted_input("probe.csv") == b"probe of A"
        assert third.trusted_input("probe_B.png") is None  # lying there, but not the set's
    assert json.loads((out / MANIFEST).read_text())["inputs"] == {"probe.csv": manifest["files"]["probe.csv"]}
    (out / "probe.csv").write_text("probe of A, edited by hand")
    with output_set(out, ["A"]) as fourth:
        assert fourth.trusted_input("probe.csv") is None  # its sha256 no longer matches


@pytest.mark.slow
def test_eval_never_takes_passkey_rows_from_a_probe_csv_no_manifest_vouches_for(smoke_sweep, tmp_path):
    """A probe.csv of this very run, put there by hand (or left by an older set): eval's comparison.md
    must not show it (a probe's own probe.csv, vouched for by its manifest, is: tests/test_probe.py)."""
    run = a_run(smoke_sweep, "rope")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "probe.csv").write_text(
        f"run,scheme,seed,train_len,length,depth,trials,accuracy,key_nll\n{run},rope,0,64,64,0.5,2,1.0,0.1\n"
    )
    args = ["eval", str(run), "--lengths", "64", "--max-tokens", "256", "--out", "d"]
    result = run_cli(*args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "passkey @" not in (tmp_path / "d" / "comparison.md").read_text()
    assert "probe.csv" not in assert_manifest_matches_its_files(tmp_path / "d")["files"]


@pytest.mark.slow
def test_two_evals_on_one_out_one_succeeds_the_other_is_refused_in_one_line(smoke_sweep, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    (tmp_path / "d").mkdir()
    jobs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "posenc_cli",
                "eval",
                str(a_run(smoke_sweep, scheme)),
                "--lengths",
                "64,128",
            ]
            + ["--max-tokens", "512", "--device", "cpu", "--out", "d"],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for scheme in ("rope", "alibi")
    ]
    results = [subprocess.CompletedProcess(j.args, j.wait(timeout=300), *j.communicate()) for j in jobs]
    winners = [r for r in results if r.returncode == 0]
    assert len(winners) == 1, [r.stderr for r in results]
    loser = next(r for r in results if r.returncode != 0)
    assert_one_line_error(loser, "is being written by another posenc command")
    manifest = assert_manifest_matches_its_files(tmp_path / "d")
    scheme = "rope" if winners[0] is results[0] else "alibi"
    summary = json.loads((a_run(smoke_sweep, scheme) / "summary.json").read_text())
    assert manifest["runs"] == [
        f"{summary['run_id']}@{summary['steps']}"
    ]  # models, not the paths naming them


def export_weights(directory: Path) -> dict:
    import safetensors.torch

    return safetensors.torch.load_file(str(directory / "model.safetensors"))


@pytest.mark.slow
def test_an_export_killed_between_its_files_is_refused_never_loaded_as_a_mix(
    smoke_sweep, tmp_path, monkeypatch
):
    from posenc_cli.evaluation import export
    from posenc_cli.evaluation.export import export_run, load_export

    a, b = a_run(smoke_sweep, "rope"), a_run(smoke_sweep, "alibi")
    export_run(a, tmp_path / "d")
    load_export(tmp_path / "d")
    manifest = assert_manifest_matches_its_files(tmp_path / "d")
    assert (
        manifest["run_id"]
        and json.loads((tmp_path / "d" / "config.json").read_text())["run_id"] == manifest["run_id"]
    )

    def killed(*args):
        raise KeyboardInterrupt  # the weights of B are in place, its config.json is not

    monkeypatch.setattr(export, "write_text", killed)
    with pytest.raises(KeyboardInterrupt):
        export_run(b, tmp_path / "d")
    with pytest.raises(UsageError, match="not a complete posenc export"):
        load_export(tmp_path / "d")
    monkeypatch.undo()
    # a mix put together by hand: B's weights and manifest beside A's config.json
    export_run(b, tmp_path / "b")
    export_run(a, tmp_path / "a")
    (tmp_path / "b" / "config.json").write_bytes((tmp_path / "a" / "config.json").read_bytes())
    with pytest.raises(UsageError, match="not a complete posenc export"):
        load_export(tmp_path / "b")


@pytest.mark.slow
def test_an_export_sigkilled_mid_write_loads_a_consistent_pair_or_is_refused(smoke_sweep, tmp_path):
    a, b = a_run(smoke_sweep, "rope"), a_run(smoke_sweep, "alibi")
    from posenc_cli.evaluation.export import load_export

    assert run_cli("export", str(a), "--out", "d", cwd=tmp_path).returncode == 0
    proc = subprocess.Popen(
        [sys.executable, "-m", "posenc_cli", "export", str(b), "--out", "d"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stderr=subprocess.DEVNULL,
    )
    while not list((tmp_path / "d").glob(".posenc-tmp-*")) and proc.poll() is None:
        pass  # the export has started writing
    time.sleep(random.uniform(0, 0.05))
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    try:
        model, _, _ = load_export(tmp_path / "d")
    except UsageError as err:
        assert "not a complete posenc export" in str(err)
        return
    run_id = json.loads((tmp_path / "d" / "config.json").read_text())["run_id"]
    source = a if run_id == json.loads((a / "summary.json").read_text())["run_id"] else b
    assert run_cli("export", str(source), "--out", "fresh", cwd=tmp_path).returncode == 0
    theirs = export_weights(tmp_path / "fresh")
    assert all((export_weights(tmp_path / "d")[k] == v).all() for k, v in theirs.items())


@pytest.mark.slow
def test_export_refuses_and_sample_warns_about_a_run_being_trained(smoke_sweep, tmp_path):
    run = a_run(smoke_sweep, "rope")
    fd = os.open(run / ".lock", os.O_RDWR | os.O_CREAT, 0o644)  # what the training process holds
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    try:
        assert_refused(*posenc("export", str(run), "--out", str(tmp_path / "x")), "being trained right now")
        sampled = run_cli("sample", str(run), "--prompt", "the ", "--tokens", "3", cwd=tmp_path)
    finally:
        os.close(fd)
    assert sampled.returncode == 0 and "is being trained right now" in sampled.stderr
    assert not (tmp_path / "x").exists()


@pytest.mark.slow
def test_an_export_left_in_a_run_that_trained_on_is_refused_and_its_files_are_shareable(
    smoke_sweep, tmp_path
):
    from posenc_cli.evaluation.export import export_run, load_export

    run = tmp_path / "run"
    shutil.copytree(a_run(smoke_sweep, "rope"), run)
    export_run(run)  # into the run directory, the default
    assert load_export(run)[2] == 64
    assert all((run / name).stat().st_mode & 0o044 for name in ("model.safetensors", "config.json"))
    summary = json.loads((run / "summary.json").read_text())
    (run / "summary.json").write_text(json.dumps({**summary, "checkpoint_step": summary["steps"] + 2}))
    with pytest.raises(UsageError, match="trained on to step 22: export again"):
        load_export(run)


@pytest.mark.parametrize("kind", ["directory", "symlink", "fifo"])
def test_an_atomic_write_never_replaces_a_directory_link_or_fifo_standing_where_its_file_goes(tmp_path, kind):
    from posenc_cli.core.atomic import write_text

    path = tmp_path / "ppl.md"
    if kind == "directory":
        path.mkdir()
    elif kind == "symlink":
        (tmp_path / "mine.txt").write_text("mine")
        path.symlink_to(tmp_path / "mine.txt")
    else:
        os.mkfifo(path)
    with pytest.raises(UsageError, match="where posenc writes a file"):
        write_text(path, "table")
    assert (tmp_path / "mine.txt").read_text() == "mine" if kind == "symlink" else not path.is_file()
