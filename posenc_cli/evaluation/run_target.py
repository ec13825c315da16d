"""A posenc run as evaluation sees it: the EvalTarget that `posenc eval` and `posenc probe` score, beside
the `hf:` models of hf.models."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from posenc_cli.config.forward_memory import forward_of
from posenc_cli.core.device import free_memory
from posenc_cli.core.errors import UsageError
from posenc_cli.data import token_window
from posenc_cli.data.needles import NeedleTask
from posenc_cli.evaluation.labels import Label, Variant
from posenc_cli.evaluation.perplexity import TOKENS_PER_FORWARD, LogitsScorer
from posenc_cli.evaluation.probe import check_vocab, make_trials, overhead, without_episodes
from posenc_cli.evaluation.target import RefusedColumn
from posenc_cli.model import GPT
from posenc_cli.model.extension import ContextExtension
from posenc_cli.model.extension.method import ContextMethod
from posenc_cli.model.positional import PositionalScheme
from posenc_cli.model.positional.rope_scaling import METHODS
from posenc_cli.rundir.loading import LoadedRun, require_text_run, run_corpus


def scheme_label(
    scheme: PositionalScheme, *, extension: ContextExtension | None = None, randomized: bool = False
) -> Label:
    """A posenc scheme's column, from what the scheme says of itself: its parts, the options its label
    names, its RoPE scaling; the eval-time `extension` it is computed with; `randomized`: trained with
    randomized positions."""
    variant = Variant(
        scheme.column_options,
        scheme.scaling_method,
        extension=extension.names if extension else (),
        settings=extension.marks if extension else (),
        randomized=randomized,
    )
    return Label(scheme.part_names, variant)


@dataclass(frozen=True)
class RunVariant:
    """What a posenc run is evaluated as (RunTarget.variants): scheme options (a RoPE scaling; none: as
    trained) and a training-free context extension (None: none), which the model's layers that take it
    compute with (GPT.with_extension)."""

    options: dict[str, Any] = field(default_factory=dict)
    extension: ContextExtension | None = None


@dataclass
class RunTarget(LoadedRun):
    """A loaded run with the variants, tokens, scorer and probe trials that evaluation asks of a model."""

    active: GPT | None = None  # the model as evaluated now (use_variant); None: as trained
    extensions: list[ContextExtension] = field(default_factory=list)  # asked columns' (memory_short)

    @classmethod
    def of(cls, run: LoadedRun) -> RunTarget:
        return cls(run.path, run.model, run.tokenizer, run.train_len, run.summary, run.checkpoint)

    @property
    def model_id(self) -> str:
        """The run's id (its resolved path for a run from before posenc gave runs ids) and the step its
        checkpoint holds: an output set's results are of these models, whatever path named them, never
        of a run trained there since nor of the same run resumed and trained on."""
        return f"{self.record.run_id or f'path:{Path(self.path).resolve()}'}@{self.checkpoint.step}"

    @property
    def real_context(self) -> int:
        return self.train_len  # a posenc run's context is the block size it was trained at

    @property
    def label(self) -> Label:
        """The run as trained: `rope+yarn` for a run trained with that scaling, `sinusoidal+unscaled` for
        one trained off its scale_embeddings default."""
        return scheme_label(self.model.scheme)

    def model_with(self, **scheme_options: Any) -> GPT:
        """This run's model, rebuilt with scheme options changed (eval's --rope-scaling); itself if none."""
        if not scheme_options:
            return self.model
        cfg = self.model.cfg
        model = GPT(replace(cfg, scheme_options={**cfg.scheme_options, **scheme_options}))
        model.load_state_dict(self.model.state_dict())
        return model.eval()

    def facts(self) -> dict:
        """What comparison.md's "positional parameters" and "relative position" rows show."""
        model = self.active or self.model
        return {"positional_params": model.n_positional_params, "relative": model.scheme.relative}

    def eval_tokens(self, text: str | None):
        """(token ids, weights): the ids of `text`, or of the run's validation split (loaded once for runs
        trained on the same data and tokenizer); weights(start, n) gives the UTF-8 bytes and characters
        of tokens start..start+n-1, a (2, n) tensor."""
        if text is not None:
            tokens = self.tokenizer.encode(text)
        else:
            tokens = run_corpus(self).val
        per_id = torch.from_numpy(
            np.stack([self.tokenizer.byte_counts, self.tokenizer.char_counts]).astype(np.float64)
        )
        return tokens, lambda start, n: per_id[:, token_window(tokens, start, n)]

    def check_fits(self, lengths: list[int], device: torch.device) -> None:
        """One forward at the longest length must fit in what the device has free (memory_short)."""
        short = memory_short(self, max(lengths), device) if lengths else None
        if short:
            raise UsageError(f"--lengths {max(lengths)}: {short}; use shorter --lengths")

    def scorer(self, device):
        return LogitsScorer((self.active or self.model).to(device), device)

    def variants(
        self, methods: list[ContextMethod], factor: float | None
    ) -> list[RunVariant | RefusedColumn]:
        """What to evaluate this run as, one item per method: a RunVariant (its frequency scaling as
        scheme options, its extension built for the run's training length; 'none': the run as trained),
        or a RefusedColumn saying why the run cannot compute it (a scaling on a scheme without RoPE
        frequencies, an extension no layer takes). A run trained with a scaling has it built in: a second
        one is refused rather than composed, while an extension applies on top. A run that computes no
        asked method is scored once, as trained: alone where it has no RoPE at all (the note says so),
        else beside the refused columns."""
        if methods == [ContextMethod()]:
            return [RunVariant()]
        columns = [self.column(method, factor) for method in methods]
        self.extensions = [c.extension for c in columns if isinstance(c, RunVariant) and c.extension]
        return computed_columns(columns, RunVariant(), rotary=has_rope(self.model.scheme))

    def column(self, method: ContextMethod, factor: float | None) -> RunVariant | RefusedColumn:
        """One method's column: its RunVariant, checked against the run before any scoring, or why not."""
        scheme = self.model.scheme
        if method.scales:
            if not scheme.scalable:
                return RefusedColumn(method, unscaled_reason(scheme))
            if scheme.scaling_method:
                return RefusedColumn(
                    method,
                    f"{self.path} was trained with scheme.scaling={scheme.scaling_method}, which its evaluation "
                    "always applies; scalings do not compose (self_extend, rerope, leaky_rerope, dca and logn "
                    "apply on top of it)",
                )
            if method.scaling not in METHODS:
                raise UsageError(
                    f"--rope-scaling {method.text}: {method.scaling} exists for hf: models only; posenc's own "
                    f"rotary runs take {', '.join(METHODS)}"
                )
        scaling = method.long_factors if method.long_factors is not None else method.scaling
        options = {} if not method.scales else {"scaling": scaling, "scaling_factor": factor}
        if method.long_factors is not None and (rotation := scheme.rotation(1)) is not None:
            method.long_factors.check_pairs(rotation.inv_freq.numel())  # before any scoring
        options |= {"scaling_len": self.train_len} if options else {}
        try:
            extension = method.extension(self.train_len)  # its parameters checked against the run's context
        except UsageError as refused:
            raise UsageError(f"--rope-scaling {method.text} for {self.path}: {refused}") from None
        if extension is not None:
            try:
                self.model.with_extension(extension)  # a view: the trained model is left as it is
            except UsageError as refused:
                return RefusedColumn(method, str(refused))
        return RunVariant(options, extension)

    def use_variant(self, variant: RunVariant | RefusedColumn) -> Label:
        """Evaluate as `variant` from now on (the checkpoint is untouched); its label. A refused column
        changes nothing and is named as asked."""
        if isinstance(variant, RefusedColumn):
            return replace(self.label, variant=variant.variant(self.label.variant))
        self.active = self.model_with(**variant.options).with_extension(variant.extension)
        return scheme_label(self.active.scheme, extension=variant.extension)

    def check_probe(self, task: NeedleTask) -> None:
        require_text_run(self)
        check_vocab(self.tokenizer, str(self.path), task)
        run_corpus(self)  # the text the run was trained on, unchanged: checked before any work

    def shortest_trial(self, task: NeedleTask) -> int:
        return overhead(self.tokenizer, task) + 1  # one filler token at least

    def probe_trials(
        self, task: NeedleTask, length: int, depth: float, *, trials: int, seed: int, cache: dict
    ):
        """[(trials x `length` tokens, answer tokens per trial)]: one batch with filler from the run's own
        validation text, the answer scored through the tokens that cover its characters."""
        filler = ("filler", self.data_key())
        if filler not in cache:
            cache[filler] = without_episodes(run_corpus(self).val, self.tokenizer)
        sequences, key_tokens, _ = make_trials(
            cache[filler], self.tokenizer, length, depth=depth, trials=trials, seed=seed, task=task
        )
        return [(sequences, key_tokens)]


def has_rope(scheme: PositionalScheme) -> bool:
    """Whether the scheme, or a part or layer of it, rotates by RoPE (a scaling or an extension could
    apply to it)."""
    return scheme.scalable or any(member.rotation(1) is not None for member in scheme.members)


def computed_columns(columns: list, as_trained: Any, *, rotary: bool) -> list:
    """The columns to score: as asked (refused ones shown with their reason), with `as_trained` first
    where no asked column computes; a model with no RoPE at all that computes nothing but as trained
    (no log-n column) is scored once, as trained (the table's note says it takes no scaling)."""
    computed = [column for column in columns if not isinstance(column, RefusedColumn)]
    if not rotary and all(column == as_trained for column in computed):
        return [as_trained]
    return columns if computed else [as_trained, *columns]


def unscaled_reason(scheme: PositionalScheme) -> str:
    """Why a frequency scaling cannot apply to a posenc scheme that is not RoPE alone."""
    if has_rope(scheme):
        return (
            f"{scheme.label} fixes its RoPE layers' frequencies per layer; a frequency scaling applies to "
            "scheme=rope runs (self_extend, rerope, leaky_rerope, dca and logn apply to its full-attention RoPE layers)"
        )
    return f"{scheme.label} has no RoPE frequencies to scale"


def memory_short(run: RunTarget, tokens: int, device: torch.device) -> str | None:
    """Why one forward of `tokens` tokens, windows batched as LogitsScorer batches them, does not fit:
    what the forward holds (config.forward_memory: activations, logits, the executor's blocks of
    attention, the asked columns' largest extension) against what the device has free; None if it fits."""
    windows = max(1, TOKENS_PER_FORWARD // tokens)  # LogitsScorer.batch_size
    need = forward_of(run.model.cfg.size, len(run.tokenizer), batch=windows, length=tokens).bytes(
        run.extensions
    )
    free = free_memory(device)
    if free is None or need <= free:
        return None
    return (
        f"scoring {run.path} at {tokens:,} tokens needs about {need / 2**30:,.1f} GiB, but {device} has "
        f"{free / 2**30:,.1f} GiB free"
    )
