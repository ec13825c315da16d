"""The EvalTarget protocol: what `posenc eval` and `posenc probe` ask of a model, so that a posenc run
(evaluation.run_target.RunTarget) and a pretrained `hf:` model (hf.models.HFModel) are
scored by the same code. A new kind of model implements this and is loaded in hf.targets."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Protocol, runtime_checkable

import torch

from posenc_cli.data.needles import NeedleTask
from posenc_cli.evaluation.labels import Label, Variant
from posenc_cli.model.extension.method import ContextMethod
from posenc_cli.rundir.record import TrainedText


@dataclass(frozen=True)
class RefusedColumn:
    """A --rope-scaling column a model cannot compute, as its `variants` gives it: the column is shown,
    with `why`, and never scored; a requested column is never dropped without a word."""

    method: ContextMethod
    why: str

    def variant(self, trained: Variant) -> Variant:
        """The column's Variant: the model's own, with the method's scaling and extensions named."""
        extension = ((self.method.remap.name,) if self.method.remap is not None else ()) + (
            ("logn",) if self.method.logn else ()
        )
        scaling = self.method.scaling if self.method.scales else ""
        return replace(trained, scaling=scaling or trained.scaling, extension=trained.extension + extension)


@runtime_checkable
class EvalTarget(Protocol):
    @property
    def path(self) -> Path | str: ...  # a run directory, or the hf: name: the `run` column of every result

    @property
    def model_id(self) -> str: ...  # whose results: a run's id and its checkpoint's step; an hf: model's name

    @property
    def train_len(self) -> int: ...  # the length it was trained at: lengths are read against it

    @property
    def real_context(self) -> int: ...  # the context it has: train_len, but an hf: model's own config's

    # where --hf-context pretends another (no extrapolation verdict without a length past this one)

    @property
    def seed(self) -> int: ...  # a posenc run's seed; 0 for a pretrained model

    @property
    def training_precision(self) -> str: ...  # EFFECTIVE_PRECISIONS, unrecorded; "" if not posenc's

    @property
    def trained_text(self) -> TrainedText | None: ...  # what it was trained on; None: not known to posenc

    @property
    def tokenizer_name(self) -> str: ...  # posenc's tokenizer kind (char, byte, bpe) or the model's name

    @property
    def label(self) -> Label: ...  # the column as trained

    @property
    def max_len(self) -> int | None: ...  # the longest position it can represent; None: unbounded

    def variants(self, methods: list[ContextMethod], factor: float | None) -> list[Any]:
        """What it is evaluated as, one item per --rope-scaling method (opaque: given back to use_variant;
        `factor`: --rope-factor, for a method's frequency scaling); a model that takes no scaling once.
        A method it cannot apply is a RefusedColumn (shown with its reason, never scored); one whose
        options cannot fit it is refused in one line naming it and the method."""
        ...

    def use_variant(self, variant: Any) -> Label:
        """Evaluate as `variant` from now on (nothing on disk changes); the column's label."""
        ...

    def eval_tokens(self, text: str | None) -> tuple[Any, Callable[[int, int], torch.Tensor]]:
        """(token ids of `text`, or of its own validation text; weights(start, n): UTF-8 bytes and
        characters of tokens start..start+n-1, a (2, n) tensor)."""
        ...

    def check_fits(self, lengths: list[int], device: torch.device) -> None:
        """Refuse, in one line, lengths whose scoring would not fit in the device's free memory."""
        ...

    def scorer(self, device: Any) -> Any:
        """What scores windows: token_nll(inputs, targets) and last_logits(inputs, n)."""
        ...

    def facts(self) -> dict[str, Any]:
        """comparison.md's rows about the model: positional_params, relative (and used_by)."""
        ...

    def check_probe(self, task: NeedleTask) -> None:
        """Refuse, before any work, a model the probe cannot ask the task (its vocabulary, its text)."""
        ...

    def shortest_trial(self, task: NeedleTask) -> int:
        """The fewest tokens a trial of the task takes in this model's tokenizer."""
        ...

    def probe_trials(
        self, task: NeedleTask, length: int, depth: float, *, trials: int, seed: int, cache: dict
    ) -> list[tuple[Any, Any]]:
        """[(trials x `length` token ids, the answer's tokens per trial)] at `depth`, the same for a seed."""
        ...
