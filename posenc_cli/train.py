"""The training loop: one run directory in, a checkpoint, metrics.csv and summary.json out."""

from __future__ import annotations

import json
import logging
import math
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import pandas as pd
import torch

from posenc_cli import distributed, ui
from posenc_cli.atomic import remove_leftovers, write_text, write_with
from posenc_cli.checkpoint import FILENAME, load_checkpoint, save_checkpoint
from posenc_cli.data import Corpus, load_corpus, random_batch, random_positions
from posenc_cli.device import autocast, resolve_device
from posenc_cli.errors import UsageError
from posenc_cli.init_from import check_same_model, initial_state, lineage, source_checkpoint
from posenc_cli.model import GPT, ModelConfig, token_nll
from posenc_cli.ownership import hold_lock, stored_record
from posenc_cli.stopping import Stopped, StopSignals

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


def model_config(cfg: Mapping[str, Any], vocab_size: int) -> ModelConfig:
    scheme = dict(cfg["scheme"])
    return ModelConfig(
        vocab_size=vocab_size,
        block_size=cfg["train"]["block_size"],
        n_layer=cfg["model"]["n_layer"],
        n_head=cfg["model"]["n_head"],
        n_embd=cfg["model"]["n_embd"],
        embed_std=cfg["model"]["embed_std"],
        scheme=scheme.pop("name"),
        scheme_options=scheme,
    )


def check_lengths(corpus: Corpus, block_size: int) -> None:
    shortest = min(len(corpus.train), len(corpus.val))
    if block_size + 1 > shortest:
        raise UsageError(
            f"train.block_size={block_size} does not fit the corpus: its smaller split has {shortest} tokens; "
            f"use train.block_size <= {shortest - 1} or a larger corpus"
        )


def lr_at(step: int, tc: Mapping[str, Any]) -> float:
    """Linear warm-up, then cosine decay from lr to min_lr over the remaining steps."""
    if step < tc["warmup_steps"]:
        return tc["lr"] * (step + 1) / tc["warmup_steps"]
    progress = (step - tc["warmup_steps"]) / max(1, tc["max_steps"] - tc["warmup_steps"])
    return tc["min_lr"] + 0.5 * (tc["lr"] - tc["min_lr"]) * (1 + math.cos(math.pi * min(1.0, progress)))


def make_optimizer(model: GPT, tc: Mapping[str, Any]) -> torch.optim.AdamW:
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": tc["weight_decay"]}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=tc["lr"], betas=(0.9, 0.95))


@torch.no_grad()
def validation_loss(model: GPT, batches: list[tuple[torch.Tensor, torch.Tensor]], device, precision: str) -> float:
    model.eval()
    total = torch.zeros((), device=device)
    for x, y in batches:
        with autocast(device, precision):
            total += token_nll(model(x.to(device)), y.to(device)).mean()
    model.train()
    return float(total) / len(batches)


@dataclass(kw_only=True)
class Session:
    """One run being trained: what the loop works on and what a checkpoint saves."""
    cfg: Mapping[str, Any]
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
    state: TrainState = field(default_factory=TrainState)
    saved_step: int | None = None  # the step of the newest checkpoint on disk


def train(cfg: Mapping[str, Any], run_dir: str | Path) -> dict[str, Any]:
    tc = cfg["train"]
    if tc.get("threads"):
        torch.set_num_threads(int(tc["threads"]))
    ctx = distributed.current()
    distributed.check_batch(tc["batch_size"], ctx)
    device = distributed.device_for(resolve_device(cfg["device"]), ctx)
    run_id = stored_record(Path(tc["resume"]))[1] if tc.get("resume") else uuid.uuid4().hex
    if ctx.is_main:  # the directory is this process's; a fresh one says at once which run it holds
        hold_lock(Path(run_dir))
        if not tc.get("resume"):
            write_summary(Path(run_dir), {"status": "running", "run_id": run_id, "config": recorded(cfg)})
    corpus = load_corpus(cfg["data"])
    check_lengths(corpus, tc["block_size"])

    torch.manual_seed(cfg["seed"])
    mc = model_config(cfg, len(corpus.vocab))
    model = GPT(mc)
    if tc.get("init_from"):
        init_weights(model, tc["init_from"], corpus)
    model = model.to(device)
    val_rng = torch.Generator().manual_seed(12345)  # the same validation windows for every run
    s = Session(cfg=cfg, run_dir=Path(run_dir), mc=mc, corpus=corpus, device=device, ctx=ctx, model=model,
                optimizer=make_optimizer(model, tc), data_rng=torch.Generator().manual_seed(cfg["seed"]),
                val_batches=[random_batch(corpus.val, tc["batch_size"], tc["block_size"], val_rng)
                             for _ in range(tc["eval_batches"])], run_id=run_id)
    if tc.get("resume"):
        restore(s, Path(tc["resume"]) / FILENAME)
        if ctx.is_main:
            remove_leftovers(s.run_dir)

    summary = {**describe(cfg, model, corpus, device), "run_id": run_id, "config": recorded(cfg)}
    if tc.get("init_from"):
        source = Path(tc["init_from"]).resolve()
        summary.update(init_from=str(source), init_chain=lineage(source))
    if ctx.is_main:
        write_summary(s.run_dir, {**summary, "status": "running"})
    status, message = "finished", None
    started, elapsed_before = time.perf_counter(), s.state.elapsed
    try:
        with StopSignals() as stop:
            run_loop(s, distributed.wrap(model, device, ctx), stop, lambda: elapsed_before + time.perf_counter() - started)
    except NonFiniteLoss as err:
        kept = f"the checkpoint of step {s.saved_step} is kept" if s.saved_step else "no checkpoint had been saved yet"
        status, message = "failed", f"training stopped: {err}; {kept} (try a lower train.lr)"
    except Stopped as stop:
        status, message = "interrupted", f"{stop} at step {s.state.step}; checkpoint saved. Resume with: posenc train train.resume={s.run_dir}"
    except KeyboardInterrupt:
        status, message = "interrupted", f"stopped at once at step {s.state.step}; the last checkpoint is kept. Resume with: posenc train train.resume={s.run_dir}"
    s.state.elapsed = elapsed_before + time.perf_counter() - started
    final = s.state.metrics[-1] if s.state.metrics else {}
    summary.update(
        status=status, message=message, steps=s.state.step, wall_time_s=round(s.state.elapsed, 2),
        final_train_loss=final.get("train_loss"), final_val_loss=final.get("val_loss"),
        tokens_per_s=round(s.state.step * tc["batch_size"] * tc["block_size"] / max(s.state.elapsed, 1e-9)),
    )
    if ctx.is_main:  # the other ranks hold the same state and stay quiet
        write_summary(s.run_dir, summary)
        if status == "finished":
            log.info(f"{summary['scheme']}: val loss {summary['final_val_loss']:.4f} after {s.state.step} steps "
                     f"({summary['wall_time_s']:.0f} s) -> {s.run_dir}")
        else:
            (log.error if status == "failed" else log.warning)(message)
    if status == "interrupted":
        raise SystemExit(130)
    return summary


def run_loop(s: Session, net: torch.nn.Module, stop: StopSignals, elapsed) -> None:
    """Train until max_steps; `net` is the model as trained (DDP-wrapped under torchrun)."""
    tc, state, ctx = s.cfg["train"], s.state, s.ctx
    rate_start, rate_steps = time.perf_counter(), 0  # tokens/s over each eval interval
    with ui.progress(disable=not ctx.is_main) as bar:
        task = bar.add_task(f"train {s.mc.scheme}", total=tc["max_steps"], completed=state.step, status="")
        while state.step < tc["max_steps"]:
            if stop.agreed(state.step, tc["log_interval"], s.device, ctx):
                save(s, elapsed())
                raise Stopped(f"stopped by {stop.received}")
            lr = lr_at(state.step, tc)
            for group in s.optimizer.param_groups:
                group["lr"] = lr
            x, y = random_batch(s.corpus.train, tc["batch_size"], tc["block_size"], s.data_rng)
            x, y = distributed.shard(x, ctx), distributed.shard(y, ctx)  # this rank's rows of the global batch
            positions = None  # 0..T-1
            if tc.get("positions") == "randomized":
                positions = random_positions(tc["batch_size"], tc["block_size"], tc["max_position"],
                                             s.data_rng)
                positions = distributed.shard(positions, ctx).to(s.device)
            with autocast(s.device, tc["precision"]):
                loss = token_nll(net(x.to(s.device), positions), y.to(s.device)).mean()
            s.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(net.parameters(), tc["grad_clip"])
            s.optimizer.step()
            state.recent.append(loss.detach())
            state.step += 1
            rate_steps += 1
            last = state.step == tc["max_steps"]
            if state.step % tc["log_interval"] == 0 or last:
                state.train_loss = float(checked_losses(s).mean())  # one host sync per log interval
                state.recent.clear()
                bar.update(task, completed=state.step, status=f"loss {state.train_loss:.3f}")
            if (state.step % tc["eval_interval"] == 0 or last) and ctx.is_main:
                tokens_per_s = rate_steps * tc["batch_size"] * tc["block_size"] / max(time.perf_counter() - rate_start, 1e-9)
                val_loss = validation_loss(s.model, s.val_batches, s.device, tc["precision"])
                state.metrics.append({"step": state.step, "train_loss": round(state.train_loss, 6), "val_loss": round(val_loss, 6),
                                      "lr": lr, "tokens_per_s": round(tokens_per_s)})
                write_with(s.run_dir / "metrics.csv", lambda p: pd.DataFrame(state.metrics).to_csv(p, index=False))
                bar.update(task, status=f"loss {state.train_loss:.3f}  val {val_loss:.3f}  {tokens_per_s:,.0f} tok/s")
                rate_start, rate_steps = time.perf_counter(), 0
            if state.step % tc["checkpoint_interval"] == 0 or last:
                save(s, elapsed())


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
    save_checkpoint(s.run_dir / FILENAME, {
        "model_config": s.mc.to_dict(), "vocab": list(s.corpus.vocab.chars), "train_len": s.cfg["train"]["block_size"],
        "data": dict(s.cfg["data"]), "seed": s.cfg["seed"], "step": s.state.step, "elapsed": s.state.elapsed,
        "config": recorded(s.cfg), "run_id": s.run_id, "corpus_sha256": s.corpus.sha256,
        "metrics": s.state.metrics, "recent_losses": recent, "train_loss": s.state.train_loss,
        "model": s.model.state_dict(), "optimizer": s.optimizer.state_dict(),
        "data_rng": s.data_rng.get_state(), "torch_rng": torch.get_rng_state(),
    })


def restore(s: Session, path: Path) -> None:
    """Continue from `path`: weights, optimizer, step, RNG streams, metrics so far. A run killed before
    its first checkpoint simply starts again."""
    if not path.is_file():
        log.warning(f"{path.parent} has no checkpoint yet; training it from step 0")
        return
    payload = load_checkpoint(path)
    if payload.get("run_id") != s.run_id:
        raise UsageError(f"{path} belongs to another run (its run id differs); a run resumes only from its own checkpoint")
    if payload.get("corpus_sha256") != s.corpus.sha256:
        raise UsageError(f"{path} was trained on another corpus than data now gives (its sha256 differs); "
                         "the data it was trained on has changed")
    saved = payload.get("model_config")
    if saved is None or ModelConfig(**saved).to_dict() != s.mc.to_dict():  # older checkpoints lack newer fields
        raise UsageError(f"{path} was trained with a different model, scheme or corpus; resume with the run's own overrides")
    try:
        s.model.load_state_dict(payload["model"])
        s.optimizer.load_state_dict(payload["optimizer"])
        s.data_rng.set_state(payload["data_rng"])
        torch.set_rng_state(payload["torch_rng"])
        s.state = TrainState(step=payload["step"], elapsed=payload["elapsed"], metrics=list(payload["metrics"]),
                             recent=[loss.to(s.device) for loss in payload["recent_losses"]],
                             train_loss=payload["train_loss"])
        s.saved_step = s.state.step
    except (KeyError, RuntimeError, ValueError, TypeError) as err:
        raise UsageError(f"{path} cannot be resumed by this version of posenc ({' '.join(str(err).split())[:120]})") from None
    log.info(f"resumed from {path} at step {s.state.step}")


def init_weights(model: GPT, run: str, corpus: Corpus) -> None:
    """train.init_from: RUN's weights into `model` (checked again here: RUN may have changed since)."""
    source, saved = source_checkpoint(run)
    check_same_model(source, saved, model.cfg.to_dict(), corpus.vocab.chars)
    model.load_state_dict(initial_state(source, saved, model))
    log.info(f"initialised from {source} (its step {saved.get('step')})")


def describe(cfg, model: GPT, corpus: Corpus, device) -> dict[str, Any]:
    scheme = model.scheme
    return {
        "scheme": model.scheme.label, "seed": cfg["seed"], "train_len": cfg["train"]["block_size"],
        "positions": cfg["train"].get("positions", "ordinary"),
        "max_position": cfg["train"].get("max_position"),
        "kind": scheme.kind, "relative": scheme.relative, "max_len": scheme.max_len,
        "positional_params": model.n_positional_params, "total_params": model.n_params,
        "corpus": corpus.name, "vocab_size": len(corpus.vocab), "device": str(device),
        "threads": torch.get_num_threads(), "processes": distributed.current().world_size,
        **{f"corpus_{k}": v for k, v in corpus.stats.items()},
    }


def recorded(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The config as posenc records it with the run: what a resume rebuilds the run from."""
    return {**cfg, "train": {**cfg["train"], "resume": None}}


def write_summary(run_dir: Path, summary: dict[str, Any]) -> None:
    write_text(run_dir / "summary.json", json.dumps(summary, indent=2, default=str) + "\n")
