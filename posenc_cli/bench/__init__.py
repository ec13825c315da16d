"""`posenc bench`: training and evaluation speed on the paths users run, against this machine's limits.

- peak.py: the GEMM peak of each precision (fp32, bf16), the denominator of MFU: a large square
  matmul's, and that of the default training step's own matmul shapes.
- step_profile.py: where an fp32 training step's time goes (matmuls, attention, optimizer, the rest).
- train_speed.py: `posenc train`'s own training function, timed per eval interval (median reported);
  its precision section: what train.precision=auto chose, beside every pinned precision's speed.
- peer.py: whole `posenc train` processes side by side with nanoGPT's CPU recipe, alternated.
- eval_memory.py: evaluation speed and peak memory, each case in a fresh process.
- sampling.py: `posenc sample`'s tokens/s with and without the KV cache, alternated.
- scheme_costs.py: each scheme's training step and evaluation at 8x, time and peak tensor memory, against
  rope at the same depth, alternated call by call.
- startup.py: whole processes a user waits on (a refused override, --help, a completion, a tiny run).
- main_job.py: wall time of the README's main job.
- markdown.py: bench.md and bench.csv; bench_targets.py: the targets of configs/bench_targets.yaml.

Everything is measured in one run so the ratios (MFU, each scheme against rope, posenc against
nanoGPT) stay meaningful on a busy machine.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from unittest import mock

import pandas as pd

from posenc_cli.bench.eval_memory import bench_eval
from posenc_cli.bench.main_job import bench_main_job
from posenc_cli.bench.markdown import machine, write_outputs
from posenc_cli.bench.peak import Peak
from posenc_cli.bench.peer import side_by_side
from posenc_cli.bench.processes import TINY_MODEL
from posenc_cli.bench.sampling import bench_sampling
from posenc_cli.bench.scheme_costs import bench_costs
from posenc_cli.bench.startup import bench_startup
from posenc_cli.bench.step_profile import bench_step
from posenc_cli.bench.train_speed import bench_levers, bench_precision, bench_training
from posenc_cli.core.file_sets import SetKind, output_set
from posenc_cli.model.positional import SCHEMES
from posenc_cli.training.precision_choice import CACHE_ENV
from posenc_cli.training.stopping import terminate_as_interrupt

__all__ = ["Effort", "FULL", "QUICK", "run_bench", "write_bench"]


@dataclass(frozen=True)
class Effort:
    """How long to measure: the full benchmark, or --quick's smoke version."""

    gemm_size: int = 2048
    gemm_repeats: int = 10
    profile_steps: int = 5  # profiled steps of the fp32 step's breakdown, after two unprofiled
    train_intervals: int = 3  # eval intervals of training timed per run; the median one is reported
    eval_tokens: int = 16384  # tokens scored per evaluation case (at least one window)
    peer_steps: int = 400  # steps of each whole-process run in the nanoGPT side-by-side
    peer_pairs: int = 3  # alternated (nanoGPT, posenc) pairs; the median ratio is reported
    sample_tokens: int = 1000  # tokens generated per sampling measurement
    sample_pairs: int = 3  # alternated (cached, uncached) pairs per scheme; the median speed-up is reported
    startup_repeats: int = 3  # alternated rounds of the start-up cases; each case's fastest is reported
    cost_pairs: int = (
        5  # alternated (scheme, rope) calls per phase of the cost table; the medians are reported
    )
    overrides: tuple[str, ...] = ()  # on top of each benchmarked configuration


FULL = Effort()
QUICK = Effort(
    gemm_size=256,
    gemm_repeats=2,
    profile_steps=1,
    train_intervals=2,
    eval_tokens=64,
    peer_steps=20,
    peer_pairs=1,
    sample_tokens=20,
    sample_pairs=1,
    startup_repeats=1,
    cost_pairs=1,
    overrides=(
        *TINY_MODEL,
        "train.eval_interval=2",
        "train.log_interval=1",
        "train.checkpoint_interval=2",
        "train.eval_batches=1",
    ),
)


def run_bench(
    *,
    quick: bool = False,
    main_job: bool = False,
    levers: bool = False,
    schemes: list[str] | None = None,
    peer: Path | None = None,
    peer_steps: int | None = None,
    startup_only: bool = False,
    costs_only: bool = False,
) -> tuple[pd.DataFrame, dict]:
    """Every section of the benchmark as tidy rows, and the machine it ran on. `peer`: nanoGPT's
    peer directory (with run.sh); None or absent: the side-by-side is skipped and says so.
    `peer_steps`: steps of each side-by-side run (default: the effort's). `startup_only`: the
    start-up section alone (seconds, not minutes); `costs_only`: the per-scheme cost table alone (minutes);
    both: those two."""

    effort = QUICK if quick else FULL
    if peer_steps is not None:
        effort = replace(effort, peer_steps=peer_steps)
    schemes = schemes or list(SCHEMES)
    info = machine()
    with terminate_as_interrupt(), own_precision_cache():  # SIGTERM as Ctrl-C: temporary files go
        if startup_only or costs_only:
            rows = bench_costs(schemes, effort) if costs_only else []
            rows += bench_startup(effort.startup_repeats) if startup_only else []
        else:
            startup = bench_startup(effort.startup_repeats)
            speed = speed_rows(
                effort, schemes, peer, info=info, levers=levers, main_job=main_job, quick=quick
            )
            rows = [*speed, *startup]
    info["load_avg_1min_at_end"] = round(os.getloadavg()[0], 2)
    df = pd.DataFrame(rows)
    return (df if startup_only or costs_only else add_ratios(df)), info


@contextlib.contextmanager
def own_precision_cache():
    """auto's precision choices, for every run the benchmark starts, in a cache of its own: the user's
    is neither read (the timings would depend on what it holds) nor written."""
    with tempfile.TemporaryDirectory(prefix="posenc-bench-cache-") as cache:
        with mock.patch.dict(os.environ, {CACHE_ENV: str(Path(cache) / "precision.json")}):
            yield


def speed_rows(
    effort: Effort,
    schemes: list[str],
    peer: Path | None,
    *,
    info: dict,
    levers: bool,
    main_job: bool,
    quick: bool,
) -> list[dict]:
    """Training, the side-by-side, evaluation, sampling and (if asked) the README's main job."""
    peak = Peak(effort.gemm_size, effort.gemm_repeats)
    peak.measure()
    rows = bench_training(schemes, effort, peak)
    if levers:
        rows += bench_levers(effort, peak)
    profiled = bench_step(effort, peak, {row["precision"] for row in rows})
    rows = [*peak.rows(), *[peak.with_mfu(row) for row in rows], *profiled]
    with tempfile.TemporaryDirectory(prefix="posenc-bench-precision-") as cache:
        rows += bench_precision(effort, Path(cache) / "precision.json")
    rows += side_by_side(peer, effort, info)
    rows += bench_eval(schemes, effort)
    rows += bench_costs(schemes, effort)
    rows += bench_sampling(effort)
    if main_job:
        rows += bench_main_job(quick)
    return rows


def add_ratios(df: pd.DataFrame) -> pd.DataFrame:
    """tokens/s of each scheme over rope's at the same config, depth and length (a preset measured deeper
    than the default model has no rope here: the cost table holds its ratios)."""
    df = df.copy()
    df["vs_rope"] = float("nan")
    compared = df[df["section"].isin(["train", "eval"]) & df["tokens_per_s"].notna()]
    for _, group in compared.groupby(["section", "config", "length", "n_layer"]):
        rope = group[group["scheme"] == "rope"]["tokens_per_s"]
        if len(rope):
            df.loc[group.index, "vs_rope"] = group["tokens_per_s"] / rope.iloc[0]
    return df


def write_bench(df: pd.DataFrame, info: dict, out: Path) -> str:
    """bench.csv and bench.md as one output set of its own kind (a manifest lists them), so that no
    eval, probe or export writes into it, nor it into theirs: bench.md's text."""
    with output_set(out, [], kind=SetKind.BENCH) as result:
        markdown = write_outputs(df, info, out)
        result.written += [out / "bench.csv", out / "bench.md"]
    return markdown
