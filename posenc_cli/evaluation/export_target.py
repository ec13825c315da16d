"""A posenc export (`posenc export RUN`) as an evaluation target, loaded through transformers."""

from __future__ import annotations

from dataclasses import replace

import torch

from posenc_cli.core.errors import UsageError
from posenc_cli.evaluation.hf_extension import HFVariant
from posenc_cli.evaluation.hf_models import HFModel, short_name
from posenc_cli.evaluation.labels import Label
from posenc_cli.model import token_nll
from posenc_cli.model.extension.method import ContextMethod


class ExportModel(HFModel):
    """A posenc export (`posenc export RUN`) as transformers loads it: posenc's GPT under PreTrainedModel
    (evaluation.hf_modeling), scored through its logits whole (posenc's vocabularies are small), with the
    facts its scheme states, as the run it was exported from has them."""

    @property
    def gpt(self):
        return self.model.gpt

    @property
    def label(self) -> Label:
        """The export's scheme by its parts (a composite's too), as the run it was exported from names it."""
        return Label(self.gpt.scheme.part_names, model=short_name(self.path))

    @property
    def max_len(self) -> int | None:
        return self.gpt.scheme.max_len

    def facts(self) -> dict:
        return {
            "positional_params": self.gpt.n_positional_params,
            "relative": self.gpt.scheme.relative,
            "used_by": short_name(self.path),
        }

    @torch.no_grad()
    def token_nll(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return token_nll(self.model(input_ids=inputs.to(self.device)).logits, targets.to(self.device))

    @torch.no_grad()
    def last_logits(self, inputs: torch.Tensor, n: int) -> torch.Tensor:
        return self.model(input_ids=inputs.to(self.device)).logits[:, -n:].float()

    def variants(self, methods: list[ContextMethod], factor: float | None) -> list[HFVariant | None]:
        """Once, as exported, unless a method extends the context: posenc applies a RoPE scaling to its own
        runs, so one is refused here, but its scheme computes a training-free extension (extend_context)."""
        scaled = [m.text for m in methods if m.scaling != "none"]
        if scaled and self.gpt.scheme.scalable:
            raise UsageError(
                f"--rope-scaling {','.join(scaled)}: {self.path} is a posenc export, scored as exported; "
                "evaluate the run directory it was exported from to scale its RoPE"
            )
        if not any(m.extends for m in methods):
            return [None]
        extensions = [m.extension(self.train_len) for m in methods]
        for method, extension in zip(methods, extensions):
            if extension is None:
                continue
            try:
                self.gpt.scheme.check_takes_extension()
            except UsageError as refused:
                raise UsageError(f"--rope-scaling {method.text}: {self.path}: {refused}") from None
        self.extensions = [e for e in extensions if e is not None]
        return [None if e is None else HFVariant(None, e) for e in extensions]

    def use_variant(self, variant: HFVariant | None) -> Label:
        """Score with the variant's extension from now on, computed by the exported scheme itself."""
        if variant is None:
            self.gpt.scheme.extension = None  # the scheme's default: its own attention
            return self.label
        self.gpt.scheme.extend_context(variant.extension)
        return replace(self.label, variant=variant.variant)
