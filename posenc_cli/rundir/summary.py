"""summary.json, what a run is and how it ended, as one typed `RunSummary`: this module is its one
reader and its one writer. Training builds the summary once, when the run's model and corpus are built,
and replaces its fields as the run goes on (a checkpoint, the end). metrics.csv is read back here too."""

from __future__ import annotations

import csv
import dataclasses
import json
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from types import UnionType
from typing import Any, get_args, get_origin, get_type_hints

from posenc_cli.core.atomic import write_text
from posenc_cli.core.errors import UsageError
from posenc_cli.rundir.layout import METRICS, SUMMARY


class RunStatus(str, Enum):
    """A run's status in summary.json: training now, or how it ended (a str, so the file spells it)."""

    RUNNING = "running"
    FINISHED = "finished"
    FAILED = "failed"
    INTERRUPTED = "interrupted"

    def __str__(self) -> str:  # as summary.json spells it, in logs and trackers too
        return self.value


@dataclass(frozen=True, kw_only=True)
class PrecisionFacts:
    """What a run computes in and why (summary.json's `precision`); a fact not recorded is None."""

    requested: str | None = None  # train.precision as asked
    effective: str | None = None  # core.device.EFFECTIVE_PRECISIONS
    cpu_bf16: str | None = None  # on a CPU: whether its bf16 is native or emulated
    reason: str | None = None  # why it is that one (training.precision_choice)
    step_ms: dict[str, Any] | None = None  # measured ms a step, per precision


@dataclass(frozen=True, kw_only=True)
class RunDescription:
    """What a run is, from its config, model and corpus; None where an older posenc did not record it."""

    scheme: str | None  # the scheme's label
    seed: int | None
    train_len: int | None
    positions: str | None
    max_position: int | None
    kind: str | None
    relative: str | None
    max_len: int | None
    positional_params: int | None
    total_params: int | None
    corpus: str | None
    tokenizer: str | None
    vocab_size: int | None
    device: str | None
    code_version: str | None
    threads: int | None
    processes: int | None
    corpus_stats: dict[str, Any]  # data.Corpus.stats, written as corpus_<name> keys
    precision: PrecisionFacts | None

    @property
    def corpus_sha256(self) -> str | None:
        """The digest of the corpus the run trained on (None: generated in memory, or not recorded)."""
        sha = self.corpus_stats.get("sha256")
        return sha if isinstance(sha, str) else None

    def as_json(self) -> dict[str, Any]:
        plain = {k: v for k, v in _values(self).items() if k not in ("corpus_stats", "precision")}
        stats = {f"corpus_{name}": value for name, value in self.corpus_stats.items()}
        precision = _given(_values(self.precision)) if self.precision else None
        return {**plain, **stats, "precision": precision}


@dataclass(frozen=True, kw_only=True)
class RunOutcome:
    """Where the training stopped and what it measured last (written once the loop stops)."""

    steps: int | None
    wall_time_s: float | None
    final_train_loss: float | None
    final_val_loss: float | None
    tokens_per_s: float | None


@dataclass(frozen=True, kw_only=True)
class RunSummary:
    """summary.json: which run this is, what it is, and where its training stands. A field a summary
    does not hold (an older posenc's, or one written before the run got that far) is None."""

    status: RunStatus | None = None  # None: a summary that states none
    run_id: str | None = None  # None only in summaries written before posenc gave runs an id
    config: dict[str, Any] | None = None  # the config a resume rebuilds the run from
    description: RunDescription | None = None  # None: the start of a run, before its model is built
    code_versions: tuple[str, ...] | None = None  # a resumed run's: every version that trained it
    init_from: str | None = None  # train.init_from, resolved
    init_chain: tuple[str, ...] | None = None  # the runs init_from's weights came from, newest first
    checkpoint_step: int | None = None  # the step of the checkpoint on disk
    record_sha256: str | None = None  # rundir.record.record_sha256 of that checkpoint's record
    message: str | None = None  # why the run stopped, when it did not finish
    outcome: RunOutcome | None = None  # None until the training stops

    def code_history(self, now: str | None) -> tuple[str, ...]:
        """Every code version that trained the run, oldest first, and `now` (a resume's) last."""
        first = self.description.code_version if self.description else None
        before = self.code_versions or ((first,) if first else ())
        return before if now is None or now in before else (*before, now)

    def as_json(self) -> dict[str, Any]:
        """summary.json's object, its keys in the order posenc has always written them: a field that is
        None is left out, but for those every summary of its kind holds (null then)."""
        ended = self.status not in (None, RunStatus.RUNNING)
        which = {"run_id": self.run_id, "config": self.config}
        later = {
            "code_versions": None if self.code_versions is None else list(self.code_versions),
            "init_from": self.init_from,
            "init_chain": None if self.init_chain is None else list(self.init_chain),
            "checkpoint_step": self.checkpoint_step,  # a described run's says null before its first
            "record_sha256": self.record_sha256,
        }
        later = _given(later, keep=() if self.description is None else ("checkpoint_step",))
        said = _given({"message": self.message}, keep=("message",) if ended else ())
        outcome = _values(self.outcome) if self.outcome else {}
        if self.description is None:  # the start of a run says first which run its directory holds
            return {"status": self.status, **which, **later, **said, **outcome}
        return {**self.description.as_json(), **which, **later, "status": self.status, **said, **outcome}

    @classmethod
    def from_json(cls, value: dict[str, Any], path: Path) -> RunSummary:
        """The summary in summary.json's object, written by this posenc or an older one: described once
        it names a scheme, ended once it counts steps."""
        stats = {k.removeprefix("corpus_"): v for k, v in value.items() if k.startswith("corpus_")}
        return _read(
            cls,
            value,
            path,
            description=_read(RunDescription, value, path, corpus_stats=stats) if "scheme" in value else None,
            outcome=_read(RunOutcome, value, path) if "steps" in value else None,
        )


def _values(obj: Any) -> dict[str, Any]:
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}


def _given(values: dict[str, Any], *, keep: tuple[str, ...] = ()) -> dict[str, Any]:
    """The values that are not None, and those named in `keep` whatever they are."""
    return {k: v for k, v in values.items() if v is not None or k in keep}


def _read(cls: type, value: dict[str, Any], path: Path, *, part: str = "", **given: Any) -> Any:
    """The dataclass `cls` from the fields `value` holds (absent or null: None) and those `given`: a
    field of another type than posenc writes it in is one line naming the file."""
    hints = get_type_hints(cls)
    read = {
        name: _parsed(hint, value.get(name), path=path, name=part + name)
        for name, hint in hints.items()
        if name not in given
    }
    return cls(**read, **given)


def _parsed(hint: Any, value: Any, *, path: Path, name: str) -> Any:
    """`value` as JSON holds it, as the field type `hint` (`X | None`) of one of the summary's parts."""
    if value is None:
        return None
    kind = next(t for t in get_args(hint) if t is not type(None)) if isinstance(hint, UnionType) else hint
    base = get_origin(kind) or kind
    if base is tuple:
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return tuple(value)
        expected = "a list of strings"
    elif isinstance(base, type) and issubclass(base, Enum):
        if isinstance(value, str) and value in {s.value for s in base}:
            return base(value)
        expected = f"one of {', '.join(s.value for s in base)}"
    elif dataclasses.is_dataclass(base):
        if isinstance(value, dict):
            return _read(base, value, path, part=f"{name}.")  # type: ignore[arg-type]
        expected = "an object"
    else:
        kinds = (int, float) if base is float else (base,)
        if isinstance(value, kinds) and not isinstance(value, bool):
            return value
        expected = "an object" if base is dict else base.__name__
    shown = repr(value) if len(repr(value)) <= 40 else type(value).__name__
    raise UsageError(f"{path} is damaged: its {name} is {shown}, not {expected}")


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


def read_summary(run_dir: Path) -> RunSummary:
    """The run's summary; one line naming the file when it is missing, corrupt or damaged."""
    return RunSummary.from_json(read_json(run_dir / SUMMARY), run_dir / SUMMARY)


def write_summary(run_dir: Path, summary: RunSummary) -> None:
    """summary.json, atomically: the one place the file is written."""
    write_text(run_dir / SUMMARY, json.dumps(summary.as_json(), indent=2, default=str) + "\n")


def finished(run_dir: Path) -> bool:
    """Whether the run's summary says it finished (an unreadable one: not)."""
    try:
        return read_summary(run_dir).status is RunStatus.FINISHED
    except UsageError:
        return False


def read_metrics(run_dir: Path) -> list[dict[str, float]]:
    """metrics.csv's rows, each with the numbers its step measured (a blank cell: not measured)."""
    path = run_dir / METRICS
    try:
        with open(path, newline="", encoding="utf-8") as file:
            return [{k: float(v) for k, v in row.items() if v} for row in csv.DictReader(file)]
    except (OSError, UnicodeDecodeError, csv.Error, TypeError, ValueError) as err:
        raise UsageError(f"{path} is unreadable or corrupt ({type(err).__name__})") from None
