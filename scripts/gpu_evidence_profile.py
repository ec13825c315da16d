"""The per-step profile of scripts/gpu_evidence.py, measured in its first seconds: at each level of
processes side by side, that many short runs (the training kinds in turn, each as the plan trains it),
then one short evaluation of each kind beside each other. A run's step time is read from its
metrics.csv (tokens/s between logged steps, which leaves out validation and checkpoints), the
validation from the rest of its training time, the start-up from its process's wall time less its
training time. An evaluation's start-up is taken to be the training runs' (it is not measured apart)."""

from __future__ import annotations

import csv
import json
import math
import statistics
from pathlib import Path

from gpu_evidence_plan import NEEDLE_TRAIN_LEN, TRAIN_KINDS, Job, Kind, Plan, jobs
from gpu_evidence_run import Launcher, Record, profile_args, run_schedule
from gpu_evidence_time import Profile, StepCost

TIMEOUT_S = 240.0  # a profile that takes longer says more about the machine than any plan could use


class ProfileError(RuntimeError):
    """A profile run failed: the plan would fail the same way, so nothing more is run."""


def measure(
    plan: Plan, *, levels: list[int], steps: int, trials: int, launcher: Launcher, device: str
) -> Profile:
    started = launcher.clock()
    needed = {j.kind for j in jobs(plan)}  # PARTS may leave kinds out
    kinds = [k for k in TRAIN_KINDS if k in needed]
    costs, first = {}, []
    for level in levels:
        round_jobs = [
            Job(
                f"profile-{level}-{i}-{kind.value}",
                "profile",
                kind,
                (
                    "train",
                    "-m",
                    "seed=0",
                    f"hydra.sweep.dir=profile/{level}/{i}_{kind.value}",
                    *profile_args(plan, kind, steps),
                ),
                steps=steps,
                sweep=f"profile/{level}/{i}_{kind.value}",
            )
            for i, kind in enumerate(kinds * level)
            if i < max(level, len(kinds))  # every kind at least once, `level` at a time
        ]
        launcher.say(f"profile: {level} runs side by side, {steps} steps each")
        records = checked(
            run_schedule(
                round_jobs,
                {j.name: 0.0 for j in round_jobs},
                slots=level,
                end_s=launcher.clock() + TIMEOUT_S,
                launcher=launcher,
            )
        )
        costs[level] = {
            kind: median_cost([step_cost(r, launcher.out) for r in records if r.job.kind is kind])
            for kind in kinds
        }
        first = first or records
    startup = statistics.median(c.startup_s for c in costs[levels[0]].values())
    unit_s = measure_evals(plan, first, needed, startup_s=startup, trials=trials, launcher=launcher)
    return Profile(device, plan.smoke, costs, unit_s, startup, launcher.clock() - started)


def checked(records: list[Record]) -> list[Record]:
    for r in records:
        if r.outcome != "finished":
            raise ProfileError(
                f"the profile's {r.job.name} {r.outcome}: see {r.job.name}.log under $OUT/logs"
            )
    return records


def run_dir(record: Record, out: Path) -> Path:
    return next(p.parent for p in sorted((out / str(record.job.sweep)).glob("*/summary.json")))


def step_cost(record: Record, out: Path) -> StepCost:
    run = run_dir(record, out)
    summary = json.loads((run / "summary.json").read_text(encoding="utf-8"))
    train = summary["config"]["train"]
    with open(run / "metrics.csv", encoding="utf-8") as f:
        rates = [float(row["tokens_per_s"]) for row in csv.DictReader(f) if row["tokens_per_s"]]
    steady = rates[1:] or rates  # the first interval holds the warm-up (allocation, kernel choice)
    step_s = train["batch_size"] * train["block_size"] / statistics.median(steady)
    validations = math.ceil(summary["steps"] / train["eval_interval"])
    val_s = max(0.0, summary["wall_time_s"] - summary["steps"] * step_s) / validations
    return StepCost(step_s, val_s, max(0.0, wall(record) - summary["wall_time_s"]))


def median_cost(costs: list[StepCost]) -> StepCost:
    return StepCost(
        step_s=statistics.median(c.step_s for c in costs),
        val_s=statistics.median(c.val_s for c in costs),
        startup_s=statistics.median(c.startup_s for c in costs),
    )


def measure_evals(
    plan: Plan, trained: list[Record], needed: set[Kind], *, startup_s: float, trials: int, launcher: Launcher
) -> dict[Kind, float]:
    """Seconds a unit of each evaluation kind the plan holds, from one short evaluation of each beside
    the others, on the first round's runs."""
    run = {r.job.kind: str(run_dir(r, launcher.out).relative_to(launcher.out)) for r in trained}
    evals = [job for job in eval_jobs(plan, run, trials=trials) if job.kind in needed]
    launcher.say("profile: one evaluation of each kind side by side")
    records = checked(
        run_schedule(
            evals,
            {j.name: 0.0 for j in evals},
            slots=len(evals),
            end_s=launcher.clock() + TIMEOUT_S,
            launcher=launcher,
        )
    )
    # what the evaluation took past the start-up, a tenth of its wall time at least (never free)
    return {r.job.kind: max(wall(r) - startup_s, 0.1 * wall(r)) / r.job.units for r in records}


def eval_jobs(plan: Plan, run: dict[Kind, str], *, trials: int) -> list[Job]:
    """A probe of the needle run at one depth, the task run's eval and the base run's perplexity eval,
    each at the plan's lengths; units as the plan's jobs count them."""
    device = ["--device", "cpu"] if plan.smoke else []
    probe_lengths, task_lengths = plan.probe_lengths, sorted({*plan.task_lengths, 8})
    probe = ["probe", run.get(Kind.NEEDLE, ""), "--task", plan.needle_tasks[0], "--depths", "0.5"]
    probe += [
        "--lengths",
        ",".join(map(str, probe_lengths)),
        "--trials",
        str(trials),
        "--out",
        "profile/probe",
    ]
    tasks = ["eval", run.get(Kind.TASK, ""), "--lengths", ",".join(map(str, plan.task_lengths))]
    # on the base model where the extension part runs, else on the needle model (the drope part alone)
    ppl = [
        "eval",
        run.get(Kind.BASE) or run.get(Kind.NEEDLE, ""),
        "--lengths",
        ",".join(map(str, plan.ppl_lengths)),
    ]
    ppl += ["--max-tokens", str(plan.max_tokens), "--out", "profile/ppl_eval"]
    return [
        Job(
            "profile-probe",
            "profile",
            Kind.PROBE,
            (*probe, *device),
            units=trials * (sum(probe_lengths) + NEEDLE_TRAIN_LEN),
        ),
        Job(
            "profile-task-eval",
            "profile",
            Kind.TASK_EVAL,
            (*tasks, "--out", "profile/task_eval", *device),
            units=len(task_lengths),
        ),
        Job(
            "profile-ppl-eval",
            "profile",
            Kind.PPL_EVAL,
            (*ppl, *device),
            units=len(plan.ppl_lengths) * plan.max_tokens,
        ),
    ]


def wall(record: Record) -> float:
    return float(record.ended or 0.0) - float(record.started or 0.0)
