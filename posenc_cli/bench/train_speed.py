"""Training speed on the path users run: `posenc_cli.training.loop.train`, the function `posenc train` calls,
whole (data sampling, logging, validation and checkpoints at the configured intervals), sustained
over several eval intervals. Reported: the median interval's tokens/s (the training loop's own per-interval
rate, which leaves out the validation pass it times) and the whole loop's (everything included)."""

from __future__ import annotations

import logging
import os
import shutil
import statistics
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any
from unittest import mock

import torch

from posenc_cli.bench.peak import Peak, flops_per_token
from posenc_cli.bench.peer import RECIPE
from posenc_cli.config.hydra_args import composing, parse_hydra_args
from posenc_cli.config.schema import PosencConfig, check_keys
from posenc_cli.core import ui
from posenc_cli.core.choices import PRECISIONS
from posenc_cli.core.device import cpu_bf16
from posenc_cli.core.errors import UsageError
from posenc_cli.model.positional import build_scheme
from posenc_cli.rundir.summary import PrecisionFacts, RunStatus, read_metrics
from posenc_cli.training.loop import train
from posenc_cli.training.precision_choice import CACHE_ENV

CONFIG = "default"  # the training configuration every scheme is timed at: posenc's defaults
LEVERS = {"baseline": [], "threads=1": ["train.threads=1"], "fp32": ["train.precision=fp32"]}
DEPTH_SEARCH = 64  # layers past the configured model's a scheme's pattern may need before it is a mistake


def compose(overrides: list[str]) -> dict[str, Any]:
    """The config `posenc train OVERRIDES` would run, composed as `posenc train` composes it."""

    with composing(parse_hydra_args([])) as compose_point:
        return compose_point(list(overrides))


def least_depth(cfg: PosencConfig) -> int:
    """The fewest layers, from the configured model's own, at which its scheme builds: the default model's,
    or the depth a preset's interval needs (irope's every 4th layer: 4 on the 2-layer default model). A
    scheme that builds at no depth is refused as at the configured one."""
    size, refusals = cfg.model, []
    scheme = build_scheme(
        cfg.scheme_name, size.n_embd, size.n_head, block_size=cfg.train.block_size, **cfg.scheme_options
    )
    for n_layer in range(size.n_layer, size.n_layer + DEPTH_SEARCH):
        try:
            scheme.for_layers(n_layer)
            return n_layer
        except UsageError as refused:
            refusals.append(refused)
    raise refusals[0]


def at_depth(overrides: list[str]) -> list[str]:
    """OVERRIDES, with model.n_layer raised last to the least depth their scheme builds at where the
    configured model is too shallow for it: the config each scheme is benchmarked at."""
    cfg = check_keys(compose(overrides))
    depth = least_depth(cfg)
    return overrides if depth == cfg.model.n_layer else [*overrides, f"model.n_layer={depth}"]


def timed_training(overrides: list[str], effort) -> dict[str, Any]:
    """Run `posenc train OVERRIDES` in-process for effort.train_intervals eval intervals, in a
    temporary run directory; a row of what it measured."""

    composed = check_keys(compose(at_depth([*overrides, *effort.overrides])))
    tc = replace(composed.train, max_steps=composed.train.eval_interval * effort.train_intervals)
    cfg = replace(composed, train=tc)
    threads, work = torch.get_num_threads(), Path(tempfile.mkdtemp(prefix="posenc-bench-"))
    # the run is the benchmark's own: its warnings (a resume hint naming this temporary directory, the
    # precision the benchmark asked for) would mislead; a stop by signal ends the benchmark as Ctrl-C
    train_log = logging.getLogger("posenc.train")
    level = train_log.level
    train_log.setLevel(logging.ERROR)
    try:
        summary = train(cfg, work)
        rates = [row["tokens_per_s"] for row in read_metrics(work) if "tokens_per_s" in row]
    except SystemExit as stopped:
        if stopped.code == ui.INTERRUPTED:
            raise KeyboardInterrupt from None
        raise
    finally:
        train_log.setLevel(level)
        torch.set_num_threads(threads)
        shutil.rmtree(work, ignore_errors=True)
    if summary.status is not RunStatus.FINISHED or not summary.description or not summary.outcome:
        raise RuntimeError(f"posenc train {' '.join(overrides)}: {summary.message}")
    steady = rates[1:] or rates  # the first interval holds the warm-up
    T, model = tc.block_size, cfg.model
    described, outcome = summary.description, summary.outcome
    precision = described.precision or PrecisionFacts()
    effective = precision.effective
    return {
        "reason": precision.reason or "",
        "section": "train",
        "config": CONFIG,
        "scheme": cfg.scheme_name,
        "precision": "fp32" if effective == "fp32" else "bf16",  # the GEMM peak its matmuls run at
        "effective": effective,
        "asked": tc.precision,
        "length": T,
        "batch": tc.batch_size,
        "n_layer": model.n_layer,
        "n_embd": model.n_embd,
        "steps": outcome.steps,
        "tokens_per_s": statistics.median(steady),
        "loop_tokens_per_s": outcome.tokens_per_s,
        "flops_per_token": flops_per_token(
            non_positional_params=described.total_params - described.positional_params,
            n_layer=model.n_layer,
            n_embd=model.n_embd,
            seq_len=T,
        ),
    }


def bench_training(schemes: list[str], effort, peak: Peak) -> list[dict]:
    """Every scheme at the default configuration, one after another, the GEMM peak measured between."""
    rows = []
    for scheme in schemes:
        ui.err.print(f"train {CONFIG}: {scheme}")
        rows.append({**timed_training([f"scheme={scheme}"], effort), "lever": "baseline"})
        peak.measure()
    return rows


def bench_levers(effort, peak: Peak, scheme: str = "rope") -> list[dict]:
    """Settings that are not the default, each through the same training path as the baseline."""
    rows = []
    for lever, overrides in LEVERS.items():
        ui.err.print(f"lever ({scheme}): {lever}")
        rows.append(
            {**timed_training([f"scheme={scheme}", *overrides], effort), "section": "lever", "lever": lever}
        )
        peak.measure()
    baseline = rows[0]["tokens_per_s"]
    return [{**row, "vs_baseline": row["tokens_per_s"] / baseline} for row in rows]


# the shapes auto must not lose at by more than PRECISION_SLACK (issue #33): posenc's default config,
# and nanoGPT's CPU recipe (bench/peer.py's RECIPE on the default corpus: its data is the peer's file)
PRECISION_CONFIGS = {
    "default": ("scheme=rope",),
    "nanogpt-recipe": tuple(o for o in RECIPE if o != "data=text"),
}


# Where bf16 is emulated (AVX2: its matmuls ~100x slower than fp32's) three eval intervals of 100 steps
# would take over an hour at the default config; three intervals of 2 steps show the gap in a minute or two
# (measured beside 300 steps on AVX2 kernels: 2,822 against 2,801 tokens/s). A warm-up as short as the run.
EMULATED_BF16_RUN = (
    "train.eval_interval=2",
    "train.log_interval=2",
    "train.eval_batches=1",
    "train.warmup_steps=1",
)


def bench_precision(effort, cache: Path) -> list[dict]:
    """Each configuration trained at every train.precision, auto (which measures afresh: `cache` is a new
    file) and each pinned one, through the training path users run; each one's speed over the fastest
    pinned one. Where bf16 is emulated, pinned bf16 runs EMULATED_BF16_RUN's few steps, and
    bf16-fp32-attention (the same emulated matmuls) is left out."""
    emulated = cpu_bf16() != "native"
    asked_for = [p for p in PRECISIONS if not emulated or p != "bf16-fp32-attention"]
    rows = []
    with mock.patch.dict(os.environ, {CACHE_ENV: str(cache)}):
        for config, overrides in PRECISION_CONFIGS.items():
            found = []
            for asked in asked_for:
                ui.err.print(f"precision ({config}): {asked}")
                short = EMULATED_BF16_RUN if emulated and asked == "bf16" else ()
                row = timed_training([*overrides, *short, f"train.precision={asked}"], effort)
                found.append({**row, "section": "precision", "config": config})
            best = max(r["tokens_per_s"] for r in found[1:])
            rows += [{**r, "vs_best": r["tokens_per_s"] / best} for r in found]
    return rows
