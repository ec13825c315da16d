"""`posenc probe` as one call, which the command and `posenc.probe` both make: every target at each of
its lengths and depths, once per RoPE scaling method (as eval scores it), on one needle task."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import torch

from posenc_cli.core import ui
from posenc_cli.core.errors import UsageError, require_seed
from posenc_cli.data.needles import NeedleTask
from posenc_cli.evaluation.eval_plan import announce_added
from posenc_cli.evaluation.eval_runs import as_trained, column_label
from posenc_cli.evaluation.labels import Label, distinctions, mixes_own_tokenizers
from posenc_cli.evaluation.perplexity import target_lengths
from posenc_cli.evaluation.probe import COLUMNS, check_trials, recall, score
from posenc_cli.evaluation.target import EvalTarget, RefusedColumn
from posenc_cli.evaluation.targets import load_targets
from posenc_cli.model.extension.method import ContextMethod
from posenc_cli.model.positional import past_max_len
from posenc_cli.rundir.selection import Skipped


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
    import pandas as pd

    fillers: dict[Any, torch.Tensor] = {}
    mixed = mixes_own_tokenizers(runs)  # label columns as eval does: "rope [bpe]"
    apart = distinctions(runs, mixed)  # seeds of one model share a column, other trainings never do
    rows, info = [], {}
    cells = sum(len(lengths[id(r)]) * len(variants[id(r)]) for r in runs) * len(spec.depths)
    with ui.progress() as bar:
        task = bar.add_task("probe", total=cells, status="")
        for run in runs:
            for method, variant in zip(spec.rope_scaling, variants[id(run)]):
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
                asked = "none" if as_trained(run, scheme) else method.text
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
