"""Where an fp32 training step's time goes: `posenc train`'s own step (session.train_step, with the model
and optimizer the loop builds) under torch.profiler, each op's self time put in the first category its
call stack names, innermost first: the matmuls, attention, the optimizer, or another op. What no op
holds (Python between ops, the profiler's own) is the step's wall time less the ops'."""

from __future__ import annotations

import time

import torch
from torch.autograd.profiler_util import FunctionEvent
from torch.profiler import ProfilerActivity, profile

from posenc_cli.bench.peak import Peak, step_gemms
from posenc_cli.bench.train_speed import compose
from posenc_cli.config.schema import PosencConfig, check_keys
from posenc_cli.core import ui
from posenc_cli.data import load_corpus
from posenc_cli.training.precision_timing import throwaway_step
from posenc_cli.training.session import model_config, train_step

# Op and autograd-node names (lower case) of each category; an op under one of them (aten::t under
# aten::linear, a copy under Optimizer.step) is that category's
MATMUL_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::matmul", "aten::linear")
MATMUL_NODES = ("mmbackward", "addmmbackward", "bmmbackward")
CATEGORIES = {
    "matmuls": lambda name: name in MATMUL_OPS or any(node in name for node in MATMUL_NODES),
    "attention": lambda name: "scaled_dot_product" in name or "scaleddotproduct" in name,
    "optimizer step": lambda name: name.startswith("optimizer.") or "adamw" in name,
}
OTHER, UNTRACED = "other ops", "between ops"
TOP_OTHERS = 5  # the other ops named in the report, by self time


def category(event: FunctionEvent) -> str:
    """The first category named by `event` or, outward, by the ops that called it."""
    while event is not None:
        name = event.name.lower()
        for found, matches in CATEGORIES.items():
            if matches(name):
                return found
        event = event.cpu_parent
    return OTHER


def profile_step(cfg: PosencConfig, vocab_size: int, *, steps: int, warm_up: int = 2) -> list[dict]:
    """ms a step and share of the step per category over `steps` profiled fp32 steps of `cfg`'s model,
    after `warm_up` steps; the step's unprofiled time in the note of the total."""
    tc, device = cfg.train, torch.device("cpu")
    with torch.random.fork_rng(devices=[]):
        model, optimizer, batch = throwaway_step(cfg, device, vocab_size)

        def run(count: int) -> float:
            started = time.perf_counter()
            for _ in range(count):
                train_step(model, optimizer, batch, device=device, precision="fp32", grad_clip=tc.grad_clip)
            return (time.perf_counter() - started) / count

        run(warm_up)
        plain = run(steps)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            wall = run(steps)
    ms = {name: 0.0 for name in [*CATEGORIES, OTHER]}
    others: dict[str, float] = {}
    for event in prof.events():
        found = category(event)
        ms[found] += event.self_cpu_time_total / 1000 / steps
        if found == OTHER:
            others[event.name] = others.get(event.name, 0.0) + event.self_cpu_time_total / 1000 / steps
    ms[UNTRACED] = max(0.0, 1000 * wall - sum(ms.values()))
    top = sorted(others.items(), key=lambda item: -item[1])[:TOP_OTHERS]
    notes = {OTHER: ", ".join(f"{name} {t:.1f}" for name, t in top)}
    rows = [
        {"section": "step_profile", "config": name, "ms_per_step": t, "share": t / (1000 * wall)}
        | {"note": notes.get(name, ""), "steps": steps}
        for name, t in ms.items()
    ]
    note = f"{1000 * plain:.1f} ms unprofiled"
    return [
        *rows,
        {"section": "step_profile", "config": "step", "ms_per_step": 1000 * wall, "share": 1.0}
        | {"note": note, "steps": steps},
    ]


def bench_step(effort, peak: Peak, precisions: set[str]) -> list[dict]:
    """The default training step (rope, as `posenc train` composes it): its matmul shapes' peak measured
    into `peak` for `precisions`, and its fp32 time per category."""
    cfg = check_keys(compose(["scheme=rope", *effort.overrides]))
    vocab_size = len(load_corpus(cfg.data).tokenizer)
    rows = cfg.train.batch_size * cfg.train.block_size
    peak.measure_step_shapes(step_gemms(model_config(cfg, vocab_size), rows), precisions)
    ui.err.print("profile: the default fp32 training step")
    return profile_step(cfg, vocab_size, steps=effort.profile_steps)
