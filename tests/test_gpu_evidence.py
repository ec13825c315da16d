"""scripts/gpu_evidence.sh: the time model fits the plan to the budget and says what it cut, the
schedule honours dependencies and stops a job at its deadline, and the CPU smoke (SMOKE=1) runs the
whole script end to end, its summary page agreeing with the output sets it wrote; the drope part trains
DroPE from each RoPE run and its page sets posenc's numbers beside the paper's."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import gpu_evidence  # noqa: E402
from gpu_evidence_plan import (  # noqa: E402
    DEEP_LAYERS,
    FULL,
    SMOKE,
    TRAIN_KINDS,
    WANTED_DEEP,
    WANTED_NEEDLES,
    Job,
    Kind,
    cut,
    jobs,
    present,
)
from gpu_evidence_run import Launcher, run_schedule  # noqa: E402
from gpu_evidence_time import MARGIN, Profile, StepCost, fit, makespan, predict  # noqa: E402

from posenc_cli.model.positional import SCHEMES  # noqa: E402


def profile(step_s: float = 0.02, *, levels=(16,)) -> Profile:
    """A made-up profile: every training kind `step_s` a step, 10 s to start, 0.5 s a validation."""
    costs = {kind: StepCost(step_s=step_s, val_s=0.5, startup_s=10.0) for kind in TRAIN_KINDS}
    units = {Kind.PROBE: 3e-6, Kind.TASK_EVAL: 0.05, Kind.PPL_EVAL: 1e-6}
    return Profile("NVIDIA H200", False, {n: costs for n in levels}, units, 10.0, 30.0)


def test_a_plan_that_fits_is_not_cut_and_one_that_does_not_is_cut_in_steps_to_fit_the_budget():
    roomy = fit(FULL, profile(1e-5), available_s=1e6, may_cut=frozenset({"steps"}))
    assert roomy.fits and roomy.fraction == 1.0 and roomy.plan == FULL
    # half again the least the plan can take: the budget a plan of any size (SCHEMES decides it) must cut into
    budget = 1.5 * predict(cut(FULL, fraction=0.0), profile(), 16) / MARGIN
    tight = fit(FULL, profile(), available_s=budget, may_cut=frozenset({"steps"}))
    assert tight.fits and 0 < tight.fraction < 1 and tight.predicted_s <= budget * MARGIN
    assert tight.plan.tasks.steps < FULL.tasks.steps and tight.plan.tasks.seeds == FULL.tasks.seeds
    assert (
        predict(
            replace(tight.plan, tasks=replace(tight.plan.tasks, steps=tight.plan.tasks.steps * 2)),
            profile(),
            16,
        )
        > tight.predicted_s
    )  # more steps cost more: the cut is what made it fit


def test_seeds_are_cut_only_when_allowed_never_below_the_least_and_a_plan_that_cannot_fit_says_so():
    hopeless = fit(FULL, profile(), available_s=5, may_cut=frozenset({"steps"}))
    assert not hopeless.fits and hopeless.plan.needles.steps == FULL.needles.min_steps
    assert hopeless.plan.tasks.seeds == FULL.tasks.seeds  # seeds were not allowed
    seeds = fit(FULL, profile(), available_s=5, may_cut=frozenset({"steps", "seeds"}))
    assert not seeds.fits and len(seeds.plan.tasks.seeds) == FULL.tasks.min_seeds
    assert len(seeds.plan.needles.seeds) == FULL.needles.min_seeds == 2  # the needle table keeps 2 seeds
    nothing = fit(FULL, profile(), available_s=5, may_cut=frozenset())
    assert nothing.plan == FULL and not nothing.fits


def test_the_schedule_packs_the_slots_and_waits_for_what_a_job_depends_on():
    a, b, c = (Job(n, "tasks", Kind.TASK, ()) for n in "abc")
    after = Job("d", "tasks", Kind.TASK_EVAL, (), deps=("a", "b"))
    cost = {"a": 10.0, "b": 4.0, "c": 6.0, "d": 3.0}
    assert makespan([a, b, c, after], cost, slots=2) == 13.0  # a | b then c; d after a
    assert makespan([a, b, c, after], cost, slots=1) == 23.0
    assert makespan([a, b, c, after], cost, slots=4) == 13.0


def test_the_plan_trains_what_the_issue_asks_and_every_evaluation_reads_its_own_runs():
    plan_jobs = jobs(FULL)
    runs = {part: sum(j.runs for j in plan_jobs if j.part == part and j.kind.trains) for part in FULL.parts}
    needle_schemes = (
        5 + len(present(WANTED_NEEDLES)) + len(present(WANTED_DEEP))
    )  # the 2025 ones where present
    drope = 3 * (4 * 2 + 2)  # per task: rope, alibi, none, rnope_swa x 2 seeds; DroPE from each rope seed
    assert runs == {
        "needles": 3 * needle_schemes * 2,
        "tasks": 4 * 7 * 3,
        "extension": 1 + 3 * 2,
        "drope": drope,
    }
    trained = {j.name: str(j.sweep) for j in plan_jobs if j.kind.trains}
    for job in (j for j in plan_jobs if not j.kind.trains):
        out = job.args[job.args.index("--out") + 1]
        read = [a for a in job.args if "/" in a and a != out]
        under = {
            name
            for name, sweep in trained.items()
            if any(sweep == r or sweep.startswith(r + "/") for r in read)
        }
        assert read and under == set(job.deps), job.name  # it waits for exactly the runs it reads


def test_bad_settings_are_refused_in_one_line_before_anything_runs():
    for env, needle in (
        ({"BUDGET_S": "ten"}, "BUDGET_S must be a positive number"),
        ({"SLOTS": "0"}, "SLOTS must be a positive integer"),
        ({"MAY_CUT": "steps,layers"}, "MAY_CUT must be a comma list of steps, seeds"),
        ({"PARTS": "needles,nope"}, "PARTS must be a comma list of needles, tasks, extension, drope"),
        ({"SMOKE": "yes"}, "SMOKE must be 0 or 1"),
        ({"CPU": "1", "SMOKE": "1"}, "choose one"),
        ({"CPU": "1", "PARTS": "drope,needles"}, "CPU=1 runs PARTS=drope only"),
    ):
        with pytest.raises(gpu_evidence.Refused, match=needle):
            gpu_evidence.Settings.from_env(env)


def test_plan_only_with_an_earlier_profile_prints_the_plan_and_its_prediction_and_trains_nothing(
    tmp_path, capsys
):
    device = gpu_evidence.describe_device(on_cpu=True)
    earlier = replace(profile(0.01, levels=(2,)), device=device, smoke=True)
    (tmp_path / "profile.json").write_text(json.dumps(earlier.to_json()))
    env = {
        "SMOKE": "1",
        "PLAN_ONLY": "1",
        "OUT": str(tmp_path / "out"),
        "PROFILE": str(tmp_path / "profile.json"),
    }
    assert gpu_evidence.run(gpu_evidence.Settings.from_env(env)) == 0
    printed = capsys.readouterr().out
    runs = 2 * (len(SMOKE.needle_schemes) + len(SMOKE.deep_schemes))  # the deep group's irope, where present
    assert (
        f"needles: {runs} runs in {runs // 2} processes, seeds 0,1 (of 0,1), 4 steps a run (of 4)" in printed
    )
    assert "predicted:" in printed and ": fits" in printed
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["profile.json"]
    (tmp_path / "profile.json").write_text(json.dumps(replace(earlier, device="NVIDIA H200").to_json()))
    assert gpu_evidence.run(gpu_evidence.Settings.from_env(env)) == 0  # PLAN_ONLY predicts for its machine
    assert "profile: NVIDIA H200, read from" in capsys.readouterr().out
    with pytest.raises(gpu_evidence.Refused, match="was measured on NVIDIA H200"):  # a run needs this one's
        gpu_evidence.run(gpu_evidence.Settings.from_env({**env, "PLAN_ONLY": "0"}))


@pytest.mark.slow
def test_a_job_still_running_at_its_deadline_is_stopped_and_reported_as_stopped_by_the_budget(tmp_path):
    ticks = iter(range(10**6)).__next__  # a fifth of a second a reading
    launcher = Launcher(tmp_path, ("sleep",), clock=lambda: ticks() * 0.2)
    (long,) = run_schedule(
        [Job("long", "tasks", Kind.TASK, ("60",))], {"long": 1.0}, slots=1, end_s=2.0, launcher=launcher
    )
    assert long.stopped and long.outcome == "stopped by the budget" and long.returncode != 0
    assert (tmp_path / "logs" / "long.log").read_text().startswith("sleep 60")
    (late,) = run_schedule(
        [Job("late", "tasks", Kind.TASK_EVAL, ("0",))], {"late": 1.0}, slots=1, end_s=0.0, launcher=launcher
    )
    assert late.started is None and late.outcome == "not started: the budget had run out"


@pytest.mark.slow
def test_the_cpu_smoke_runs_every_part_end_to_end_and_its_summary_agrees_with_the_output_sets(tmp_path):
    """SMOKE=1: the profile measured, the plan fitted, every job run, and the page's claims checked
    against the files: each planned run finished at its planned steps, each output set is there."""
    out = tmp_path / "evidence"
    env = {**os.environ, "SMOKE": "1", "OUT": str(out), "PYTHON": sys.executable, "BUDGET_S": "900"}
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu_evidence.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    page = (out / "summary.md").read_text(encoding="utf-8")
    plan_jobs = jobs(SMOKE)
    for job in plan_jobs:
        assert f"| {job.name} |" in page and (out / "logs" / f"{job.name}.log").is_file()
    assert page.count("| finished |") == len(plan_jobs) and "nothing: every job and run finished" in page
    for job in (j for j in plan_jobs if j.kind.trains):
        summaries = [json.loads(p.read_text()) for p in (out / str(job.sweep)).glob("*/summary.json")]
        assert len(summaries) == job.runs and {(s["status"], s["steps"]) for s in summaries} == {
            ("finished", job.steps)
        }
    probe = rows(out / "needles/probe/multikey_scaled/probe.csv")
    assert {r["scheme"] for r in probe} == {"rope", "rope+ntk", "rope+yarn"} and (
        out / "needles/probe/multikey/passkey.md"
    ).is_file()
    assert {(r["scheme"], r["length"]) for r in rows(out / "tasks/eval/task_accuracy.csv")} == {
        ("rope+randomized", "8"),
        ("rope+randomized", "16"),
    }
    assert {r["scheme"] for r in rows(out / "extension/zero_shot/ppl.csv")} == {
        "rope",
        "rope+linear",
        "rope+ntk",
        "rope+yarn",
    }
    assert {r["scheme"] for r in rows(out / "extension/fine_tuned/ppl.csv")} == {"rope+linear"}
    task_row = next(line for line in page.splitlines() if line.startswith("| rope+randomized |"))
    learned, at_1x, at_2x = task_row.strip("| ").split(" | ")[1:]
    assert at_1x[0].isdigit() and at_2x.startswith("(") == (learned == "no")  # not learned at 1x: not judged
    assert {r["scheme"] for r in rows(out / "drope/probe/multikey_trained/probe.csv")} == {
        "rope",
        "rope+ntk",
        "rope+yarn",
        "none",
    }
    assert {r["scheme"] for r in rows(out / "drope/probe/multikey_dropped/probe.csv")} == {
        "none",
        "none+logn",
    }
    assert {r["eval_len"] for r in rows(out / "drope/ppl/multikey_dropped/ppl.csv")} == {"512", "1024"}
    drope = next(line for line in page.splitlines() if line.startswith("| DroPE |"))
    assert "| 28/41.6/23.3 |" in drope and "### DroPE-style comparison" in page
    measured = json.loads((out / "profile.json").read_text())
    assert measured["smoke"] and set(measured["levels"]["2"]) == {k.value for k in TRAIN_KINDS}


def test_the_2025_schemes_join_the_needle_table_and_the_layer_schedules_train_at_a_depth_they_build_at():
    """p_rope (at 0.75), cope and fox beside the chapter schemes where SCHEMES has them; irope, rnope_swa and
    local_global with rope and none at DEEP_LAYERS, in a probe of their own, their steps predicted deeper."""
    from posenc_cli.bench.train_speed import compose
    from posenc_cli.config.schema import check_keys
    from posenc_cli.model import GPT
    from posenc_cli.training.session import model_config

    plan_jobs = {j.name: j for j in jobs(FULL)}
    assert set(present(WANTED_NEEDLES)) <= set(FULL.needle_schemes) and set(FULL.needle_schemes) <= set(
        SCHEMES
    )
    assert {"irope", "rnope_swa", "local_global", "rope", "none"} == set(FULL.deep_schemes)
    for task in FULL.needle_tasks:
        deep = [plan_jobs[f"needles-{task}_{DEEP_LAYERS}_layers-{s}"] for s in FULL.deep_schemes]
        for job in deep:
            assert job.args[-1] == f"model.n_layer={DEEP_LAYERS}" and job.step_scale > 1
            with torch.device("meta"):  # builds at that depth: the preset is not refused
                GPT(model_config(check_keys(compose(list(job.args[4:]))), 32))
        probe = plan_jobs[f"probe-{task}_{DEEP_LAYERS}_layers"]
        assert set(probe.deps) == {j.name for j in deep} and f"needles/deep/{task}" in probe.args
    if "p_rope" in SCHEMES:
        assert "scheme.keep_fraction=0.75" in plan_jobs["needles-multikey-p_rope"].args


def rows(path: Path) -> list[dict[str, str]]:
    with open(path, encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_drope_recalibrates_each_rope_seed_without_positions_and_probes_nope_and_drope_apart():
    """DroPE: each seed's RoPE run, scheme=none with QK-norm, at the same length for an eighth of its steps;
    NoPE and DroPE (both `none` to posenc's labels) are scored by different jobs into different sets."""
    from gpu_evidence_drope import RECALIBRATION

    plan_jobs = {j.name: j for j in jobs(replace(FULL, parts=("drope",)))}
    for seed, number in ((0, 0), (1, 1)):
        dropped = plan_jobs[f"drope-multikey-drope-seed{seed}"]
        assert f"train.init_from=drope/multikey/trained/rope/{number}_rope_seed{seed}" in dropped.args
        assert {"scheme=none", "model.qk_norm=true", "train.block_size=512"} <= set(dropped.args)
        assert dropped.steps == FULL.drope.steps * RECALIBRATION and dropped.deps == ("drope-multikey-rope",)
    trained = plan_jobs["probe-drope-multikey-trained"]
    assert (
        "drope/multikey/trained" in trained.args
        and "none,ntk,yarn" in trained.args
        and "1024" in trained.args
    )
    assert "drope/multikey/dropped" in plan_jobs["probe-drope-multikey-dropped"].args
    assert {j.args[-1] for j in plan_jobs.values() if j.part == "drope" and j.kind.trains} >= {
        "model.qk_norm=true"
    }


def test_cpu_fallback_plans_the_drope_part_alone_on_this_cpu_and_says_its_recipe(tmp_path, capsys):
    settings = gpu_evidence.Settings.from_env({"CPU": "1", "OUT": str(tmp_path), "BUDGET_S": "3600"})
    assert settings.parts == ("drope",) and gpu_evidence.chosen_plan(settings).drope.seeds == (0,)
    device = gpu_evidence.describe_device(on_cpu=True)
    earlier = replace(profile(0.2, levels=(2,)), device=device, smoke=False)
    (tmp_path / "profile.json").write_text(json.dumps(earlier.to_json()))
    env = {
        "CPU": "1",
        "PLAN_ONLY": "1",
        "OUT": str(tmp_path / "out"),
        "PROFILE": str(tmp_path / "profile.json"),
    }
    assert gpu_evidence.run(gpu_evidence.Settings.from_env({**env, "SLOTS": "2", "BUDGET_S": "3600"})) == 0
    printed = capsys.readouterr().out
    assert "CPU fallback (CPU=1)" in printed and "the needle recipe at length 512" in printed
    assert "within BUDGET_S=3600" in printed and "recalibrated as DroPE" in printed


def test_the_drope_section_sets_posencs_retrieval_and_perplexity_beside_the_papers(tmp_path):
    from gpu_evidence_page import drope_section

    def write(path: Path, header: list[str], body: list[list]) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(",".join(map(str, r)) for r in [header, *body]) + "\n")

    for task, hit in (("multiquery", 0.25), ("multikey", 0.5), ("multivalue", 0.75)):
        probe = tmp_path / "drope" / "probe"
        write(
            probe / f"{task}_trained" / "probe.csv",
            ["scheme", "length", "accuracy"],
            [["rope+ntk", 1024, hit]],
        )
        write(probe / f"{task}_trained" / "probe.csv", ["scheme", "length", "accuracy"], [
            ["rope+ntk", 1024, hit], ["rnope_swa+window=256", 1024, 0.0], ["none", 1024, 0.1]
        ])  # fmt: skip
        write(
            probe / f"{task}_dropped" / "probe.csv", ["scheme", "length", "accuracy"], [["none", 1024, 1.0]]
        )
        ppl = tmp_path / "drope" / "ppl" / f"{task}_dropped" / "ppl.csv"
        write(ppl, ["scheme", "eval_len", "ppl"], [["none", 512, 3.0], ["none", 1024, 4.0]])
    lines = drope_section(tmp_path, FULL)
    row = {
        cells[0]: cells[1:]
        for line in lines
        if line.startswith("| ")
        for cells in [line.strip("| ").split(" | ")]
    }
    assert row["RoPE+NTK"][:2] == ["25.0/50.0/75.0", "21.1/19.4/16.5"]
    assert row["RNoPE-SWA"][0] == "0.0/0.0/0.0" and row["NoPE"][0] == "10.0/10.0/10.0"
    assert row["DroPE"][:4] == ["100.0/100.0/100.0", "28/41.6/23.3", "3.00/3.00/3.00", "4.00/4.00/4.00"]
    assert row["RoPE"][0] == "—/—/—" and row["DroPE+log-n"][1] == "— (posenc's own row)"
