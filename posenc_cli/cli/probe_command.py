"""`posenc probe`: passkey and needle retrieval by depth and length, once per RoPE scaling."""

from __future__ import annotations

from typing import List, Optional

import typer

from posenc_cli.cli.app import (
    app,
    choice,
    device_option,
    extension_option,
    flag,
    force_option,
    lengths_option,
    ppl_tolerance_option,
    retrieval_threshold_option,
    rope_factor_option,
    rope_scaling_option,
    runs_argument,
)
from posenc_cli.core import ui
from posenc_cli.core.choices import (
    HF_DEVICE_MAPS,
    HF_DTYPES,
    LANGS,
    PROBE_TASKS,
)


@app.command()
def probe(
    runs: List[str] = runs_argument(),
    lengths: str = lengths_option(
        "256,512,1024,2048",
        "Comma list of trial lengths. A run's training length is added (said up front) when it is shorter than the longest asked, or with --add-context.",
    ),
    depths: str = typer.Option(
        "0.1,0.5,0.9",
        help="Comma list of relative depths of the key sentence in the filler (0 = start, 1 = end).",
    ),
    trials: int = typer.Option(
        50, help="Trials per run, length and depth (a fresh key and filler each; at most 10,000)."
    ),
    seed: int = typer.Option(0, help="Seed for keys and filler: the same trials for every run."),
    out: Optional[str] = typer.Option(
        None,
        help="Output directory (default: outputs/probe/<time>). Use eval's --out to get passkey rows in its comparison.md.",
    ),
    device: str = device_option(),
    lang: str = choice(
        "en", LANGS, "en, or zh: as eval's --lang, for the comparison.md it rewrites.", "--lang"
    ),
    hf_context: Optional[int] = typer.Option(
        None, "--hf-context", help="Training length of hf: models, when their config is silent or misleading."
    ),
    dtype: str = choice("fp32", HF_DTYPES, "The weights of hf: models.", "--dtype"),
    device_map: Optional[str] = choice(
        None, HF_DEVICE_MAPS, "Place hf: models with accelerate's big-model loading.", "--device-map"
    ),
    add_context: bool = flag(
        "Also probe each target at its own training length when it is longer than every --lengths."
    ),
    task: str = choice(
        "passkey",
        PROBE_TASKS,
        "The needle task (RULER's family beside the passkey): multikey hides distractor keys of other names and asks one; multivalue hides 4 keys of one name and asks all; multiquery hides 4 keys of 4 names and asks all. See docs/probe.md.",
        "--task",
    ),
    distractors: Optional[int] = typer.Option(
        None,
        "--distractors",
        help="multikey only: needles beside the asked one, 1 to 16 (default 3, as RULER's multikey).",
    ),
    rope_scaling: str = rope_scaling_option("probed"),
    rope_factor: Optional[float] = rope_factor_option("trial length / training length, as eval's"),
    self_extend_group: Optional[int] = extension_option("--self-extend-group"),
    self_extend_window: Optional[int] = extension_option("--self-extend-window"),
    rerope_window: Optional[int] = extension_option("--rerope-window"),
    rerope_leak: Optional[float] = extension_option("--rerope-leak"),
    dca_chunk: Optional[int] = extension_option("--dca-chunk"),
    dca_local: Optional[int] = extension_option("--dca-local"),
    retrieval_threshold: float = retrieval_threshold_option(),
    ppl_tolerance: float = ppl_tolerance_option(", read where eval wrote its ppl.csv into --out too"),
    force: bool = force_option(),
) -> None:
    """Needle retrieval: can a model find a 5-digit key (or several) at depth δ in a prompt of L tokens?

    Filler comes from each run's own validation text; the phrasing is the one the synthetic corpus
    teaches with data.passkey_rate>0 and data.probe_task (see experiment=probe). hf: models get the
    task in English (Mohtashami & Jaggi's prompt for the passkey: "The grass is green. …") in their own tokenizer, whole sentences up to L tokens. Writes probe.csv,
    passkey.md (retrieval by depth and length), a heatmap per scheme (probe_<scheme>.png, probe_<scheme>.svg),
    probe_summary.png, probe_summary.svg, results.json (how it was made: command, versions, machine) and
    manifest.json, and rewrites comparison.md with "passkey @ L" rows (the task's name @ L) when the output
    directory also holds eval's ppl.csv. Runs are chosen as in eval.
    """
    given = dict(locals())  # every option as given and defaulted: results.json records them
    # imported when the command runs, so that --help leaves torch unimported
    from posenc_cli.report.run_probe import ProbeOptions, probe_options

    probing = probe_options(ProbeOptions(**{**given, "runs": list(runs or [])}))
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
