"""Shared test helpers: run the real CLI in a subprocess, and a tiny trained sweep to reuse."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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


@pytest.fixture(scope="session")
def smoke_sweep(tmp_path_factory) -> Path:
    """One tiny run of every chapter scheme, trained once per test session: the sweep directory."""
    cwd = tmp_path_factory.mktemp("sweep")
    result = run_cli("train", "-m", f"scheme={','.join(ALL_SCHEMES)}", *SMOKE, cwd=cwd)
    assert result.returncode == 0, result.stderr
    (sweep,) = (cwd / "outputs" / "sweeps").iterdir()
    return sweep
