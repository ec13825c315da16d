"""One run being trained: the Session the loop works on, the model and optimizer built from the config,
and the step that trains them (auto precision, training.precision_choice, builds and times the same)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from posenc_cli.config.schema import PosencConfig, TrainConfig
from posenc_cli.core.device import autocast
from posenc_cli.data import Corpus
from posenc_cli.data.tasks import IGNORE
from posenc_cli.model import GPT, ModelConfig, token_nll
from posenc_cli.rundir.summary import RunSummary
from posenc_cli.training import distributed
from posenc_cli.training.tracking import RunLogger


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
