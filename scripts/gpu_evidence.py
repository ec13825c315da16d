"""One prepared GPU run within a budget: the needle table, the algorithmic tasks at tens of thousands of
steps, PI and YaRN fine-tuning, and a DroPE-style comparison (gpu_evidence_plan.py); CPU=1 runs the last
on a CPU at a reduced recipe (CPU_FALLBACK).

Before anything trains it measures a per-step profile (gpu_evidence_profile.py) or reads the one an
earlier run wrote, predicts the wall time of the plan with as many runs side by side as pack the
machine best (gpu_evidence_time.py), cuts what it may cut so that the prediction fits, prints the plan
and the prediction, then runs it (gpu_evidence_run.py) and writes summary.md (gpu_evidence_page.py).
Run it through scripts/gpu_evidence.sh; every setting is an environment variable (Settings).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path

from gpu_evidence_drope import RECALIBRATION, recalibration_steps
from gpu_evidence_page import write_page
from gpu_evidence_plan import CPU_FALLBACK, FULL, NEEDLE_TRAIN_LEN, PARTS, SMOKE, Plan, jobs
from gpu_evidence_profile import ProfileError, measure
from gpu_evidence_run import Launcher, posenc_command, run_schedule
from gpu_evidence_time import Fit, Profile, duration, fit

PAGE_RESERVE_S = 10.0  # kept back from the budget for the summary page
CUTTABLE = ("steps", "seeds")


class Refused(ValueError):
    """A setting that cannot be used: one line on stderr, exit 2, before anything runs."""


@dataclass(frozen=True)
class Settings:
    """The script's environment variables, read and checked once."""

    out: Path  # OUT: every output set, log and the page (default outputs/gpu_evidence/<time>)
    budget_s: float  # BUDGET_S: the whole run's wall time, profile and evaluation included (480)
    smoke: bool  # SMOKE=1: the same script on a CPU, a small grid, a tiny model, a few steps
    cpu: bool  # CPU=1: the drope part on this machine's CPU at CPU_FALLBACK's reduced recipe
    levels: list[int]  # SLOTS: the counts of runs side by side to measure (cores,2xcores; SMOKE: 2)
    may_cut: frozenset[str]  # MAY_CUT: what a cut may reduce, of steps,seeds (steps)
    parts: tuple[str, ...]  # PARTS: of needles,tasks,extension,drope (all; CPU: drope)
    profile: Path | None  # PROFILE: an earlier run's profile.json instead of measuring
    profile_steps: int  # PROFILE_STEPS: steps of each profile run (150; SMOKE: 6)
    plan_only: bool  # PLAN_ONLY=1: print the plan and the prediction, train nothing

    @classmethod
    def from_env(cls, env: dict[str, str]) -> Settings:
        smoke, cpu = flag(env, "SMOKE"), flag(env, "CPU")
        if smoke and cpu:
            raise Refused(
                "SMOKE=1 and CPU=1: choose one (SMOKE is the CPU smoke, CPU the drope part's fallback)"
            )
        parts = choices(env, "PARTS", "drope" if cpu else ",".join(PARTS), allowed=PARTS)
        if cpu and parts != ["drope"]:
            raise Refused(
                f"CPU=1 runs PARTS=drope only (the other parts need a GPU's hours), got '{env['PARTS']}'"
            )
        cores = os.cpu_count() or 1
        stamp = datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
        slots = choices(env, "SLOTS", "2" if smoke else f"{cores},{2 * cores}")
        return cls(
            out=Path(env.get("OUT") or f"outputs/gpu_evidence/{stamp}").absolute(),
            budget_s=positive("BUDGET_S", env.get("BUDGET_S") or "480", integer=False),
            smoke=smoke,
            cpu=cpu,
            levels=sorted({int(positive("SLOTS", n)) for n in slots}),
            may_cut=frozenset(choices(env, "MAY_CUT", "steps", allowed=CUTTABLE, empty=True)),
            parts=tuple(p for p in PARTS if p in parts),
            profile=Path(env["PROFILE"]).absolute() if env.get("PROFILE") else None,
            profile_steps=int(
                positive("PROFILE_STEPS", env.get("PROFILE_STEPS") or ("6" if smoke else "150"))
            ),
            plan_only=flag(env, "PLAN_ONLY"),
        )


def flag(env: dict[str, str], name: str) -> bool:
    value = env.get(name) or "0"
    if value not in ("0", "1"):
        raise Refused(f"{name} must be 0 or 1, got '{value}'")
    return value == "1"


def positive(name: str, value: str, *, integer: bool = True) -> float:
    try:
        number = float(value)
    except ValueError:
        number = 0.0
    if not number > 0 or (integer and number != int(number)):
        raise Refused(f"{name} must be a positive {'integer' if integer else 'number'}, got '{value}'")
    return number


def choices(
    env: dict[str, str],
    name: str,
    default: str,
    allowed: tuple[str, ...] | None = None,
    *,
    empty: bool = False,
) -> list[str]:
    """A comma list from the environment (unset: `default`; set but empty: none, where `empty` allows)."""
    values = [v.strip() for v in env.get(name, default).split(",") if v.strip()]
    if (allowed is not None and any(v not in allowed for v in values)) or not (values or empty):
        what = ", ".join(allowed) if allowed else "positive integers"
        raise Refused(f"{name} must be a comma list of {what}, got '{env.get(name)}'")
    return values


def describe_device(on_cpu: bool) -> str:
    """The GPU's name (nvidia-smi), or the CPU's for SMOKE and CPU; a GPU run without a GPU is refused."""
    smi = shutil.which("nvidia-smi")
    if not on_cpu:
        if smi is None:
            raise Refused(
                "no GPU found (nvidia-smi is not on PATH); SMOKE=1 runs the CPU smoke instead, and "
                "CPU=1 PARTS=drope the DroPE comparison's CPU fallback"
            )
        names = subprocess.run(
            [smi, "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True
        )
        return (
            names.stdout.strip().splitlines()[0]
            if names.returncode == 0 and names.stdout.strip()
            else "a GPU"
        )
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in open_lines("/proc/cpuinfo")
            if line.startswith("model name")
        ),
        "",
    )
    return f"CPU {cpu}".strip()


def open_lines(path: str) -> list[str]:
    try:
        return Path(path).read_text(encoding="utf-8").splitlines()
    except OSError:
        return []


def load_profile(settings: Settings, device: str | None) -> Profile:
    """The profile of PROFILE, for this device (None: any, for PLAN_ONLY's prediction of another machine)."""
    assert settings.profile is not None
    try:
        profile = Profile.from_json(json.loads(settings.profile.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise Refused(f"PROFILE={settings.profile} is not a profile.json this script wrote ({err})") from None
    if device not in (None, profile.device) or profile.smoke != settings.smoke:
        raise Refused(
            f"PROFILE={settings.profile} was measured on {profile.device} (SMOKE={int(profile.smoke)}); "
            f"this is {device} (SMOKE={int(settings.smoke)}): measure again without PROFILE"
        )
    if not set(settings.levels) <= set(profile.levels):
        raise Refused(f"PROFILE={settings.profile} has SLOTS {sorted(profile.levels)}, not {settings.levels}")
    measured = {*profile.unit_s, *(k for costs in profile.levels.values() for k in costs)}
    missing = sorted(k.value for k in {j.kind for j in jobs(chosen_plan(settings))} - measured)
    if missing:
        raise Refused(
            f"PROFILE={settings.profile} has no cost for {', '.join(missing)}: measure again without PROFILE"
        )
    return replace(profile, levels={n: profile.levels[n] for n in settings.levels})


def chosen_plan(settings: Settings) -> Plan:
    return replace(SMOKE if settings.smoke else CPU_FALLBACK if settings.cpu else FULL, parts=settings.parts)


def plan_lines(fitted: Fit, profile: Profile, settings: Settings) -> list[str]:
    """What will train and the predicted wall time, as printed before anything runs."""
    plan = fitted.plan
    lines = [
        f"profile: {profile.device}, measured in {profile.measured_s:.0f} s"
        if profile.measured_s
        else f"profile: {profile.device}, read from {settings.profile}"
    ]
    lines += [
        f"runs side by side: {n}: the whole plan in {t:.0f} s" for n, t in sorted(fitted.makespans.items())
    ]
    for part in plan.parts:
        s, full = plan.sizes(part), chosen_plan(settings).sizes(part)
        trained = [j for j in jobs(plan) if j.part == part and j.kind.trains]
        lines.append(
            f"{part}: {sum(j.runs for j in trained)} runs in {len(trained)} processes, seeds "
            f"{','.join(map(str, s.seeds))} (of {','.join(map(str, full.seeds))}), {s.steps} steps a run "
            f"(of {full.steps})"
        )
    if "drope" in plan.parts:
        lines.append(
            f"drope: each RoPE run recalibrated as DroPE for {recalibration_steps(plan)} steps "
            f"({RECALIBRATION:g} of its {plan.drope.steps}) at length {NEEDLE_TRAIN_LEN}; all scored at "
            f"{2 * NEEDLE_TRAIN_LEN}"
        )
    if settings.cpu:
        lines.append(
            f"CPU fallback (CPU=1) on {profile.device}: the needle recipe at length {NEEDLE_TRAIN_LEN} "
            f"(model=small, batch 16), seeds {','.join(map(str, plan.drope.seeds))}, {plan.drope.steps} "
            f"steps a run (planned {CPU_FALLBACK.drope.steps}, the GPU plan's {FULL.drope.steps}), "
            f"{plan.trials} probe trials, within BUDGET_S={settings.budget_s:g}"
        )
    verdict = "fits" if fitted.fits else "does NOT fit even at the floors: the budget will stop runs"
    lines.append(
        f"predicted: {fitted.predicted_s:.0f} s with {fitted.slots} side by side; "
        f"{fitted.available_s:.0f} s of the budget left: {verdict}"
    )
    return lines


def run(settings: Settings) -> int:
    started = time.monotonic()
    launcher = Launcher(settings.out, posenc_command(), clock=lambda: time.monotonic() - started)
    # PLAN_ONLY with PROFILE predicts for the profile's machine, from any machine
    device = (
        None if settings.plan_only and settings.profile else describe_device(settings.smoke or settings.cpu)
    )
    plan = chosen_plan(settings)
    if settings.profile is not None:
        profile = load_profile(settings, device)
    else:
        settings.out.mkdir(parents=True, exist_ok=True)
        trials = max(2, plan.trials // 4)
        assert device is not None
        profile = measure(
            plan,
            levels=settings.levels,
            steps=settings.profile_steps,
            trials=trials,
            launcher=launcher,
            device=device,
        )
    settings.out.mkdir(parents=True, exist_ok=True)
    (settings.out / "profile.json").write_text(
        json.dumps(profile.to_json(), indent=1) + "\n", encoding="utf-8"
    )
    available = settings.budget_s - launcher.clock() - PAGE_RESERVE_S
    fitted = fit(plan, profile, available_s=available, may_cut=settings.may_cut)
    for line in plan_lines(fitted, profile, settings):
        launcher.say(line)
    if settings.plan_only:
        return 0
    plan_jobs = jobs(fitted.plan)
    cost = {j.name: duration(j, profile, fitted.slots) for j in plan_jobs}
    before = launcher.clock()
    records = run_schedule(
        plan_jobs, cost, slots=fitted.slots, end_s=settings.budget_s - PAGE_RESERVE_S, launcher=launcher
    )
    page = write_page(
        settings,
        fitted=fitted,
        profile=profile,
        records=records,
        schedule_s=(before, launcher.clock()),
        full=chosen_plan(settings),
        plan_lines=plan_lines(fitted, profile, settings),
    )
    launcher.say(f"summary: {page}")
    return 0


def main() -> int:
    try:
        settings = Settings.from_env(dict(os.environ))
        return run(settings)
    except (Refused, ProfileError) as err:
        print(f"gpu_evidence: error: {err}", file=sys.stderr)
        return 2 if isinstance(err, Refused) else 1


if __name__ == "__main__":
    sys.exit(main())
