"""The time model of scripts/gpu_evidence.py: a job's wall time from a per-step (per-unit) profile, the
schedule's wall time on N slots, and the cut that makes the plan fit the budget.

A training job of R runs of S steps takes R x (start-up + S x step + ceil(S / V) x validation): the
start-up measured for a one-run process is charged to every run of a sweep (conservative), and the
step time is the one measured with as many processes side by side as the schedule runs. An evaluation
job takes start-up + units x its kind's cost a unit. The schedule starts the ready job with the longest
chain still behind it whenever a slot is free, in the simulation as in the real run.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from dataclasses import dataclass

from gpu_evidence_plan import PARTS, Job, Kind, Plan, cut, jobs

MARGIN = 0.95  # the share of the budget the prediction may fill: the rest absorbs the model's error
MIN_FRACTION = 0.01


@dataclass(frozen=True)
class StepCost:
    """One training kind at one level of processes side by side, in seconds."""

    step_s: float
    val_s: float  # one validation and the checkpoint beside it
    startup_s: float  # process start to the first step, and the writes after the last


@dataclass(frozen=True)
class Profile:
    """What the time model knows of this machine: measured here, or read from an earlier run's file."""

    device: str
    smoke: bool
    levels: dict[int, dict[Kind, StepCost]]  # processes side by side -> cost by training kind
    unit_s: dict[Kind, float]  # evaluation kind -> seconds a unit
    eval_startup_s: float
    measured_s: float  # how long measuring took

    def to_json(self) -> dict:
        return {
            "device": self.device,
            "smoke": self.smoke,
            "levels": {
                str(n): {k.value: dataclasses.asdict(c) for k, c in costs.items()}
                for n, costs in self.levels.items()
            },
            "unit_s": {k.value: v for k, v in self.unit_s.items()},
            "eval_startup_s": self.eval_startup_s,
            "measured_s": self.measured_s,
        }

    @classmethod
    def from_json(cls, data: dict) -> Profile:
        levels = {
            int(n): {Kind(k): StepCost(**c) for k, c in costs.items()} for n, costs in data["levels"].items()
        }
        unit_s = {Kind(k): float(v) for k, v in data["unit_s"].items()}
        return cls(data["device"], bool(data["smoke"]), levels, unit_s, float(data["eval_startup_s"]), 0.0)


def duration(job: Job, profile: Profile, slots: int) -> float:
    """The predicted wall time of one job with `slots` processes side by side."""
    if job.kind.trains:
        c = profile.levels[slots][job.kind]
        stepping = job.steps * c.step_s + math.ceil(job.steps / job.val_every) * c.val_s
        per_run = c.startup_s + job.step_scale * stepping
        return job.runs * per_run
    return profile.eval_startup_s + job.units * profile.unit_s[job.kind]


def tails(plan_jobs: list[Job], cost: dict[str, float]) -> dict[str, float]:
    """Each job's own time plus the longest chain of jobs that wait for it: its priority, and what must
    still fit after it."""
    after: dict[str, list[str]] = {j.name: [] for j in plan_jobs}
    for job in plan_jobs:
        for dep in job.deps:
            after[dep].append(job.name)
    memo: dict[str, float] = {}

    def tail(name: str) -> float:
        if name not in memo:
            memo[name] = cost[name] + max((tail(n) for n in after[name]), default=0.0)
        return memo[name]

    return {j.name: tail(j.name) for j in plan_jobs}


def makespan(plan_jobs: list[Job], cost: dict[str, float], slots: int) -> float:
    """The schedule's wall time: list scheduling on `slots`, the longest tail first."""
    tail = tails(plan_jobs, cost)
    waiting = {j.name: set(j.deps) for j in plan_jobs}
    running: list[tuple[float, str]] = []
    now = 0.0
    while waiting or running:
        ready = sorted((n for n, deps in waiting.items() if not deps), key=lambda n: -tail[n])
        for name in ready[: slots - len(running)]:
            del waiting[name]
            heapq.heappush(running, (now + cost[name], name))
        if not running:
            raise ValueError(f"jobs wait for jobs that are not in the plan: {sorted(waiting)}")
        now, done = heapq.heappop(running)
        for deps in waiting.values():
            deps.discard(done)
    return now


@dataclass(frozen=True)
class Fit:
    """The plan to run, and what the time model said of it."""

    plan: Plan
    slots: int
    predicted_s: float  # the schedule, from now
    available_s: float  # the budget left now
    fraction: float  # the steps kept, of the plan's
    dropped_seeds: int
    makespans: dict[int, float]  # the full plan's predicted schedule by level of processes side by side
    fits: bool


def predict(plan: Plan, profile: Profile, slots: int) -> float:
    plan_jobs = jobs(plan)
    return makespan(plan_jobs, {j.name: duration(j, profile, slots) for j in plan_jobs}, slots)


def fit(plan: Plan, profile: Profile, *, available_s: float, may_cut: frozenset[str]) -> Fit:
    """Pick the level of processes side by side that runs the whole plan soonest, then cut what may be cut
    until the prediction fits MARGIN of the budget left: steps first (one fraction for every part, down to
    each part's floor), then seeds (down to each part's least), the steps searched again for each."""
    makespans = {n: predict(plan, profile, n) for n in profile.levels}
    slots = min(makespans, key=lambda n: makespans[n])
    room = available_s * MARGIN
    max_drop = max(len(plan.sizes(p).seeds) for p in PARTS) if "seeds" in may_cut else 0
    for dropped in range(max_drop + 1):
        fraction = largest_fraction(
            plan, profile, slots, room=room, dropped=dropped, steps="steps" in may_cut
        )
        if fraction is not None:
            chosen = cut(plan, fraction=fraction, dropped=dropped)
            return Fit(
                chosen,
                slots,
                predict(chosen, profile, slots),
                available_s,
                fraction,
                dropped,
                makespans,
                fits=True,
            )
    floor = cut(plan, fraction=0.0 if "steps" in may_cut else 1.0, dropped=max_drop)
    return Fit(
        floor,
        slots,
        predict(floor, profile, slots),
        available_s,
        0.0 if "steps" in may_cut else 1.0,
        max_drop,
        makespans,
        fits=False,
    )


def largest_fraction(
    plan: Plan, profile: Profile, slots: int, *, room: float, dropped: int, steps: bool
) -> float | None:
    """The largest share of the steps (to 1 %) whose schedule fits `room`, None if not even the floor does."""

    def fits(fraction: float) -> bool:
        return predict(cut(plan, fraction=fraction, dropped=dropped), profile, slots) <= room

    if fits(1.0):
        return 1.0
    if not steps or not fits(0.0):
        return None
    low, high = 0.0, 1.0
    while high - low > MIN_FRACTION:
        mid = (low + high) / 2
        low, high = (mid, high) if fits(mid) else (low, mid)
    return low
