"""`posenc schemes`: every scheme and the chapters' claims."""

from __future__ import annotations

from rich.table import Table

from posenc_cli.cli.app import app
from posenc_cli.core import ui


@app.command()
def schemes() -> None:
    """List every positional scheme: how it plugs in, what it costs, and what the chapters claim."""
    from rich import box

    # imported when the command runs, so that --help leaves torch unimported
    from posenc_cli.model.positional import SCHEMES

    table = Table(title="Positional schemes", box=box.SIMPLE_HEAD)
    for column in (
        "scheme",
        "kind",
        "positional\nparameters",
        "relative\nposition",
        "×√d",
        "extrapolation\n(claimed)",
        "used by",
    ):
        table.add_column(column, overflow="fold", no_wrap=column in ("scheme", "kind", "×√d"))
    scaling = {None: "—", True: "yes", False: "no"}
    for name, cls in SCHEMES.items():
        table.add_row(
            name,
            cls.kind,
            cls.param_formula,
            cls.relative,
            scaling[cls.scales_embeddings],
            cls.claim.extrapolation,
            cls.claim.used_by,
        )
    ui.out.print(table)
    ui.out.print(
        "×√d: the default of scheme.scale_embeddings=true|false, an option of every additive "
        "scheme (token embeddings × √d before the position vectors are added, Vaswani et al. 2017 §3.4).",
        highlight=False,
    )
    ui.out.print("Check a scheme's claims and draw it: posenc inspect SCHEME", highlight=False)
