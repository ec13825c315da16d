"""posenc from Python: the few calls a notebook needs, each a thin call into the functions the `posenc`
command runs (no copies), returning pandas objects; a bad value raises the same UsageError (one line,
naming it) that the command prints.

    import posenc
    run = posenc.train(overrides=["experiment=smoke", "scheme=rope", "hydra.run.dir=rope"])
    result = posenc.evaluate([run], lengths=[128, 256])   # result.ppl: ppl.csv's rows
    posenc.schemes(); posenc.inspect("rope"); posenc.probe([run], lengths=[128])
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any, Iterable, Sequence

import pandas as pd

from posenc_cli import __version__
from posenc_cli.cli.app import hf_options
from posenc_cli.cli.inspect_command import check_options
from posenc_cli.cli.schemes_command import scheme_rows
from posenc_cli.cli.train_command import train_with
from posenc_cli.core.choices import PPL_TOLERANCE, RETRIEVAL_THRESHOLD
from posenc_cli.core.device import resolve_device
from posenc_cli.core.errors import UsageError
from posenc_cli.data.needles import needle_task
from posenc_cli.evaluation.eval_runs import rope_methods
from posenc_cli.evaluation.hf_loading import load_hf_model
from posenc_cli.evaluation.perplexity import parse_lengths
from posenc_cli.evaluation.probe import parse_depths
from posenc_cli.evaluation.probe_run import ProbeSpec, run_probe
from posenc_cli.inspection.inspect_scheme import inspect_scheme
from posenc_cli.report.effective_length import LengthRule
from posenc_cli.report.output_sets import write_probe_result
from posenc_cli.report.run_eval import EvalOptions, Evaluation, run_eval
from posenc_cli.rundir.destinations import owned_out
from posenc_cli.rundir.loading import LoadedRun, load_run

__all__ = ["Evaluation", "UsageError", "evaluate", "inspect", "load_hf", "load_run", "probe", "schemes"]
__all__ += ["train", "__version__"]


def train(overrides: Sequence[str] = ()) -> Path | None:
    """`posenc train OVERRIDES`: the run (or sweep, with "-m") directory it trained into."""
    return train_with(list(overrides))


def target_names(targets: Iterable[str | Path | LoadedRun]) -> list[str]:
    """Run directories, `hf:` names or loaded runs, as the command line names them."""
    return [str(t.path) if isinstance(t, LoadedRun) else str(t) for t in targets]


def as_text(values: str | int | float | Iterable) -> str:
    """[512, 1024] or "512,1024" -> "512,1024": the command's spelling, parsed by its own parsers."""
    return values if isinstance(values, str) else ",".join(map(str, values))


def load_hf(id_or_path: str, **options: Any):
    """`hf:ID_OR_PATH` (the prefix may be left out) as eval scores it; options: context, device, dtype."""
    name = id_or_path if id_or_path.startswith("hf:") else f"hf:{id_or_path}"
    return load_hf_model(name, **options)


def evaluate(
    targets: Iterable[str | Path | LoadedRun],
    *,
    lengths: str | Iterable[int] = (512, 1024, 2048),
    mode: str = "nonoverlap",
    stride: int | None = None,
    max_tokens: int = 32768,
    data: str | Path | None = None,
    device: str = "auto",
    rope_scaling: str | Iterable[str] = "none",
    rope_factor: float | None = None,
    learned_overflow: str | Iterable[str] = "dash",
    add_context: bool = False,
    hf_context: int | None = None,
    dtype: str = "fp32",
    text_field: str = "text",
    documents: bool = False,
    ppl_tolerance: float = PPL_TOLERANCE,
    retrieval_threshold: float = RETRIEVAL_THRESHOLD,
    out: str | Path | None = None,
) -> Evaluation:
    """`posenc eval`, its options as keywords (lists or the command's comma lists): every target at
    every length (`.tasks` holds task runs' accuracy). With `out`, the output set (tables, figures,
    results.json) is written there too; without it, nothing is written."""
    options = EvalOptions(
        runs=target_names(targets),
        lengths=as_text(lengths),
        mode=mode,
        stride=stride,
        max_tokens=max_tokens,
        out=str(out) if out is not None else None,
        data=str(data) if data is not None else None,
        text_field=text_field,
        documents=documents,
        device=device,
        lang="en",
        rope_scaling=as_text(rope_scaling),
        rope_factor=rope_factor,
        learned_overflow=as_text(learned_overflow),
        hf_context=hf_context,
        dtype=dtype,
        device_map=None,
        add_context=add_context,
        ppl_tolerance=ppl_tolerance,
        retrieval_threshold=retrieval_threshold,
    )
    return run_eval(options, write=out is not None)


def probe(
    targets: Iterable[str | Path | LoadedRun],
    *,
    lengths: str | Iterable[int] = (256, 512, 1024, 2048),
    depths: str | Iterable[float] = (0.1, 0.5, 0.9),
    trials: int = 50,
    seed: int = 0,
    task: str = "passkey",
    distractors: int | None = None,
    rope_scaling: str | Iterable[str] = "none",
    rope_factor: float | None = None,
    device: str = "auto",
    ppl_tolerance: float = PPL_TOLERANCE,
    retrieval_threshold: float = RETRIEVAL_THRESHOLD,
    out: str | Path | None = None,
) -> pd.DataFrame:
    """`posenc probe`: passkey or needle retrieval by length and depth, once per RoPE scaling method;
    probe.csv's rows (and its output set with `out`)."""
    asked = {**locals(), "targets": target_names(targets)}  # as results.json records the command's
    out_dir = owned_out(str(out)) if out is not None else None
    wanted, at_depths = parse_lengths(as_text(lengths)), parse_depths(as_text(depths))
    methods = rope_methods(as_text(rope_scaling), rope_factor)
    LengthRule(ppl_tolerance, retrieval_threshold)  # checked here, applied by the writers (rule_of)
    spec = ProbeSpec(needle_task(task, distractors), at_depths, trials, seed, methods, rope_factor)
    where = resolve_device(device)
    result = run_probe(
        asked["targets"], spec, lengths=wanted, device=where, hf=hf_options(None, where, "fp32")
    )
    if out_dir is not None:
        write_probe_result(result, out_dir, options=asked, device=where)
    return result.rows


def schemes() -> pd.DataFrame:
    """`posenc schemes`: one row per positional scheme, its kind, cost and the chapters' claim."""
    return pd.DataFrame(scheme_rows()).set_index("scheme")


def inspect(scheme: str, *, out: str | Path | None = None, **options: Any) -> pd.DataFrame:
    """`posenc inspect SCHEME`: its claims checked, one row each (claim, passed, measured, needs, note);
    the figures drawn are in `.attrs["figures"]`. options: dim, length, heads, layout, slopes."""
    scheme_options = {k: options.pop(k) for k in ("layout", "slopes") if options.get(k) is not None}
    check_options(
        options.get("dim"), options.get("heads"), options.get("length"), run=None, layer=None, head=None
    )
    result = inspect_scheme(
        name=scheme, out=Path(out) if out is not None else None, options=scheme_options, **options
    )
    checks = pd.DataFrame([asdict(check) for check in result.checks])
    checks.attrs["figures"] = list(result.figures)
    return checks
