"""bench.md and bench.csv: the machine, each section's table, and the targets (bench_targets)."""

from __future__ import annotations

import datetime
import os
import shlex
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from posenc_cli.bench.bench_targets import mfu_text, targets_section
from posenc_cli.bench.peer import RECIPE, speedup
from posenc_cli.bench.scheme_costs import costs_section
from posenc_cli.core.atomic import write_text, write_with
from posenc_cli.core.device import cpu_model
from posenc_cli.report.cells import markdown_table

COLUMNS = (
    "note",
    "median_s",
    "scheme",
    "length",
    "tokens_per_s",
    "multiple",
    "peak_rss_mib",
    "eval_rss_mib",
    "vs_baseline",
    "seconds",
    "pair",
    "val_loss",
    "train_loss",
    "loop_tokens_per_s",
    "precision",
    "mfu",
    "gflops",
    "vs_rope",
    "asked",
    "reason",
    "vs_best",
    "mfu_step",
    "ms_per_step",
    "share",
)  # not every section has them


def machine() -> dict[str, Any]:
    return {
        "command": shlex.join(["posenc", *sys.argv[1:]]),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "isa": torch.backends.cpu.get_cpu_capability(),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "unset"),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "load_avg_1min_at_start": round(os.getloadavg()[0], 2),
    }


def num(value, fmt: str) -> str:
    return "—" if pd.isna(value) else format(value, fmt)


def render(df: pd.DataFrame, info: dict[str, Any]) -> str:
    """bench.md: one section per part of the bench, in the order it runs."""
    sections = (
        header(df, info),
        training_section(df),
        step_profile_section(df),
        levers_section(df),
        precision_section(df),
        peer_section(df, info),
        eval_section(df),
        costs_section(df),
        sampling_section(df),
        startup_section(df),
        main_job_section(df),
        targets_section(df),
    )
    return "\n".join(line for section in sections for line in section)


def header(df: pd.DataFrame, info: dict[str, Any]) -> list[str]:
    return [
        f"# posenc bench, {info['date']}",
        "",
        f"Machine: {info['cpu']}, {info['cores']} cores, torch {info['torch']} ({info['isa']}), "
        f"{info['torch_threads']} threads, OMP_WAIT_POLICY {info['omp_wait_policy']}; 1-min load average "
        f"{info['load_avg_1min_at_start']} at start, {info['load_avg_1min_at_end']} at end.",
        "",
        f"Command: `{info['command']}`.",
        "",
        *gemm_lines(df[df["section"] == "gemm"]),
    ]


def gemm_lines(gemm: pd.DataFrame) -> list[str]:
    """The GEMM peaks, where this run measured them (not --startup, --costs)."""
    if not len(gemm):
        return []
    step = gemm["config"].str.startswith("step shapes")
    peaks = ", ".join(
        f"{r.precision} **{r.gflops:.1f} GFLOP/s** ({r.config.split()[0]})" for r in gemm[~step].itertuples()
    )
    at_step = [
        f"At the default training step's own matmul shapes (each linear's forward and two backward GEMMs, "
        f"FLOP-weighted; forward shapes {gemm[step]['note'].iloc[0]}): "
        + ", ".join(f"{r.precision} **{r.gflops:.1f} GFLOP/s**" for r in gemm[step].itertuples())
        + ".",
        "",
    ]
    return [
        f"GEMM peaks (best square matmul of the run, smaller where one would take over a second): {peaks}.",
        "",
        *(at_step if step.any() else []),
    ]


def training_section(df: pd.DataFrame) -> list[str]:
    if not (df["section"] == "train").any():  # --startup
        return []
    columns = ["scheme", "n_layer × d_model", "T", "batch", "steps", "precision", "tokens/s", "whole loop"]
    columns += ["GFLOP/s", "MFU", "MFU (step shapes)", "vs rope"]
    rows = [
        [
            r.scheme,
            f"{int(r.n_layer)} × {int(r.n_embd)}",
            int(r.length),
            int(r.batch),
            int(r.steps),
            r.precision,
            f"{r.tokens_per_s:,.0f}",
            f"{r.loop_tokens_per_s:,.0f}",
            f"{r.gflops:.1f}",
            mfu_text(r.mfu),
            "—" if pd.isna(r.mfu_step) else mfu_text(r.mfu_step),
            num(r.vs_rope, ".2f"),
        ]
        for r in df[df["section"] == "train"].itertuples()
    ]
    return [
        "## Training",
        "",
        "`posenc train`'s own training function at the default configuration, with its logging, "
        "validation and checkpoints at the configured intervals. tokens/s: the median eval interval "
        "after the first (the training loop's own rate, validation pass left out); whole loop: steps × batch × T / "
        "the loop's wall time, validation, checkpoints and warm-up included. MFU = tokens/s × "
        "(6·N + 12·n_layer·d_model·T) / the GEMM peak of the precision the run computes in; N = "
        "non-positional parameters, tied embedding counted once; MFU (step shapes): against the peak at the "
        "step's own matmul shapes.",
        "",
        markdown_table(columns, rows),
    ]


def step_profile_section(df: pd.DataFrame) -> list[str]:
    found = df[df["section"] == "step_profile"]
    if not len(found):
        return []
    rows = [[r.config, f"{r.ms_per_step:.1f}", f"{r.share:.1%}", r.note] for r in found.itertuples()]
    return [
        "## Where an fp32 step's time goes",
        "",
        f"`posenc train`'s own step (session.train_step) at the default configuration (rope) in fp32, "
        f"{int(found['steps'].iloc[0])} steps under torch.profiler after two warm-up steps; each op's self "
        "time in the first category its call stack names (matmuls: mm/addmm/bmm/matmul/linear and their "
        "backward; attention: scaled_dot_product_attention and its backward; the optimizer: zero_grad and "
        "the fused AdamW step; other ops: elementwise, norms, embedding, loss, gradient clipping, ms each "
        "for the largest); between ops: the profiled step's wall time less its ops' (Python, the profiler).",
        "",
        markdown_table(["part", "ms/step", "share", "note"], rows),
        "",
    ]


def levers_section(df: pd.DataFrame) -> list[str]:
    levers = df[df["section"] == "lever"]
    if not len(levers):
        return []
    rows = [
        [r.scheme, r.lever, r.precision, f"{r.tokens_per_s:,.0f}", f"{r.vs_baseline:.2f}", mfu_text(r.mfu)]
        for r in levers.itertuples()
    ]
    return [
        "## Levers (default config, not on by default)",
        "",
        "Each setting through the same training path as the baseline.",
        "",
        markdown_table(["scheme", "lever", "precision", "tokens/s", "vs baseline", "MFU"], rows),
    ]


def precision_section(df: pd.DataFrame) -> list[str]:
    found = df[df["section"] == "precision"]
    if not len(found):
        return []
    rows = [
        [r.config, r.asked, r.effective, int(r.steps), f"{r.tokens_per_s:,.0f}", f"{r.vs_best:.2f}", r.reason]
        for r in found.itertuples()
    ]
    shortened = (found["steps"] < found.groupby("config")["steps"].transform("max")).any()
    return [
        "## Precision: what auto chose, beside every pinned precision",
        "",
        "Each configuration trained at every train.precision through the training path: auto (which "
        "measures afresh, in a new cache file), then each pinned one; vs best: tokens/s over the fastest "
        "pinned one."
        + (
            " This CPU emulates bf16 (~100x slower), so pinned bf16 trained a few steps only."
            if shortened
            else ""
        ),
        "",
        markdown_table(["config", "asked", "computed in", "steps", "tokens/s", "vs best", "why"], rows),
    ]


def peer_section(df: pd.DataFrame, info: dict[str, Any]) -> list[str]:
    peer = df[df["section"] == "peer"]
    if not len(peer) and not (df["section"] == "train").any():  # --startup, --costs
        return []
    if not len(peer):
        said = info.get("peer_stopped") or info.get("peer", "Not run (--nanogpt none).")
        return ["## Beside nanoGPT", "", said, ""]
    steps = int(peer["steps"].iloc[0])
    rows = [
        [
            int(r.pair) + 1,
            r.config,
            f"{r.seconds:.1f}",
            f"{r.tokens_per_s:,.0f}",
            num(r.train_loss, ".3f"),
            num(r.val_loss, ".3f"),
            r.note,
        ]
        for r in peer.itertuples()
    ]
    return [
        "## Beside nanoGPT",
        "",
        f"Whole processes, start-up included, alternated pair by pair: nanoGPT's README CPU recipe "
        f"(`run.sh {steps}`) against `posenc train {' '.join(RECIPE)} "
        f"data.path=… train.max_steps={steps}` with posenc's default intervals. "
        f"posenc's speed / nanoGPT's: **{speedup(df):.2f}×** (median over pairs of the wall-time ratio).",
        "",
        markdown_table(["pair", "program", "seconds", "tokens/s", "train loss", "val loss", "note"], rows),
        *(["", info["peer_stopped"]] if "peer_stopped" in info else []),
        "",
    ]


def eval_section(df: pd.DataFrame) -> list[str]:
    if not (df["section"] == "eval").any():  # --startup
        return []
    columns = [
        "scheme",
        "length",
        "× train",
        "tokens/s",
        "vs rope",
        "peak RSS (MiB)",
        "RSS growth (MiB)",
        "note",
    ]
    evals = df[df["section"] == "eval"]
    usual = evals["n_layer"].min()  # the default model's; a preset needing more layers is named with its own
    rows = [
        [
            r.scheme if r.n_layer == usual else f"{r.scheme} (n_layer={int(r.n_layer)})",
            int(r.length),
            int(r.multiple),
            num(r.tokens_per_s, ",.0f"),
            num(r.vs_rope, ".2f"),
            num(r.peak_rss_mib, ",.0f"),
            num(r.eval_rss_mib, ",.0f"),
            "" if pd.isna(r.note) else r.note,
        ]
        for r in evals.itertuples()
    ]
    return [
        "## Evaluation",
        "",
        "Default model, untrained weights, every case in a fresh process. "
        "RSS growth = peak RSS minus the process's peak before evaluating.",
        "",
        markdown_table(columns, rows),
    ]


def sampling_section(df: pd.DataFrame) -> list[str]:
    sample = df[df["section"] == "sample"]
    if not len(sample):
        return []
    rows = [
        [r.scheme, r.config, f"{r.length:.0f}", f"{r.tokens_per_s:,.0f}", f"{r.vs_baseline:.1f}×"]
        for r in sample.itertuples()
    ]
    return [
        "## Sampling",
        "",
        "`posenc sample`'s generation, default model untrained, one-token prompt, context growing; "
        "with and without the KV cache alternated, the median pair's speeds.",
        "",
        markdown_table(["scheme", "path", "tokens", "tokens/s", "vs whole context"], rows),
        "",
    ]


def startup_section(df: pd.DataFrame) -> list[str]:
    startup = df[df["section"] == "startup"]
    if not len(startup):
        return []
    rows = [
        [r.config, f"{r.seconds:.2f}", f"{r.median_s:.2f}", f"{r.pair:.0f}"] for r in startup.itertuples()
    ]
    return [
        "## Start-up",
        "",
        "Whole `posenc` processes, OMP_NUM_THREADS=1, the cases alternated; fastest and median of the rounds.",
        "",
        markdown_table(["command", "fastest s", "median s", "rounds"], rows),
        "",
    ]


def main_job_section(df: pd.DataFrame) -> list[str]:
    main = df[df["section"] == "main_job"]
    if not len(main):
        return []
    rows = [
        [f"posenc {r.config}" if r.config != "total" else "total", f"{r.seconds:.0f}"]
        for r in main.itertuples()
    ]
    return ["## README main job", "", markdown_table(["command", "seconds"], rows)]


def write_outputs(df: pd.DataFrame, info: dict[str, Any], out: Path) -> str:
    markdown = render(df.reindex(columns=list(dict.fromkeys([*df.columns, *COLUMNS]))), info)
    write_with(out / "bench.csv", lambda p: df.to_csv(p, index=False))
    write_text(out / "bench.md", markdown)
    return markdown
