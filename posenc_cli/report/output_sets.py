"""An evaluation's or a probe's output set: every table and figure written atomically into one directory,
with a manifest of what this command wrote. eval and probe share a directory on purpose: comparison.md
gains passkey rows from probe.csv (and probe rewrites it from ppl.csv), but only from a file the set
found there listed, with the same sha256, about the same runs (core.file_sets.OutputSet.trusted_input).
results.json, written last before the manifest, records how the set was made and every row of its
tables (report.results_file), so that `posenc report` rebuilds the set through these same writers. Once the
set is complete, its numbers go to the trackers its runs were trained with (report.tracked), unless
`track=False` (`posenc report`, which scores nothing)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Sequence

import pandas as pd

from posenc_cli.core.atomic import write_text, write_with
from posenc_cli.core.file_sets import OutputSet, output_set
from posenc_cli.evaluation.labels import Label
from posenc_cli.report.cells import markdown_table
from posenc_cli.report.comparison_notes import skipped_text
from posenc_cli.report.effective_length import rule_of, with_ppl_length, with_retrieval_length
from posenc_cli.report.passkey_tables import passkey_by_depth, probe_columns
from posenc_cli.report.plots import (
    plot_loss_by_position,
    plot_ppl_vs_length,
    plot_probe_heatmap,
    plot_probe_summary,
)
from posenc_cli.report.results_file import (
    RESULTS,
    TABLES,
    Provenance,
    ResultsSection,
    earlier_section,
    write_results_file,
)
from posenc_cli.report.tables import comparison, mixes_tokenizers, ppl_pivot
from posenc_cli.report.tracked import send_to_trackers
from posenc_cli.rundir.selection import Skipped


def earlier_table(result: OutputSet, csv: str, kind: str) -> pd.DataFrame | None:
    """The table an earlier set of this directory wrote as `csv` (eval's ppl, probe's probe), read back
    with its Labels from that set's results.json; None unless the set found here listed both unchanged,
    about the same runs (OutputSet.trusted_input)."""
    if result.trusted_input(csv) is None:
        return None
    section = earlier_section(result.trusted_input(RESULTS), kind, result.out)
    return section.tables[TABLES[kind][0]] if section is not None else None


def write_probe_outputs(
    passkey: pd.DataFrame,
    info: dict[Label, dict],
    out: Path,
    *,
    made: list[Provenance],
    lang: str = "en",
    skipped: Sequence[Skipped] = (),
    track: bool = True,
) -> list[Path]:
    """probe.csv, passkey.md, one heatmap per scheme, the summary plot; comparison.md again if eval's
    ppl.csv of the same runs is here; results.json. The set is complete once manifest.json is written."""
    rule = rule_of(made)
    passkey = with_retrieval_length(passkey, rule)
    with output_set(out, list(passkey["model_id"].unique())) as result:
        write_with(out / "probe.csv", lambda p: passkey.to_csv(p, index=False))
        written = [out / "probe.csv"]
        for scheme in probe_columns(passkey):
            plot_probe_heatmap(passkey, scheme, out / f"probe_{file_safe(scheme)}.png")
            written += [out / f"probe_{file_safe(scheme)}.png", out / f"probe_{file_safe(scheme)}.svg"]
        plot_probe_summary(passkey, out / "probe_summary.png")
        written += [out / "probe_summary.png", out / "probe_summary.svg"]
        asked = str(made[0].options.get("rope_scaling") or "none").split(",") if made else ["none"]
        depths = passkey_by_depth(passkey, scaling_asked=any(m.strip() != "none" for m in asked))
        write_text(out / "passkey.md", depths + skipped_text(skipped))
        written.append(out / "passkey.md")
        ppl = earlier_table(result, "ppl.csv", "eval")
        if ppl is not None:
            text = comparison(ppl, info, lang=lang, passkey=passkey, skipped=skipped, rule=rule)
            write_text(out / "comparison.md", text)
            written.append(out / "comparison.md")
        section = ResultsSection("probe", {"probe": passkey}, info, made)
        written.append(write_results_file(out, section, result.trusted_input(RESULTS)))
        result.written += written
    if track:
        send_to_trackers(section, written)
    return written


def file_safe(label: Label) -> str:
    """A column label as part of a file name: 'rope+yarn' stays, 'EleutherAI/pythia-160m (rope)' ->
    'EleutherAI_pythia-160m_rope'."""
    return re.sub(r"[^A-Za-z0-9+._-]+", "_", str(label)).strip("_")


def write_eval_outputs(
    df: pd.DataFrame,
    positions: pd.DataFrame,
    info: dict[Label, dict],
    *,
    out: Path,
    made: list[Provenance],
    lang: str = "en",
    skipped: Sequence[Skipped] = (),
    track: bool = True,
) -> list[Path]:
    """The eval output set, results.json last; complete once manifest.json is written
    (core.file_sets.output_set)."""
    figures = ("ppl_vs_length", "loss_by_position") if not positions.empty else ("ppl_vs_length",)
    written = [out / n for n in ("ppl.csv", "ppl.md", "comparison.md", "loss_by_position.csv")] + [
        out / f"{name}.{ext}" for name in figures for ext in ("png", "svg")
    ]
    rule = rule_of(made)
    df = with_ppl_length(df, rule)
    with output_set(out, list(df["model_id"].unique())) as result:
        write_with(out / "ppl.csv", lambda p: df.to_csv(p, index=False))
        write_with(out / "loss_by_position.csv", lambda p: positions.to_csv(p, index=False))
        header, rows = ppl_pivot(df)
        text = "# Perplexity by evaluation length\n\n" + markdown_table(header, rows)
        if mixes_tokenizers(df):  # per-token perplexities of different tokenizers do not compare
            header, rows = ppl_pivot(df, "bpb", digits=3)
            text += "\n# Bits per byte by evaluation length\n\n" + markdown_table(header, rows)
        write_text(out / "ppl.md", text + skipped_text(skipped))
        passkey = earlier_table(result, "probe.csv", "probe")
        text = comparison(df, info, lang=lang, passkey=passkey, skipped=skipped, rule=rule)
        write_text(out / "comparison.md", text)
        plot_ppl_vs_length(df, out / "ppl_vs_length.png")
        if not positions.empty:
            plot_loss_by_position(positions, df, out / "loss_by_position.png")
        section = ResultsSection("eval", {"ppl": df, "loss_by_position": positions}, info, made)
        written.append(write_results_file(out, section, result.trusted_input(RESULTS)))
        result.written += written
    if track:
        send_to_trackers(section, written)
    return written
