"""`posenc probe`: passkey and needle retrieval by depth and length, once per RoPE scaling."""

from __future__ import annotations

from typing import Any

from posenc_cli.cli.app import app, runs_argument, with_options
from posenc_cli.core import ui
from posenc_cli.core.option_groups import ProbeOptions
from posenc_cli.core.options import build


@app.command()
@with_options(ProbeOptions, runs_argument())
def probe(runs: list[str] | None, **given: Any) -> None:
    """Needle retrieval: can a model find a 5-digit key (or several) at depth δ in a prompt of L tokens?

    Filler comes from each run's own validation text; the phrasing is the one the synthetic corpus
    teaches with data.passkey_rate>0 and data.probe_task (see experiment=probe). hf: models get the
    task in English (Mohtashami & Jaggi's prompt for the passkey: "The grass is green. …") in their own tokenizer, whole sentences up to L tokens. Writes probe.csv,
    passkey.md (retrieval by depth and length), a heatmap per scheme (probe_<scheme>.png, probe_<scheme>.svg),
    probe_summary.png, probe_summary.svg, results.json (how it was made: command, versions, machine) and
    manifest.json, and rewrites comparison.md with "passkey @ L" rows (the task's name @ L) when the output
    directory also holds eval's ppl.csv. Runs are chosen as in eval.
    """
    # imported when the command runs, so that --help leaves torch unimported
    from posenc_cli.report.run_probe import probe_options

    probing = probe_options(build(ProbeOptions, given, runs=list(runs or [])))
    show_probe(probing.rows, probing.written, probing.out, rule=probing.rule)


def show_probe(df, written: list, out, *, rule) -> None:
    """The retrieval table, with the effective length by retrieval, on stdout; what was written on stderr."""
    # imported when the command runs, so that --help leaves torch unimported
    from posenc_cli.report.cells import markdown_table
    from posenc_cli.report.effective_length import effective_length_row
    from posenc_cli.report.passkey_tables import passkey_rows, probe_columns

    schemes = probe_columns(df)
    effective, note = effective_length_row(None, df, schemes, rule=rule)
    rows = [*passkey_rows(df, schemes), effective]
    ui.out.print(
        markdown_table(["% retrieved"] + schemes, rows) + f"\n- {note}", markup=False, highlight=False
    )
    ui.err.print(f"wrote {', '.join(p.name for p in written)} to {out}")
