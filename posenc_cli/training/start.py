"""A run's start: its directory held, corpus and model built, precision chosen, weights loaded."""

from __future__ import annotations

import logging
import uuid
from pathlib import Path

import torch

from posenc_cli.config.schema import PosencConfig
from posenc_cli.core.atomic import remove_leftovers
from posenc_cli.core.device import effective_precision, resolve_device
from posenc_cli.core.errors import UsageError
from posenc_cli.data import Corpus, load_corpus
from posenc_cli.model import GPT
from posenc_cli.rundir.claim import hold_lock
from posenc_cli.rundir.layout import CHECKPOINT
from posenc_cli.rundir.lineage import check_same_model, initial_state, source_checkpoint
from posenc_cli.rundir.resume import stored_record
from posenc_cli.rundir.summary import PrecisionFacts, RunStatus, RunSummary, read_summary, write_summary
from posenc_cli.training import distributed
from posenc_cli.training.checkpoints import recorded, restore
from posenc_cli.training.precision_choice import PrecisionChoice, choose_precision, valid_timings
from posenc_cli.training.session import Session, make_optimizer, model_config

log = logging.getLogger("posenc.train")


RESUMED = "a resume keeps its run's precision"


def resumed_choice(run: Path, effective: str) -> PrecisionChoice:
    """A resume continues in its run's precision (restore() sets it from the checkpoint); how it was
    first chosen, measured or asked for, stays on the record from the run's summary."""
    described = read_summary(run).description
    first = (described.precision if described else None) or PrecisionFacts()
    reason, step_ms = first.reason, first.step_ms
    if not reason:
        reason = RESUMED
    elif not reason.startswith(RESUMED):  # a resume of a resume keeps the first reason once
        reason = f"{RESUMED}; first chosen: {reason}"
    return PrecisionChoice(effective, reason, step_ms if valid_timings(step_ms) else {})


def start_session(cfg: PosencConfig, run_dir: Path) -> Session:
    """The run's directory held, its corpus, model and optimizer built, a resume's checkpoint restored."""
    tc = cfg.train
    if tc.threads:
        torch.set_num_threads(tc.threads)
    ctx = distributed.current()
    distributed.check_batch(tc.batch_size, ctx)
    device = distributed.device_for(resolve_device(cfg.device), ctx)
    run_id = stored_record(Path(tc.resume))[1] if tc.resume else uuid.uuid4().hex
    if ctx.is_main:  # the directory is this process's; a fresh one says at once which run it holds
        hold_lock(run_dir)
        if not tc.resume:
            write_summary(run_dir, RunSummary(status=RunStatus.RUNNING, run_id=run_id, config=recorded(cfg)))
    corpus = load_corpus(cfg.data)
    check_lengths(corpus, tc.block_size)

    if tc.resume and (Path(tc.resume) / CHECKPOINT).is_file():  # restore() reads the run's own precision
        choice = resumed_choice(Path(tc.resume), effective_precision(device, tc.precision))
    else:  # a new run, or one killed before its first checkpoint: it starts at step 0 and chooses afresh
        choice = choose_precision(cfg, device, vocab_size=len(corpus.tokenizer), ranks=ctx.world_size)
    torch.manual_seed(cfg.seed)
    mc = model_config(cfg, len(corpus.tokenizer))
    model = GPT(mc)
    if tc.init_from:
        init_weights(model, tc.init_from, corpus)
    model = model.to(device)
    val_rng = torch.Generator().manual_seed(12345)  # the same validation windows for every run
    s = Session(
        cfg=cfg,
        run_dir=run_dir,
        mc=mc,
        corpus=corpus,
        device=device,
        ctx=ctx,
        model=model,
        optimizer=make_optimizer(model, tc),
        data_rng=torch.Generator().manual_seed(cfg.seed),
        val_batches=[
            corpus.batch("val", tc.batch_size, tc.block_size, generator=val_rng)
            for _ in range(tc.eval_batches)
        ],
        run_id=run_id,
        precision=choice.effective,
        precision_facts=choice.facts(),
    )
    if tc.resume:
        restore(s, Path(tc.resume) / CHECKPOINT)
        if ctx.is_main:
            remove_leftovers(s.run_dir)
    return s


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


def init_weights(model: GPT, run: str, corpus: Corpus) -> None:
    """train.init_from: RUN's weights into `model` (checked again here: RUN may have changed since)."""
    source, saved = source_checkpoint(run)
    check_same_model(source, saved, model.cfg.to_dict(), tokenizer=corpus.tokenizer)
    model.load_state_dict(initial_state(source, saved, model))
    log.info(f"initialised from {source} (its step {saved.step})")
