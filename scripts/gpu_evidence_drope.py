"""The drope part of scripts/gpu_evidence.py: a DroPE-style comparison at posenc's scale, in the shape of
Table 1 of Gelberg et al. (arXiv 2512.12167); gpu_evidence_page.py writes its section of summary.md.

For each of multiquery, multikey and multivalue: RoPE, ALiBi, NoPE and RNoPE-SWA trained at the needle
recipe (experiment=probe at length 512, the needles part's), then DroPE: each RoPE run's weights with
RoPE dropped and QK-norm added (`train.init_from=RUN scheme=none model.qk_norm=true`), recalibrated at
the same length for RECALIBRATION of the RoPE run's steps. All are scored at 2x the training length by
retrieval (`posenc probe`, RoPE also under NTK and YaRN, DroPE also with its log-n temperature) and by
perplexity (`posenc eval` at 1x and 2x). NoPE and DroPE are both `none` to posenc's labels, so each group
is probed and evaluated on its own (trained/, dropped/) and never pooled.
"""

from __future__ import annotations

from gpu_evidence_plan import NEEDLE_TRAIN_LEN, Kind, Plan, Sizes, eval_job, joined, needle_args, train_job

RECALIBRATION = 1 / 8  # DroPE's steps, of the RoPE run's: posenc's choice at this scale, not tuned
SCALINGS = {"trained": "none,ntk,yarn", "dropped": "none,logn"}  # each group's --rope-scaling columns
LENGTHS = (NEEDLE_TRAIN_LEN, 2 * NEEDLE_TRAIN_LEN)  # perplexity at 1x and 2x; retrieval at 2x
TASKS = ("multiquery", "multikey", "multivalue")  # Table 1's column order: MQ, MK, MV
# Table 1 at 0.5B, % retrieved at 2x as MQ/MK/MV: the paper's, quoted beside posenc's, never a target
PAPER = {
    "RoPE": (0.0, 0.0, 0.0),
    "RoPE+NTK": (21.1, 19.4, 16.5),
    "RoPE+YaRN": (17.8, 0.5, 14.6),
    "ALiBi": (5.2, 0.0, 1.1),
    "NoPE": (9.2, 36.2, 21.4),
    "RNoPE-SWA": (5.2, 25.6, 20.6),
    "DroPE": (28.0, 41.6, 23.3),
}
# each row: its group and its column (the label's scheme and the methods it adds, options left out)
ROWS = {
    "RoPE": ("trained", ("rope",)),
    "RoPE+NTK": ("trained", ("rope", "ntk")),
    "RoPE+YaRN": ("trained", ("rope", "yarn")),
    "ALiBi": ("trained", ("alibi",)),
    "NoPE": ("trained", ("none",)),
    "RNoPE-SWA": ("trained", ("rnope_swa",)),
    "DroPE": ("dropped", ("none",)),
    "DroPE+log-n": ("dropped", ("none", "logn")),
}


def recalibration_steps(plan: Plan) -> int:
    return max(1, round(plan.drope.steps * RECALIBRATION))


def drope_jobs(plan: Plan) -> list:
    return [job for task in plan.drope_tasks for job in task_jobs(plan, task)]


def task_jobs(plan: Plan, task: str) -> list:
    """One task's trainings, each RoPE seed's DroPE recalibration, and each group's probe and eval."""
    sizes, where = plan.drope, f"drope/{task}"
    trained = [
        train_job(
            f"drope-{task}-{scheme}",
            Kind.NEEDLE,
            f"{where}/trained/{scheme}",
            sizes=sizes,
            args=needle_args(plan, task, scheme, steps=sizes.steps),
            steps=sizes.steps,
            val_every=250,
        )
        for scheme in plan.drope_schemes
    ]
    steps = recalibration_steps(plan)
    dropped = [
        train_job(
            f"drope-{task}-drope-seed{seed}",
            Kind.NEEDLE,
            f"{where}/dropped/seed{seed}",
            sizes=Sizes(seeds=(seed,), min_seeds=1, steps=steps, min_steps=1),
            args=[
                *needle_args(plan, task, "none", steps=steps),
                f"train.init_from={where}/trained/rope/{number}_rope_seed{seed}",  # Hydra's sweep subdir
                "model.qk_norm=true",
            ],
            deps=(f"drope-{task}-rope",),
            steps=steps,
            val_every=250,
        )
        for number, seed in enumerate(sizes.seeds)
    ]
    return [
        *trained,
        *dropped,
        *scoring(plan, task, "trained", trained),
        *scoring(plan, task, "dropped", dropped),
    ]


def scoring(plan: Plan, task: str, group: str, trained: list) -> list:
    """The group's probe at 2x and its perplexity at 1x and 2x, under the group's --rope-scaling."""
    where, deps, seeds = f"drope/{task}/{group}", tuple(j.name for j in trained), len(plan.drope.seeds)
    columns = sum(len(SCALINGS[group].split(",")) if "-rope" in j.name else 1 for j in trained)
    columns = columns * seeds if group == "trained" else columns  # dropped: one job a seed
    probe = ["probe", where, "--task", task, "--lengths", str(LENGTHS[1]), "--trials", str(plan.trials)]
    tokens = 3 * plan.trials * (LENGTHS[1] + NEEDLE_TRAIN_LEN)  # 3 depths, the training length added
    ppl = ["eval", where, "--lengths", joined(LENGTHS), "--max-tokens", str(plan.max_tokens)]
    scaling = ["--rope-scaling", SCALINGS[group]]
    return [
        eval_job(
            plan,
            f"probe-drope-{task}-{group}",
            Kind.PROBE,
            args=[*probe, *scaling, "--out", f"drope/probe/{task}_{group}"],
            deps=deps,
            units=columns * tokens,  # the scalings a non-rotary run refuses counted too: an upper bound
        ),
        eval_job(
            plan,
            f"eval-drope-{task}-{group}",
            Kind.PPL_EVAL,
            args=[*ppl, *scaling, "--out", f"drope/ppl/{task}_{group}"],
            deps=deps,
            units=columns * len(LENGTHS) * plan.max_tokens,
        ),
    ]
