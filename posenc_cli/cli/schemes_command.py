"""`posenc schemes`: every scheme and the chapters' claims."""

from __future__ import annotations

from rich.table import Table

from posenc_cli.cli.app import app
from posenc_cli.core import ui

COLUMNS = {  # a row's key -> the table's heading
    "scheme": "scheme",
    "kind": "kind",
    "positional_params": "positional\nparameters",
    "relative": "relative\nposition",
    "scales_embeddings": "×√d",
    "extrapolation": "extrapolation\n(claimed)",
    "used_by": "used by",
}


def scheme_rows() -> list[dict]:
    """Every scheme as `posenc schemes` shows it (posenc.schemes() returns these rows too)."""
    # imported when the command runs, so that --help leaves torch unimported
    from posenc_cli.model.positional import SCHEMES

    return [
        {
            "scheme": name,
            "kind": cls.kind,
            "positional_params": cls.param_formula,
            "relative": cls.relative,
            "scales_embeddings": cls.scales_embeddings,
            "extrapolation": cls.claim.extrapolation,
            "used_by": cls.claim.used_by,
        }
        for name, cls in SCHEMES.items()
    ]


@app.command()
def schemes() -> None:
    """List every positional scheme: how it plugs in, what it costs, and what the chapters claim."""
    from rich import box

    table = Table(title="Positional schemes", box=box.SIMPLE_HEAD)
    for key, column in COLUMNS.items():
        table.add_column(column, overflow="fold", no_wrap=key in ("scheme", "kind", "scales_embeddings"))
    scaling = {None: "—", True: "yes", False: "no"}
    for row in scheme_rows():
        table.add_row(*(scaling[v] if k == "scales_embeddings" else v for k, v in row.items()))
    ui.out.print(table)
    ui.out.print(
        "×√d: the default of scheme.scale_embeddings=true|false, an option of every additive "
        "scheme (token embeddings × √d before the position vectors are added, Vaswani et al. 2017 §3.4).",
        highlight=False,
    )
    ui.out.print("Check a scheme's claims and draw it: posenc inspect SCHEME", highlight=False)
