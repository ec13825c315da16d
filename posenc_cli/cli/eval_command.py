"""`posenc eval`: perplexity at lengths past the training length, and the chapters' table."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer
from rich.table import Table

from posenc_cli.cli.app import DEVICE_HELP, app, choice, hf_options
from posenc_cli.core import ui
from posenc_cli.core.choices import DEVICES, EVAL_MODES, HF_DTYPES, HF_ROPE_SCALING, LANGS, ROPE_SCALING
from posenc_cli.core.errors import UsageError, require_number, require_positive_int


@app.command("eval")
def eval_command(
    runs: List[str] = typer.Argument(
        None,
        help="Run directories, sweep directories, globs, or hf:ID_OR_PATH (a Hugging Face causal LM: hub id or local directory; needs --data) (default: the latest runs).",
    ),
    lengths: str = typer.Option(
        "512,1024,2048",
        "--lengths",
        "-l",
        help="Comma list of evaluation lengths; each run's training length is always added.",
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
        help="Validation tokens scored at every length (rounded down to a multiple of the longest length).",
    ),
    out: Optional[str] = typer.Option(None, help="Output directory (default: outputs/eval/<time>)."),
    data: Optional[Path] = typer.Option(
        None,
        help="Evaluate on this UTF-8 text file instead of each run's validation split (required for hf: models, tokenized by each model's own tokenizer).",
    ),
    device: str = choice("auto", DEVICES, DEVICE_HELP, "--device", also=r"cuda:\d+"),
    lang: str = choice("en", LANGS, "en, or zh to add the chapters' own words to comparison.md.", "--lang"),
    rope_scaling: str = choice(
        "none",
        ROPE_SCALING + HF_ROPE_SCALING,
        "Comma list of RoPE context-extension methods: each RoPE-based run is evaluated once per method (labelled rope+yarn etc.), no retraining; llama3 is for hf: models only, which go through transformers' own rope_parameters.",
        "--rope-scaling",
        comma_list=True,
    ),
    rope_factor: Optional[float] = typer.Option(
        None,
        "--rope-factor",
        help="Scale factor s for --rope-scaling, at most 1e6 (default: eval length / training length; dynamic: 1, it scales with the length itself).",
    ),
    learned_overflow: str = typer.Option(
        "dash",
        "--learned-overflow",
        help="Past a position table's max_len (learned): dash shows —; window scores with sliding windows of max_len tokens, labelled learned+window. A comma list shows both.",
    ),
    hf_context: Optional[int] = typer.Option(
        None,
        "--hf-context",
        help="Training length of hf: models, when their config is silent or misleading (default: n_positions / max_position_embeddings / the like).",
    ),
    dtype: str = choice(
        "fp32", HF_DTYPES, "The weights of hf: models (posenc runs always score in fp32).", "--dtype"
    ),
) -> None:
    """Perplexity at lengths past the training length, and the chapters' comparison table, measured.

    Writes ppl.csv, ppl.md, comparison.md, loss_by_position.csv, ppl_vs_length.png and
    loss_by_position.png. With no RUNS it takes the newest sweep under outputs/sweeps if it is newer
    than every single run, otherwise the newest single run of each scheme under outputs/runs.
    """
    # imported when the command runs, so that --help leaves torch unimported
    from posenc_cli.core.device import resolve_device
    from posenc_cli.evaluation.eval_runs import evaluate_runs
    from posenc_cli.evaluation.hf_models import is_hf
    from posenc_cli.evaluation.perplexity import parse_lengths, parse_overflow
    from posenc_cli.evaluation.targets import load_targets
    from posenc_cli.model.positional.rope_scaling import MAX_FACTOR, parse_rope_scaling
    from posenc_cli.report.output_sets import write_eval_outputs
    from posenc_cli.report.tables import ppl_pivot
    from posenc_cli.rundir.destinations import default_out, owned_out

    out_dir = owned_out(out)
    wanted = parse_lengths(lengths)
    if rope_factor is not None:
        require_number("--rope-factor", rope_factor, above=0, at_most=MAX_FACTOR)
    methods = parse_rope_scaling(rope_scaling, rope_factor)
    overflows = parse_overflow(learned_overflow)
    if stride is not None:
        if mode != "sliding":
            raise UsageError(
                f"--stride {stride} is only used with --mode sliding; drop it or add --mode sliding"
            )
        require_positive_int("--stride", stride)
    require_positive_int("--max-tokens", max_tokens)
    target = resolve_device(device)
    named = list(runs or [])
    hf_named = [r for r in named if is_hf(r)]
    if hf_named and data is None:
        raise UsageError(
            f"{hf_named[0]} needs --data FILE: the text to evaluate it on (its own tokenizer is used)"
        )
    loaded, why = load_targets(named, "evaluate", hf_options(hf_context, target, dtype))
    df, positions, info = evaluate_runs(
        loaded,
        lengths=wanted,
        mode=mode,
        stride=stride,
        max_tokens=max_tokens,
        data_path=str(data) if data else None,
        device=target,
        rope_scaling=methods,
        rope_factor=rope_factor,
        why=why,
        learned_overflow=overflows,
    )
    out = out_dir or default_out("eval")
    written = write_eval_outputs(df, positions, info, out, lang=lang)
    header, rows = ppl_pivot(df)
    table = Table(title=f"Perplexity ({mode}, {int(df['tokens'].max()):,} tokens per length)")
    for column in header:
        table.add_column(column, justify="right")
    for row in rows:
        table.add_row(*row)
    ui.out.print(table)
    ui.out.print(
        (out / "comparison.md").read_text(encoding="utf-8"), markup=False, highlight=False, soft_wrap=True
    )
    ui.err.print(f"wrote {', '.join(p.name for p in written if p.exists())} to {out}")
