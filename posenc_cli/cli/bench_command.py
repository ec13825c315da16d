"""`posenc bench`: speed and memory, measured on this machine."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from posenc_cli.cli.app import app, flag, force_option
from posenc_cli.core import ui
from posenc_cli.core.errors import UsageError, require_positive_int
from posenc_cli.core.file_sets import SetKind

DEFAULT_PEER = "../shared/peers/nanogpt"  # beside this repository's checkout; users have none
COSTS_HELP = (
    "Only each scheme's training step and evaluation at 8x the training length, time and peak memory, "
    "against rope alternated at the same depth (a few minutes; with --startup, both)."
)


@app.command()
def bench(
    quick: bool = flag(
        "A smoke version on a tiny model that runs in seconds; its numbers mean nothing.", "--quick"
    ),
    main_job: bool = typer.Option(
        True, "--main-job/--no-main-job", help="Time `make demo`'s commands (five trainings, eval): minutes."
    ),
    levers: bool = flag(
        "Also measure settings that are off by default through the same training path: 1 thread, fp32.",
        "--levers",
    ),
    nanogpt: Optional[str] = typer.Option(
        None,
        "--nanogpt",
        help=f"nanoGPT's peer directory (with run.sh) for the side-by-side; 'none' skips it. Default: "
        f"{DEFAULT_PEER}, and where it is absent the report says so.",
    ),
    peer_steps: Optional[int] = typer.Option(
        None,
        "--peer-steps",
        help="Training steps of each run in the nanoGPT side-by-side (default: 400; nanoGPT's README CPU run is 2000).",
    ),
    startup: bool = flag(
        "Only the start-up figures: whole processes, alternated and repeated (seconds).", "--startup"
    ),
    costs: bool = flag(COSTS_HELP, "--costs"),
    out: Optional[str] = typer.Option(
        None, help="Output directory for bench.csv and bench.md (default: outputs/bench/<time>)."
    ),
    scheme: Optional[List[str]] = typer.Option(
        None, "--scheme", help="Benchmark only this scheme (repeatable; default: all)."
    ),
    force: bool = force_option(),
) -> None:
    """Speed on the paths users run, against this machine's limits: training, nanoGPT side by side, evaluation.

    Training: `posenc train`'s own training function per scheme (median eval interval), MFU against
    the GEMM peak of the precision it computes in; `posenc train` beside nanoGPT's CPU recipe as whole
    processes, alternated; evaluation tokens/s and peak memory at 1x/8x/32x the training length;
    `posenc sample`'s tokens/s with and without the KV cache; start-up as whole processes; the
    README's main job (`make demo`'s commands) as whole processes. Writes bench.csv and bench.md. The numbers are this machine's, now: on a busy machine compare the ratios (MFU, vs rope, vs nanoGPT) rather than the absolute tokens/s."""
    # imported when the command runs, so that --help leaves torch unimported
    from posenc_cli.bench import run_bench
    from posenc_cli.core.device import cpu_bf16
    from posenc_cli.rundir.destinations import owned_out

    schemes, peer = known_schemes(scheme), peer_directory(nanogpt, peer_steps)
    cpu_bf16()  # a bad POSENC_CPU_BF16 is refused here, not by the first training minutes in
    out_dir = owned_out(out, SetKind.BENCH, force=force)  # a second writer, or another set, refused now
    df, info = run_bench(
        quick=quick,
        main_job=main_job,
        levers=levers,
        schemes=schemes,
        peer=peer,
        peer_steps=peer_steps,
        startup_only=startup,
        costs_only=costs,
    )
    show(df, info, out_dir)


def show(df, info: dict, out: Path | None) -> None:
    """bench.csv and bench.md written to `out` (default: outputs/bench/<time>), bench.md printed."""
    from posenc_cli.bench import write_bench
    from posenc_cli.rundir.destinations import default_out

    out = out or default_out("bench")
    ui.out.print(write_bench(df, info, out), markup=False, highlight=False, soft_wrap=True)
    ui.err.print(f"wrote bench.csv, bench.md to {out}")


def peer_directory(given: str | None, steps: int | None) -> Path | None:
    """--nanogpt as the side-by-side takes it (--peer-steps checked too): None for 'none'; the default
    peer even where it is absent (the report says so); a directory named on the command line only if
    it holds a peer."""
    from posenc_cli.bench.peer import peer_files

    if steps is not None:
        require_positive_int("--peer-steps", steps)
    if given == "none":
        return None
    if given is not None and peer_files(Path(given)) is None:
        raise UsageError(
            f"--nanogpt {given} holds no nanoGPT peer (run.sh there, ../../data/tinyshakespeare.txt beside "
            "it); give such a directory, or 'none' to skip the side-by-side"
        )
    return Path(given or DEFAULT_PEER)


def known_schemes(names: list[str] | None) -> list[str] | None:
    """--scheme's names, refused by the first one that is not a scheme."""
    from posenc_cli.model.positional import SCHEMES

    unknown = [s for s in names or [] if s not in SCHEMES]
    if unknown:
        raise UsageError(f"--scheme {unknown[0]} is not known; choose from: {', '.join(SCHEMES)}")
    return names
