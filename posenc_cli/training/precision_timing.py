"""Timing a run's training step in each precision, and whether the machine is quiet enough to time it."""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

import torch

from posenc_cli.config.schema import PosencConfig
from posenc_cli.core.cores import usable_cores
from posenc_cli.core.device import EFFECTIVE_PRECISIONS
from posenc_cli.data import random_positions
from posenc_cli.model import GPT
from posenc_cli.training.session import make_optimizer, model_config, train_step

# Timed rounds of STEPS_PER_ROUND steps in each precision, the order reversed every round, after WARM_UP
# steps of each. Fewer (one warm-up step, single-step rounds) misjudged 3 of 5 demo runs on an EPYC: the
# first steps of a precision run cold, and one step is within the machine's jitter (docs/training.md).
WARM_UP, ROUNDS, STEPS_PER_ROUND = 2, 3, 2
SLOW_STEP_S = (
    1.0  # a first step slower than this: no more warm-up, one timed step each (calibration stays short)
)


def throwaway_step(cfg: PosencConfig, device: torch.device, vocab_size: int):
    """A fresh model of the run's shapes, its optimizer as the loop builds it, and one random batch:
    what timing or profiling the run's step needs."""
    tc = cfg.train
    model = GPT(model_config(cfg, vocab_size)).to(device)
    optimizer = make_optimizer(model, tc)
    generator = torch.Generator().manual_seed(0)
    x = torch.randint(0, vocab_size, (tc.batch_size, tc.block_size + 1), generator=generator)
    positions = None
    if tc.positions == "randomized":
        positions = random_positions(tc.batch_size, tc.block_size, tc.max_position, generator=generator)
        positions = positions.to(device)
    return model, optimizer, (x[:, :-1], x[:, 1:], positions)


def time_steps(
    cfg: PosencConfig,
    device: torch.device,
    vocab_size: int,
    *,
    precisions: tuple[str, ...] = EFFECTIVE_PRECISIONS,
    rounds: int = ROUNDS,
    steps_per_round: int = STEPS_PER_ROUND,
) -> dict[str, float]:
    """Median ms a training step takes in each of `precisions`, on a throwaway model of the run's shapes (the
    run's own random streams untouched), the precisions in turn so that load on the machine falls on
    all alike; `rounds` of `steps_per_round` steps each (scripts/attention_precision_ab.py times longer)."""
    tc = cfg.train
    with torch.random.fork_rng(devices=[]):
        model, optimizer, batch = throwaway_step(cfg, device, vocab_size)

        def steps(precision: str, count: int) -> float:
            """Seconds a step, over `count` steps."""
            started = time.perf_counter()
            for _ in range(count):
                train_step(
                    model, optimizer, batch, device=device, precision=precision, grad_clip=tc.grad_clip
                )
            return (time.perf_counter() - started) / count

        slow = max(steps(p, 1) for p in precisions) >= SLOW_STEP_S
        for precision in () if slow else precisions:
            steps(precision, WARM_UP - 1)
        rounds, count = (1, 1) if slow else (rounds, steps_per_round)
        times: dict[str, list[float]] = {p: [] for p in precisions}
        for round_ in range(rounds):
            for precision in precisions[:: -1 if round_ % 2 else 1]:
                times[precision].append(steps(precision, count))
    return {p: round(1000 * statistics.median(t), 3) for p, t in times.items()}


def machine_busy() -> str | None:
    """Why timings taken now would not stand for this machine (other work keeps every core busy), or None.
    Counted now where Linux says so, not as the 1-minute load average, which holds this process's own
    training a moment ago: a sweep's later runs read "load 2.1 on 2 cores" of their own making."""
    cores = usable_cores()
    others = other_runnable_threads()
    if others is not None:
        return f"{others} threads of other processes runnable on {cores} cores" if others >= cores else None
    try:
        load = os.getloadavg()[0]
    except (OSError, AttributeError):  # no load average on this platform (Windows): measured as if quiet
        return None
    return f"load average {load:.1f} on {cores} cores" if load > cores else None


def other_runnable_threads(samples: int = 5) -> int | None:
    """The threads of other processes ready to run, the median of a few samples 10 ms apart (a blip either
    way does not decide); None without Linux's /proc. Machine-wide: a container sees its host's."""
    counts = []
    for _ in range(samples):
        try:
            runnable = int(Path("/proc/loadavg").read_text().split()[3].split("/")[0])
            tasks = list(Path("/proc/self/task").iterdir())
        except (OSError, ValueError, IndexError):
            return None
        counts.append(runnable - sum(thread_running(task) for task in tasks))
        time.sleep(0.01)
    return max(0, round(statistics.median(counts)))


def thread_running(task: Path) -> bool:
    try:  # the state follows the name in parentheses, which may itself hold spaces, ")" or any byte
        return (task / "stat").read_bytes().rsplit(b")", 1)[1].split()[0] == b"R"
    except (OSError, IndexError):  # the thread ended while it was read
        return False
