"""Output sets (eval, probe, export): a directory owned by one writer at a time, a manifest of what that
writer wrote (sha256 and size), nothing read that no valid manifest vouches for, and posenc's own
temporaries only ever cleaned."""

from __future__ import annotations

import errno
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

from conftest import ROOT, assert_one_line_error, assert_refused, invoke, posenc, run_cli, train
from posenc_cli.core.atomic import remove_leftovers
from posenc_cli.core.errors import UsageError
from posenc_cli.core.file_sets import (
    MANIFEST,
    SetKind,
    hashed_entry,
    output_set,
    own_directory,
    release_directories,
)


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
    from posenc_cli.hf import export
    from posenc_cli.hf.export import export_run
    from posenc_cli.hf.export_loading import load_export

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
    from posenc_cli.hf.export_loading import load_export

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
    from posenc_cli.hf.export import export_run
    from posenc_cli.hf.export_loading import load_export

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


def a_set(out: Path, kind, names: tuple[str, ...] = ("a.csv",), **identity) -> None:
    """A complete output set of `kind` in `out`, listing `names` (written here, no command run)."""
    with output_set(out, ["run"], kind=kind, **identity) as written:
        for name in names:
            (out / name).write_text(name)
            written.written.append(out / name)


WRITERS = {  # every command that writes an output set, and the kind of set it writes
    "eval": (["eval", "r"], SetKind.EVALUATION),
    "probe": (["probe", "r"], SetKind.EVALUATION),
    "report": (["report", "r"], SetKind.EVALUATION),
    "export": (["export", "r"], SetKind.EXPORT),
    "bench": (["bench", "--quick", "--startup"], SetKind.BENCH),
}


@pytest.mark.parametrize("held", list(SetKind))
@pytest.mark.parametrize("writer", WRITERS)
def test_a_directory_holding_another_kind_of_output_set_is_refused_before_any_work(
    tmp_path, monkeypatch, writer, held
):
    """export then eval left the export unloadable, eval then export lost the eval set for report: every
    writer refuses another kind's set in one line, before any work (run `r` does not exist: not read),
    and changes nothing; its own kind (eval and probe share one) goes on to the work."""
    monkeypatch.chdir(tmp_path)
    a_set(tmp_path / "d", held)
    before = {p.name: p.read_bytes() for p in (tmp_path / "d").iterdir()}
    args, kind = WRITERS[writer]
    if kind is held:
        if writer != "bench":  # bench would run: its own kind is no refusal, the missing run is
            code, stderr = posenc(*args, "--out", "d")
            assert code == 2 and "holds" not in stderr
        return
    assert_refused(
        *posenc(*args, "--out", "d"), "--out d holds", "--force", "1 files its manifest.json lists"
    )
    assert {p.name: p.read_bytes() for p in (tmp_path / "d").iterdir()} == before


def test_a_set_written_before_kinds_were_recorded_is_known_by_its_manifest(tmp_path, monkeypatch):
    """An export of an older posenc (its manifest names a run_id, no kind) is still an export."""
    monkeypatch.chdir(tmp_path)
    a_set(tmp_path / "d", SetKind.EXPORT, run_id="r1")
    manifest = json.loads((tmp_path / "d" / MANIFEST).read_text())
    del manifest["kind"]
    (tmp_path / "d" / MANIFEST).write_text(json.dumps(manifest))
    assert_refused(*posenc("eval", "r", "--out", "d"), "holds a posenc export")


def test_force_removes_only_the_files_the_other_sets_manifest_lists_and_only_once_it_writes(tmp_path):
    """--force: the other set's listed files go when this set is written (a refusal or a failure before
    then keeps them), never a file it does not list, nor a listed name that reaches out of the directory."""
    out = tmp_path / "d"
    out.mkdir()
    (tmp_path / "outside.txt").write_text("mine")
    a_set(out, SetKind.EXPORT, ("config.json", "model.safetensors"), run_id="r1")
    (out / "notes.txt").write_text("mine")
    manifest = json.loads((out / MANIFEST).read_text())
    manifest["files"]["../outside.txt"] = hashed_entry(tmp_path / "outside.txt")  # a forged entry
    (out / MANIFEST).write_text(json.dumps(manifest))
    own_directory(out, kind=SetKind.EVALUATION, force=True)
    try:
        assert (out / "config.json").is_file()  # nothing removed before the set is written
        with output_set(out, ["run"]) as result:
            (out / "ppl.csv").write_text("ppl")
            result.written.append(out / "ppl.csv")
    finally:
        release_directories()
    assert sorted(p.name for p in out.iterdir()) == [MANIFEST, "notes.txt", "ppl.csv"]
    assert (tmp_path / "outside.txt").read_text() == "mine"
    assert json.loads((out / MANIFEST).read_text())["kind"] == "evaluation"


@pytest.mark.slow
def test_a_forced_set_whose_write_fails_leaves_the_other_set_as_it_was(smoke_sweep, tmp_path, monkeypatch):
    """`eval --force` over an export on a full disk removed the export, then failed: both were lost. The
    other set goes only once every file of the new one is written; a failure before then leaves it
    byte-identical and loadable, and says nothing of a removal. A write that succeeds replaces it."""
    from posenc_cli.core import atomic
    from posenc_cli.hf.export import export_run
    from posenc_cli.hf.export_loading import load_export

    run = str(a_run(smoke_sweep, "rope"))
    export_run(run, tmp_path / "d")
    before = {p.name: p.read_bytes() for p in (tmp_path / "d").iterdir()}
    evaluation = [
        "eval",
        run,
        "--lengths",
        "64",
        "--max-tokens",
        "128",
        "--out",
        str(tmp_path / "d"),
        "--force",
    ]
    replace, writes = os.replace, []

    def refusing(src, dst):  # the disk fills up on eval's second file
        writes.extend([dst] if str(src).endswith(".tmp") else [])
        if len(writes) == 2 and str(src).endswith(".tmp"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        replace(src, dst)

    monkeypatch.setattr(atomic.os, "replace", refusing)
    failed = invoke(*evaluation)
    monkeypatch.undo()
    assert failed.code == 2 and "cannot write" in failed.stderr, failed.stderr
    assert "--force: removed" not in failed.stderr
    assert {p.name: p.read_bytes() for p in (tmp_path / "d").iterdir()} == before
    load_export(tmp_path / "d")
    forced = invoke(*evaluation)
    assert forced.code == 0, forced.stderr
    assert "--force: removed a posenc export" in forced.stderr
    assert not (tmp_path / "d" / "model.safetensors").exists()
    assert assert_manifest_matches_its_files(tmp_path / "d")["kind"] == "evaluation"


def test_sample_refuses_to_write_over_a_file_an_output_set_lists(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    a_set(tmp_path / "d", SetKind.EXPORT, ("config.json",), run_id="r1")
    for name in ("config.json", MANIFEST):
        assert_refused(
            *posenc("sample", "r", "--prompt", "a", "--out", f"d/{name}"), "a file of a posenc export"
        )


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.ENAMETOOLONG])
def test_a_write_the_disk_refuses_is_one_line_and_leaves_no_part_of_the_set(tmp_path, monkeypatch, code):
    """A full disk, a quota, `ulimit -f`, a name too long, on the second file of a set: one line naming the
    file and the cause; the first file, the temporaries and the manifest are gone, as is the old set."""
    from posenc_cli.core import atomic

    out = tmp_path / "d"
    a_set(out, SetKind.EVALUATION, ("old.csv",))
    replace = os.replace
    calls = []

    def refusing(src, dst):
        calls.append(dst)
        if len(calls) == 2:
            raise OSError(code, os.strerror(code))
        replace(src, dst)

    monkeypatch.setattr(atomic.os, "replace", refusing)
    with pytest.raises(UsageError) as refused:
        with output_set(out, ["run"]) as result:
            for name in ("ppl.csv", "ppl.md"):
                atomic.write_text(out / name, name)
                result.written.append(out / name)
    assert str(refused.value).startswith(f"cannot write {out / 'ppl.md'}: {os.strerror(code)}")
    assert "\n" not in str(refused.value)
    assert sorted(p.name for p in out.iterdir()) == ["old.csv"]  # unlisted, no manifest: no set


def limited_file_size(limit: int):
    """For a subprocess: files may grow to `limit` bytes (`ulimit -f`), and SIGXFSZ is ignored, so a
    write past it fails with EFBIG as on a full disk rather than killing the process."""

    def apply() -> None:
        import resource

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


@pytest.mark.slow
@pytest.mark.parametrize("command", ["export", "eval", "probe"])
def test_a_set_past_the_file_size_limit_is_one_line_and_nothing_is_left_as_if_complete(
    smoke_sweep, tmp_path, command
):
    """export onto a full disk or under `ulimit -f`, eval and probe likewise (a partial set, no manifest):
    the error is the last line, naming the file and the cause, and no file of the set is left."""
    if command == "probe":  # a run whose vocabulary holds the passkey prompt's words
        run = str(
            train(tmp_path, "train.block_size=96", "data.passkey_rate=0.3", "data.passkey_max_distance=20")
        )
    else:
        run = str(a_run(smoke_sweep, "rope"))
    args = {
        "export": ["export", run],
        "eval": ["eval", run, "--lengths", "64", "--max-tokens", "128"],
        "probe": ["probe", run, "--lengths", "96", "--trials", "2"],
    }[command]
    result = subprocess.run(
        [sys.executable, "-m", "posenc_cli", *args, "--out", "d"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=limited_file_size(2000),
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("posenc: error: cannot write d/") and "File too large" in last, result.stderr
    assert not (tmp_path / "d").exists() or list((tmp_path / "d").iterdir()) == []


@pytest.mark.slow
def test_export_and_eval_into_one_directory_are_refused_and_force_replaces_the_other_set(
    smoke_sweep, tmp_path
):
    from posenc_cli.hf.export import export_run
    from posenc_cli.hf.export_loading import load_export

    a, b = str(a_run(smoke_sweep, "rope")), str(a_run(smoke_sweep, "alibi"))
    export_run(b, tmp_path / "d")
    evaluation = ["eval", a, "--lengths", "64", "--max-tokens", "128", "--out", str(tmp_path / "d")]
    assert_refused(*posenc(*evaluation), "holds a posenc export")
    load_export(tmp_path / "d")  # untouched: still loads
    forced = run_cli(*evaluation, "--force", cwd=tmp_path)
    assert forced.returncode == 0, forced.stderr
    assert "--force: removed a posenc export" in forced.stderr
    assert not (tmp_path / "d" / "model.safetensors").exists()
    assert_refused(*posenc("export", b, "--out", str(tmp_path / "d")), "holds an output set of posenc eval")
    rebuilt = invoke("report", str(tmp_path / "d"), "--out", str(tmp_path / "r"))
    assert rebuilt.code == 0, rebuilt.stderr  # the eval set is still whole
