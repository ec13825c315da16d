"""The cores this process may use, and how many of a sweep's trainings run side by side on them."""

from __future__ import annotations

import importlib.util
import os

CORES_PER_JOB = 2  # a small model's step still gains from a second thread; never fewer per job
SIDE_BY_SIDE_FROM = 4  # on 2 cores, two trainings side by side were measured 6 % slower than in turn


def usable_cores() -> int:
    """The cores this process may run on (its affinity: taskset, a cpuset), else the machine's."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # no affinity on this platform (macOS, Windows)
        return os.cpu_count() or 1


def side_by_side_jobs(trainings: int, cores: int) -> int:
    """How many of `trainings` to run at once on `cores`: one after another below SIDE_BY_SIDE_FROM
    cores, else as many as leave each at least CORES_PER_JOB (the launcher's jobs then split the cores:
    training.distributed.threads_per_job)."""
    if cores < SIDE_BY_SIDE_FROM:
        return 1
    return max(1, min(trainings, cores // CORES_PER_JOB))


def sweep_launcher(trainings: int, cores: int) -> list[str]:
    """The Hydra overrides that run a sweep's `trainings` side by side on `cores` (Hydra's joblib
    launcher), or none (the basic launcher, one after another) where that is faster or joblib's plugin
    is not installed (pip install 'posenc[cluster]')."""
    jobs = side_by_side_jobs(trainings, cores)
    if jobs == 1 or importlib.util.find_spec("hydra_plugins.hydra_joblib_launcher") is None:
        return []
    return ["hydra/launcher=joblib", f"hydra.launcher.n_jobs={jobs}"]
