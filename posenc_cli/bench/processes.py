"""Child processes the benchmark times: a fresh Python that imports this very package."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

# the smallest model and corpus that still train: --quick's overrides and the start-up's tiny run
TINY_MODEL = (
    "model.n_layer=1",
    "model.n_embd=32",
    "model.n_head=2",
    "train.block_size=16",
    "train.batch_size=2",
    "data.n_chars=5000",
)


def child_env(**extra: str) -> dict[str, str]:
    """The environment for a child Python that imports this very package."""
    package_root = str(Path(__file__).resolve().parents[2])
    path = os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, **extra}


def timed(
    args: list[str], cwd: Path | None, what: str, *, env: dict[str, str] | None = None
) -> tuple[float, str]:
    """Wall seconds of the whole process and its stdout; its stderr's tail in the error if it fails."""
    start = time.perf_counter()
    done = subprocess.run(args, cwd=cwd, env=env or child_env(), capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if done.returncode:
        raise RuntimeError(f"{what} failed:\n{done.stderr[-2000:]}")
    return seconds, done.stdout


def posenc(*args: str) -> list[str]:
    return [sys.executable, "-m", "posenc_cli", *args]
