"""bench.md: the machine, each section's table, and the targets of configs/bench_targets.yaml."""

from __future__ import annotations

import datetime
import os
import platform
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from posenc_cli.bench.eval_memory import EVAL_MULTIPLES
from posenc_cli.bench.peer import RECIPE, speedup
from posenc_cli.config.location import config_dir
from posenc_cli.core.atomic import write_text, write_with
from posenc_cli.model.positional import SCHEMES
from posenc_cli.report.tables import markdown_table

COLUMNS = (
    "note",
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
)  # not every section has them
TARGETS_FILE = "bench_targets.yaml"


def machine() -> dict[str, Any]:
    model = platform.processor() or platform.machine()
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text().splitlines()
        model = next(line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "isa": torch.backends.cpu.get_cpu_capability(),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "unset"),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "load_avg_1min_at_start": round(os.getloadavg()[0], 2),
    }


def load_targets() -> dict[str, float]:
    from omegaconf import OmegaConf

    return OmegaConf.to_container(OmegaConf.load(config_dir() / TARGETS_FILE))


def mfu_text(mfu: float) -> str:
    """MFU as a percentage; above 100 % the peak was measured at a busier moment than the run, so no
    percentage is printed."""
    return f"{mfu:.1%}" if mfu <= 1 else "n/a (above the measured peak: rerun on a quiet machine)"


def targets(df: pd.DataFrame) -> list[list[str]]:
    """This run's numbers against configs/bench_targets.yaml: [target, measured, met]."""

    goal = load_targets()
    rows = []
    train = df[df["section"] == "train"]
    if len(train):
        worst = train.loc[train["mfu"].idxmin()]
        rows.append(
            [
                f"training MFU ≥ {goal['train_mfu']:.0%} for every scheme (default config, against the "
                "peak of its precision)",
                f"lowest {mfu_text(worst['mfu'])} ({worst['scheme']}, {worst['precision']})",
                worst["mfu"] >= goal["train_mfu"],
            ]
        )
    biased = train[train["scheme"].map(lambda s: SCHEMES[s].adds_bias)]
    if len(biased) and train["vs_rope"].notna().any():
        worst = biased.loc[biased["vs_rope"].idxmin()]
        rows.append(
            [
                f"bias schemes within {1 - goal['bias_vs_rope']:.0%} of rope's training tokens/s",
                f"lowest {worst['vs_rope']:.2f}× rope ({worst['scheme']})",
                worst["vs_rope"] >= goal["bias_vs_rope"],
            ]
        )
    ratio = speedup(df)
    if ratio is not None:
        rows.append(
            [
                f"posenc train ≥ {goal['nanogpt_speedup']}× nanoGPT's speed at its CPU recipe "
                "(whole process)",
                f"{ratio:.2f}× (median of pairs)",
                ratio >= goal["nanogpt_speedup"],
            ]
        )
    longest = df[
        (df["section"] == "eval") & (df["multiple"] == max(EVAL_MULTIPLES)) & df["peak_rss_mib"].notna()
    ]
    if len(longest):
        worst = longest.loc[longest["peak_rss_mib"].idxmax()]
        gib = worst["peak_rss_mib"] / 1024
        rows.append(
            [
                f"eval peak RSS at {max(EVAL_MULTIPLES)}× the training length < {goal['eval_rss_gib']} GiB",
                f"highest {gib:.2f} GiB ({worst['scheme']})",
                gib < goal["eval_rss_gib"],
            ]
        )
    evals = df[(df["section"] == "eval") & df["vs_rope"].notna()]
    if len(evals):
        worst = evals.loc[evals["vs_rope"].idxmin()]
        slowdown = 1 / worst["vs_rope"]
        rows.append(
            [
                f"eval: no scheme > {goal['eval_slowdown']:.0f}× slower per token than rope",
                f"slowest {slowdown:.2f}× ({worst['scheme']} @ {int(worst['length'])})",
                slowdown <= goal["eval_slowdown"],
            ]
        )
    total = df[(df["section"] == "main_job") & (df["config"] == "total")]
    if len(total):
        seconds = total["seconds"].iloc[0]
        rows.append(
            [
                f"README main job ≤ {goal['main_job_s'] / 60:g} min",
                f"{seconds / 60:.1f} min",
                seconds <= goal["main_job_s"],
            ]
        )
    return [[target, measured, "yes" if met else "**no**"] for target, measured, met in rows]


def render(df: pd.DataFrame, info: dict[str, Any]) -> str:

    def num(value, fmt: str) -> str:
        return "—" if pd.isna(value) else format(value, fmt)

    gemm = df[df["section"] == "gemm"]
    peaks = ", ".join(
        f"{r.precision} **{r.gflops:.1f} GFLOP/s** ({r.config.split()[0]})" for r in gemm.itertuples()
    )
    lines = [
        f"# posenc bench, {info['date']}",
        "",
        f"Machine: {info['cpu']}, {info['cores']} cores, torch {info['torch']} ({info['isa']}), "
        f"{info['torch_threads']} threads, OMP_WAIT_POLICY {info['omp_wait_policy']}; 1-min load average "
        f"{info['load_avg_1min_at_start']} at start, {info['load_avg_1min_at_end']} at end.",
        "",
        f"GEMM peaks (best square matmul of the run, smaller where one would take over a second): {peaks}.",
        "",
        "## Training",
        "",
        "`posenc train`'s own training function at the default configuration, with its logging, "
        "validation and checkpoints at the configured intervals. tokens/s: the median eval interval "
        "after the first (train.py's own rate, validation pass left out); whole loop: steps × batch × T / "
        "the loop's wall time, validation, checkpoints and warm-up included. MFU = tokens/s × "
        "(6·N + 12·n_layer·d_model·T) / the GEMM peak of the precision the run computes in; N = "
        "non-positional parameters, tied embedding counted once.",
        "",
    ]
    train = df[df["section"] == "train"]
    lines.append(
        markdown_table(
            [
                "scheme",
                "n_layer × d_model",
                "T",
                "batch",
                "steps",
                "precision",
                "tokens/s",
                "whole loop",
                "GFLOP/s",
                "MFU",
                "vs rope",
            ],
            [
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
                    num(r.vs_rope, ".2f"),
                ]
                for r in train.itertuples()
            ],
        )
    )
    levers = df[df["section"] == "lever"]
    if len(levers):
        lines += [
            "## Levers (default config, not on by default)",
            "",
            "Each setting through the same training path as the baseline.",
            "",
        ]
        lines.append(
            markdown_table(
                ["scheme", "lever", "precision", "tokens/s", "vs baseline", "MFU"],
                [
                    [
                        r.scheme,
                        r.lever,
                        r.precision,
                        f"{r.tokens_per_s:,.0f}",
                        f"{r.vs_baseline:.2f}",
                        mfu_text(r.mfu),
                    ]
                    for r in levers.itertuples()
                ],
            )
        )
    lines += ["## Beside nanoGPT", ""]
    peer = df[df["section"] == "peer"]
    if len(peer):
        ratio = speedup(df)
        lines += [
            f"Whole processes, start-up included, alternated pair by pair: nanoGPT's README CPU recipe "
            f"(`run.sh {int(peer['steps'].iloc[0])}`) against `posenc train {' '.join(RECIPE)} "
            f"data.path=… train.max_steps={int(peer['steps'].iloc[0])}` with posenc's default intervals. "
            f"posenc's speed / nanoGPT's: **{ratio:.2f}×** (median over pairs of the wall-time ratio).",
            "",
        ]
        lines.append(
            markdown_table(
                ["pair", "program", "seconds", "tokens/s", "train loss", "val loss", "note"],
                [
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
                ],
            )
        )
    else:
        lines += [info.get("peer", "Not run (--nanogpt none)."), ""]
    lines += [
        "## Evaluation",
        "",
        "Default model, untrained weights, every case in a fresh process. "
        "RSS growth = peak RSS minus the process's peak before evaluating.",
        "",
    ]
    evals = df[df["section"] == "eval"]
    lines.append(
        markdown_table(
            [
                "scheme",
                "length",
                "× train",
                "tokens/s",
                "vs rope",
                "peak RSS (MiB)",
                "RSS growth (MiB)",
                "note",
            ],
            [
                [
                    r.scheme,
                    int(r.length),
                    int(r.multiple),
                    num(r.tokens_per_s, ",.0f"),
                    num(r.vs_rope, ".2f"),
                    num(r.peak_rss_mib, ",.0f"),
                    num(r.eval_rss_mib, ",.0f"),
                    "" if pd.isna(r.note) else r.note,
                ]
                for r in evals.itertuples()
            ],
        )
    )
    main = df[df["section"] == "main_job"]
    if len(main):
        lines += ["## README main job", ""]
        lines.append(
            markdown_table(
                ["command", "seconds"],
                [
                    [f"posenc {r.config}" if r.config != "total" else "total", f"{r.seconds:.0f}"]
                    for r in main.itertuples()
                ],
            )
        )
    lines += [
        "## Targets",
        "",
        f"From configs/{TARGETS_FILE}.",
        "",
        markdown_table(["target", "measured", "met"], targets(df)),
    ]
    return "\n".join(lines)


def write_outputs(df: pd.DataFrame, info: dict[str, Any], out: Path) -> str:
    markdown = render(df.reindex(columns=list(dict.fromkeys([*df.columns, *COLUMNS]))), info)
    write_with(out / "bench.csv", lambda p: df.to_csv(p, index=False))
    write_text(out / "bench.md", markdown)
    return markdown
