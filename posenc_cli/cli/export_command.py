"""`posenc export`: a run as a model transformers can load."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from posenc_cli.cli.app import app
from posenc_cli.core import ui


@app.command("export")
def export_command(
    run: Path = typer.Argument(..., help="A trained run directory."),
    out: Optional[str] = typer.Option(
        None, help="Directory for model.safetensors and config.json (default: the run directory)."
    ),
) -> None:
    """Write a run's model as model.safetensors + config.json (and manifest.json, their hashes and the
    run's id, written last): shareable, and loaded without pickle (posenc_cli.evaluation.export.load_export
    gives the same logits, and refuses an export whose files do not match its manifest). A run being
    trained is refused. Needs safetensors: pip install 'posenc\\[hf]'."""
    # imported when the command runs, so that --help leaves torch unimported
    from posenc_cli.core.atomic import MANIFEST
    from posenc_cli.evaluation.export import CONFIG, WEIGHTS, export_run

    written = export_run(run, out)
    ui.err.print(f"wrote {WEIGHTS}, {CONFIG}, {MANIFEST} to {written}")
