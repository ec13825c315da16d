"""A run's model for sharing: `model.safetensors` (weights, no pickle) and `config.json` (posenc's
model config, tokenizer and training length). `load_export` rebuilds the same model from the two
files alone, so nothing that loads it can run code."""

from __future__ import annotations

import json
from pathlib import Path

from posenc_cli.core.atomic import write_text, write_with
from posenc_cli.core.errors import UsageError
from posenc_cli.data.tokenizers import from_payload
from posenc_cli.model import GPT, ModelConfig
from posenc_cli.rundir.destinations import checked_out
from posenc_cli.rundir.loading import load_run

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

    st = safetensors_torch()
    out = checked_out(None if out is None else str(out)) or Path(run_dir)
    run = load_run(run_dir)
    config = {
        "format": FORMAT,
        "version": VERSION,
        "model_config": run.model.cfg.to_dict(),
        "tokenizer": run.tokenizer.payload(),
        "train_len": run.train_len,
        "data": run.record.data,
    }
    write_with(out / WEIGHTS, lambda p: st.save_model(run.model, str(p)))  # tied head stored once
    write_text(out / CONFIG, json.dumps(config, indent=2, ensure_ascii=False) + "\n")
    return out


def load_export(directory: str | Path) -> tuple[GPT, object, int]:
    """(model, tokenizer, training length) from an export directory."""
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
    return model.eval(), from_payload(config["tokenizer"], str(directory / CONFIG)), int(config["train_len"])
