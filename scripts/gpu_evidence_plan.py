"""What scripts/gpu_evidence.py runs: four parts as posenc commands, each a job of the schedule.

- needles: RULER's multikey, multivalue, multiquery x the five chapter schemes and the 2025 ones (p_rope
  at keep_fraction 0.75, cope, fox) x seeds, trained as scripts/reproduce_needles.sh trains them (length
  512), probed at 2x-8x, the rope runs also under NTK and YaRN; and the layer schedules (irope,
  rnope_swa, local_global) with rope and none beside them at DEEP_LAYERS, the depth they build at;
- tasks: reverse, parity, addition (reversed digits), copy x none, learned, rope, alibi, fire and
  learned and rope with randomized positions x seeds, scripts/reproduce_tasks.sh's recipe at many more
  steps, scored at 1x-8x;
- extension: a rope run at 256 (the default recipe), fine-tuned at 1,024 with no scaling, PI (linear)
  and YaRN (s = 4), scored zero-shot and fine-tuned at 1x-8x;
- drope: the DroPE-style comparison at the needle recipe (gpu_evidence_drope.py).

A training job is one `posenc train -m` process (a sweep over seeds, so the start-up is paid once per
process); an evaluation job is one `posenc eval` or `posenc probe`. SMOKE is the same plan on a CPU with a
smaller grid, a tiny model and a few steps; CPU_FALLBACK the drope part on a CPU, at a reduced recipe.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import Enum

from posenc_cli.model.positional import SCHEMES


class Kind(Enum):
    """The shapes the time model measures: one cost per step (training) or per unit (evaluation)."""

    NEEDLE = "needle"  # the small model at 512, batch 16
    TASK = "task"  # the 2-layer width-64 model on a task, batch 32
    BASE = "base"  # the tiny model at 256, batch 16
    FINE_TUNE = "fine_tune"  # the tiny model at 1,024, batch 4 (experiment=extend)
    PROBE = "probe"  # unit: one trial token (run x column x depth x trial x length)
    TASK_EVAL = "task_eval"  # unit: one run at one instance length
    PPL_EVAL = "ppl_eval"  # unit: one scored token (column x length x --max-tokens)

    @property
    def trains(self) -> bool:
        return self in TRAIN_KINDS


TRAIN_KINDS = (Kind.NEEDLE, Kind.TASK, Kind.BASE, Kind.FINE_TUNE)
PARTS = ("needles", "tasks", "extension", "drope")


@dataclass(frozen=True)
class Sizes:
    """A part's seeds and steps a run, as planned, and the least that a cut may leave."""

    seeds: tuple[int, ...]
    min_seeds: int
    steps: int
    min_steps: int


@dataclass(frozen=True)
class Plan:
    needles: Sizes
    tasks: Sizes
    fine_tune: Sizes
    base_steps: int
    needle_tasks: tuple[str, ...]
    needle_schemes: tuple[str, ...]
    deep_schemes: tuple[str, ...]  # trained at DEEP_LAYERS, probed as a table of their own
    task_names: tuple[str, ...]
    variants: tuple[str, ...]
    trials: int
    probe_lengths: tuple[int, ...]
    task_lengths: tuple[int, ...]
    ppl_lengths: tuple[int, ...]
    max_tokens: int
    scalings: tuple[str, ...]  # the fine-tunes: none (plain), linear (PI), yarn
    drope: Sizes  # the drope part's trainings (its recalibrations: a share of their steps)
    drope_schemes: tuple[str, ...]  # trained beside RoPE, the run DroPE starts from
    drope_tasks: tuple[str, ...]
    parts: tuple[str, ...] = PARTS
    smoke: bool = False

    def sizes(self, part: str) -> Sizes:
        return {
            "needles": self.needles,
            "tasks": self.tasks,
            "extension": self.fine_tune,
            "drope": self.drope,
        }[part]

    def with_sizes(self, part: str, sizes: Sizes) -> Plan:
        return dataclasses.replace(self, **{{"extension": "fine_tune"}.get(part, part): sizes})


@dataclass(frozen=True)
class Job:
    """One process of the schedule. `sweep`: where a training job's runs go (relative to $OUT)."""

    name: str
    part: str
    kind: Kind
    args: tuple[str, ...]
    deps: tuple[str, ...] = ()
    runs: int = 1
    steps: int = 0
    val_every: int = 1
    units: float = 0.0
    sweep: str | None = None
    step_scale: float = 1.0  # a step's cost over its kind's measured one (a deeper model's layers)


# the 2025 schemes, each where this checkout's SCHEMES has it (some land in parallel): at the needle
# recipe's depth, and the layer schedules at DEEP_LAYERS (local_global's every 6th layer; irope's and
# rnope_swa's every 4th), with rope and none as their references there
WANTED_NEEDLES = ("p_rope", "cope", "fox")
WANTED_DEEP = ("none", "rope", "irope", "rnope_swa", "local_global")
NEEDLE_OPTIONS = {"p_rope": ("scheme.keep_fraction=0.75",)}  # Barbero et al.'s 0.75-p-RoPE
DEEP_LAYERS = 6
NEEDLE_LAYERS = {False: 4, True: 1}  # the needle recipe's depth (experiment=probe: model=small), the smoke's


def present(names: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(name for name in names if name in SCHEMES)


FULL = Plan(
    needles=Sizes(seeds=(0, 1), min_seeds=2, steps=6000, min_steps=1000),
    tasks=Sizes(seeds=(0, 1, 2), min_seeds=2, steps=20000, min_steps=2000),
    fine_tune=Sizes(seeds=(0, 1), min_seeds=1, steps=1000, min_steps=200),  # PI's paper: 1,000 steps
    base_steps=600,  # the default recipe's rope run (docs/extension.md's base)
    needle_tasks=("multikey", "multivalue", "multiquery"),
    needle_schemes=("none", "sinusoidal", "learned", "rope", "alibi", *present(WANTED_NEEDLES)),
    deep_schemes=present(WANTED_DEEP),
    task_names=("reverse", "parity", "addition", "copy"),
    variants=("none", "learned", "rope", "alibi", "fire", "learned+randomized", "rope+randomized"),
    trials=20,
    probe_lengths=(1024, 2048, 4096),
    task_lengths=(8, 16, 32, 64),
    ppl_lengths=(256, 1024, 2048),
    max_tokens=16384,
    scalings=("none", "linear", "yarn"),
    drope=Sizes(seeds=(0, 1), min_seeds=1, steps=6000, min_steps=1000),  # the needles part's recipe
    drope_schemes=("rope", "alibi", "none", "rnope_swa"),
    drope_tasks=("multiquery", "multikey", "multivalue"),
)
SMOKE = dataclasses.replace(
    FULL,
    needles=Sizes(seeds=(0, 1), min_seeds=1, steps=4, min_steps=2),
    tasks=Sizes(seeds=(0,), min_seeds=1, steps=6, min_steps=2),
    fine_tune=Sizes(seeds=(0,), min_seeds=1, steps=4, min_steps=2),
    base_steps=6,
    needle_tasks=("multikey",),
    needle_schemes=("rope",),
    deep_schemes=present(("irope",)),
    task_names=("reverse",),
    variants=("rope+randomized",),
    trials=2,
    probe_lengths=(1024,),
    task_lengths=(8, 16),
    ppl_lengths=(256, 1024),
    max_tokens=2048,
    scalings=("linear",),
    drope=Sizes(seeds=(0,), min_seeds=1, steps=8, min_steps=8),  # 8: DroPE's eighth is one step
    drope_schemes=("rope", "none"),  # NoPE beside DroPE: two `none` labels kept apart
    drope_tasks=("multikey",),
    smoke=True,
)
# CPU=1: the drope part on this machine's CPU, at the needle recipe's length and model (512, model=small,
# batch 16) with one seed and fewer steps, cut further to fit BUDGET_S
CPU_FALLBACK = dataclasses.replace(
    FULL,
    drope=Sizes(seeds=(0,), min_seeds=1, steps=1500, min_steps=250),
    trials=10,
    max_tokens=8192,
    parts=("drope",),
)

# scripts/reproduce_tasks.sh's block sizes: the longest training sequence at data.max_train_len=8
TASK_BLOCK = {"reverse": 17, "parity": 10, "addition": 27, "copy": 17}
NEEDLE_TRAIN_LEN = 512


def train_job(name: str, kind: Kind, sweep: str, *, sizes: Sizes, args: list[str], **fields) -> Job:
    """A `posenc train -m` process over the seeds, into `sweep`."""
    sweep_args = ["train", "-m", "seed=" + ",".join(map(str, sizes.seeds)), f"hydra.sweep.dir={sweep}"]
    part = sweep.split("/")[0]
    return Job(name, part, kind, (*sweep_args, *args), runs=len(sizes.seeds), sweep=sweep, **fields)


def eval_job(plan: Plan, name: str, kind: Kind, *, args: list[str], **fields) -> Job:
    """A `posenc eval` or `posenc probe` process; its --out is its part's."""
    part = args[args.index("--out") + 1].split("/")[0]
    return Job(name, part, kind, (*args, *(["--device", "cpu"] if plan.smoke else [])), **fields)


def joined(values) -> str:
    return ",".join(map(str, values))


def needle_args(plan: Plan, task: str, scheme: str, *, steps: int, deep: bool = False) -> list[str]:
    """scripts/reproduce_needles.sh's recipe for one task and scheme (its options, NEEDLE_OPTIONS), at
    DEEP_LAYERS if `deep`."""
    args = f"experiment=probe train.block_size={NEEDLE_TRAIN_LEN} data.passkey_min_distance=16 "
    args += f"data.passkey_max_distance=160 data.probe_task={task} scheme={scheme} train.max_steps={steps} "
    args += "train.threads=1"
    tiny = " model.n_layer=1 model.n_head=2 model.n_embd=32 train.batch_size=2 data.n_chars=60000"
    args += tiny + " train.eval_batches=1 device=cpu" if plan.smoke else ""
    return [
        *args.split(),
        *NEEDLE_OPTIONS.get(scheme, ()),
        *([f"model.n_layer={DEEP_LAYERS}"] if deep else []),
    ]


def task_args(plan: Plan, task: str, variant: str, *, steps: int) -> list[str]:
    """scripts/reproduce_tasks.sh's recipe (one validation and checkpoint, at the end) at `steps`."""
    block = TASK_BLOCK[task]
    scheme, randomized = variant.removesuffix("+randomized"), variant.endswith("+randomized")
    args = f"data=task data.task={task} data.max_train_len=8 train.block_size={block} model.n_layer=2 "
    args += (
        f"model.n_head=4 model.n_embd=64 train.max_steps={steps} train.batch_size=32 train.warmup_steps=30 "
    )
    args += (
        f"train.lr=3e-3 train.eval_interval={steps} train.checkpoint_interval={steps} train.log_interval=50 "
    )
    args += f"train.threads=1 train.precision=fp32 scheme={scheme}"
    args += " data.reversed_digits=true" if task == "addition" else ""
    if randomized:  # positions from [0, 8 x block); learned's table then covers them (its yaml)
        args += f" train.positions=randomized train.max_position={8 * block}"
    elif scheme == "learned":  # 200 rows: untrained past 8, but scored at 8x (reproduce_tasks.sh)
        args += " scheme.max_len=200"
    return (args + (" train.eval_batches=1 device=cpu" if plan.smoke else "")).split()


def extension_args(
    plan: Plan, *, steps: int, init_from: str | None = None, scaling: str = "none"
) -> list[str]:
    """The base rope run (init_from None: the default recipe at 256) or a fine-tune of it at 1,024."""
    args = ["scheme=rope", f"train.max_steps={steps}", "train.threads=1", "train.precision=fp32"]
    if init_from is not None or scaling != "none":  # the profile times a fine-tune's shape from scratch
        args = ["experiment=extend", *args] + ([f"train.init_from={init_from}"] if init_from else [])
    if scaling != "none":
        args += [f"scheme.scaling={scaling}", "scheme.scaling_factor=4"]
    smoke = ["data.n_chars=100000", "train.batch_size=4", "train.eval_batches=1", "device=cpu"]
    return args + (smoke if plan.smoke else [])


def jobs(plan: Plan) -> list[Job]:
    """Every job of the plan, in the order the parts are listed."""
    from gpu_evidence_drope import drope_jobs  # it builds on this module's recipe: imported when used

    builders = {"needles": needle_jobs, "tasks": task_jobs, "extension": extension_jobs, "drope": drope_jobs}
    return [job for part in plan.parts for job in builders[part](plan)]


def needle_jobs(plan: Plan) -> list[Job]:
    out = []
    for task in plan.needle_tasks:
        out += needle_group(plan, task, deep=False)
        out += needle_group(plan, task, deep=True) if plan.deep_schemes else []
    return out


def needle_group(plan: Plan, task: str, *, deep: bool) -> list[Job]:
    """One task's runs of a group (the recipe's schemes, or the deep ones at DEEP_LAYERS) and its probe;
    the recipe's rope runs probed under NTK and YaRN too."""
    sizes, schemes = plan.needles, plan.deep_schemes if deep else plan.needle_schemes
    scale = DEEP_LAYERS / NEEDLE_LAYERS[plan.smoke] if deep else 1.0  # a step's cost ~ the layers
    where, name = (
        (f"needles/deep/{task}", f"{task}_{DEEP_LAYERS}_layers") if deep else (f"needles/{task}", task)
    )
    # trial tokens a run: probe's 3 default depths x trials x the lengths, its training length added
    tokens = 3 * plan.trials * (sum(plan.probe_lengths) + NEEDLE_TRAIN_LEN) * scale
    trained = [
        train_job(
            f"needles-{name}-{scheme}",
            Kind.NEEDLE,
            f"{where}/{scheme}",
            sizes=sizes,
            args=needle_args(plan, task, scheme, steps=sizes.steps, deep=deep),
            steps=sizes.steps,
            val_every=250,
            step_scale=scale,
        )
        for scheme in schemes
    ]
    probe = f"probe --task {task} --lengths {joined(plan.probe_lengths)} --trials {plan.trials}".split()
    out = trained + [
        eval_job(
            plan,
            f"probe-{name}",
            Kind.PROBE,
            args=[*probe, where, "--out", f"needles/probe/{name}"],
            deps=tuple(j.name for j in trained),
            units=len(trained) * len(sizes.seeds) * tokens,
        )
    ]
    if "rope" in schemes and not deep:  # each rope run three times: plain, NTK, YaRN
        scaled = [*probe, "--rope-scaling", "none,ntk,yarn", f"{where}/rope"]
        out.append(
            eval_job(
                plan,
                f"probe-{task}-scaled",
                Kind.PROBE,
                args=[*scaled, "--out", f"needles/probe/{task}_scaled"],
                deps=(f"needles-{task}-rope",),
                units=3 * len(sizes.seeds) * tokens,
            )
        )
    return out


def task_jobs(plan: Plan) -> list[Job]:
    sizes = plan.tasks
    trained = [
        train_job(
            f"tasks-{task}-{variant}",
            Kind.TASK,
            f"tasks/{task}/{variant}",
            sizes=sizes,
            args=task_args(plan, task, variant, steps=sizes.steps),
            steps=sizes.steps,
            val_every=sizes.steps,
        )
        for task in plan.task_names
        for variant in plan.variants
    ]
    lengths = sorted({*plan.task_lengths, 8})  # the training length (data.max_train_len) is always added
    sweeps = [str(j.sweep) for j in trained]
    evaluate = ["eval", *sweeps, "--lengths", joined(plan.task_lengths), "--out", "tasks/eval"]
    units = len(trained) * len(sizes.seeds) * len(lengths)
    return [
        *trained,
        eval_job(
            plan,
            "eval-tasks",
            Kind.TASK_EVAL,
            args=evaluate,
            deps=tuple(j.name for j in trained),
            units=units,
        ),
    ]


BASE_RUN = "extension/base/0_rope_seed0"  # Hydra's sweep subdir: ${hydra.job.num}_${scheme.name}_seed${seed}


def extension_jobs(plan: Plan) -> list[Job]:
    sizes, base_sizes = plan.fine_tune, Sizes(seeds=(0,), min_seeds=1, steps=plan.base_steps, min_steps=1)
    base = train_job(
        "extension-base",
        Kind.BASE,
        "extension/base",
        sizes=base_sizes,
        args=extension_args(plan, steps=plan.base_steps),
        steps=plan.base_steps,
        val_every=100,
    )
    tuned = [
        train_job(
            f"extension-ft-{scaling}",
            Kind.FINE_TUNE,
            f"extension/ft_{scaling}",
            sizes=sizes,
            args=extension_args(plan, steps=sizes.steps, init_from=BASE_RUN, scaling=scaling),
            deps=(base.name,),
            steps=sizes.steps,
            val_every=50,
        )
        for scaling in plan.scalings
    ]
    lengths = ["--lengths", joined(plan.ppl_lengths), "--max-tokens", str(plan.max_tokens)]
    tokens = len(plan.ppl_lengths) * plan.max_tokens
    zero_shot = ["eval", "extension/base", *lengths, "--rope-scaling", "none,linear,ntk,yarn"]
    fine_tuned = ["eval", *(str(j.sweep) for j in tuned), *lengths]
    return [
        base,
        *tuned,
        eval_job(
            plan,
            "eval-zero-shot",
            Kind.PPL_EVAL,
            args=[*zero_shot, "--out", "extension/zero_shot"],
            deps=(base.name,),
            units=4 * tokens,
        ),
        eval_job(
            plan,
            "eval-fine-tuned",
            Kind.PPL_EVAL,
            args=[*fine_tuned, "--out", "extension/fine_tuned"],
            deps=tuple(j.name for j in tuned),
            units=len(tuned) * len(sizes.seeds) * tokens,
        ),
    ]


def cut(plan: Plan, *, fraction: float, dropped: int = 0) -> Plan:
    """The plan with each cuttable part's steps scaled by `fraction` (never below its floor) and its last
    `dropped` seeds left out (never below its least)."""
    for part in PARTS:
        s = plan.sizes(part)
        keep = max(s.min_seeds, len(s.seeds) - dropped)
        steps = max(s.min_steps, min(s.steps, int(s.steps * fraction)))
        plan = plan.with_sizes(part, dataclasses.replace(s, seeds=s.seeds[:keep], steps=steps))
    return plan
