"""Checkpoints: written atomically, read with weights_only=True so a file can never run code."""

from __future__ import annotations

import pickle
import re
import zipfile
from pathlib import Path
from typing import Any

import torch

from posenc_cli.atomic import write_with
from posenc_cli.errors import UsageError

FORMAT = "posenc-checkpoint"
VERSION = 1
FILENAME = "checkpoint.pt"


def save_checkpoint(path: str | Path, payload: dict[str, Any]) -> None:
    write_with(path, lambda tmp: torch.save({"format": FORMAT, "version": VERSION, **payload}, tmp))


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise UsageError(
            f"no checkpoint at {path}; a run directory holds {FILENAME} once training has saved one"
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
