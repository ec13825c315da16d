"""Wall time of the README's main job: five trainings, then the evaluation, as a user runs them."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from posenc_cli.bench.processes import posenc, timed
from posenc_cli.core import ui
from posenc_cli.core.choices import CHAPTER_SCHEMES
from posenc_cli.core.cores import sweep_launcher, usable_cores

DEMO_LENGTHS = "256,512,1024"  # 2x, 4x and 8x experiment=demo's training length


def main_job(cores: int) -> list[list[str]]:
    """make demo's commands on `cores` (tests/test_docs.py holds the two alike): its trainings side by
    side from 4 cores, as scripts/demo_launcher.py chooses for make demo."""
    return [
        ["train", "-m", "experiment=demo", "scheme=" + ",".join(CHAPTER_SCHEMES)]
        + sweep_launcher(len(CHAPTER_SCHEMES), cores),
        ["eval", "--lengths", DEMO_LENGTHS],
    ]


def bench_main_job(quick: bool) -> list[dict]:
    """Each command's whole-process seconds (--quick: the same commands on experiment=smoke, which
    replaces the demo's)."""
    rows, work = [], Path(tempfile.mkdtemp(prefix="posenc-main-job-"))
    try:
        for args in main_job(usable_cores()):
            if quick and args[0] == "train":
                args = [a.replace("experiment=demo", "experiment=smoke") for a in args]
            ui.err.print(f"main job: posenc {' '.join(args)}")
            seconds, _ = timed(posenc(*args), cwd=work, what=f"posenc {' '.join(args)}")
            rows.append({"section": "main_job", "config": " ".join(args), "seconds": seconds})
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rows.append({"section": "main_job", "config": "total", "seconds": sum(r["seconds"] for r in rows)})
    return rows
