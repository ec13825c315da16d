"""`posenc probe`'s work, once for the command and for `posenc.probe`: every option checked before any
model is loaded (as eval's are: report.run_eval), the targets probed (evaluation.probe_run), and the output
set written. The command only parses and prints; the Python API only spells its keywords as the options."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

import pandas as pd

from posenc_cli.core.device import resolve_device
from posenc_cli.core.file_sets import SetKind
from posenc_cli.core.option_groups import ProbeOptions
from posenc_cli.core.options import check_given, given, refuse_unread
from posenc_cli.data.needles import needle_task
from posenc_cli.evaluation.eval_runs import rope_methods
from posenc_cli.evaluation.perplexity import parse_lengths
from posenc_cli.evaluation.probe import parse_depths
from posenc_cli.evaluation.probe_run import ProbeSpec, run_probe
from posenc_cli.evaluation.targets import exports_as_hf
from posenc_cli.report.effective_length import LengthRule, with_retrieval_length
from posenc_cli.report.output_sets import write_probe_result
from posenc_cli.report.run_eval import extension_settings, hf_loading, refuse_hf_options_without_hf
from posenc_cli.rundir.destinations import default_out, owned_out


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
    o, n = options, options.needles
    check_given(o)
    out_dir = owned_out(o.outputs.out, SetKind.EVALUATION, force=o.outputs.force)
    wanted, at_depths = parse_lengths(n.lengths), parse_depths(n.depths)
    methods = rope_methods(o.scaling.rope_scaling, o.scaling.rope_factor, extension_settings(o))
    rule = LengthRule(**asdict(o.rule))  # checked here, applied by the writers
    task = needle_task(n.task, n.distractors)
    if task.name == "cwe":  # a shuffled list has no depth: one set of trials, at depth 0
        refuse_unread(o, ["depths"], why="by --task cwe (its words are shuffled through the list)")
        at_depths = [0.0]
    spec = ProbeSpec(task, at_depths, n.trials, n.seed, methods, o.scaling.rope_factor)
    names = exports_as_hf(list(o.runs))
    refuse_hf_options_without_hf(o, names)
    device = resolve_device(o.running.device)
    add_context = o.running.add_context
    result = run_probe(
        names, spec, lengths=wanted, device=device, hf=hf_loading(o, device), add_context=add_context
    )
    rows = with_retrieval_length(result.rows, rule)  # probe.csv's rows, written or not
    out = out_dir or (default_out("probe") if write else None)  # made only once the work is done
    if out is None:
        return Probing(rows, rule, None)
    written = write_probe_result(result, out, options=given(o), device=device, lang=o.outputs.lang)
    return Probing(rows, rule, out, written)
