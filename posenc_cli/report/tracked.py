"""An output set's numbers sent to the trackers its runs were trained with (training.tracking.send_results):
eval's perplexity at each length as `eval/ppl@1024` (a RoPE scaling or overflow column as
`eval/ppl@1024+yarn`), probe's retrieval as `probe/accuracy@1024` (over its depths), a task run's exact
match as `task/accuracy@16`, and the set's
figures as images, at the step of the checkpoint scored. Models posenc did not train (`hf:`) and runs
trained without a tracker get nothing; `posenc report`, which scores nothing, sends nothing."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from posenc_cli.evaluation.labels import Label
from posenc_cli.report.results_file import ResultsSection
from posenc_cli.training.tracking import TrackedResults, send_results


def column_tag(kind: str, measure: str, length: int, *, scheme: Label) -> str:
    """`eval/ppl@1024`, or `eval/ppl@1024+yarn` for a column scored as a variant of the run."""
    apart = "".join(f"+{part}" for part in scheme.variant.parts)
    return f"{kind}/{measure}@{length}{apart}"


def run_key(run: str) -> str:
    return str(Path(run).resolve())


def eval_scalars(ppl: pd.DataFrame) -> dict[str, dict[str, float]]:
    """Per run (its resolved path): every finite perplexity of its rows, by tag."""
    scalars: dict[str, dict[str, float]] = {}
    for run, scheme, length, value in ppl[["run", "scheme", "eval_len", "ppl"]].itertuples(index=False):
        if math.isfinite(value):
            scalars.setdefault(run_key(run), {})[column_tag("eval", "ppl", length, scheme=scheme)] = float(
                value
            )
    return scalars


def probe_scalars(probe: pd.DataFrame) -> dict[str, dict[str, float]]:
    """Per run: the fraction of trials retrieved at each length, over every depth."""
    scored = probe[probe["accuracy"].notna()].assign(hits=lambda d: d["accuracy"] * d["trials"])
    scalars: dict[str, dict[str, float]] = {}
    for (run, scheme, length), rows in scored.groupby(["run", "scheme", "length"], sort=False):
        tag = column_tag("probe", "accuracy", int(length), scheme=scheme)
        scalars.setdefault(run_key(run), {})[tag] = float(rows["hits"].sum() / rows["trials"].sum())
    return scalars


def task_scalars(accuracy: pd.DataFrame) -> dict[str, dict[str, float]]:
    """Per task run: the fraction of instances answered exactly at each instance length."""
    scalars: dict[str, dict[str, float]] = {}
    for run, scheme, length, value in accuracy[["run", "scheme", "length", "accuracy"]].itertuples(
        index=False
    ):
        if math.isfinite(value):
            scalars.setdefault(run_key(run), {})[column_tag("task", "accuracy", length, scheme=scheme)] = (
                value
            )
    return scalars


SCALARS = {  # kind -> the scalars of its table, the table's name, the tags' group
    "eval": (eval_scalars, "ppl", "eval"),
    "probe": (probe_scalars, "probe", "probe"),
    "tasks": (task_scalars, "task_accuracy", "task"),
}


def send_to_trackers(section: ResultsSection, written: list[Path]) -> None:
    """Each posenc run of the section's targets gets its own rows and the set's PNG figures."""
    scalars_of, table, group = SCALARS[section.kind]
    scalars = scalars_of(section.tables[table])
    figures = {f"{group}/{p.stem}": p for p in written if p.suffix == ".png" and p.exists()}
    for made in section.made:
        for target in made.targets:
            logger = (target.get("config") or {}).get("logger") if target["kind"] == "run" else None
            if not logger or target["path"] not in scalars:
                continue
            results = TrackedResults(int(target["step"]), scalars[target["path"]], figures)
            send_results(logger, Path(target["path"]), results, run_id=target.get("run_id"))
