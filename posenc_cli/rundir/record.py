"""Checkpoints: written atomically, read with weights_only=True so a file can never run code."""

from __future__ import annotations

import json
import pickle
import re
import zipfile
from pathlib import Path
from typing import Any

import torch

from posenc_cli.core.atomic import write_text, write_with
from posenc_cli.core.errors import UsageError
from posenc_cli.rundir.layout import CHECKPOINT, SUMMARY

FORMAT = "posenc-checkpoint"
VERSION = 1


def save_checkpoint(path: str | Path, payload: dict[str, Any]) -> None:
    write_with(path, lambda tmp: torch.save({"format": FORMAT, "version": VERSION, **payload}, tmp))


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise UsageError(
            f"no checkpoint at {path}; a run directory holds {CHECKPOINT} once training has saved one"
        )
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        found = re.search(r"Unsupported global: GLOBAL (\S+)", str(err))
        if not found and not zipfile.is_zipfile(path):  # torch.save always writes a zip archive
            raise UsageError(
                f"{path} is truncated or corrupted and cannot be read (not a checkpoint file)"
            ) from None
        what = (
            f"it references {found.group(1)}" if found else "it holds objects beyond tensors and plain data"
        )
        raise UsageError(
            f"{path} refused: {what}, which a safe (weights_only) load never runs; "
            "a posenc checkpoint holds only tensors and plain data"
        ) from None
    except (RuntimeError, EOFError, zipfile.BadZipFile, OSError, ValueError) as err:
        raise UsageError(
            f"{path} is truncated or corrupted and cannot be read ({type(err).__name__})"
        ) from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise UsageError(f"{path} is not a posenc checkpoint (format {FORMAT!r} expected)")
    if payload.get("version") != VERSION:
        raise UsageError(
            f"{path} has checkpoint version {payload.get('version')}; this posenc reads version {VERSION}"
        )
    return payload


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object from `path`, or one line naming the file and what is wrong with it."""
    try:
        value = json.loads(path.read_bytes().decode("utf-8"))
    except FileNotFoundError:
        raise UsageError(f"{path} is missing") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise UsageError(
            f"{path} is unreadable or corrupt ({type(err).__name__}); it is not a posenc summary"
        ) from None
    if not isinstance(value, dict):
        raise UsageError(f"{path} is corrupt: it holds {type(value).__name__}, not a JSON object")
    return value


def read_summary(run_dir: Path) -> dict[str, Any]:
    """summary.json as a dict; one line naming the file when it is missing, corrupt or not an object."""
    return read_json(run_dir / SUMMARY)


CHECKPOINT_FIELDS = {
    "model_config": dict,
    "model": dict,
    "tokenizer": dict,
    "train_len": int,
    "data": dict,
    "seed": int,
}


def check_fields(payload: dict[str, Any], path: Path) -> None:
    """The fields a loaded run reads, each present with its type: one line naming the file otherwise."""
    older = "tokenizer" not in payload and isinstance(payload.get("vocab"), list)  # chars only, checked below
    for name, kind in CHECKPOINT_FIELDS.items():
        if name == "tokenizer" and older:
            if not payload["vocab"] or not all(isinstance(c, str) for c in payload["vocab"]):
                raise UsageError(f"{path} is damaged: its vocabulary is not a list of characters")
            continue
        value = payload.get(name)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise UsageError(
                f"{path} is damaged: its field {name!r} is {type(value).__name__}, not {kind.__name__}"
            )
    if payload["train_len"] <= 0:
        raise UsageError(f"{path} is damaged: its training length {payload['train_len']} is not positive")


def write_summary(run_dir: Path, summary: dict[str, Any]) -> None:
    write_text(run_dir / SUMMARY, json.dumps(summary, indent=2, default=str) + "\n")


def tokenizer_record(payload: dict[str, Any]) -> dict[str, Any]:
    """The tokenizer a checkpoint records; the one migration of old checkpoints, which stored only the
    characters of a char vocabulary (`vocab`)."""
    return payload.get("tokenizer") or {"kind": "char", "chars": payload["vocab"]}
