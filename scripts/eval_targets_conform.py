"""Read by mypy in `make lint`: posenc's two kinds of eval target implement evaluation.target.EvalTarget
(a member missing, or of another type, fails the assignment below). Running it does nothing."""

from __future__ import annotations

from posenc_cli.evaluation.run_target import RunTarget
from posenc_cli.evaluation.target import EvalTarget
from posenc_cli.hf.models import HFModel


def as_eval_targets(run: RunTarget, model: HFModel) -> list[EvalTarget]:
    return [run, model]
