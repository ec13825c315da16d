"""The run record: what a run is (its identity, `RunRecord`) and where its training stands (`Checkpoint`),
written atomically in one file and read back with weights_only=True, so a file can never run code.
This module is the one reader and the one writer of checkpoint.pt; rundir.summary is summary.json's."""

from __future__ import annotations

import hashlib
import json
import pickle
import re
import zipfile
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import torch

from posenc_cli.core.atomic import write_with
from posenc_cli.core.errors import UsageError
from posenc_cli.data.corpus_config import DataConfig
from posenc_cli.rundir.layout import CHECKPOINT, SUMMARY
from posenc_cli.rundir.summary import RunStatus, RunSummary

FORMAT = "posenc-checkpoint"
VERSION = 2  # 2: the record as one typed block; version 1 (flat fields) is migrated when read
READABLE_VERSIONS = (1, 2)


@dataclass(frozen=True)
class TrainedText:
    """The corpus a model was trained on, as its run recorded it (a posenc run, or the export of one):
    eval on that text scores only its validation split, and never a dataset split it trained on."""

    corpus_sha256: str | None  # stream.scan's digest of a text corpus; None: generated, or not recorded
    data: DataConfig | None  # the run's data config; None: an export that does not say


@dataclass(frozen=True, kw_only=True)
class RunRecord:
    """What a run is: every command that reads a run checks these, and a resume must match them."""

    run_id: str | None  # None only in checkpoints written before posenc gave runs an id
    model_config: dict[str, Any]  # model.ModelConfig.to_dict()
    tokenizer: dict[str, Any]  # data.tokenizers.run_payload: the tokenizer or its fingerprint
    train_len: int
    data: dict[str, Any]  # the data config, as asdict(cfg.data)
    seed: int
    corpus_sha256: str | None  # the corpus as stream.scan read it (None: in-memory synthetic data)
    precision: str | None  # effective precision (core.device); None before posenc recorded it
    config: dict[str, Any] | None  # the whole config a resume rebuilds the run from


@dataclass(kw_only=True)
class Checkpoint:
    """A run's record with the state its training stopped in: enough for a resume to continue exactly."""

    record: RunRecord
    version: int = VERSION  # as read: 1 for a migrated checkpoint, whose summary kept no fingerprint
    step: int
    elapsed: float
    metrics: list[dict[str, Any]]
    recent_losses: torch.Tensor
    train_loss: float
    model: dict[str, torch.Tensor]
    optimizer: dict[str, Any] | None  # None only in old checkpoints, which can be read but not resumed
    data_rng: torch.Tensor | None
    torch_rng: torch.Tensor | None


_RECORD_TYPES: dict[str, tuple[type, ...]] = {
    "run_id": (str, type(None)),
    "model_config": (dict,),
    "tokenizer": (dict,),
    "train_len": (int,),
    "data": (dict,),
    "seed": (int,),
    "corpus_sha256": (str, type(None)),
    "precision": (str, type(None)),
    "config": (dict, type(None)),
}
_STATE_TYPES: dict[str, tuple[type, ...]] = {
    "step": (int,),
    "elapsed": (float, int),
    "metrics": (list,),
    "recent_losses": (torch.Tensor, list),
    "train_loss": (float, int),
    "model": (dict,),
    "optimizer": (dict, type(None)),
    "data_rng": (torch.Tensor, type(None)),
    "torch_rng": (torch.Tensor, type(None)),
}


def save_checkpoint(path: str | Path, checkpoint: Checkpoint) -> None:
    payload = {"format": FORMAT, "version": VERSION, **asdict_shallow(checkpoint)}
    payload["record"] = asdict(checkpoint.record)

    def write(tmp: Path) -> None:
        """torch.save through a file object, whose refused write (a full disk) is an OSError that
        core.atomic says in one line; torch raises its own RuntimeError ("unexpected pos") while
        handling it, so the OSError underneath is raised instead (saving to a path hid it entirely)."""
        with open(tmp, "wb") as file:
            try:
                torch.save(payload, file)
            except RuntimeError as err:
                if isinstance(err.__context__, OSError):
                    raise err.__context__ from None
                raise

    write_with(path, write)


def asdict_shallow(obj: Any) -> dict[str, Any]:
    """A dataclass's fields as a dict without copying its tensors (dataclasses.asdict deep-copies)."""
    return {f.name: getattr(obj, f.name) for f in fields(obj)}


def load_checkpoint(path: str | Path) -> Checkpoint:
    """The checkpoint at `path`, its every field checked: one line naming the file when it is missing,
    unsafe, corrupt, of another version, or damaged."""
    path = Path(path)
    payload = _load_payload(path)
    version = payload["version"]
    if version == 1:
        payload = _migrated_v1(payload)
    record = payload.get("record")
    if not isinstance(record, dict):
        raise UsageError(f"{path} is damaged: it has no run record")
    _check_types(record, _RECORD_TYPES, path)
    _check_types(payload, _STATE_TYPES, path)
    if record["train_len"] <= 0:
        raise UsageError(f"{path} is damaged: its training length {record['train_len']} is not positive")
    if record["tokenizer"].get("kind") is None:
        raise UsageError(f"{path} is damaged: its tokenizer record names no kind")
    state = {name: payload[name] for name in _STATE_TYPES}
    state["recent_losses"] = torch.as_tensor(state["recent_losses"], dtype=torch.float32)
    return Checkpoint(
        record=RunRecord(**{name: record[name] for name in _RECORD_TYPES}), version=version, **state
    )


def _check_types(values: dict[str, Any], types: dict[str, tuple[type, ...]], path: Path) -> None:
    for name, kinds in types.items():
        value = values.get(name)
        if (
            name not in values
            or not isinstance(value, kinds)
            or (isinstance(value, bool) and bool not in kinds)
        ):
            raise UsageError(
                f"{path} is damaged: its field {name!r} is {type(value).__name__ if name in values else 'missing'}, "
                f"not {' or '.join(k.__name__ for k in kinds if k is not type(None))}"
            )


def _migrated_v1(payload: dict[str, Any]) -> dict[str, Any]:
    """Version 1 kept the record's fields beside the state, and before that a char run's characters
    as `vocab`: the one migration of old checkpoints."""
    old = dict(payload)
    if "tokenizer" not in old and isinstance(old.get("vocab"), list):
        chars = old["vocab"]
        old["tokenizer"] = (
            {"kind": "char", "chars": chars} if chars and all(isinstance(c, str) for c in chars) else None
        )
    record = {name: old.pop(name, None) for name in _RECORD_TYPES}
    defaults = {"step": 0, "elapsed": 0.0, "metrics": [], "recent_losses": [], "train_loss": float("nan")}
    state = {name: old.get(name, defaults.get(name)) for name in _STATE_TYPES}
    return {**state, "record": record}


def _load_payload(path: Path) -> dict[str, Any]:
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
    if payload.get("version") not in READABLE_VERSIONS:
        raise UsageError(
            f"{path} has checkpoint version {payload.get('version')}; this posenc reads versions "
            f"{', '.join(map(str, READABLE_VERSIONS))}"
        )
    return payload


def check_own_checkpoint(run_dir: Path, checkpoint: Checkpoint, summary: RunSummary) -> None:
    """A checkpoint copied in from another run is refused wherever a run is read: its run id must be
    the one summary.json names (old runs that recorded no id in either are read as before); and a
    record edited since it was saved is refused by its fingerprint, which the summary keeps."""
    theirs, ours = checkpoint.record.run_id, summary.run_id
    if theirs != ours and (theirs is not None or ours is not None):
        raise UsageError(
            f"{run_dir / CHECKPOINT} belongs to another run than {run_dir / SUMMARY} (run id "
            f"{theirs} vs {ours}); a run is read only with its own checkpoint"
        )
    kept = summary.record_sha256
    if kept is None and checkpoint.version >= 2 and summary.status is not RunStatus.RUNNING:
        raise UsageError(
            f"{run_dir / SUMMARY} keeps no fingerprint of its checkpoint's record (removed by hand?); "
            "the run cannot be verified and is not read"
        )
    if kept is not None and kept != record_sha256(checkpoint.record):
        raise UsageError(
            f"{run_dir / CHECKPOINT} holds another record than {run_dir / SUMMARY} saved with it (its "
            "fingerprint differs: the model, tokenizer, data, seed or training length was edited)"
        )


def record_sha256(record: RunRecord) -> str:
    """The fingerprint of what a run is: every field of its record but the config (a resume may change
    train.max_steps), the same at every checkpoint of the run."""
    identity = {k: v for k, v in asdict(record).items() if k != "config"}
    return hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()
