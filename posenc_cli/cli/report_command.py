"""`posenc report`: tables and figures rebuilt from output sets' results.json, one set or several merged."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from posenc_cli.cli.app import app, choice, force_option
from posenc_cli.core import ui
from posenc_cli.core.choices import LANGS
from posenc_cli.core.file_sets import SetKind


@app.command("report")
def report_command(
    dirs: List[Path] = typer.Argument(
        ...,
        metavar="DIRS...",
        help="Output directories of posenc eval (text or task runs) or probe (or report).",
    ),
    out: Optional[str] = typer.Option(None, help="Output directory (default: outputs/report/<time>)."),
    lang: str = choice("en", LANGS, "en, or zh to add the chapters' own words to comparison.md.", "--lang"),
    force: bool = force_option(),
) -> None:
    """Rebuild tables and figures from the results.json of eval and probe output sets, without scoring
    anything: one set again, or several merged into one (a run counts once).

    Each results.json is read only when its set's manifest.json lists it with the same sha256 and size.
    Writes what eval and probe write (ppl.csv, comparison.md, figures, probe.csv, ...) and a results.json
    of the merged set that keeps every provenance.
    """
    # imported when the command runs, so that --help leaves torch unimported
    from posenc_cli.report.rebuild import merged_sections, rebuild
    from posenc_cli.rundir.destinations import default_out, owned_out

    out_dir = owned_out(out, SetKind.EVALUATION, force=force)
    merged = merged_sections(list(dirs))  # every file checked before anything is written
    written = rebuild(merged, out_dir or default_out("report"), lang=lang)
    ui.err.print(f"wrote {', '.join(p.name for p in written)} to {written[0].parent}")
