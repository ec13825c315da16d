"""`posenc probe`'s work, its one home, which the command and `posenc.probe` both call: every option
checked before any model is loaded (as eval's are: report.run_eval), the named targets loaded, every
target probed at each of its lengths and depths, once per RoPE scaling method (as eval scores it), on
one needle task, and the output set written. The command only parses and prints; the Python API only
spells its keywords as the options."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from posenc_cli.core import ui
from posenc_cli.core.device import resolve_device
from posenc_cli.core.errors import UsageError, require_seed
from posenc_cli.core.file_sets import SetKind
from posenc_cli.core.option_groups import ProbeOptions
from posenc_cli.core.options import check_given, given, refuse_unread
from posenc_cli.data.needles import NeedleTask, needle_task
from posenc_cli.evaluation.columns import as_trained, asked_methods, column_label
from posenc_cli.evaluation.eval_plan import announce_added
from posenc_cli.evaluation.labels import Label, distinctions, mixes_own_tokenizers
from posenc_cli.evaluation.perplexity import parse_lengths, target_lengths
from posenc_cli.evaluation.probe import COLUMNS, check_trials, parse_depths, recall, score
from posenc_cli.evaluation.target import EvalTarget, RefusedColumn
from posenc_cli.hf.targets import exports_as_hf, load_targets, refuse_hf_options_without_hf
from posenc_cli.model.extension.method import ContextMethod
from posenc_cli.model.positional import past_max_len
from posenc_cli.report.effective_length import LengthRule, with_retrieval_length
from posenc_cli.report.output_sets import write_probe_outputs
from posenc_cli.report.results_file import provenance
from posenc_cli.report.run_eval import hf_loading
from posenc_cli.rundir.destinations import default_out, owned_out
from posenc_cli.rundir.selection import Skipped


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
    methods = asked_methods(o.scaling, o.extension)
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
    made = provenance(result.targets, options=given(o), data_path=None, device=device)
    written = write_probe_outputs(
        result.rows, result.info, out, made=[made], lang=o.outputs.lang, skipped=result.skipped
    )
    return Probing(rows, rule, out, written)


@dataclass(frozen=True)
class ProbeResult:
    """probe.csv's rows, the targets they are of (for results.json), comparison.md's facts per column,
    and the runs skipped as unfinished."""

    rows: Any  # a pandas DataFrame with COLUMNS
    targets: list[EvalTarget]
    info: dict[Label, dict]
    skipped: list[Skipped]


@dataclass(frozen=True)
class ProbeSpec:
    """What every target is probed on: the same trials for every run of a tokenizer."""

    task: NeedleTask
    depths: list[float]
    trials: int
    seed: int
    rope_scaling: list[ContextMethod]  # methods in the order given ("none": as trained)
    rope_factor: float | None


def run_probe(
    names: list[str],
    spec: ProbeSpec,
    *,
    lengths: list[int],
    device: torch.device,
    hf: dict,
    add_context: bool = False,
) -> ProbeResult:
    """Load the named targets (as eval chooses them), check everything before any trial, probe."""
    check_trials(spec.trials)
    require_seed("--seed", spec.seed)
    loaded, why, skipped = load_targets(names, "probe", hf)
    lengths_of = probe_lengths(loaded, lengths, add_context=add_context, device=device, task=spec.task)
    variants = {id(r): r.variants(list(spec.rope_scaling), spec.rope_factor) for r in loaded}
    ui.announce([r.path for r in loaded], why, "probing")
    rows, info = probe_runs(loaded, spec, lengths=lengths_of, variants=variants, device=device)
    return ProbeResult(rows, loaded, info, skipped)


def probe_lengths(
    loaded: list, wanted: list[int], *, add_context: bool, device, task: NeedleTask
) -> dict[int, list[int]]:
    """Each target's trial lengths (by id; perplexity.target_lengths, the added ones said), checked
    before any trial: a posenc run's vocabulary and corpus (unchanged since training), and each
    target's memory at its lengths. Lengths too short for one trial of the task are left out, and said
    (an added training length silently: nobody asked for it)."""
    planned = {}
    for run in loaded:
        run.check_probe(task)
        shortest = run.shortest_trial(task)
        plan = target_lengths(run.train_len, wanted, add_context=add_context)
        kept = [L for L in plan.lengths if L >= shortest]
        planned[id(run)] = replace(plan, lengths=kept, added=plan.added if plan.added in kept else None)
        short = [str(L) for L in wanted if L < shortest]
        if not kept:
            raise UsageError(
                f"--lengths {','.join(short)}: a {task.name} trial for {run.path} needs at least {shortest} "
                "tokens; give longer --lengths"
            )
        if short:
            ui.err.print(
                f"not probing {run.path} at {', '.join(short)}: a {task.name} trial needs at least {shortest} tokens",
                markup=False,
                highlight=False,
            )
        run.check_fits([L for L in kept if run.max_len is None or L <= run.max_len], device)
    announce_added(loaded, planned)
    return {key: plan.lengths for key, plan in planned.items()}


def probe_runs(runs: list[EvalTarget], spec: ProbeSpec, *, lengths: dict, variants: dict, device):
    """(probe.csv's rows, comparison.md's facts per column): every run at each of its
    lengths (by id) and depth, once per variant (by id: the RoPE scalings it takes, else itself once)."""
    fillers: dict[Any, torch.Tensor] = {}
    mixed = mixes_own_tokenizers(runs)  # label columns as eval does: "rope [bpe]"
    apart = distinctions(runs, mixed)  # seeds of one model share a column, other trainings never do
    rows, info = [], {}
    cells = sum(len(lengths[id(r)]) * len(variants[id(r)]) for r in runs) * len(spec.depths)
    with ui.progress() as bar:
        task = bar.add_task("probe", total=cells, status="")
        for run in runs:
            for method, variant in asked_columns(spec.rope_scaling, variants[id(run)]):
                scheme = column_label(
                    run,
                    variant,
                    "",
                    distinct=apart[id(run)].within,
                    rope_factor=spec.rope_factor,
                    mixed=mixed,
                )
                info[scheme] = run.facts()
                if isinstance(variant, RefusedColumn):
                    ui.err.print(
                        f"{scheme} not computed: --rope-scaling {method.text}: {variant.why}", highlight=False
                    )
                # as trained (no rotary scheme to scale): "none"; else the method as --rope-scaling names it
                asked = ContextMethod().text if as_trained(run, scheme) else method.text
                scorer = run.scorer(device)
                for length in lengths[id(run)]:
                    for depth in spec.depths:
                        bar.update(task, status=f"{scheme} seed {run.seed} @ {length}, depth {depth:g}")
                        row = {"run": str(run.path), "model_id": run.model_id, "scheme": scheme}
                        row |= {"rope_scaling": asked, "task": spec.task.name, "seed": run.seed}
                        row |= {"train_len": run.train_len, "length": length, "depth": depth}
                        if isinstance(variant, RefusedColumn):  # shown as "—", never scored: noted once
                            cell = {
                                "trials": 0,
                                "accuracy": math.nan,
                                "key_nll": math.nan,
                                "recall": math.nan,
                            }
                        else:
                            cell = probe_cell(run, scorer, spec, length=length, depth=depth, cache=fillers)
                        rows.append(row | cell)
                        bar.advance(task)
    return pd.DataFrame(rows, columns=COLUMNS), info


def asked_columns(methods, columns: list) -> list[tuple[ContextMethod, Any]]:
    """Each column with the method it was asked as: a model that computes no asked method is probed as
    trained first, beside the refused columns (run_target.computed_columns); one that takes no method at
    all once, as trained, under the first."""
    methods = list(methods)
    if len(columns) == len(methods) + 1:
        methods = [ContextMethod(), *methods]
    return list(zip(methods, columns))


def probe_cell(run: EvalTarget, scorer, spec: ProbeSpec, *, length: int, depth: float, cache: dict) -> dict:
    """trials, accuracy and key_nll of one run at one length and depth ("—" past a position table)."""
    if past_max_len(run.max_len, length):
        return {"trials": 0, "accuracy": math.nan, "key_nll": math.nan, "recall": math.nan}
    batches = run.probe_trials(spec.task, length, depth, trials=spec.trials, seed=spec.seed, cache=cache)
    scored = [score(scorer, s, k, digits=spec.task.answer_digits) for s, k in batches]
    hit, nll = (torch.cat(parts) for parts in zip(*scored))
    found = [recall(scorer, s, k, decode=run.tokenizer.decode) for s, k in batches if spec.task.recalled]
    recalled = float(torch.cat(found).mean()) if found else math.nan  # vt and cwe: RULER's recall
    return {"trials": spec.trials, "accuracy": float(hit.float().mean()), "key_nll": float(nll.mean())} | {
        "recall": recalled
    }
