"""The processes of scripts/gpu_evidence.py: the schedule run on N slots against the budget, and the
profile measured by short runs of each kind side by side.

Every process runs posenc's command line in $OUT (so every file it writes lands there), one torch
thread each, its output in $OUT/logs/<job>.log. A job is stopped at its own deadline, the budget's end
less the predicted time of the jobs that wait for it: SIGTERM, which posenc's training loop takes as an
interruption at the next step (the run is saved and marked interrupted), then SIGKILL after GRACE_S.
"""

from __future__ import annotations

import math
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gpu_evidence_plan import Job, Kind, Plan, extension_args, needle_args, task_args
from gpu_evidence_time import tails

ROOT = Path(__file__).resolve().parents[1]
GRACE_S = 30.0
POLL_S = 0.2


@dataclass
class Record:
    """What became of one job. Times are seconds since the script started."""

    job: Job
    predicted_s: float
    stop_at: float = math.inf
    started: float | None = None
    ended: float | None = None
    returncode: int | None = None
    stopped: bool = False  # the budget stopped it
    process: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def outcome(self) -> str:
        if self.started is None:
            return "not started: the budget had run out"
        if self.stopped:
            return "stopped by the budget"
        return (
            "finished"
            if self.returncode == 0
            else f"failed (exit {self.returncode}, see logs/{self.job.name}.log)"
        )


@dataclass(frozen=True)
class Launcher:
    """How a job's process is started: posenc's command, in `out`, with this checkout importable."""

    out: Path
    posenc: tuple[str, ...]
    clock: Callable[[], float]

    def start(self, job: Job) -> subprocess.Popen:
        (self.out / "logs").mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "120"}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
        with open(self.out / "logs" / f"{job.name}.log", "w", encoding="utf-8") as log:
            log.write(shlex.join([*self.posenc, *job.args]) + "\n")
            log.flush()
            return subprocess.Popen(
                [*self.posenc, *job.args],
                cwd=self.out,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )

    def say(self, text: str) -> None:
        print(f"[{self.clock():6.0f} s] {text}", flush=True)


def posenc_command() -> tuple[str, ...]:
    return tuple(shlex.split(os.environ.get("POSENC") or f"{shlex.quote(sys.executable)} -m posenc_cli"))


def run_schedule(
    plan_jobs: list[Job], cost: dict[str, float], *, slots: int, end_s: float, launcher: Launcher
) -> list[Record]:
    """Run the jobs on `slots` processes, the longest tail first, each stopped at its deadline."""
    tail = tails(plan_jobs, cost)
    records = {
        j.name: Record(j, cost[j.name], stop_at=end_s - (tail[j.name] - cost[j.name])) for j in plan_jobs
    }
    waiting = {j.name: set(j.deps) for j in plan_jobs}
    running: list[Record] = []
    while waiting or running:
        for record in list(running):
            if watch(record, launcher):
                running.remove(record)
                for deps in waiting.values():
                    deps.discard(record.job.name)
        for name in sorted((n for n, deps in waiting.items() if not deps), key=lambda n: -tail[n]):
            if len(running) >= slots:
                break
            record = records[name]
            del waiting[name]
            if launcher.clock() >= record.stop_at:  # its jobs after it still run, on what finished
                launcher.say(f"not started: {name} (the budget had run out)")
                for deps in waiting.values():
                    deps.discard(name)
                continue
            record.started, record.process = launcher.clock(), launcher.start(record.job)
            launcher.say(f"start {name} (predicted {record.predicted_s:.0f} s)")
            running.append(record)
        time.sleep(POLL_S)
    return list(records.values())


def watch(record: Record, launcher: Launcher) -> bool:
    """Whether the job's process has ended; stops it at its deadline (SIGTERM, then SIGKILL)."""
    process, now = record.process, launcher.clock()
    assert process is not None and record.started is not None
    if process.poll() is not None:
        record.ended, record.returncode = now, process.returncode
        launcher.say(f"{record.outcome}: {record.job.name} in {now - record.started:.0f} s")
        return True
    if now >= record.stop_at and not record.stopped:
        record.stopped = True
        launcher.say(f"budget: stopping {record.job.name}")
        os.killpg(process.pid, signal.SIGTERM)
    elif record.stopped and now >= record.stop_at + GRACE_S:
        os.killpg(process.pid, signal.SIGKILL)
    return False


def with_overrides(args: list[str], **values: object) -> list[str]:
    """Hydra overrides with `key=value` set for each dotted key (train__max_steps for train.max_steps)."""
    keys = {k.replace("__", "."): v for k, v in values.items()}
    return [a for a in args if a.split("=", 1)[0] not in keys] + [f"{k}={v}" for k, v in keys.items()]


def profile_args(plan: Plan, kind: Kind, steps: int) -> list[str]:
    """A run of `kind` as the plan trains it, `steps` long, logging often and validating twice."""
    task = max(plan.task_names, key=lambda t: len(t))  # addition's 27 tokens, when planned
    variant = "fire" if "fire" in plan.variants else plan.variants[0]  # the slowest to train (docs/tasks.md)
    args = {
        Kind.NEEDLE: lambda: needle_args(plan, plan.needle_tasks[0], "rope", steps=steps),
        Kind.TASK: lambda: task_args(plan, task, variant, steps=steps),
        Kind.BASE: lambda: extension_args(plan, steps=steps),
        Kind.FINE_TUNE: lambda: extension_args(plan, steps=steps, scaling="yarn"),
    }[kind]()
    half = max(1, steps // 2)
    return with_overrides(
        args,
        train__log_interval=max(1, steps // 6),
        train__eval_interval=half,
        train__checkpoint_interval=half,
    )
