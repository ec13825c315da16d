"""`posenc eval`: perplexity at lengths past the training length, and the chapters' table."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer
from rich.table import Table

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
    EVAL_MODES,
    HF_DEVICE_MAPS,
    HF_DTYPES,
    LANGS,
    LEARNED_OVERFLOWS,
)


@app.command("eval")
def eval_command(
    runs: List[str] = runs_argument(": hub id or local directory; needs --data"),
    lengths: str = lengths_option(
        "512,1024,2048",
        "Comma list of evaluation lengths. A target's training length is added (said up front) when it is shorter than the longest length asked; a context longer than every length is not (the longest length asked is then the reference), unless --add-context.",
    ),
    mode: str = choice(
        "nonoverlap",
        EVAL_MODES,
        "nonoverlap: consecutive windows, every token scored. sliding: windows advance by --stride, only their last stride tokens scored.",
        "--mode",
    ),
    stride: Optional[int] = typer.Option(None, help="Stride for --mode sliding (default: half the length)."),
    max_tokens: int = typer.Option(
        32768,
        "--max-tokens",
        help="Tokens scored at every length, never raised (a multiple of the longest length, at least one window). With --data every column scores the same bytes: those the column with the longest tokens covers in this many, each column in its own tokens.",
    ),
    out: Optional[str] = typer.Option(None, help="Output directory (default: outputs/eval/<time>)."),
    data: Optional[str] = typer.Option(
        None,
        help="Evaluate on this UTF-8 text file, or a dataset's split (hf:NAME:SPLIT, hf:NAME:CONFIG:SPLIT, or a save_to_disk directory as hf:DIR or hf:DIR:SPLIT; its rows each followed by a newline), instead of each run's validation split (required for hf: models, tokenized by each model's own tokenizer).",
    ),
    text_field: str = typer.Option("text", "--text-field", help="The column of text of an hf: --data."),
    documents: bool = flag(
        "With --data hf:...: score each row as a document of its own (PI's and YaRN's protocol): at each length the documents of at least L+1 tokens, their first L tokens (or sliding windows inside them with --mode sliding, up to --max-tokens each); ppl.csv's documents column says how many."
    ),
    device: str = device_option(),
    lang: str = choice("en", LANGS, "en, or zh to add the chapters' own words to comparison.md.", "--lang"),
    rope_scaling: str = rope_scaling_option("evaluated"),
    rope_factor: Optional[float] = rope_factor_option(
        "eval length / training length; dynamic: 1, it scales with the length itself"
    ),
    self_extend_group: Optional[int] = extension_option("--self-extend-group"),
    self_extend_window: Optional[int] = extension_option("--self-extend-window"),
    rerope_window: Optional[int] = extension_option("--rerope-window"),
    rerope_leak: Optional[float] = extension_option("--rerope-leak"),
    dca_chunk: Optional[int] = extension_option("--dca-chunk"),
    dca_local: Optional[int] = extension_option("--dca-local"),
    learned_overflow: str = choice(
        "dash",
        LEARNED_OVERFLOWS,
        "Past a position table's max_len (learned): dash shows —; window scores with sliding windows of max_len tokens, labelled learned+window. A comma list shows both.",
        "--learned-overflow",
        comma_list=True,
    ),
    hf_context: Optional[int] = typer.Option(
        None,
        "--hf-context",
        help="Training length of hf: models, when their config is silent or misleading (default: n_positions / max_position_embeddings / the like).",
    ),
    dtype: str = choice(
        "fp32", HF_DTYPES, "The weights of hf: models (posenc runs always score in fp32).", "--dtype"
    ),
    device_map: Optional[str] = choice(
        None,
        HF_DEVICE_MAPS,
        "Place hf: models with accelerate's big-model loading (GPUs, then CPU), not on --device.",
        "--device-map",
    ),
    add_context: bool = flag(
        "Also evaluate each target at its own training length (context) when it is longer than every --lengths."
    ),
    ppl_tolerance: float = ppl_tolerance_option(),
    retrieval_threshold: float = retrieval_threshold_option(
        ", read where probe wrote its probe.csv into --out too"
    ),
    force: bool = force_option(),
) -> None:
    """Perplexity at lengths past the training length, and the chapters' comparison table, measured.

    Writes ppl.csv, ppl.md, comparison.md, loss_by_position.csv, ppl_vs_length.png,
    loss_by_position.png and results.json (how it was made, every number: posenc report reads it). With no RUNS it takes the newest sweep under outputs/sweeps if it is newer
    than every single run, otherwise the newest single run of each scheme under outputs/runs.
    """
    given = dict(locals())  # every option as given and defaulted: results.json records them
    # imported when the command runs, so that --help leaves torch unimported
    from posenc_cli.report.run_eval import EvalOptions, run_eval

    result = run_eval(EvalOptions(**{**given, "runs": list(runs or [])}))
    if result.tasks is not None:
        show_task_eval(result.tasks, result.out, result.written)
    else:
        show_eval(result.ppl, result.out, result.written, mode=mode)


def show_task_eval(df, out: Path, written: list[Path]) -> None:
    """Task runs: accuracy by instance length on stdout, what was written on stderr."""
    # imported when the command runs, so that --help leaves torch unimported
    from posenc_cli.report.task_tables import task_tables

    ui.out.print(task_tables(df), markup=False, highlight=False, soft_wrap=True)
    ui.err.print(f"wrote {', '.join(p.name for p in written if p.exists())} to {out}")


def show_eval(df, out: Path, written: list[Path], *, mode: str) -> None:
    """The perplexity table and comparison.md on stdout, what was written on stderr."""
    # imported when the command runs, so that --help leaves torch unimported
    from posenc_cli.report.tables import ppl_pivot

    header, rows = ppl_pivot(df)
    counts = df.loc[df["tokens"] > 0, "tokens"].unique()
    scored = f"{int(counts[0]):,} tokens per length" if len(counts) == 1 else "the same text for every column"
    table = Table(title=f"Perplexity ({mode}, {scored})")
    for column in header:
        table.add_column(column, justify="right")
    for row in rows:
        table.add_row(*row)
    ui.out.print(table)
    ui.out.print(
        (out / "comparison.md").read_text(encoding="utf-8"), markup=False, highlight=False, soft_wrap=True
    )
    ui.err.print(f"wrote {', '.join(p.name for p in written if p.exists())} to {out}")
