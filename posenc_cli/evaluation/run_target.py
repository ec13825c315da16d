"""A posenc run as evaluation sees it: the EvalTarget that `posenc eval` and `posenc probe` score, beside
the `hf:` models of evaluation.hf_models."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from posenc_cli.core.device import free_memory
from posenc_cli.core.errors import UsageError
from posenc_cli.data import token_window
from posenc_cli.data.needles import NeedleTask
from posenc_cli.evaluation.labels import Label, Variant
from posenc_cli.evaluation.perplexity import TOKENS_PER_FORWARD, LogitsScorer
from posenc_cli.evaluation.probe import check_vocab, make_trials, overhead, without_episodes
from posenc_cli.model import GPT
from posenc_cli.model.extension import ContextExtension
from posenc_cli.model.extension.method import ContextMethod
from posenc_cli.model.positional import PositionalScheme
from posenc_cli.model.positional.rope_scaling import METHODS
from posenc_cli.rundir.loading import LoadedRun, require_text_run, run_corpus


def scheme_label(scheme: PositionalScheme, *, randomized: bool = False) -> Label:
    """A posenc scheme's column, from what the scheme says of itself: its parts, the options its label
    names, its RoPE scaling; `randomized`: trained with randomized positions."""
    extension = scheme.extension
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
    trained) and a training-free context extension (None: none)."""

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

    def model_with(self, *, fresh: bool = False, **scheme_options: Any) -> GPT:
        """This run's model, rebuilt with scheme options changed (eval's --rope-scaling); itself if none
        and not `fresh` (a copy an extension may change)."""
        if not scheme_options and not fresh:
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

    def variants(self, methods: list[ContextMethod], factor: float | None) -> list[RunVariant]:
        """What to evaluate this run as: for a scheme that takes RoPE scaling, one RunVariant per method
        (its frequency scaling as scheme options, its extension built for the run's training length;
        'none': the run as trained); any other run once, as it is. A run trained with a scaling has it
        built in: a second one on top is refused rather than composed, while an extension applies on top."""
        scheme = self.model.scheme
        if [m.text for m in methods] == ["none"] or not (scheme.scalable or extends_only(scheme, methods)):
            return [RunVariant()]
        scaled = [m.text for m in methods if m.scaling != "none"]
        if scheme.scaling is not None and scaled:
            raise UsageError(
                f"--rope-scaling {','.join(scaled)}: {self.path} was trained with scheme.scaling={scheme.scaling.method}, "
                "which its evaluation always applies; evaluate it without a frequency scaling (scalings do not "
                "compose; self_extend, rerope, leaky_rerope, dca and logn alone apply on top of it)"
            )
        for method in methods:
            if method.scaling not in METHODS:
                raise UsageError(
                    f"--rope-scaling {method.text}: {method.scaling} exists for hf: models only; posenc's own "
                    f"rotary runs take {', '.join(METHODS)}"
                )
        variants = [variant_of(self, method, factor=factor) for method in methods]
        self.extensions = [v.extension for v in variants if v.extension is not None]
        return variants

    def use_variant(self, variant: RunVariant) -> Label:
        """Evaluate as `variant` from now on (the checkpoint is untouched); its label."""
        self.active = self.model_with(fresh=variant.extension is not None, **variant.options)
        if variant.extension is not None:
            self.active.scheme.extend_context(variant.extension)
        return scheme_label(self.active.scheme)

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


def extends_only(scheme: PositionalScheme, methods: list[ContextMethod]) -> bool:
    """Whether a scheme that takes no frequency scaling (a layer schedule) is asked for training-free
    extensions alone, and has layers that take them: then it is scored once per method."""
    if any(method.scaling != "none" for method in methods):
        return False
    try:
        scheme.check_takes_extension()
    except UsageError:
        return False
    return True


def variant_of(run: RunTarget, method: ContextMethod, *, factor: float | None) -> RunVariant:
    """One method's RunVariant for a rotary run, its extension checked against the run's scheme and
    context before any scoring."""
    options = {} if method.scaling == "none" else {"scaling": method.scaling, "scaling_factor": factor}
    options |= {"scaling_len": run.train_len} if options else {}
    try:
        extension = method.extension(run.train_len)  # its parameters checked against the run's context
        if extension is not None:
            run.model.scheme.check_takes_extension()
    except UsageError as refused:
        raise UsageError(f"--rope-scaling {method.text} for {run.path}: {refused}") from None
    return RunVariant(options, extension)


def memory_short(run: RunTarget, tokens: int, device: torch.device) -> str | None:
    """Why one forward of `tokens` tokens (windows batched up to TOKENS_PER_FORWARD tokens) does not
    fit: its fp32 activations, logits and attention scores against what the device has free; None if
    it fits."""
    cfg = run.model.cfg.size
    batched = max(tokens, TOKENS_PER_FORWARD)
    need = 4 * batched * (len(run.tokenizer) + 16 * cfg.n_embd * cfg.n_layer + cfg.n_head * tokens)
    windows, head_dim = batched // tokens, cfg.n_embd // cfg.n_head
    need += max(
        (
            e.extra_bytes(batch=windows, heads=cfg.n_head, length=tokens, head_dim=head_dim)
            for e in run.extensions
        ),
        default=0,
    )
    free = free_memory(device)
    if free is None or need <= free:
        return None
    return (
        f"scoring {run.path} at {tokens:,} tokens needs about {need / 2**30:,.1f} GiB, but {device} has "
        f"{free / 2**30:,.1f} GiB free"
    )
