"""Shared test helpers: the CLI in this process (refusals, help, a quick eval) or as a real subprocess
(training, signals, launchers), and tiny trained runs shared by every test that reads them.

pytest runs the files on several workers (pytest-xdist, `--dist loadfile`: a file's tests and its
module fixtures stay on one worker). A session fixture that trains is built once for all workers
(`built_once`), the first worker to ask trains, the others wait for it and reuse the directory.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import pandas as pd
import pytest
from filelock import FileLock
from hypothesis import settings

from posenc_cli.core.choices import CHAPTER_SCHEMES
from posenc_cli.core.device import CPU_BF16, CPU_BF16_ENV
from posenc_cli.evaluation.labels import Label, Variant
from posenc_cli.training.precision_choice import CACHE_ENV

# Property tests check maths, not speed: no per-example deadline (hypothesis' default 200 ms fails on
# a loaded 2-core machine, which is a timed test in disguise).
settings.register_profile("posenc", deadline=None)
settings.load_profile("posenc")

# What `train.precision=auto` resolves to must not depend on the machine the suite runs on (AVX2: fp32;
# AVX-512-BF16/AMX: bf16 autocast). Every test, and every process it starts, sees a CPU that emulates
# bf16, so auto means fp32 everywhere (and stays fast on AVX2); a test that needs the other answer asks
# for it with the `cpu_bf16` fixture, and numeric comparisons pin their precision (test_precision.py).
os.environ[CPU_BF16_ENV] = "emulated"
# auto's measured choices (training.precision_choice) are cached in a file of the suite's own, never the user's
os.environ[CACHE_ENV] = str(Path(tempfile.mkdtemp(prefix="posenc-test-precision-")) / "precision.json")

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data" / "tinyshakespeare.txt"
SMOKE = ["experiment=smoke"]
ALL_SCHEMES = list(CHAPTER_SCHEMES)
BEYOND_CHAPTERS = ["t5", "xpos", "kerple"]


# fixtures that train runs (once per session) or build models: a test that asks for one is slow
TRAINED_FIXTURES = {"smoke_sweep", "beyond_chapters_sweep", "broken_runs", "tiny"}


def pytest_collection_modifyitems(items) -> None:
    """Mark `slow` every test that reads trained runs; modules of end-to-end tests mark themselves."""
    for item in items:
        if TRAINED_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


def run_cli(
    *args: str, cwd: Path, timeout: int = 300, env: dict | None = None
) -> subprocess.CompletedProcess:
    """`posenc ARGS` as a user runs it, from `cwd`, with this checkout's package."""
    environment = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "posenc_cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=environment,
    )


def assert_one_line_error(result: subprocess.CompletedProcess, *needles: str) -> None:
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


@dataclass(frozen=True)
class Invocation:
    code: int
    stdout: str
    stderr: str


def invoke(*args: str, env: dict[str, str] | None = None) -> Invocation:
    """`posenc ARGS` in this process (no interpreter start-up, no torch import): faithful wherever the
    behaviour is not the process's own (refusals, help, completion, a quick eval), with `env` set."""
    from posenc_cli.cli import main as cli
    from posenc_cli.core import ui

    environment = {"COLUMNS": "200", **(env or {})}
    columns = int(environment["COLUMNS"])  # rich reads COLUMNS when a console is made: at import, here
    stdout, stderr = io.StringIO(), io.StringIO()
    with (
        contextlib.redirect_stderr(stderr),
        contextlib.redirect_stdout(stdout),
        mock.patch.object(sys, "argv", ["posenc", *args]),
        mock.patch.dict(os.environ, environment),
        mock.patch.object(ui.out, "_width", columns),
        mock.patch.object(ui.err, "_width", columns),
    ):
        try:
            cli.main()
            code = 0
        except SystemExit as exit_:
            code = exit_.code
    return Invocation(code, stdout.getvalue(), stderr.getvalue())


def posenc(*args: str) -> tuple[int, str]:
    """`posenc ARGS` in this process, for refusals: (exit code, stderr)."""
    result = invoke(*args)
    return result.code, result.stderr


def assert_refused(code: int, stderr: str, *needles: str) -> None:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1, (code, stderr)
    assert lines[0].startswith("posenc: error: ") and "Traceback" not in stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


def train(cwd: Path, *overrides: str, run: str = "run") -> Path:
    """`posenc train experiment=smoke OVERRIDES` as a real process into cwd/run: the run directory."""
    result = run_cli("train", *SMOKE, "train.threads=1", *overrides, f"hydra.run.dir={run}", cwd=cwd)
    assert result.returncode == 0, result.stderr
    return cwd / run


def evaluate(cwd: Path, *args: str, out: str = "eval") -> pd.DataFrame:
    """`posenc eval ARGS --out cwd/out` in this process (it must succeed): its ppl.csv."""
    here = Path.cwd()
    os.chdir(cwd)  # run arguments and the default run selection are relative to cwd, as for a user
    try:
        result = invoke("eval", *args, "--out", out)
    finally:
        os.chdir(here)
    assert result.code == 0, result.stderr
    return pd.read_csv(cwd / out / "ppl.csv")


def built_once(tmp_path_factory, name: str, build: Callable[[Path], Path]) -> Path:
    """build(an empty directory) -> a path, run once per test session however many xdist workers ask."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None:
        return build(tmp_path_factory.mktemp(name))
    shared = tmp_path_factory.getbasetemp().parent  # the session's directory above every worker's
    marker = shared / f"{name}.path"
    with FileLock(shared / f"{name}.lock"):
        if not marker.exists():  # a build that failed left no marker: the next worker tries afresh
            attempt = shared / f"{name}-{worker}"
            attempt.mkdir()
            marker.write_text(str(build(attempt)))
    return Path(marker.read_text())


def train_sweep(cwd: Path, schemes: list[str]) -> Path:
    result = run_cli("train", "-m", f"scheme={','.join(schemes)}", *SMOKE, cwd=cwd)
    assert result.returncode == 0, result.stderr
    (sweep,) = (cwd / "outputs" / "sweeps").iterdir()
    return sweep


@pytest.fixture(params=CPU_BF16)
def cpu_bf16(request, monkeypatch) -> str:
    """Each answer the CPU's bf16 detection can give (native, then emulated), in this process and in
    the processes it starts: a precision-sensitive test runs under both, on either machine kind."""
    monkeypatch.setenv(CPU_BF16_ENV, request.param)
    return request.param


@pytest.fixture
def fixed_free_memory(monkeypatch) -> int:
    """Every memory check sees 24 GiB free (this project's machine size), whatever the host has."""
    from posenc_cli.config import memory_model
    from posenc_cli.evaluation import run_target, sample
    from posenc_cli.hf import memory as hf_memory
    from posenc_cli.hf import models as hf_models

    free = 24 * 2**30
    for module in (memory_model, hf_memory, hf_models, run_target, sample):
        monkeypatch.setattr(module, "free_memory", lambda device: free)
    return free


@pytest.fixture(scope="session")
def smoke_sweep(tmp_path_factory) -> Path:
    """One tiny run of every chapter scheme, trained once per test session: the sweep directory."""
    return built_once(tmp_path_factory, "sweep", lambda cwd: train_sweep(cwd, ALL_SCHEMES))


@pytest.fixture(scope="session")
def beyond_chapters_sweep(tmp_path_factory) -> Path:
    """One tiny run of each scheme beyond the chapters (t5, xpos, kerple), trained once per session."""
    return built_once(tmp_path_factory, "beyond", lambda cwd: train_sweep(cwd, BEYOND_CHAPTERS))


def column(scheme: str, scaling: str = "", **fields) -> Label:
    """A result column of one scheme, scaled by `scaling` (eval's --rope-scaling), as eval builds it."""
    return Label((scheme,), Variant(scaling=scaling), **fields)
