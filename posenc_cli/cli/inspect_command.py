"""`posenc inspect`: the chapters' properties of a scheme, checked and drawn."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from posenc_cli.cli.app import app, choice
from posenc_cli.core.choices import ALIBI_SLOPES, ROPE_LAYOUTS
from posenc_cli.core.errors import UsageError, require_int

LAYOUT_HELP = "rope, xpos, p_rope: half (default) or interleaved, the chapter's pairs (2i, 2i+1)."
SLOPES_HELP = "alibi: paper (default, 2^(-8h/H)) or chapter (1/2^h)."
ROTARY_HELP = "rope: rotate the first int(p·head_dim) dimensions only (GPT-NeoX's rotary_pct; default 1)."
KEEP_HELP = "p_rope: the share of pairs, highest frequencies first, that turn (default 0.75)."


@app.command("inspect")
def inspect_command(
    scheme: Optional[str] = typer.Argument(
        None, help="Scheme to inspect (see `posenc schemes`); optional with --run."
    ),
    dim: Optional[int] = typer.Option(None, help="Model width d (default 128; with --run, the run's)."),
    length: Optional[int] = typer.Option(
        None, help="Positions to check and draw (default 128; with --run, its training length)."
    ),
    heads: Optional[int] = typer.Option(None, help="Attention heads (default 4; with --run, the run's)."),
    run: Optional[Path] = typer.Option(
        None, "--run", help="A trained run directory: inspect its trained scheme and draw its attention."
    ),
    layer: Optional[int] = typer.Option(
        None,
        help="With --run: the layer whose attention is drawn; of a layer schedule: the layer inspected (default 0).",
    ),
    head: Optional[int] = typer.Option(
        None, help="With --run: the head whose attention is drawn (default 0)."
    ),
    out: Optional[str] = typer.Option(
        None, help="Figure directory (default outputs/inspect/<scheme or run>)."
    ),
    layout: Optional[str] = choice(None, ROPE_LAYOUTS, LAYOUT_HELP, "--layout"),
    slopes: Optional[str] = choice(None, ALIBI_SLOPES, SLOPES_HELP, "--slopes"),
    rotary_fraction: Optional[float] = typer.Option(None, help=ROTARY_HELP),
    keep_fraction: Optional[float] = typer.Option(None, help=KEEP_HELP),
) -> None:
    """Check the chapters' claims about one scheme (PASS/FAIL with the measured number) and draw it.

    Checks follow the scheme's kind:
      every scheme: attention is permutation-equivariant only without positions
      additive: same vector across the batch, unique per position; bounded and shift-linear if computed, refused past max_len if a table
      rotary: norms kept, q·k depends on m − n only
      bias: depends on distance only; linear biases follow ALiBi's geometric slopes

    Examples:
      posenc inspect rope --dim 64 --heads 2
      posenc inspect --run outputs/runs/RUN --layer 1 --head 2
    """
    # imported when the command runs, so that --help leaves torch unimported
    from posenc_cli.inspection.inspect_scheme import inspect_scheme, print_report
    from posenc_cli.rundir.destinations import checked_out

    given = dict(layout=layout, slopes=slopes, rotary_fraction=rotary_fraction, keep_fraction=keep_fraction)
    options = {key: value for key, value in given.items() if value is not None}
    check_options(dim, heads, length, run=run, layer=layer, head=head, scheme=scheme)
    print_report(
        inspect_scheme(
            name=scheme,
            dim=dim,
            length=length,
            heads=heads,
            out=checked_out(out),
            run_dir=run,
            layer=layer or 0,
            head=head or 0,
            options=options,
        )
    )


def check_options(
    dim: int | None,
    heads: int | None,
    length: int | None,
    *,
    run: Path | None,
    layer: int | None,
    head: int | None,
    scheme: str | None = None,
) -> None:
    """Sizes bounded so the checks' length x length matrices fit, --layer and --head only with --run,
    and an even width (positions are encoded in pairs of dimensions)."""
    for option, value, most in (("--dim", dim, 8192), ("--heads", heads, 256), ("--length", length, 8192)):
        if value is not None:
            require_int(option, value, at_least=2 if option != "--heads" else 1, at_most=most)
    from posenc_cli.model.positional import SCHEMES

    schedule = scheme in SCHEMES and SCHEMES[scheme].kind == "schedule"  # --layer picks one of its layers
    for option, value in (("--layer", None if schedule else layer), ("--head", head)):
        if value is not None and run is None:
            raise UsageError(
                f"{option} {value} applies only with --run RUN_DIR (--layer also to a layer schedule); "
                f"add --run or drop {option}"
            )
    if dim is not None and dim % 2:
        raise UsageError(f"--dim {dim} must be even (positions are encoded in pairs of dimensions)")
