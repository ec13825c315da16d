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
    asked = dict(locals())  # every option as given and defaulted: results.json records them
    # imported when the command runs, so that --help leaves torch unimported
    from posenc_cli.core.device import resolve_device
    from posenc_cli.core.ui import announce
    from posenc_cli.evaluation.perplexity import parse_lengths
    from posenc_cli.evaluation.probe import check_trials, parse_depths, probe_runs
    from posenc_cli.evaluation.targets import load_targets
    from posenc_cli.rundir.destinations import owned_out

    out_dir = owned_out(out)
    wanted, at_depths = parse_lengths(lengths), parse_depths(depths)
    check_trials(trials), require_seed("--seed", seed)
    target = resolve_device(device)
    options = hf_options(hf_context, target, dtype, device_map=device_map)
    loaded, why, skipped = load_targets(list(runs or []), "probe", options)
    lengths_of = probe_lengths(loaded, wanted, add_context=add_context, device=target)
    announce([r.path for r in loaded], why, "probing")
    df = probe_runs(loaded, lengths=lengths_of, depths=at_depths, trials=trials, seed=seed, device=target)
    report_probe(df, loaded, out_dir, options=asked, device=target, lang=lang, skipped=skipped)


def probe_lengths(loaded: list, wanted: list[int], *, add_context: bool, device) -> dict[int, list[int]]:
    """Each target's trial lengths (by id; perplexity.target_lengths, the added ones said), checked
    before any trial: a posenc run's vocabulary and corpus (unchanged since training), and each
    target's memory at its lengths."""
    # imported when the command runs, so that --help leaves torch unimported
    from posenc_cli.evaluation.eval_runs import announce_added
    from posenc_cli.evaluation.perplexity import target_lengths

    planned = {id(r): target_lengths(r.train_len, wanted, add_context=add_context) for r in loaded}
    for run in loaded:
        run.check_probe()
        lengths = planned[id(run)].lengths
        run.check_fits([L for L in lengths if run.max_len is None or L <= run.max_len], device)
    announce_added(loaded, planned)
    return {key: plan.lengths for key, plan in planned.items()}


def report_probe(df, loaded: list, out_dir, *, options: dict, device, lang: str, skipped: list) -> None:
    """The probe's output set (in `out_dir`, or outputs/probe/<time>; its results.json records `options`),
    and its table on stdout."""
    # imported when the command runs, so that --help leaves torch unimported
    from posenc_cli.report.output_sets import write_probe_outputs
    from posenc_cli.report.results_file import provenance
    from posenc_cli.rundir.destinations import default_out

    info = column_facts(df, loaded)
    made = provenance(loaded, options=options, data_path=None, device=device)
    out = out_dir or default_out("probe")
    show_probe(df, write_probe_outputs(df, info, out, made=[made], lang=lang, skipped=skipped), out)


def column_facts(df, loaded: list) -> dict:
    """comparison.md's facts about each column of the probe's rows (posenc.probe reads them too)."""
    labels = df.groupby("run")["scheme"].first()  # "rope", or "rope [bpe]" when tokenizers mix
    return {labels[str(r.path)]: r.facts() for r in loaded}


def show_probe(df, written: list, out) -> None:
    """The retrieval table on stdout, what was written on stderr."""
    # imported when the command runs, so that --help leaves torch unimported
    from posenc_cli.report.tables import markdown_table, passkey_rows, scheme_order

    schemes = scheme_order(df["scheme"])
    ui.out.print(
        markdown_table(["% retrieved"] + schemes, passkey_rows(df, schemes)), markup=False, highlight=False
    )
    ui.err.print(f"wrote {', '.join(p.name for p in written)} to {out}")
