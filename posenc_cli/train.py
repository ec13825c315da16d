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

import torch

from posenc_cli import distributed, ui
from posenc_cli.atomic import remove_leftovers, write_text
from posenc_cli.checkpoint import FILENAME, load_checkpoint, save_checkpoint
from posenc_cli.data import Corpus, load_corpus, random_batch, random_positions
from posenc_cli.data.tokenizers import TOKENIZER_FILE, run_payload
from posenc_cli.device import (
    autocast,
    effective_precision,
    native_bf16,
    precision_record,
    resolve_device,
    resumed_precision,
)
from posenc_cli.errors import UsageError
from posenc_cli.init_from import check_same_model, initial_state, lineage, source_checkpoint
from posenc_cli.model import GPT, ModelConfig, token_nll
from posenc_cli.ownership import hold_lock, stored_record
from posenc_cli.stopping import Stopped, StopSignals
from posenc_cli.tracking import RunLogger, open_loggers
from posenc_cli.version import code_version

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
    groups = [
        {"params": decay, "weight_decay": tc["weight_decay"]},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    try:  # one fused kernel instead of ~10 ops per parameter: whole runs 1.09x faster at nanoGPT's shapes
        return torch.optim.AdamW(groups, lr=tc["lr"], betas=(0.9, 0.95), fused=True)
    except RuntimeError:  # a device (or a torch before 2.4 on CPU) without the fused kernel
        return torch.optim.AdamW(groups, lr=tc["lr"], betas=(0.9, 0.95))


@torch.no_grad()
def validation_loss(
    model: GPT, batches: list[tuple[torch.Tensor, torch.Tensor]], device, effective: str
) -> float:
    model.eval()
    total = torch.zeros((), device=device)
    for x, y in batches:
        with autocast(device, effective):
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
    precision: str  # effective (fp32 | bf16-autocast): resolved once, kept by every resume
    state: TrainState = field(default_factory=TrainState)
    saved_step: int | None = None  # the step of the newest checkpoint on disk
    logger: RunLogger = field(default_factory=RunLogger)  # metrics.csv and trackers (rank 0 only)


def train(cfg: Mapping[str, Any], run_dir: str | Path, run_name: str | None = None) -> dict[str, Any]:
    """Train one run into `run_dir`; `run_name` names it in trackers (default: the directory's name)."""
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
    mc = model_config(cfg, len(corpus.tokenizer))
    model = GPT(mc)
    if tc.get("init_from"):
        init_weights(model, tc["init_from"], corpus)
    model = model.to(device)
    val_rng = torch.Generator().manual_seed(12345)  # the same validation windows for every run
    s = Session(
        cfg=cfg,
        run_dir=Path(run_dir),
        mc=mc,
        corpus=corpus,
        device=device,
        ctx=ctx,
        model=model,
        optimizer=make_optimizer(model, tc),
        data_rng=torch.Generator().manual_seed(cfg["seed"]),
        val_batches=[
            random_batch(corpus.val, tc["batch_size"], tc["block_size"], val_rng)
            for _ in range(tc["eval_batches"])
        ],
        run_id=run_id,
        precision=effective_precision(device, tc["precision"]),
    )
    if tc.get("resume"):
        restore(s, Path(tc["resume"]) / FILENAME)
        if ctx.is_main:
            remove_leftovers(s.run_dir)

    summary = {
        **describe(cfg, model, corpus, device),
        "precision": precision_record(device, tc["precision"], s.precision),
        "run_id": run_id,
        "config": recorded(cfg),
    }
    if tc.get("init_from"):
        source = Path(tc["init_from"]).resolve()
        summary.update(init_from=str(source), init_chain=lineage(source))
    if ctx.is_main:
        if corpus.tokenizer.kind == "bpe":
            write_text(s.run_dir / TOKENIZER_FILE, corpus.tokenizer.to_json())
        write_summary(s.run_dir, {**summary, "status": "running"})
        s.logger = open_loggers(
            cfg.get("logger"), s.run_dir, s.state.metrics, run_name or s.run_dir.name, s.state.step
        )
        s.logger.log_config(cfg)
    status, message = "finished", None
    started, elapsed_before = time.perf_counter(), s.state.elapsed
    try:
        with StopSignals() as stop:
            run_loop(
                s,
                distributed.wrap(model, device, ctx),
                stop,
                lambda: elapsed_before + time.perf_counter() - started,
            )
    except NonFiniteLoss as err:
        kept = (
            f"the checkpoint of step {s.saved_step} is kept"
            if s.saved_step
            else "no checkpoint had been saved yet"
        )
        status, message = "failed", f"training stopped: {err}; {kept} (try a lower train.lr)"
    except Stopped as stop:
        status, message = (
            "interrupted",
            f"{stop} at step {s.state.step}; checkpoint saved. Resume with: posenc train train.resume={s.run_dir}",
        )
    except KeyboardInterrupt:
        status, message = (
            "interrupted",
            f"stopped at once at step {s.state.step}; the last checkpoint is kept. Resume with: posenc train train.resume={s.run_dir}",
        )
    s.state.elapsed = elapsed_before + time.perf_counter() - started
    summary.update(
        status=status,
        message=message,
        steps=s.state.step,
        wall_time_s=round(s.state.elapsed, 2),
        final_train_loss=last_measured(s.state.metrics, "train_loss"),
        final_val_loss=last_measured(s.state.metrics, "val_loss"),
        tokens_per_s=round(s.state.step * tc["batch_size"] * tc["block_size"] / max(s.state.elapsed, 1e-9)),
    )
    if ctx.is_main:  # the other ranks hold the same state and stay quiet
        write_summary(s.run_dir, summary)
        s.logger.log_summary(summary)
        s.logger.close()
        if status == "finished":
            log.info(
                f"{summary['scheme']}: val loss {summary['final_val_loss']:.4f} after {s.state.step} steps "
                f"({summary['wall_time_s']:.0f} s) -> {s.run_dir}"
            )
        else:
            (log.error if status == "failed" else log.warning)(message)
    if status == "interrupted":
        raise SystemExit(130)
    return summary


def run_loop(s: Session, net: torch.nn.Module, stop: StopSignals, elapsed) -> None:
    """Train until max_steps; `net` is the model as trained (DDP-wrapped under torchrun)."""
    tc, state, ctx = s.cfg["train"], s.state, s.ctx
    rate = Throughput(tc["batch_size"] * tc["block_size"])
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
            x, y = (
                distributed.shard(x, ctx),
                distributed.shard(y, ctx),
            )  # this rank's rows of the global batch
            positions = None  # 0..T-1
            if tc.get("positions") == "randomized":
                positions = random_positions(
                    tc["batch_size"], tc["block_size"], tc["max_position"], s.data_rng
                )
                positions = distributed.shard(positions, ctx).to(s.device)
            with autocast(s.device, s.precision):
                loss = token_nll(net(x.to(s.device), positions), y.to(s.device)).mean()
            s.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(net.parameters(), tc["grad_clip"])
            s.optimizer.step()
            state.recent.append(loss.detach())
            state.step += 1
            rate.steps += 1
            last = state.step == tc["max_steps"]
            row: dict[str, Any] = {}
            if state.step % tc["log_interval"] == 0 or last:
                row.update(training_metrics(s, lr, grad_norm, rate))
            if (state.step % tc["eval_interval"] == 0 or last) and ctx.is_main:
                row["val_loss"] = round(validation_loss(s.model, s.val_batches, s.device, s.precision), 6)
            if row:
                record(s, row, bar, task)
            if state.step % tc["checkpoint_interval"] == 0 or last:
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


def training_metrics(s: Session, lr: float, grad_norm: torch.Tensor, rate: Throughput) -> dict[str, Any]:
    """The log-interval numbers: mean loss since the last log, lr, tokens/s, this step's grad norm."""
    s.state.train_loss = float(checked_losses(s).mean())  # one host sync per log interval
    s.state.recent.clear()
    return {
        "train_loss": round(s.state.train_loss, 6),
        "lr": lr,
        "tokens_per_s": round(rate.tokens_per_s()),
        "grad_norm": round(float(grad_norm), 6),
    }


def record(s: Session, row: dict[str, Any], bar, task) -> None:
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
    save_checkpoint(
        s.run_dir / FILENAME,
        {
            "model_config": s.mc.to_dict(),
            "tokenizer": run_payload(s.corpus.tokenizer),
            "train_len": s.cfg["train"]["block_size"],
            "data": dict(s.cfg["data"]),
            "seed": s.cfg["seed"],
            "step": s.state.step,
            "elapsed": s.state.elapsed,
            "config": recorded(s.cfg),
            "run_id": s.run_id,
            "precision": s.precision,
            "corpus_sha256": s.corpus.sha256,
            "metrics": s.state.metrics,
            "recent_losses": recent,
            "train_loss": s.state.train_loss,
            "model": s.model.state_dict(),
            "optimizer": s.optimizer.state_dict(),
            "data_rng": s.data_rng.get_state(),
            "torch_rng": torch.get_rng_state(),
        },
    )


def restore(s: Session, path: Path) -> None:
    """Continue from `path`: weights, optimizer, step, RNG streams, metrics so far. A run killed before
    its first checkpoint simply starts again."""
    if not path.is_file():
        log.warning(f"{path.parent} has no checkpoint yet; training it from step 0")
        return
    payload = load_checkpoint(path)
    if payload.get("run_id") != s.run_id:
        raise UsageError(
            f"{path} belongs to another run (its run id differs); a run resumes only from its own checkpoint"
        )
    if payload.get("corpus_sha256") != s.corpus.sha256:
        raise UsageError(
            f"{path} was trained on another corpus than data now gives (its sha256 differs); "
            "the data it was trained on has changed"
        )
    saved = payload.get("model_config")
    if (
        saved is None or ModelConfig(**saved).to_dict() != s.mc.to_dict()
    ):  # older checkpoints lack newer fields
        raise UsageError(
            f"{path} was trained with a different model, scheme or corpus; resume with the run's own overrides"
        )
    if payload.get("precision") is not None:  # older checkpoints resume in what this machine resolves
        s.precision = resumed_precision(
            s.device, s.cfg["train"]["precision"], payload["precision"], str(s.run_dir)
        )
        if s.precision == "bf16-autocast" and not native_bf16(s.device):
            log.warning(
                f"{s.run_dir} computes in bf16-autocast, which {s.device} emulates: this resume is slow"
            )
    try:
        s.model.load_state_dict(payload["model"])
        s.optimizer.load_state_dict(payload["optimizer"])
        s.data_rng.set_state(payload["data_rng"])
        torch.set_rng_state(payload["torch_rng"])
        s.state = TrainState(
            step=payload["step"],
            elapsed=payload["elapsed"],
            metrics=list(payload["metrics"]),
            recent=[loss.to(s.device) for loss in payload["recent_losses"]],
            train_loss=payload["train_loss"],
        )
        s.saved_step = s.state.step
    except (KeyError, RuntimeError, ValueError, TypeError) as err:
        raise UsageError(
            f"{path} cannot be resumed by this version of posenc ({' '.join(str(err).split())[:120]})"
        ) from None
    log.info(f"resumed from {path} at step {s.state.step}")


def init_weights(model: GPT, run: str, corpus: Corpus) -> None:
    """train.init_from: RUN's weights into `model` (checked again here: RUN may have changed since)."""
    source, saved = source_checkpoint(run)
    check_same_model(source, saved, model.cfg.to_dict(), corpus.tokenizer)
    model.load_state_dict(initial_state(source, saved, model))
    log.info(f"initialised from {source} (its step {saved.get('step')})")


def describe(cfg, model: GPT, corpus: Corpus, device) -> dict[str, Any]:
    scheme = model.scheme
    return {
        "scheme": model.scheme.label,
        "seed": cfg["seed"],
        "train_len": cfg["train"]["block_size"],
        "positions": cfg["train"].get("positions", "ordinary"),
        "max_position": cfg["train"].get("max_position"),
        "kind": scheme.kind,
        "relative": scheme.relative,
        "max_len": scheme.max_len,
        "positional_params": model.n_positional_params,
        "total_params": model.n_params,
        "corpus": corpus.name,
        "tokenizer": corpus.tokenizer.kind,
        "vocab_size": len(corpus.tokenizer),
        "device": str(device),
        "code_version": code_version(),
        "threads": torch.get_num_threads(),
        "processes": distributed.current().world_size,
        **{f"corpus_{k}": v for k, v in corpus.stats.items()},
    }


def recorded(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The config as posenc records it with the run: what a resume rebuilds the run from."""
    return {**cfg, "train": {**cfg["train"], "resume": None}}


def write_summary(run_dir: Path, summary: dict[str, Any]) -> None:
    write_text(run_dir / "summary.json", json.dumps(summary, indent=2, default=str) + "\n")
