"""Shared test helpers: run the real CLI in a subprocess, and a tiny trained sweep to reuse."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data" / "tinyshakespeare.txt"
SMOKE = ["experiment=smoke"]
ALL_SCHEMES = ["none", "sinusoidal", "learned", "rope", "alibi"]


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


def posenc(*args: str) -> tuple[int, str]:
    """`posenc ARGS` in this process, faithful for refusals (raised before any process-specific work):
    (exit code, stderr)."""
    from posenc_cli import cli

    stderr = io.StringIO()
    with (
        contextlib.redirect_stderr(stderr),
        contextlib.redirect_stdout(io.StringIO()),
        mock.patch.object(sys, "argv", ["posenc", *args]),
    ):
        try:
            cli.main()
            code = 0
        except SystemExit as exit_:
            code = exit_.code
    return code, stderr.getvalue()


def assert_refused(code: int, stderr: str, *needles: str) -> None:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1, (code, stderr)
    assert lines[0].startswith("posenc: error: ") and "Traceback" not in stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


@pytest.fixture(scope="session")
def smoke_sweep(tmp_path_factory) -> Path:
    """One tiny run of every chapter scheme, trained once per test session: the sweep directory."""
    cwd = tmp_path_factory.mktemp("sweep")
    result = run_cli("train", "-m", f"scheme={','.join(ALL_SCHEMES)}", *SMOKE, cwd=cwd)
    assert result.returncode == 0, result.stderr
    (sweep,) = (cwd / "outputs" / "sweeps").iterdir()
    return sweep
