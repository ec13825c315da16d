"""A posenc export (`posenc export RUN`) as an evaluation target, loaded through transformers."""

from __future__ import annotations

import torch

from posenc_cli.core.errors import UsageError
from posenc_cli.evaluation.hf_models import HFModel, short_name
from posenc_cli.evaluation.labels import Label
from posenc_cli.model import token_nll
from posenc_cli.model.positional.rope_scaling import RopeScaling


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

    def variants(self, methods: list[str], factor: float | None) -> list[RopeScaling | None]:
        """Once, as exported: posenc applies a RoPE scaling to its own runs, so one is refused here."""
        scaled = [m for m in methods if m != "none"]
        if scaled and self.gpt.scheme.scalable:
            raise UsageError(
                f"--rope-scaling {','.join(scaled)}: {self.path} is a posenc export, scored as exported; "
                "evaluate the run directory it was exported from to scale its RoPE"
            )
        return [None]
