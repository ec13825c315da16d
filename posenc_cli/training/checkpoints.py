"""A run's checkpoints: saved so that a resume continues exactly, restored only into the same run."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

import torch

from posenc_cli.config.schema import PosencConfig
from posenc_cli.core.device import native_bf16, resumed_precision
from posenc_cli.core.errors import UsageError
from posenc_cli.data import data_record
from posenc_cli.data.tokenizers import run_payload
from posenc_cli.model import ModelConfig
from posenc_cli.rundir.layout import CHECKPOINT
from posenc_cli.rundir.record import (
    Checkpoint,
    RunRecord,
    load_checkpoint,
    record_sha256,
    save_checkpoint,
)
from posenc_cli.rundir.summary import write_summary
from posenc_cli.training.session import NonFiniteLoss, Session, TrainState, checked_losses

log = logging.getLogger("posenc.train")


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


def recorded(cfg: PosencConfig) -> dict[str, Any]:
    """The config as posenc records it with the run: what a resume rebuilds the run from."""
    return dataclasses.asdict(dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, resume=None)))
