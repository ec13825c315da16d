"""The summary of a run being trained: announced once, from its config, model and corpus, when the run
starts; its outcome when the training stops; marked failed when an error stops it (rundir.summary
writes and reads it)."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

import torch

from posenc_cli.config.schema import PosencConfig
from posenc_cli.core.atomic import write_text
from posenc_cli.core.device import precision_record
from posenc_cli.core.errors import UsageError
from posenc_cli.core.version import code_version
from posenc_cli.data import Corpus
from posenc_cli.data.tokenizers import TOKENIZER_FILE
from posenc_cli.model import GPT
from posenc_cli.rundir.claim import resume_command
from posenc_cli.rundir.layout import SUMMARY
from posenc_cli.rundir.lineage import lineage
from posenc_cli.rundir.summary import (
    PrecisionFacts,
    RunDescription,
    RunOutcome,
    RunStatus,
    RunSummary,
    read_summary,
    write_summary,
)
from posenc_cli.training import distributed
from posenc_cli.training.checkpoints import recorded
from posenc_cli.training.session import Session
from posenc_cli.training.tracking import open_loggers

log = logging.getLogger("posenc.train")


def announce_run(s: Session, run_name: str | None, *, hparams: dict | None = None) -> None:
    """The summary of a run being trained, written with status running; the trackers opened."""
    cfg = s.cfg
    if cfg.train.warmup_steps > cfg.train.max_steps:  # a smoke test's choice, a real run's mistake
        log.warning(
            f"train.warmup_steps={cfg.train.warmup_steps} is longer than train.max_steps="
            f"{cfg.train.max_steps}: the learning rate never reaches train.lr={cfg.train.lr}"
        )
    s.summary = running_summary(s)
    if s.ctx.is_main:
        if s.corpus.tokenizer.kind == "bpe":
            write_text(s.run_dir / TOKENIZER_FILE, s.corpus.tokenizer.to_json())
        write_summary(s.run_dir, s.summary)
        s.logger = open_loggers(
            cfg.logger,
            s.run_dir,
            s.state.metrics,
            name=run_name or s.run_dir.name,
            start_step=s.state.step,
            run_id=s.run_id,
            hparams=hparams,
        )
        s.logger.log_config(recorded(cfg))


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


def last_measured(rows: list[dict[str, Any]], key: str) -> float | None:
    """The newest value of `key` in the metrics rows (rows hold only what their step measured)."""
    return next((row[key] for row in reversed(rows) if row.get(key) is not None), None)


def mark_failed(run_dir: Path, err: BaseException, how: str) -> None:
    """A run that an error stopped (a check that only the start can make, a file that cannot be
    written) is marked failed, never left "running": it can be resumed once the cause is gone (with
    another `logger`, say) or deleted."""
    if not distributed.current().is_main or not (run_dir / SUMMARY).is_file():
        return
    summary = read_summary(run_dir)
    if summary.status is RunStatus.RUNNING:
        interrupted = isinstance(err, KeyboardInterrupt)  # Ctrl-C, or SIGTERM as the run starts
        reason = (
            RunStatus.INTERRUPTED.value if interrupted else " ".join(str(err).split()) or type(err).__name__
        )
        step = summary.checkpoint_step
        kept = f"its checkpoint of step {step} is kept" if step else "with no checkpoint saved"
        message = (
            f"the run {how} ({reason}), {kept}; delete {run_dir}, or resume it once the cause is gone: "
            f"{resume_command(run_dir)}"
        )
        status = RunStatus.INTERRUPTED if interrupted else RunStatus.FAILED
        try:
            write_summary(run_dir, dataclasses.replace(summary, status=status, message=message))
        except UsageError as refused:  # the full disk that stopped the run: its own error is the one said
            log.warning(f"the run could not be marked {status}: {refused}")
