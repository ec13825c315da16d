"""`posenc export`: a run as a model transformers can load."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from posenc_cli.cli.app import app, force_option
from posenc_cli.core import ui
from posenc_cli.core.install import needs

EXPORT_HELP = f"""Write a run's model as model.safetensors + config.json (and manifest.json, their hashes and the
run's id, written last): shareable, and loaded without pickle
(posenc_cli.hf.export_loading.load_export gives the same logits, and refuses an export whose
files do not match its manifest). The directory also loads in transformers: AutoModelForCausalLM.from_pretrained(DIR, trust_remote_code=True) with
posenc installed (modeling_posenc.py), and AutoTokenizer likewise (its end of text is the newline;
lm-evaluation-harness's hf model reads it so); posenc eval hf:DIR (or DIR) scores it. A run being trained is refused. Needs safetensors and tokenizers ({escape(needs("hf", "safetensors", "tokenizers"))})."""


@app.command("export", help=EXPORT_HELP)
def export_command(
    run: Path = typer.Argument(..., help="A trained run directory."),
    out: Optional[str] = typer.Option(
        None, help="Directory for model.safetensors and config.json (default: the run directory)."
    ),
    force: bool = force_option(),
) -> None:
    """EXPORT_HELP: its install hint is spelled for this install (core.install)."""
    # imported when the command runs, so that --help leaves torch unimported
    from posenc_cli.core.file_sets import read_manifest
    from posenc_cli.hf.export import export_run, lacks_document_end

    written = export_run(run, out, force=force)
    ui.err.print(f"wrote {', '.join(read_manifest(written)['files'])}, manifest.json to {written}")
    if lacks_document_end(written):
        ui.err.print(
            "note: its vocabulary has no newline, so its tokenizer has no end of text: "
            "lm-evaluation-harness needs prefix_token_id=ID in --model_args"
        )
