"""summary.md of scripts/gpu_evidence.py: what ran, what was cut, what the budget stopped, the time model
against the clock, and each part's results read back from the output sets posenc wrote."""

from __future__ import annotations

import csv
import json
import os
import statistics
import subprocess
from collections import defaultdict
from collections.abc import Callable, Iterable
from datetime import datetime
from pathlib import Path

from gpu_evidence_drope import LENGTHS, PAPER, RECALIBRATION, ROWS, SCALINGS, TASKS, recalibration_steps
from gpu_evidence_plan import NEEDLE_TRAIN_LEN, Plan, joined
from gpu_evidence_run import ROOT, Record
from gpu_evidence_time import Fit, Profile

PAGE = "summary.md"
LEARNED = 0.9  # a task counts as learned at 1x when its seeds' mean exact match reaches this
SETTINGS = ("SMOKE", "CPU", "BUDGET_S", "SLOTS", "MAY_CUT", "PARTS", "PROFILE")


def table(header: list[str], rows: Iterable[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + [
        "| " + " | ".join(r) + " |" for r in rows
    ]


def write_page(
    settings,
    *,
    fitted: Fit,
    profile: Profile,
    records: list[Record],
    schedule_s: tuple[float, float],
    full: Plan,
    plan_lines: list[str],
) -> Path:
    out = settings.out
    lines = header(settings, profile) + ["## What ran", "", *(f"- {line}" for line in plan_lines)]
    lines += [
        f"- the schedule took {schedule_s[1] - schedule_s[0]:.0f} s (predicted {fitted.predicted_s:.0f} s); "
        f"the whole script {schedule_s[1]:.0f} s of BUDGET_S={settings.budget_s:g}",
        "",
    ]
    lines += cuts(fitted, full) + stopped(records, out) + time_model(profile, fitted) + jobs_table(records)
    lines += ["## Results", ""] + needles(out) + tasks(out) + extension(out)
    lines += drope_section(out, fitted.plan) if "drope" in fitted.plan.parts else []
    page = out / PAGE
    page.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return page


def header(settings, profile: Profile) -> list[str]:
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    given = " ".join(f"{k}={v}" for k in SETTINGS if (v := os.environ.get(k)))
    lines = [
        "# GPU evidence: needles, tasks, context extension, DroPE",
        "",
        f"{datetime.now():%Y-%m-%d %H:%M}, {profile.device}, code {commit.stdout.strip() or 'unknown'}: "
        f"`{given + ' ' if given else ''}bash scripts/gpu_evidence.sh`, every output set under `{settings.out}`.",
        "",
    ]
    if settings.smoke:
        lines += [
            "**SMOKE**: a CPU run of the same script with a small grid, a tiny model and a few steps: it "
            "checks the path end to end; its numbers measure nothing.",
            "",
        ]
    if settings.cpu:
        lines += [
            f"**CPU=1**: the drope part on this CPU at a reduced recipe (one seed, steps cut to fit "
            f"BUDGET_S={settings.budget_s:g}; What ran says how many): retrieval is learned in a phase change "
            "that short runs may not reach, so read it beside a GPU run's, not for the paper's numbers.",
            "",
        ]
    return lines


def cuts(fitted: Fit, full: Plan) -> list[str]:
    lines = ["## What was cut", ""]
    for part in fitted.plan.parts:
        kept, planned = fitted.plan.sizes(part), full.sizes(part)
        said = []
        if kept.steps < planned.steps:
            said.append(f"steps {planned.steps} -> {kept.steps} a run")
        if len(kept.seeds) < len(planned.seeds):
            said.append(f"seeds {len(planned.seeds)} -> {len(kept.seeds)}")
        lines.append(f"- {part}: {', '.join(said) if said else 'nothing'}")
    if not fitted.fits:
        lines.append(
            "- the plan did not fit the budget even at the floors of what may be cut: the budget stopped "
            "what it had to (below)"
        )
    return lines + [""]


def stopped(records: list[Record], out: Path) -> list[str]:
    lines = ["## What the budget stopped", ""]
    for r in records:
        if r.outcome != "finished":
            lines.append(f"- job {r.job.name}: {r.outcome}")
        if r.job.kind.trains and r.started is not None:
            lines += unfinished_runs(r, out)
    return lines + (["- nothing: every job and run finished"] if len(lines) == 2 else []) + [""]


def unfinished_runs(record: Record, out: Path) -> list[str]:
    found = sorted((out / str(record.job.sweep)).glob("*/summary.json"))
    lines = []
    for path in found:
        summary = json.loads(path.read_text(encoding="utf-8"))
        if summary.get("status") != "finished":
            planned = summary["config"]["train"]["max_steps"]
            lines.append(
                f"  - run {path.parent.relative_to(out)}: {summary.get('status')} at step "
                f"{summary.get('steps', 0)} of {planned} (not scored)"
            )
    if len(found) < record.job.runs:
        lines.append(
            f"  - {record.job.runs - len(found)} of the {record.job.runs} runs of {record.job.name} never started"
        )
    return lines


def time_model(profile: Profile, fitted: Fit) -> list[str]:
    lines = [
        "## The time model",
        "",
        f"Profile {'measured in ' + format(profile.measured_s, '.0f') + ' s' if profile.measured_s else 'read from a file'} "
        f"(profile.json); {fitted.slots} runs side by side were chosen (the whole plan's predicted time by "
        f"count: {', '.join(f'{n}: {t:.0f} s' for n, t in sorted(fitted.makespans.items()))}).",
        "",
    ]
    rows = [
        [str(n), kind.value, f"{c.step_s * 1000:.1f}", f"{c.val_s:.2f}", f"{c.startup_s:.1f}"]
        for n, costs in sorted(profile.levels.items())
        for kind, c in costs.items()
    ]
    lines += table(["side by side", "kind", "ms a step", "s a validation", "s start-up"], rows) + [""]
    lines += table(["evaluation", "s a unit"], [[k.value, f"{v:.3g}"] for k, v in profile.unit_s.items()]) + [
        ""
    ]
    return lines


def jobs_table(records: list[Record]) -> list[str]:
    def took(r: Record) -> str:
        return f"{r.ended - r.started:.0f}" if r.started is not None and r.ended is not None else "—"

    rows = [[r.job.name, f"{r.predicted_s:.0f}", took(r), r.outcome] for r in records]
    return ["## Jobs", ""] + table(["job", "predicted s", "took s", "outcome"], rows) + [""]


def read_rows(path: Path) -> list[dict[str, str]]:
    if not path.is_file():
        return []
    with open(path, encoding="utf-8") as f:
        return list(csv.DictReader(f))


def means(rows: list[dict[str, str]], label: Callable[[dict], str], *, value: str, key: str) -> dict:
    """{label: {length: mean of `value` over the rest (seeds, depths)}}, lengths as ints, from column `key`."""
    cells: dict = defaultdict(lambda: defaultdict(list))
    for row in rows:
        if row[value] not in ("", "nan"):
            cells[label(row)][int(row[key])].append(float(row[value]))
    return {lab: {n: statistics.mean(v) for n, v in sorted(by.items())} for lab, by in cells.items()}


def digest(found: dict, lengths: list[int], show: Callable[[float], str]) -> list[str]:
    rows = [[lab, *(show(by[n]) if n in by else "—" for n in lengths)] for lab, by in found.items()]
    return table(["", *(f"L={n}" for n in lengths)], rows) + [""]


def needles(out: Path) -> list[str]:
    lines = ["### Needle retrieval: % of trials retrieved, depths and seeds averaged", ""]
    for probe in sorted((out / "needles" / "probe").glob("*/probe.csv")):
        rows = read_rows(probe)
        found = means(rows, lambda r: r["scheme"], value="accuracy", key="length")
        lengths = sorted({int(r["length"]) for r in rows})
        lines += [
            f"{probe.parent.name} ({probe.parent.relative_to(out)}/passkey.md has every depth, and the "
            "spread over seeds; the training length is 512):",
            "",
        ]
        lines += digest(found, lengths, lambda v: f"{100 * v:.0f}")
    return lines if len(lines) > 2 else lines + ["No probe output (see the jobs above).", ""]


def tasks(out: Path) -> list[str]:
    rows = read_rows(out / "tasks" / "eval" / "task_accuracy.csv")
    lines = [
        f"### Tasks: % exact, in-distribution first (learned at 1x: the seeds' mean >= {LEARNED:.0%})",
        "",
        "In parentheses: not learned at 1x, so its longer lengths say nothing about extrapolation. Every cell's "
        "spread over seeds: tasks/eval/task_accuracy.md.",
        "",
    ]
    if not rows:
        return lines + ["No task output (see the jobs above).", ""]
    for task in sorted({r["task"] for r in rows}):
        mine = [r for r in rows if r["task"] == task]
        train_len = int(mine[0]["train_len"])
        lengths = sorted({int(r["length"]) for r in mine})
        found = means(mine, lambda r: r["scheme"], value="accuracy", key="length")
        body = []
        for lab, by in found.items():
            learned = by.get(train_len, 0.0) >= LEARNED
            cells = [
                f"{100 * by[n]:.0f}"
                if learned or n == train_len
                else f"({100 * by[n]:.0f})"
                if n in by
                else "—"
                for n in lengths
            ]
            body.append([lab, "yes" if learned else "no", *cells])
        head = ["", "learned at 1x", *(f"{n} ({n // train_len}x)" for n in lengths)]
        lines += [f"{task}:", "", *table(head, body), ""]
    return lines


def extension(out: Path) -> list[str]:
    lines = ["### Context extension: perplexity, rope at 256 fine-tuned at 1,024 (s = 4)", ""]
    for name in ("zero_shot", "fine_tuned"):
        rows = read_rows(out / "extension" / name / "ppl.csv")
        if not rows:
            lines += [f"{name}: no output (see the jobs above).", ""]
            continue
        lengths = sorted({int(r["eval_len"]) for r in rows})
        lines += [f"{name.replace('_', '-')} (extension/{name}/ppl.md):", ""]
        found = means(rows, lambda r: r["scheme"], value="ppl", key="eval_len")
        lines += digest(found, lengths, lambda v: f"{v:.2f}")
    return lines + pi_claim(found) if rows else lines


def pi_claim(fine_tuned: dict) -> list[str]:
    """PI's claim, read off the fine-tuned table: at the fine-tuning length (4x), interpolation (rope+linear)
    fine-tuned beats extrapolation (rope, fine-tuned with no scaling)."""
    at = 1024
    if at not in fine_tuned.get("rope", {}) or at not in fine_tuned.get("rope+linear", {}):
        return [
            "(rope there is the fine-tune with no scaling; PI's claim needs it and rope+linear at 1,024.)",
            "",
        ]
    pi, plain = fine_tuned["rope+linear"][at], fine_tuned["rope"][at]
    verdict = "holds" if pi < plain else "does not hold"
    return [
        f"rope there is the fine-tune with no scaling. PI's claim (fine-tuned interpolation beats fine-tuned "
        f"extrapolation at the fine-tuning length) {verdict} here: {pi:.2f} against {plain:.2f} at 1,024.",
        "",
    ]


def column(label: str) -> tuple[str, ...]:
    """A label's scheme and the methods it adds, its options (`window=256`) left out: `rope+ntk` ->
    (rope, ntk), `rnope_swa+window=256` -> (rnope_swa,)."""
    return tuple(part for part in label.split("+") if "=" not in part)


def found(out: Path, kind: str, value: str, key: str) -> dict:
    """{(group, column): {task: {length: mean over seeds and depths}}} from every group's output set."""
    cells: dict = {}
    csv_name, directory = {"probe": ("probe.csv", "probe"), "ppl": ("ppl.csv", "ppl")}[kind]
    for task in TASKS:
        for group in SCALINGS:
            rows = read_rows(out / "drope" / directory / f"{task}_{group}" / csv_name)
            for label, by in means(rows, lambda r: r["scheme"], value=value, key=key).items():
                cells.setdefault((group, column(label)), {})[task] = by
    return cells


def drope_section(out: Path, plan: Plan) -> list[str]:
    """posenc's retrieval at 2x and perplexity beside the paper's Table 1, one row per Table 1 row."""
    retrieved, ppl = found(out, "probe", "accuracy", "length"), found(out, "ppl", "ppl", "eval_len")
    if not retrieved and not ppl:
        return ["### DroPE-style comparison", "", "No drope output (see the jobs above).", ""]

    def triple(cells: dict, length: int, show) -> str:
        return "/".join(show(cells[t][length]) if length in cells.get(t, {}) else "—" for t in TASKS)

    rows = []
    for name, (group, key) in ROWS.items():
        paper = "/".join(f"{v:g}" for v in PAPER[name]) if name in PAPER else "— (posenc's own row)"
        hits, loss = retrieved.get((group, key), {}), ppl.get((group, key), {})
        rows.append(
            [
                name,
                triple(hits, LENGTHS[1], lambda v: f"{100 * v:.1f}"),
                paper,
                triple(loss, LENGTHS[0], lambda v: f"{v:.2f}"),
                triple(loss, LENGTHS[1], lambda v: f"{v:.2f}"),
            ]
        )
    return [
        "### DroPE-style comparison: retrieval at 2x the training length, posenc's beside the paper's",
        "",
        f"Each task trained at the needle recipe (length {NEEDLE_TRAIN_LEN}, {plan.drope.steps} steps a run, seeds "
        f"{joined(plan.drope.seeds)}); DroPE: each RoPE run with RoPE dropped and QK-norm added, recalibrated "
        f"{recalibration_steps(plan)} steps ({RECALIBRATION:.3g} of the RoPE run's) at the same length. % "
        f"retrieved at {LENGTHS[1]} ({plan.trials} trials, 3 depths, seeds averaged), and perplexity at "
        f"{LENGTHS[0]} and {LENGTHS[1]}, each as MQ/MK/MV. The paper's column is Table 1 of Gelberg et al. "
        "(0.5B parameters, 2x its training length), quoted for its shape: posenc's models are tiny and its "
        "recipe was not tuned toward it. drope/probe/ and drope/ppl/ hold every depth and seed.",
        "",
        *table(
            ["", "posenc % MQ/MK/MV", "paper % MQ/MK/MV (0.5B)", "ppl 1x MQ/MK/MV", "ppl 2x MQ/MK/MV"], rows
        ),
        "",
    ]
