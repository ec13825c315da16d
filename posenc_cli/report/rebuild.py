"""`posenc report`'s work: output sets read back from their results.json files, merged (a run counts
once), and written again through the writers eval and probe use, so tables and figures come out as
those commands write them, without scoring anything."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from posenc_cli.core.errors import UsageError
from posenc_cli.evaluation.labels import Label
from posenc_cli.report.output_sets import write_eval_outputs, write_probe_outputs
from posenc_cli.report.results_file import TABLES, ResultsSection, read_results_file
from posenc_cli.report.task_tables import write_task_outputs


def merged_sections(directories: list[Path]) -> dict[str, ResultsSection]:
    """Each kind's sections of every directory as one: rows concatenated, facts and provenances joined.
    Refused: a model in two sets (it would count twice), or one column's seed from two different runs."""
    found: dict[str, list[tuple[Path, ResultsSection]]] = {}
    named: dict[Path, Path] = {}
    for directory in directories:
        first = named.setdefault(directory.resolve(), directory)
        if first is not directory:
            raise UsageError(
                f"{first} and {directory} are one directory, whose runs would count twice; name it once"
            )
        for section in read_results_file(directory):
            found.setdefault(section.kind, []).append((directory, section))
    merged = {kind: merge(kind, parts) for kind, parts in found.items()}
    if "tasks" in merged and len(merged) > 1:
        raise UsageError(
            "task accuracy and perplexity or probe results cannot share one set; report them into "
            "separate --out directories"
        )
    if {"eval", "probe"} <= set(merged) and run_set(merged["eval"]) != run_set(merged["probe"]):
        raise UsageError(
            "the eval and probe results given are of different models, so they cannot share one set; "
            "report them into separate --out directories"
        )
    return merged


def run_set(section: ResultsSection) -> list[str]:
    return sorted(set(first_table(section)["model_id"]))


def first_table(section: ResultsSection) -> pd.DataFrame:
    return section.tables[TABLES[section.kind][0]]


def merge(kind: str, parts: list[tuple[Path, ResultsSection]]) -> ResultsSection:
    refuse_collisions(kind, parts)
    tables = {
        name: pd.concat(
            [s.tables[name] for _, s in parts if not s.tables[name].empty] or [parts[0][1].tables[name]]
        ).reset_index(drop=True)
        for name in TABLES[kind]
    }
    info = {k: v for _, s in parts for k, v in s.info.items()}
    return ResultsSection(kind, tables, info, [p for _, s in parts for p in s.made])


def refuse_collisions(kind: str, parts: list[tuple[Path, ResultsSection]]) -> None:
    """One model in two sets, or one column's seed measured on two different models, is refused."""
    models: dict[str, Path] = {}
    seeds: dict[tuple[Label, int], tuple[str, Path]] = {}
    for directory, section in parts:
        rows = first_table(section)[["model_id", "scheme", "seed"]].drop_duplicates()
        for model_id in rows["model_id"].unique():
            other = models.setdefault(model_id, directory)
            if other != directory:
                raise UsageError(
                    f"{other} and {directory} both hold {kind} results of {model_id}, which would count twice; "
                    "name one of them"
                )
        for model_id, scheme, seed in rows.itertuples(index=False):
            other_model, other_dir = seeds.setdefault((scheme, int(seed)), (model_id, directory))
            if other_model != model_id:
                raise UsageError(
                    f"{other_dir} and {directory} both have seed {seed} of the column {scheme} from different "
                    "models, which one column cannot tell apart; name one of them"
                )


def rebuild(merged: dict[str, ResultsSection], out: Path, *, lang: str) -> list[Path]:
    """The tables and figures of merged sections (merged_sections) written into `out`: eval's first, then
    probe's (which adds passkey rows to comparison.md). Nothing goes to trackers: nothing was scored."""
    written: list[Path] = []
    if "eval" in merged:
        ev = merged["eval"]
        written += write_eval_outputs(
            ev.tables["ppl"],
            ev.tables["loss_by_position"],
            ev.info,
            out=out,
            made=ev.made,
            lang=lang,
            track=False,
        )
    if "probe" in merged:
        probe = merged["probe"]
        written += write_probe_outputs(
            probe.tables["probe"], probe.info, out, made=probe.made, lang=lang, track=False
        )
    if "tasks" in merged:
        tasks = merged["tasks"]
        written += write_task_outputs(tasks.tables["task_accuracy"], out, made=tasks.made, track=False)
    return list(dict.fromkeys(written))
