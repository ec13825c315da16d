"""The training loop: one run directory in, a checkpoint, metrics.csv and summary.json out; the run's
start, its step, checkpoints and summary are what it calls (training.start, session, checkpoints,
run_summary)."""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from pathlib import Path
from typing import Any

import torch

from posenc_cli.config.schema import PosencConfig, TrainConfig
from posenc_cli.core import ui
from posenc_cli.core.device import autocast
from posenc_cli.data import random_positions
from posenc_cli.model import GPT, token_nll
from posenc_cli.rundir.claim import resume_command
from posenc_cli.rundir.summary import RunStatus, RunSummary, write_summary
from posenc_cli.training import distributed
from posenc_cli.training.checkpoints import save
from posenc_cli.training.run_summary import announce_run, mark_failed, run_outcome
from posenc_cli.training.session import NonFiniteLoss, Session, checked_losses, scored_mean, train_step
from posenc_cli.training.start import start_session
from posenc_cli.training.stopping import Stopped, StopSignals, terminate_as_interrupt

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
