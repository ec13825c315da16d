"""Task runs (data=task) in `posenc eval`: exact-match accuracy of the greedy answer by instance length.

Greedy decoding reproduces an answer exactly if and only if, fed the true answer so far, the model's
argmax is the next true token at every answer position (and at the end mark): as long as the greedy
tokens agree with the answer, the greedy prefix is the true prefix. So one teacher-forced forward pass
per batch scores greedy exact match, instead of one pass per answer token. Every run is asked the same
instances at a length (one fixed generator per length), so schemes and seeds are compared paired.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd
import torch

from posenc_cli.core.errors import UsageError
from posenc_cli.data.corpora import task_spec
from posenc_cli.data.tasks import IGNORE, TaskSpec, encode
from posenc_cli.evaluation.labels import Label, refuse_repeats, run_setting
from posenc_cli.evaluation.perplexity import TOKENS_PER_FORWARD
from posenc_cli.evaluation.run_target import RunTarget, memory_short, scheme_label
from posenc_cli.model.positional import past_max_len

INSTANCES = 100  # instances per length: accuracy in steps of 1 %
EVAL_SEED = 4418  # the instances' generator is seeded with EVAL_SEED + length


def task_targets(targets: list) -> list[RunTarget] | None:
    """The task runs among eval's targets (each run's record names its data), or None when there are
    none; a call that mixes task runs with text runs or hf: models is refused."""
    is_task = [isinstance(t, RunTarget) and task_spec(t.data) is not None for t in targets]
    if not any(is_task):
        return None
    if not all(is_task):
        task = next(t for t, flag in zip(targets, is_task) if flag)
        text = next(t for t, flag in zip(targets, is_task) if not flag)
        raise UsageError(
            f"{task.path} is a task run but {getattr(text, 'path', text.label)} is scored by perplexity; "
            "evaluate task runs and text models in separate calls"
        )
    runs: list[RunTarget] = list(targets)
    refuse_repeats(runs, {id(run): run_setting(run) for run in runs})
    return runs


def column(run: RunTarget) -> Label:
    """The run's scheme as trained, `+randomized` where its positions were (train.positions)."""
    randomized = (run.record.config or {}).get("train", {}).get("positions") == "randomized"
    return scheme_label(run.model.scheme, randomized=randomized)


@torch.no_grad()
def exact_match(run: RunTarget, spec: TaskSpec, length: int, *, device: torch.device) -> float:
    """Share of INSTANCES instances of `length` whose greedy answer is exactly right."""
    generator = torch.Generator().manual_seed(EVAL_SEED + length)
    instances = [spec.instance(length, generator) for _ in range(INSTANCES)]
    width = spec.input_len(length)
    inputs, targets = encode(spec, instances, width)
    model = run.model.to(device).eval()
    rows = max(1, TOKENS_PER_FORWARD // width)
    right = [
        greedy_exact(model, inputs[start : start + rows].to(device), targets[start : start + rows].to(device))
        for start in range(0, INSTANCES, rows)
    ]
    return float(torch.cat(right).float().mean())


def greedy_exact(model: torch.nn.Module, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """(B,) True where greedy decoding would give every scored target: the argmax is right at each."""
    agree = (model(inputs).argmax(-1) == targets) | (targets == IGNORE)
    return agree.all(-1).cpu()


def check_task_lengths(runs: list[RunTarget], lengths: list[int], *, device: torch.device) -> None:
    """Refuse, before any instance is made, lengths whose sequences would not fit in the device's
    free memory (one line, from the run's own memory check: the same bound perplexity keeps)."""
    for run in runs:
        spec = task_spec(run.data)
        for length in sorted({*lengths, spec.max_train_len}):
            width = spec.input_len(length)
            short = None if past_max_len(run.max_len, width) else memory_short(run, width, device)
            if short:
                raise UsageError(
                    f"--lengths {length}: an instance of length {length} is {width:,} tokens, and {short}; "
                    "use shorter --lengths"
                )


def task_accuracy(runs: list[RunTarget], lengths: list[int], *, device: torch.device) -> pd.DataFrame:
    """The tidy table: one row per run and instance length (each run's max_train_len added), NaN with
    n = 0 where the run cannot represent the positions (a learned table)."""
    check_task_lengths(runs, lengths, device=device)
    rows: list[dict[str, Any]] = []
    for run in runs:
        spec = task_spec(run.data)
        for length in sorted({*lengths, spec.max_train_len}):
            skipped = past_max_len(run.max_len, spec.input_len(length))
            rows.append(
                {
                    "run": str(run.path),
                    "model_id": run.model_id,
                    "task": spec.task + ("+reversed" if spec.reversed_digits else ""),
                    "scheme": column(run),
                    "seed": run.seed,
                    "length": length,
                    "train_len": spec.max_train_len,
                    "accuracy": math.nan if skipped else exact_match(run, spec, length, device=device),
                    "n": 0 if skipped else INSTANCES,
                }
            )
    return pd.DataFrame(rows)
