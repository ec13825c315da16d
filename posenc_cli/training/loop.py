"""The training loop: one run directory in, a checkpoint, metrics.csv and summary.json out."""

from __future__ import annotations

import dataclasses
import logging
import math
import time
import uuid
from pathlib import Path
from typing import Any

import torch

from posenc_cli.config.schema import PosencConfig, TrainConfig
from posenc_cli.core import ui
from posenc_cli.core.atomic import remove_leftovers, write_text
from posenc_cli.core.device import autocast, effective_precision, resolve_device
from posenc_cli.core.errors import UsageError
from posenc_cli.data import load_corpus, random_positions
from posenc_cli.data.tokenizers import TOKENIZER_FILE
from posenc_cli.model import GPT, token_nll
from posenc_cli.rundir.claim import hold_lock, resume_command
from posenc_cli.rundir.layout import CHECKPOINT, SUMMARY
from posenc_cli.rundir.resume import stored_record
from posenc_cli.rundir.summary import PrecisionFacts, RunStatus, RunSummary, read_summary, write_summary
from posenc_cli.training import distributed
from posenc_cli.training.precision_choice import PrecisionChoice, choose_precision, valid_timings
from posenc_cli.training.run_summary import run_outcome, running_summary
from posenc_cli.training.session import (
    NonFiniteLoss,
    Session,
    check_lengths,
    checked_losses,
    init_weights,
    make_optimizer,
    model_config,
    recorded,
    restore,
    save,
    scored_mean,
    train_step,
)
from posenc_cli.training.stopping import Stopped, StopSignals, terminate_as_interrupt
from posenc_cli.training.tracking import open_loggers

log = logging.getLogger("posenc.train")


def lr_at(step: int, tc: TrainConfig) -> float:
    """Linear warm-up, then cosine decay from lr to min_lr over the remaining steps."""
    if step < tc.warmup_steps:
        return tc.lr * (step + 1) / tc.warmup_steps
    progress = (step - tc.warmup_steps) / max(1, tc.max_steps - tc.warmup_steps)
    return tc.min_lr + 0.5 * (tc.lr - tc.min_lr) * (1 + math.cos(math.pi * min(1.0, progress)))


@torch.no_grad()
def validation_loss(
    model: GPT, batches: list[tuple[torch.Tensor, torch.Tensor]], device, *, effective: str
) -> float:
    model.eval()
    total = torch.zeros((), device=device)
    for x, y in batches:
        with autocast(device, effective):
            total += scored_mean(token_nll(model(x.to(device)), y.to(device)), y.to(device))
    model.train()
    return float(total) / len(batches)


def train(
    cfg: PosencConfig, run_dir: str | Path, run_name: str | None = None, *, hparams: dict | None = None
) -> RunSummary:
    """Train one run into `run_dir`; `run_name` names it in trackers (default: the directory's name),
    `hparams` (its overrides) are its TensorBoard HParams."""
    try:
        with terminate_as_interrupt():  # the loop's StopSignals take over once it trains
            s = start_session(cfg, Path(run_dir))
            announce_run(s, run_name, hparams=hparams)
    except BaseException as err:
        if not cfg.train.resume:  # a resume refused at its start may be another process's run
            mark_failed(Path(run_dir), err, "failed to start")
        raise
    started, elapsed_before = time.perf_counter(), s.state.elapsed
    try:
        status, message = train_until_stopped(s, lambda: elapsed_before + time.perf_counter() - started)
    except BaseException as err:  # this process holds the run's lock: its summary is ours to mark
        mark_failed(s.run_dir, err, f"stopped by an error at step {s.state.step}")
        raise
    s.state.elapsed = elapsed_before + time.perf_counter() - started
    outcome = run_outcome(s)
    summary = dataclasses.replace(
        s.summary, status=status, message=message, checkpoint_step=s.saved_step, outcome=outcome
    )
    if s.ctx.is_main:  # the other ranks hold the same state and stay quiet
        write_summary(s.run_dir, summary)
        s.logger.log_summary(summary)
        s.logger.close()
        if status is RunStatus.FINISHED:
            log.info(
                f"{s.model.scheme.label}: val loss {outcome.final_val_loss:.4f} after {s.state.step} steps "
                f"({outcome.wall_time_s:.0f} s) -> {s.run_dir}"
            )
        else:
            (log.error if status is RunStatus.FAILED else log.warning)(message)
    if status is RunStatus.INTERRUPTED:
        raise SystemExit(ui.INTERRUPTED)
    return summary


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


def train_until_stopped(s: Session, elapsed) -> tuple[RunStatus, str | None]:
    """(status, message): finished; failed at a non-finite loss; interrupted by a signal or Ctrl-C."""
    try:
        with StopSignals() as stop:
            run_loop(s, distributed.wrap(s.model, s.device, s.ctx), stop, elapsed=elapsed)
    except NonFiniteLoss as err:
        kept = (
            f"the checkpoint of step {s.saved_step} is kept"
            if s.saved_step
            else "no checkpoint had been saved yet"
        )
        return RunStatus.FAILED, f"training stopped: {err}; {kept} (try a lower train.lr)"
    except Stopped as stop:
        return RunStatus.INTERRUPTED, (
            f"{stop} at step {s.state.step}; checkpoint saved. Resume with: {resume_command(s.run_dir)}"
        )
    except KeyboardInterrupt:
        return RunStatus.INTERRUPTED, (
            f"stopped at once at step {s.state.step}; the last checkpoint is kept. "
            f"Resume with: {resume_command(s.run_dir)}"
        )
    return RunStatus.FINISHED, None


def run_loop(s: Session, net: torch.nn.Module, stop: StopSignals, *, elapsed) -> None:
    """Train until max_steps; `net` is the model as trained (DDP-wrapped under torchrun)."""
    tc, state, ctx = s.cfg.train, s.state, s.ctx
    rate = Throughput(tc.batch_size * tc.block_size)
    with ui.progress(disable=not ctx.is_main) as bar:
        task = bar.add_task(f"train {s.mc.scheme}", total=tc.max_steps, completed=state.step, status="")
        while state.step < tc.max_steps:
            if stop.agreed(state.step, tc.log_interval, s.device, ctx=ctx):
                save(s, elapsed())
                raise Stopped(f"stopped by {stop.received}")
            lr = lr_at(state.step, tc)
            for group in s.optimizer.param_groups:
                group["lr"] = lr
            x, y = s.corpus.batch("train", tc.batch_size, tc.block_size, generator=s.data_rng)
            x, y = (
                distributed.shard(x, ctx),
                distributed.shard(y, ctx),
            )  # this rank's rows of the global batch
            positions = None  # 0..T-1
            if tc.positions == "randomized":
                positions = random_positions(
                    tc.batch_size, tc.block_size, tc.max_position, generator=s.data_rng
                )
                positions = distributed.shard(positions, ctx).to(s.device)
            loss, grad_norm = train_step(
                net,
                s.optimizer,
                (x, y, positions),
                device=s.device,
                precision=s.precision,
                grad_clip=tc.grad_clip,
            )
            state.recent.append(loss.detach())
            state.step += 1
            rate.steps += 1
            last = state.step == tc.max_steps
            row: dict[str, Any] = {}
            if state.step % tc.log_interval == 0 or last:
                row.update(training_metrics(s, lr, grad_norm, rate=rate))
            if (state.step % tc.eval_interval == 0 or last) and ctx.is_main:
                row["val_loss"] = round(
                    validation_loss(s.model, s.val_batches, s.device, effective=s.precision), 6
                )
            if row:
                record(s, row, bar, task=task)
            if state.step % tc.checkpoint_interval == 0 or last:
                save(s, elapsed())
            if row:
                rate.restart()  # tokens/s counts training steps, not validation or checkpoints


class Throughput:
    """Training tokens per second since the last logged step."""

    def __init__(self, tokens_per_step: int):
        self.tokens_per_step = tokens_per_step
        self.restart()

    def restart(self) -> None:
        self.started, self.steps = time.perf_counter(), 0

    def tokens_per_s(self) -> float:
        return self.steps * self.tokens_per_step / max(time.perf_counter() - self.started, 1e-9)


def training_metrics(s: Session, lr: float, grad_norm: torch.Tensor, *, rate: Throughput) -> dict[str, Any]:
    """The log-interval numbers: mean loss since the last log, lr, tokens/s, this step's grad norm."""
    s.state.train_loss = float(checked_losses(s).mean())  # one host sync per log interval
    s.state.recent.clear()
    return {
        "train_loss": round(s.state.train_loss, 6),
        "lr": lr,
        "tokens_per_s": round(rate.tokens_per_s()),
        "grad_norm": round(float(grad_norm), 6),
    }


def record(s: Session, row: dict[str, Any], bar, *, task) -> None:
    """One metrics row: into the training state (checkpointed), the loggers and the progress bar."""
    row = {"step": s.state.step, **row}
    s.state.metrics.append(row)
    s.logger.log_metrics(row)
    shown = [
        f"loss {row['train_loss']:.3f}" if "train_loss" in row else "",
        f"val {row['val_loss']:.3f}" if "val_loss" in row else "",
        f"{row['tokens_per_s']:,.0f} tok/s" if "tokens_per_s" in row else "",
    ]
    bar.update(task, completed=s.state.step, status="  ".join(part for part in shown if part))
