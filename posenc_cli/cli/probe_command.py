"""`posenc probe`: passkey retrieval by depth and length."""

from __future__ import annotations

from typing import List, Optional

import typer

from posenc_cli.cli.app import app, choice, device_option, flag, hf_options, lengths_option, runs_argument
from posenc_cli.core import ui
from posenc_cli.core.choices import HF_DEVICE_MAPS, HF_DTYPES, LANGS
from posenc_cli.core.errors import require_seed


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
) -> None:
    """Passkey retrieval: can a model find a 5-digit key at depth δ in a prompt of L tokens?

    Filler comes from each run's own validation text; the key's phrasing is the one the synthetic
    corpus teaches with data.passkey_rate>0 (see experiment=probe). hf: models get Mohtashami & Jaggi's
    English prompt ("The grass is green. …") in their own tokenizer, whole sentences up to L tokens. Writes probe.csv, a heatmap per
    scheme (probe_<scheme>.png), probe_summary.png, and rewrites comparison.md with "passkey @ L" rows
    when the output directory also holds eval's ppl.csv. Runs are chosen as in eval.
    """
    # imported when the command runs, so that --help leaves torch unimported
    from posenc_cli.core.device import resolve_device
    from posenc_cli.core.ui import announce
    from posenc_cli.evaluation.eval_runs import announce_added
    from posenc_cli.evaluation.perplexity import parse_lengths, target_lengths
    from posenc_cli.evaluation.probe import check_trials, parse_depths, probe_runs
    from posenc_cli.evaluation.targets import load_targets
    from posenc_cli.report.output_sets import write_probe_outputs
    from posenc_cli.rundir.destinations import default_out, owned_out

    out_dir = owned_out(out)
    wanted, at_depths = parse_lengths(lengths), parse_depths(depths)
    check_trials(trials)
    require_seed("--seed", seed)
    target = resolve_device(device)
    loaded, why = load_targets(list(runs or []), "probe", hf_options(hf_context, target, dtype, device_map))
    lengths_of = {id(r): target_lengths(r.train_len, wanted, add_context=add_context).lengths for r in loaded}
    check_probe_targets(loaded, lengths_of, target)
    announce([r.path for r in loaded], why, "probing")
    announce_added(loaded, lengths_of)
    df = probe_runs(loaded, lengths=lengths_of, depths=at_depths, trials=trials, seed=seed, device=target)
    labels = df.groupby("run")["scheme"].first()  # "rope", or "rope [bpe]" when tokenizers mix
    info = {labels[str(r.path)]: r.facts() for r in loaded}
    out = out_dir or default_out("probe")
    written = write_probe_outputs(df, info, out, lang=lang)
    show_probe(df, written, out)


def check_probe_targets(loaded: list, lengths_of: dict, device) -> None:
    """Before any trial: a posenc run's vocabulary and corpus (unchanged since training), and each
    target's memory at its lengths (`lengths_of`, by id)."""
    for run in loaded:
        run.check_probe()
        run.check_fits([L for L in lengths_of[id(run)] if run.max_len is None or L <= run.max_len], device)


def show_probe(df, written: list, out) -> None:
    """The retrieval table on stdout, what was written on stderr."""
    # imported when the command runs, so that --help leaves torch unimported
    from posenc_cli.report.tables import markdown_table, passkey_rows, scheme_order

    schemes = scheme_order(df["scheme"])
    ui.out.print(
        markdown_table(["% retrieved"] + schemes, passkey_rows(df, schemes)), markup=False, highlight=False
    )
    ui.err.print(f"wrote {', '.join(p.name for p in written)} to {out}")
