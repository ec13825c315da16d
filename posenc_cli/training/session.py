"""One run being trained: the state a checkpoint saves, the model and optimizer built from the config,
and checkpoints saved and restored so that a resume continues exactly."""

from __future__ import annotations

import dataclasses
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from posenc_cli.config.schema import PosencConfig, TrainConfig
from posenc_cli.core.device import (
    autocast,
    native_bf16,
    resumed_precision,
)
from posenc_cli.core.errors import UsageError
from posenc_cli.data import Corpus, data_record
from posenc_cli.data.tasks import IGNORE
from posenc_cli.data.tokenizers import run_payload
from posenc_cli.model import GPT, ModelConfig, token_nll
from posenc_cli.rundir.layout import CHECKPOINT
from posenc_cli.rundir.lineage import check_same_model, initial_state, source_checkpoint
from posenc_cli.rundir.record import (
    Checkpoint,
    RunRecord,
    load_checkpoint,
    record_sha256,
    save_checkpoint,
)
from posenc_cli.rundir.summary import RunSummary, write_summary
from posenc_cli.training import distributed
from posenc_cli.training.tracking import RunLogger

log = logging.getLogger("posenc.train")


@dataclass
class TrainState:
    """What changes step by step; saved in every checkpoint so a resume continues exactly."""

    step: int = 0
    elapsed: float = 0.0
    metrics: list[dict[str, Any]] = field(default_factory=list)
    recent: list[torch.Tensor] = field(default_factory=list)  # losses since the last log line
    train_loss: float = math.nan  # the last logged mean


class NonFiniteLoss(RuntimeError):
    pass


def model_config(cfg: PosencConfig, vocab_size: int) -> ModelConfig:
    return ModelConfig(
        vocab_size=vocab_size,
        block_size=cfg.train.block_size,
        size=cfg.model,
        scheme=cfg.scheme_name,
        scheme_options=cfg.scheme_options,
    )


def check_lengths(corpus: Corpus, block_size: int) -> None:
    shortest = corpus.window_limit
    if shortest is not None and block_size + 1 > shortest:
        raise UsageError(
            f"train.block_size={block_size} does not fit the corpus: its smaller split has {shortest} tokens; "
            + (
                f"use train.block_size <= {shortest - 1} or a larger corpus"
                if shortest > 1
                else "use a larger corpus"
            )
        )


def make_optimizer(model: GPT, tc: TrainConfig) -> torch.optim.AdamW:
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [
        {"params": decay, "weight_decay": tc.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    try:  # one fused kernel instead of ~10 ops per parameter: whole runs 1.09x faster at nanoGPT's shapes
        return torch.optim.AdamW(groups, lr=tc.lr, betas=(0.9, 0.95), fused=True)
    except RuntimeError:  # a device (or a torch before 2.4 on CPU) without the fused kernel
        return torch.optim.AdamW(groups, lr=tc.lr, betas=(0.9, 0.95))


def scored_mean(nll: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The mean loss over scored targets: every token of a text window, a task's answer tokens alone."""
    return nll.sum() / (targets != IGNORE).sum()


def train_step(
    net: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    batch: tuple[torch.Tensor, torch.Tensor, torch.Tensor | None],
    *,
    device: torch.device,
    precision: str,
    grad_clip: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One optimizer step on (inputs, targets, positions or None): the loss and the gradient norm. The
    loop trains with it and auto precision times it (precision_choice), so both run the same step."""
    x, y, positions = batch
    with autocast(device, precision):
        y = y.to(device)
        loss = scored_mean(token_nll(net(x.to(device), positions), y), y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(net.parameters(), grad_clip)
    optimizer.step()
    return loss, grad_norm


@dataclass(kw_only=True)
class Session:
    """One run being trained: what the loop works on and what a checkpoint saves."""

    cfg: PosencConfig
    run_dir: Path
    mc: ModelConfig
    corpus: Corpus
    device: torch.device
    ctx: distributed.Context
    model: GPT  # the bare model: validation and checkpoints
    optimizer: torch.optim.Optimizer
    data_rng: torch.Generator
    val_batches: list[tuple[torch.Tensor, torch.Tensor]]
    run_id: str  # names the run in its summary and every checkpoint: a foreign checkpoint is refused
    precision: str  # effective (core.device.EFFECTIVE_PRECISIONS): resolved once, kept by every resume
    precision_facts: dict[str, Any] = field(default_factory=dict)  # why it is that one (precision_choice)
    state: TrainState = field(default_factory=TrainState)
    saved_step: int | None = None  # the step of the newest checkpoint on disk
    summary: RunSummary = field(default_factory=RunSummary)  # summary.json while it trains (announce_run)
    logger: RunLogger = field(default_factory=RunLogger)  # metrics.csv and trackers (rank 0 only)


def last_measured(rows: list[dict[str, Any]], key: str) -> float | None:
    """The newest value of `key` in the metrics rows (rows hold only what their step measured)."""
    return next((row[key] for row in reversed(rows) if row.get(key) is not None), None)


def checked_losses(s: Session) -> torch.Tensor:
    """The global-batch loss of each step since the last log line; stops training at a non-finite one."""
    if not s.state.recent:
        return torch.zeros(0)
    losses = distributed.mean(torch.stack(s.state.recent).float(), s.ctx).cpu()
    bad = (~torch.isfinite(losses)).nonzero()
    if len(bad):
        step = s.state.step - len(losses) + int(bad[0]) + 1
        raise NonFiniteLoss(f"the loss became {float(losses[bad[0]]):.4g} at step {step}")
    return losses


def save(s: Session, elapsed: float) -> None:
    """Checkpoint the whole session; never one whose weights a non-finite loss has touched."""
    recent = checked_losses(s)
    if not all(bool(torch.isfinite(p).all()) for p in s.model.parameters()):
        raise NonFiniteLoss(f"the weights became non-finite by step {s.state.step}")
    s.state.elapsed, s.saved_step = elapsed, s.state.step
    if not s.ctx.is_main:
        return
    record = run_record(s)
    save_checkpoint(
        s.run_dir / CHECKPOINT,
        Checkpoint(
            record=record,
            step=s.state.step,
            elapsed=s.state.elapsed,
            metrics=s.state.metrics,
            recent_losses=recent,
            train_loss=s.state.train_loss,
            model=s.model.state_dict(),
            optimizer=s.optimizer.state_dict(),
            data_rng=s.data_rng.get_state(),
            torch_rng=torch.get_rng_state(),
        ),
    )
    # a checkpoint exists (a lost checkpoint.pt is never trained over), with this record
    s.summary = dataclasses.replace(
        s.summary, checkpoint_step=s.saved_step, record_sha256=record_sha256(record)
    )
    if s.state.step < s.cfg.train.max_steps:  # the last step's is said by the final summary, written next
        write_summary(s.run_dir, s.summary)


def run_record(s: Session) -> RunRecord:
    """What this run is: a resume must rebuild the same record, and every reader checks it."""
    return RunRecord(
        run_id=s.run_id,
        model_config=s.mc.to_dict(),
        tokenizer=run_payload(s.corpus.tokenizer),
        train_len=s.cfg.train.block_size,
        data=data_record(s.cfg.data),
        seed=s.cfg.seed,
        corpus_sha256=s.corpus.sha256,
        precision=s.precision,
        config=recorded(s.cfg),
    )


def restore(s: Session, path: Path) -> None:
    """Continue from `path`: weights, optimizer, step, RNG streams, metrics so far. A run killed before
    its first checkpoint simply starts again. The checkpoint must be this run's, on this data, with this
    model and tokenizer: anything else is refused, naming what differs."""
    if not path.is_file():
        log.warning(f"{path.parent} has no checkpoint yet; training it from step 0")
        return
    saved = load_checkpoint(path)
    check_resumable(saved.record, run_record(s), path)
    if saved.record.precision is not None:  # older checkpoints resume in what this machine resolves
        s.precision = resumed_precision(
            s.device, s.cfg.train.precision, saved.record.precision, run=str(s.run_dir)
        )
        if s.precision != "fp32" and not native_bf16(s.device):
            log.warning(
                f"{s.run_dir} computes in {s.precision}, which {s.device} emulates: this resume is slow"
            )
    if saved.optimizer is None or saved.data_rng is None or saved.torch_rng is None:
        raise UsageError(
            f"{path} was written by an older posenc without its optimizer state; it cannot be resumed"
        )
    try:
        s.model.load_state_dict(saved.model)
        s.optimizer.load_state_dict(saved.optimizer)
        s.data_rng.set_state(saved.data_rng)
        torch.set_rng_state(saved.torch_rng)
    except (KeyError, RuntimeError, ValueError, TypeError) as err:
        raise UsageError(
            f"{path} cannot be resumed by this version of posenc ({' '.join(str(err).split())[:120]})"
        ) from None
    s.state = TrainState(
        step=saved.step,
        elapsed=float(saved.elapsed),
        metrics=list(saved.metrics),
        recent=[loss.to(s.device) for loss in saved.recent_losses],
        train_loss=float(saved.train_loss),
    )
    s.saved_step = s.state.step
    log.info(f"resumed from {path} at step {s.state.step}")


def check_resumable(saved: RunRecord, now: RunRecord, path: Path) -> None:
    """The checkpoint's record against the one this resume rebuilt: the first difference, in one line."""
    if saved.run_id != now.run_id:
        raise UsageError(
            f"{path} belongs to another run (its run id differs); a run resumes only from its own checkpoint"
        )
    if saved.corpus_sha256 != now.corpus_sha256:
        raise UsageError(
            f"{path} was trained on another corpus than data now gives (its sha256 differs); "
            "the data it was trained on has changed"
        )
    if saved.tokenizer != now.tokenizer:
        raise UsageError(
            f"{path} was trained with another tokenizer than data now gives (its fingerprint differs: "
            "a cached tokenizer was changed); a run resumes only with its own tokenizer"
        )
    try:
        same_model = ModelConfig.from_dict(saved.model_config).to_dict() == now.model_config
    except TypeError:  # a field this version's model does not know
        same_model = False
    if not same_model:
        raise UsageError(
            f"{path} was trained with a different model, scheme or corpus; resume with the run's own overrides"
        )


def init_weights(model: GPT, run: str, corpus: Corpus) -> None:
    """train.init_from: RUN's weights into `model` (checked again here: RUN may have changed since)."""
    source, saved = source_checkpoint(run)
    check_same_model(source, saved, model.cfg.to_dict(), tokenizer=corpus.tokenizer)
    model.load_state_dict(initial_state(source, saved, model))
    log.info(f"initialised from {source} (its step {saved.step})")


def recorded(cfg: PosencConfig) -> dict[str, Any]:
    """The config as posenc records it with the run: what a resume rebuilds the run from."""
    return dataclasses.asdict(dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, resume=None)))
