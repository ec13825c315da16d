"""A run's model for sharing: `model.safetensors` (weights, no pickle) and `config.json` (posenc's
model config, vocabulary and training length). `load_export` rebuilds the same model from the two
files alone, so nothing that loads it can run code."""

from __future__ import annotations

import json
from pathlib import Path

from posenc_cli.atomic import write_text, write_with
from posenc_cli.data.vocab import Vocab
from posenc_cli.errors import UsageError
from posenc_cli.model import GPT, ModelConfig

FORMAT = "posenc-model"
VERSION = 1
WEIGHTS = "model.safetensors"
CONFIG = "config.json"


def safetensors_torch():
    try:
        import safetensors.torch
    except ImportError:
        raise UsageError("export needs safetensors: pip install 'posenc[hf]'") from None
    return safetensors.torch


def export_run(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """Write RUN's model as model.safetensors + config.json into `out` (default: the run directory)."""
    from posenc_cli.runs import load_run

    st = safetensors_torch()
    run = load_run(run_dir)
    out = Path(out) if out is not None else Path(run_dir)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file; give a directory")
    config = {
        "format": FORMAT,
        "version": VERSION,
        "model_config": run.model.cfg.to_dict(),
        "vocab": list(run.vocab.chars),
        "train_len": run.train_len,
        "data": run.checkpoint.get("data"),
    }
    write_with(out / WEIGHTS, lambda p: st.save_model(run.model, str(p)))  # tied head stored once
    write_text(out / CONFIG, json.dumps(config, indent=2, ensure_ascii=False) + "\n")
    return out


def load_export(directory: str | Path) -> tuple[GPT, Vocab, int]:
    """(model, vocabulary, training length) from an export directory."""
    st = safetensors_torch()
    directory = Path(directory)
    for name in (CONFIG, WEIGHTS):
        if not (directory / name).is_file():
            raise UsageError(
                f"{directory} is not a posenc export: it has no {name} (write one with posenc export RUN)"
            )
    try:
        config = json.loads((directory / CONFIG).read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise UsageError(f"{directory / CONFIG} is not valid JSON ({err})") from None
    if not isinstance(config, dict) or config.get("format") != FORMAT or config.get("version") != VERSION:
        raise UsageError(
            f"{directory / CONFIG} is not a posenc model config (format {FORMAT!r} version {VERSION})"
        )
    model = GPT(ModelConfig(**config["model_config"]))
    try:
        missing, unexpected = st.load_model(model, str(directory / WEIGHTS), strict=False)
    except Exception as err:  # safetensors' own error type for a truncated or foreign file
        raise UsageError(f"{directory / WEIGHTS} cannot be read ({type(err).__name__})") from None
    if missing or unexpected:
        raise UsageError(
            f"{directory / WEIGHTS} does not match its config.json "
            f"(missing {sorted(missing)[:3]}, unexpected {sorted(unexpected)[:3]})"
        )
    return model.eval(), Vocab(tuple(config["vocab"])), int(config["train_len"])
