"""A posenc export (`posenc export RUN`) as an evaluation target, loaded through transformers."""

from __future__ import annotations

from dataclasses import replace
from functools import cached_property

import torch

from posenc_cli.core.errors import UsageError
from posenc_cli.evaluation.labels import Label, Variant
from posenc_cli.evaluation.run_target import computed_columns, has_rope
from posenc_cli.evaluation.target import RefusedColumn
from posenc_cli.hf.extended_attention import HFVariant
from posenc_cli.hf.models import HFModel, short_name
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
        """The export's scheme by its parts (a composite's too) and the options its label names, as the run
        it was exported from names it."""
        scheme = self.trained.scheme
        return Label(scheme.part_names, Variant(scheme.column_options), model=short_name(self.path))

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

    def variants(
        self, methods: list[ContextMethod], factor: float | None
    ) -> list[HFVariant | RefusedColumn | None]:
        """Once, as exported, unless a method extends the context: posenc applies a RoPE scaling to its own
        runs, so one is refused here, while the exported model's layers compute a training-free
        extension (GPT.with_extension). A column the export cannot compute is a RefusedColumn, as for the
        run it was exported from."""
        scaled = [m.text for m in methods if m.scales]
        if scaled and self.gpt.scheme.scalable:
            raise UsageError(
                f"--rope-scaling {','.join(scaled)}: {self.path} is a posenc export, scored as exported; "
                "evaluate the run directory it was exported from to scale its RoPE"
            )
        if not any(m.extends for m in methods):
            return [None]
        columns = [self.column(method) for method in methods]
        self.extensions = [c.extension for c in columns if isinstance(c, HFVariant) and c.extension]
        return computed_columns(columns, None, rotary=has_rope(self.gpt.scheme))

    def column(self, method: ContextMethod) -> HFVariant | RefusedColumn | None:
        if method.scales:
            return RefusedColumn(
                method, f"{self.gpt.scheme.label} has no RoPE frequencies of its own to scale"
            )
        extension = method.extension(self.train_len)
        if extension is None:
            return None
        try:
            self.trained.with_extension(extension)
        except UsageError as refused:
            return RefusedColumn(method, str(refused))
        return HFVariant(None, extension)

    @cached_property
    def trained(self):
        """The exported GPT as trained, whatever column is scored now (read before any column sets one)."""
        return self.gpt

    def use_variant(self, variant: HFVariant | RefusedColumn | None) -> Label:
        """Score with the variant's extension from now on: the exported model, its weights shared, its
        layers extended (GPT.with_extension); None: as exported. A refused column changes nothing."""
        if isinstance(variant, RefusedColumn):
            return replace(self.label, variant=variant.variant(self.label.variant))
        self.model.gpt = self.trained.with_extension(None if variant is None else variant.extension)
        if variant is None:
            return self.label
        return replace(self.label, variant=replace(variant.variant, options=self.label.variant.options))
