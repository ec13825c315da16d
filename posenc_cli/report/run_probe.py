"""`posenc probe`'s work, once for the command and for `posenc.probe`: every option checked before any
model is loaded (as eval's are: report.run_eval), the targets probed (evaluation.probe_run), and the output
set written. The command only parses and prints; the Python API only spells its keywords as the options."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

import pandas as pd

from posenc_cli.core.choices import PPL_TOLERANCE, RETRIEVAL_THRESHOLD
from posenc_cli.core.device import resolve_device
from posenc_cli.core.file_sets import SetKind
from posenc_cli.data.needles import needle_task
from posenc_cli.evaluation.eval_runs import rope_methods
from posenc_cli.evaluation.hf_options import hf_options
from posenc_cli.evaluation.perplexity import parse_lengths
from posenc_cli.evaluation.probe import parse_depths
from posenc_cli.evaluation.probe_run import ProbeSpec, run_probe
from posenc_cli.evaluation.targets import exports_as_hf
from posenc_cli.report.effective_length import LengthRule, with_retrieval_length
from posenc_cli.report.output_sets import write_probe_result
from posenc_cli.report.run_eval import (
    check_choices,
    check_flags,
    extension_settings,
    refuse_hf_options_without_hf,
)
from posenc_cli.rundir.destinations import default_out, owned_out


@dataclass(frozen=True)
class ProbeOptions:
    """Every option of `posenc probe`, as the command spells them (comma lists as text), with the command's
    defaults (tests/test_cli.py holds the two alike); results.json records them as given and defaulted."""

    runs: list[str]
    lengths: str = "256,512,1024,2048"
    depths: str = "0.1,0.5,0.9"
    trials: int = 50
    seed: int = 0
    out: str | None = None
    device: str = "auto"
    lang: str = "en"
    hf_context: int | None = None
    dtype: str = "fp32"
    device_map: str | None = None
    add_context: bool = False
    task: str = "passkey"
    distractors: int | None = None
    rope_scaling: str = "none"
    rope_factor: float | None = None
    self_extend_group: int | None = None  # the extensions' options: model.extension.method.ExtensionSettings
    self_extend_window: int | None = None
    rerope_window: int | None = None
    rerope_leak: float | None = None
    dca_chunk: int | None = None
    dca_local: int | None = None
    retrieval_threshold: float = RETRIEVAL_THRESHOLD
    ppl_tolerance: float = PPL_TOLERANCE
    force: bool = False  # replace another kind of output set in --out (core.file_sets.output_set)


@dataclass(frozen=True)
class Probing:
    """What `posenc probe` measures: probe.csv's rows, the rule its effective lengths are read by, and the
    output set's directory and files when one was written."""

    rows: pd.DataFrame
    rule: LengthRule
    out: Path | None
    written: list[Path] = field(default_factory=list)


def probe_options(options: ProbeOptions, *, write: bool = True) -> Probing:
    """Every target of `options` probed; the output set in --out (outputs/probe/<time> when it is not
    given), or none when `write` is False and no --out is given (posenc.probe without `out`)."""
    o = options
    check_flags(o)
    check_choices(o)
    out_dir = owned_out(o.out, SetKind.EVALUATION, force=o.force)
    wanted, at_depths = parse_lengths(o.lengths), parse_depths(o.depths)
    methods = rope_methods(o.rope_scaling, o.rope_factor, extension_settings(o))
    rule = LengthRule(o.ppl_tolerance, o.retrieval_threshold)  # checked here, applied by the writers
    spec = ProbeSpec(needle_task(o.task, o.distractors), at_depths, o.trials, o.seed, methods, o.rope_factor)
    names = exports_as_hf(list(o.runs))
    refuse_hf_options_without_hf(o, names)
    device = resolve_device(o.device)
    loading = hf_options(o.hf_context, device, o.dtype, device_map=o.device_map)
    result = run_probe(names, spec, lengths=wanted, device=device, hf=loading, add_context=o.add_context)
    rows = with_retrieval_length(result.rows, rule)  # probe.csv's rows, written or not
    out = out_dir or (default_out("probe") if write else None)  # made only once the work is done
    if out is None:
        return Probing(rows, rule, None)
    written = write_probe_result(result, out, options=asdict(o), device=device, lang=o.lang)
    return Probing(rows, rule, out, written)
