"""Wall time of the README's main job: five trainings, then the evaluation, as a user runs them."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from posenc_cli.bench.processes import posenc, timed
from posenc_cli.core import ui
from posenc_cli.core.choices import CHAPTER_SCHEMES

# make demo's commands (tests/test_bench.py holds the two alike)
MAIN_JOB = (
    ["train", "-m", "experiment=demo", "scheme=" + ",".join(CHAPTER_SCHEMES)],
    ["eval", "--lengths", "512,1024,2048"],
)


def bench_main_job(quick: bool) -> list[dict]:
    """Each command's whole-process seconds (--quick: the same commands on experiment=smoke, which
    replaces the demo's)."""
    rows, work = [], Path(tempfile.mkdtemp(prefix="posenc-main-job-"))
    try:
        for args in MAIN_JOB:
            if quick and args[0] == "train":
                args = [a.replace("experiment=demo", "experiment=smoke") for a in args]
            ui.err.print(f"main job: posenc {' '.join(args)}")
            seconds, _ = timed(posenc(*args), cwd=work, what=f"posenc {' '.join(args)}")
            rows.append({"section": "main_job", "config": " ".join(args), "seconds": seconds})
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rows.append({"section": "main_job", "config": "total", "seconds": sum(r["seconds"] for r in rows)})
    return rows
