"""The training loop: one run directory in, a checkpoint, metrics.csv and summary.json out."""

from __future__ import annotations

import json
import logging
import math
import signal
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import pandas as pd
import torch

from posenc_cli import ui
from posenc_cli.atomic import write_text, write_with
from posenc_cli.checkpoint import FILENAME, load_checkpoint, save_checkpoint
from posenc_cli.data import Corpus, load_corpus, random_batch
from posenc_cli.device import autocast, resolve_device
from posenc_cli.errors import UsageError
from posenc_cli.model import GPT, ModelConfig, token_nll

log = logging.getLogger("posenc.train")


@dataclass
class TrainState:
    step: int = 0
    elapsed: float = 0.0
    metrics: list[dict[str, Any]] = field(default_factory=list)


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
def validation_loss(model: GPT, batches: list[tuple[torch.Tensor, torch.Tensor]], device) -> float:
    model.eval()
    total = torch.zeros((), device=device)
    for x, y in batches:
        with autocast(device):
            total += token_nll(model(x.to(device)), y.to(device)).mean()
    model.train()
    return float(total) / len(batches)


@contextmanager
def sigint_as_keyboard_interrupt():
    """Hydra's launchers may install their own handlers; make sure Ctrl-C reaches the loop."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def train(cfg: Mapping[str, Any], run_dir: str | Path) -> dict[str, Any]:
    run_dir = Path(run_dir)
    tc = cfg["train"]
    if tc.get("threads"):
        torch.set_num_threads(int(tc["threads"]))
    device = resolve_device(cfg["device"])
    corpus = load_corpus(cfg["data"])
    check_lengths(corpus, tc["block_size"])

    torch.manual_seed(cfg["seed"])
    mc = model_config(cfg, len(corpus.vocab))
    model = GPT(mc).to(device)
    optimizer = make_optimizer(model, tc)
    data_rng = torch.Generator().manual_seed(cfg["seed"])
    val_rng = torch.Generator().manual_seed(12345)  # the same validation windows for every run
    val_batches = [random_batch(corpus.val, tc["batch_size"], tc["block_size"], val_rng) for _ in range(tc["eval_batches"])]

    state = TrainState()
    checkpoint_path = run_dir / FILENAME
    if tc.get("resume"):
        state = restore(checkpoint_path, model, optimizer, data_rng, mc)
        log.info(f"resumed {run_dir} at step {state.step}")

    summary = describe(cfg, model, corpus, device)
    write_summary(run_dir, {**summary, "status": "running"})

    def save() -> None:
        save_checkpoint(checkpoint_path, {
            "model_config": mc.to_dict(), "vocab": list(corpus.vocab.chars), "train_len": tc["block_size"],
            "data": dict(cfg["data"]), "seed": cfg["seed"], "step": state.step, "elapsed": state.elapsed,
            "metrics": state.metrics, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
            "data_rng": data_rng.get_state(), "torch_rng": torch.get_rng_state(),
        })

    status, message = "finished", None
    try:
        with sigint_as_keyboard_interrupt():
            run_loop(model, optimizer, corpus, val_batches, data_rng, state, tc, device, run_dir, save)
    except KeyboardInterrupt:
        save()
        status = "interrupted"
        message = f"interrupted at step {state.step}; checkpoint saved. Resume with: posenc train train.resume={run_dir}"
    except NonFiniteLoss as err:
        status, message = "failed", str(err)
    final = state.metrics[-1] if state.metrics else {}
    summary.update(
        status=status, message=message, steps=state.step, wall_time_s=round(state.elapsed, 2),
        final_train_loss=final.get("train_loss"), final_val_loss=final.get("val_loss"),
        tokens_per_s=round(state.step * tc["batch_size"] * tc["block_size"] / max(state.elapsed, 1e-9)),
    )
    write_summary(run_dir, summary)
    if status == "finished":
        log.info(f"{summary['scheme']}: val loss {summary['final_val_loss']:.4f} after {state.step} steps "
                 f"({summary['wall_time_s']:.0f} s) -> {run_dir}")
    elif status == "failed":
        log.error(message)
    else:
        log.warning(message)
        raise SystemExit(130)
    return summary


def run_loop(model, optimizer, corpus, val_batches, data_rng, state, tc, device, run_dir, save) -> None:
    recent: list[torch.Tensor] = []
    train_loss = float("nan")
    tick = rate_start = time.perf_counter()  # tick: wall time into state.elapsed; rate_start: tokens/s
    interval_steps = 0
    with ui.progress() as bar:
        task = bar.add_task(f"train {model.cfg.scheme}", total=tc["max_steps"], completed=state.step, status="")
        while state.step < tc["max_steps"]:
            lr = lr_at(state.step, tc)
            for group in optimizer.param_groups:
                group["lr"] = lr
            x, y = random_batch(corpus.train, tc["batch_size"], tc["block_size"], data_rng)
            with autocast(device):
                loss = token_nll(model(x.to(device)), y.to(device)).mean()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), tc["grad_clip"])
            optimizer.step()
            recent.append(loss.detach())
            state.step += 1
            interval_steps += 1
            last = state.step == tc["max_steps"]
            if state.step % tc["log_interval"] == 0 or last:
                losses = torch.stack(recent).float().cpu()  # one host sync per log interval
                bad = (~torch.isfinite(losses)).nonzero()
                if len(bad):
                    step = state.step - len(recent) + int(bad[0]) + 1
                    raise NonFiniteLoss(f"training stopped: the loss became {float(losses[bad[0]]):.4g} at step {step}; "
                                        "the last good checkpoint is kept (try a lower train.lr)")
                train_loss = float(losses.mean())
                recent.clear()
                bar.update(task, completed=state.step, status=f"loss {train_loss:.3f}")
            if state.step % tc["eval_interval"] == 0 or last:
                tokens_per_s = interval_steps * tc["batch_size"] * tc["block_size"] / max(time.perf_counter() - rate_start, 1e-9)
                val_loss = validation_loss(model, val_batches, device)
                state.metrics.append({"step": state.step, "train_loss": round(train_loss, 6), "val_loss": round(val_loss, 6),
                                      "lr": lr, "tokens_per_s": round(tokens_per_s)})
                write_with(run_dir / "metrics.csv", lambda p: pd.DataFrame(state.metrics).to_csv(p, index=False))
                bar.update(task, status=f"loss {train_loss:.3f}  val {val_loss:.3f}  {tokens_per_s:,.0f} tok/s")
                rate_start, interval_steps = time.perf_counter(), 0
            if state.step % tc["checkpoint_interval"] == 0 or last:
                now = time.perf_counter()
                state.elapsed, tick = state.elapsed + now - tick, now
                save()


def restore(path: Path, model: GPT, optimizer, data_rng: torch.Generator, mc: ModelConfig) -> TrainState:
    payload = load_checkpoint(path)
    if payload["model_config"] != mc.to_dict():
        raise UsageError(f"{path} was trained with a different model or scheme config; resume with the run's own overrides")
    model.load_state_dict(payload["model"])
    optimizer.load_state_dict(payload["optimizer"])
    data_rng.set_state(payload["data_rng"])
    torch.set_rng_state(payload["torch_rng"])
    return TrainState(step=payload["step"], elapsed=payload["elapsed"], metrics=list(payload["metrics"]))


def describe(cfg, model: GPT, corpus: Corpus, device) -> dict[str, Any]:
    pos = model.pos
    return {
        "scheme": model.cfg.scheme, "seed": cfg["seed"], "train_len": cfg["train"]["block_size"],
        "kind": pos.kind, "relative": pos.relative, "max_len": pos.max_len,
        "positional_params": model.n_positional_params, "total_params": model.n_params,
        "corpus": corpus.name, "vocab_size": len(corpus.vocab), "device": str(device),
        **{f"corpus_{k}": v for k, v in corpus.stats.items()},
    }


def write_summary(run_dir: Path, summary: dict[str, Any]) -> None:
    write_text(run_dir / "summary.json", json.dumps(summary, indent=2, default=str) + "\n")
