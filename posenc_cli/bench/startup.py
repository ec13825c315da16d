"""Start-up: whole `posenc` processes a user waits on before anything happens, alternated and repeated.

Each case is a fresh Python, as a shell runs it; the cases take turns `repeats` times so a busy
moment on a shared machine slows them all, and each case's fastest time is reported (start-up is
what the machine allows at best; noise only adds to it)."""

from __future__ import annotations

import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from posenc_cli.bench.processes import TINY_MODEL, child_env, posenc

# a tiny run's first step: one optimizer step, no checkpoint before it, one validation batch
TINY_RUN = (
    *TINY_MODEL,
    "train.max_steps=1",
    "train.eval_interval=1",
    "train.eval_batches=1",
    "train.threads=1",
)


def startup_cases(work: Path) -> dict[str, tuple[list[str], dict[str, str], int]]:
    """name -> (command, extra environment, the exit status it must end with)."""
    completion = {
        "_POSENC_COMPLETE": "complete_bash",
        "COMP_WORDS": "posenc train scheme = al",
        "COMP_CWORD": "4",
    }
    return {
        "refused override (train scheme=roep)": (posenc("train", "scheme=roep"), {}, 2),
        "train --help": (posenc("train", "--help"), {}, 0),
        "completion (train scheme=al<TAB>)": (posenc(), completion, 0),
        "tiny run of 1 step, whole process": (
            posenc("train", *TINY_RUN, f"hydra.run.dir={work / 'run'}"),
            {},
            0,
        ),
    }


def process_seconds(args: list[str], env: dict[str, str], code: int, *, cwd: Path) -> float:
    start = time.perf_counter()
    done = subprocess.run(args, cwd=cwd, env=child_env(**env), capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if done.returncode != code:
        raise RuntimeError(
            f"{' '.join(args[2:])} ended with {done.returncode}, not {code}:\n{done.stderr[-2000:]}"
        )
    return seconds


def bench_startup(repeats: int) -> list[dict[str, Any]]:
    """Each case's fastest and median wall seconds over `repeats` alternated rounds."""
    with tempfile.TemporaryDirectory(prefix="posenc-startup-") as tmp:
        times: dict[str, list[float]] = {}
        for round_ in range(repeats):
            work = Path(tmp) / f"round{round_}"  # each round's tiny run in a directory of its own
            work.mkdir()
            for name, (args, env, code) in startup_cases(work).items():
                times.setdefault(name, []).append(
                    process_seconds(args, {"OMP_NUM_THREADS": "1", **env}, code, cwd=work)
                )
    return [
        {
            "section": "startup",
            "config": name,
            "seconds": min(runs),
            "median_s": sorted(runs)[len(runs) // 2],
            "pair": repeats,
        }
        for name, runs in times.items()
    ]
