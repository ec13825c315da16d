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

    scaling = {None: "—", True: "yes", False: "no"}
    rows = [[scaling[v] if k == "scales_embeddings" else v for k, v in row.items()] for row in scheme_rows()]
    # each column as wide as its longest word and "used by" the rest, one space between columns: the
    # table fits 80 columns and wraps only between words
    table = Table(title="Positional schemes", box=box.SIMPLE_HEAD, padding=0, show_edge=False)
    for i, column in enumerate(COLUMNS.values()):
        longest = max(len(word) for text in [column, *(row[i] for row in rows)] for word in text.split())
        table.add_column(column, width=longest if i < len(COLUMNS) - 1 else None, min_width=longest)
    for row in rows:
        table.add_row(*row)
    ui.out.print(table)
    ui.out.print(
        "×√d: the default of scheme.scale_embeddings=true|false, an option of every additive "
        "scheme (token embeddings × √d before the position vectors are added, Vaswani et al. 2017 §3.4).",
        highlight=False,
    )
    ui.out.print("Check a scheme's claims and draw it: posenc inspect SCHEME", highlight=False)
