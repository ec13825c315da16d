"""The summary of a run being trained: built once, from its config, model and corpus, when the run is
announced; its outcome when the training stops (rundir.summary writes and reads it)."""

from __future__ import annotations

from pathlib import Path

import torch

from posenc_cli.config.schema import PosencConfig
from posenc_cli.core.device import precision_record
from posenc_cli.core.version import code_version
from posenc_cli.data import Corpus
from posenc_cli.model import GPT
from posenc_cli.rundir.lineage import lineage
from posenc_cli.rundir.summary import (
    PrecisionFacts,
    RunDescription,
    RunOutcome,
    RunStatus,
    RunSummary,
    read_summary,
)
from posenc_cli.training import distributed
from posenc_cli.training.session import Session, last_measured, recorded


def running_summary(s: Session) -> RunSummary:
    """The summary of the run `s` trains, status running. A resume keeps every code version that trained
    the run, oldest first, and the fingerprint of the checkpoint on disk, which it describes until the
    next save."""
    cfg = s.cfg
    precision = precision_record(s.device, cfg.train.precision, s.precision)
    described = describe(
        cfg, s.model, s.corpus, device=s.device, precision=PrecisionFacts(**precision, **s.precision_facts)
    )
    before = read_summary(s.run_dir) if cfg.train.resume else None
    source = Path(cfg.train.init_from).resolve() if cfg.train.init_from else None
    return RunSummary(
        status=RunStatus.RUNNING,
        run_id=s.run_id,
        config=recorded(cfg),
        description=described,
        code_versions=before.code_history(described.code_version) if before else None,
        init_from=None if source is None else str(source),
        init_chain=None if source is None else tuple(lineage(source)),
        checkpoint_step=s.saved_step,
        record_sha256=before.record_sha256 if before else None,
    )


def run_outcome(s: Session) -> RunOutcome:
    """Where the run's training stopped and what it measured last."""
    tc, state = s.cfg.train, s.state
    return RunOutcome(
        steps=state.step,
        wall_time_s=round(state.elapsed, 2),
        final_train_loss=last_measured(state.metrics, "train_loss"),
        final_val_loss=last_measured(state.metrics, "val_loss"),
        tokens_per_s=round(state.step * tc.batch_size * tc.block_size / max(state.elapsed, 1e-9)),
    )


def describe(
    cfg: PosencConfig, model: GPT, corpus: Corpus, *, device, precision: PrecisionFacts
) -> RunDescription:
    scheme = model.scheme
    return RunDescription(
        scheme=model.scheme.label,
        seed=cfg.seed,
        train_len=cfg.train.block_size,
        positions=cfg.train.positions,
        max_position=cfg.train.max_position,
        kind=scheme.kind,
        relative=scheme.relative,
        max_len=scheme.max_len,
        positional_params=model.n_positional_params,
        total_params=model.n_params,
        corpus=corpus.name,
        tokenizer=corpus.tokenizer.kind,
        vocab_size=len(corpus.tokenizer),
        device=str(device),
        code_version=code_version(),
        threads=torch.get_num_threads(),
        processes=distributed.current().world_size,
        corpus_stats=dict(corpus.stats),
        precision=precision,
    )
