"""results.json: an output set that says how it was made. lm-evaluation-harness's results file is the
model: its `config` (the command and options), `git_hash`, `date`, library versions and environment,
then every number. Here one section per kind of set (eval, probe), each with the provenance of what
made it (the command line, posenc's version and commit, torch/transformers/tokenizers, the machine, each
target's identity, the data) and every row of its tables, whose column Labels are kept as fields, never
as text to parse. `posenc report` rebuilds tables and figures from it through the same writers."""

from __future__ import annotations

import datetime
import hashlib
import importlib.metadata
import json
import shlex
import sys
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from posenc_cli import __version__
from posenc_cli.core.atomic import write_text
from posenc_cli.core.device import cpu_bf16, cpu_model, native_bf16
from posenc_cli.core.errors import UsageError
from posenc_cli.core.file_sets import file_entry, hashed_entry, read_manifest
from posenc_cli.core.version import code_version
from posenc_cli.evaluation.eval_text import EvalText
from posenc_cli.evaluation.labels import Label, Variant
from posenc_cli.model.positional.rope_scaling import METHODS
from posenc_cli.rundir.loading import LoadedRun

RESULTS = "results.json"
FORMAT = "posenc-results"
# 3: a Variant's extension and settings; 2: a column's label is a record of fields (1: its text; read
# by legacy_label)
FORMAT_VERSION = 3
READABLE_VERSIONS = (1, 2, FORMAT_VERSION)
ADDED_IN_3 = {"extension", "settings"}  # Variant's fields a version 2 file lacks: none, read as such
TABLES = {  # each kind's tables, by name
    "eval": ("ppl", "loss_by_position"),
    "probe": ("probe",),
    "tasks": ("task_accuracy",),
}
LIBRARIES = ("torch", "transformers", "tokenizers")


@dataclass(frozen=True)
class Provenance:
    """How one eval or probe was made (lm-evaluation-harness's config, versions, git_hash and date)."""

    command: str  # the command line as typed
    options: dict[str, Any]  # every option's value, defaults included
    date: str  # UTC, ISO 8601
    posenc_version: str
    git_hash: str | None  # the checkout's commit (+dirty), None for an installed package
    versions: dict[str, str | None]  # torch, transformers, tokenizers (None: not installed)
    machine: dict[str, Any]  # CPU model, its bf16, the device and whether it computes bf16 natively
    targets: list[dict[str, Any]]  # each target's identity: run id, model_id, config; or hf name, revision
    data: dict[str, Any]  # the text scored (path, sha256, size) or each run's validation split


@dataclass(frozen=True)
class ResultsSection:
    """One kind's part of results.json: its tables' rows, their column Labels and facts, and what made it
    (several provenances where `posenc report` merged sets)."""

    kind: str  # eval, probe or tasks (eval of task runs)
    tables: dict[str, pd.DataFrame]
    info: dict[Label, dict]  # comparison.md's facts per column
    made: list[Provenance]


def library_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def target_identity(target) -> dict[str, Any]:
    """A posenc run by its id, checkpoint step, path and config; a pretrained model by name and revision."""
    if isinstance(target, LoadedRun):
        record = target.record
        return {
            "kind": "run",
            "path": str(Path(target.path).resolve()),
            "model_id": target.model_id,
            "run_id": record.run_id,
            "step": target.checkpoint.step,
            "config": record.config or {"model": record.model_config, "data": record.data},
            "corpus_sha256": record.corpus_sha256,
        }
    config = getattr(target, "config", None)
    return {
        "kind": "hf",
        "model_id": target.model_id,
        "name_or_path": getattr(config, "_name_or_path", str(target.path)),
        "revision": getattr(config, "_commit_hash", None),
    }


def data_identity(data_path: str | Path | None, text: EvalText | None = None) -> dict[str, Any]:
    """The text every column scored, by sha256 and size (a dataset's split: the rows as scored); or each
    run's own validation split (its corpus's sha256 is in its target entry). The span each column scored
    is in its rows (tokens, bytes)."""
    if data_path is None:
        return {"text": "each run's validation split"}
    if str(data_path).startswith("hf:") and text is not None:
        scored = text.text.encode("utf-8", "surrogatepass")
        return {"text": text.name, "sha256": hashlib.sha256(scored).hexdigest(), "bytes": len(scored)}
    entry = hashed_entry(Path(data_path))
    return {"text": str(Path(data_path).resolve()), **entry}


def provenance(
    targets: list, *, options: dict[str, Any], data_path, device: torch.device, text: EvalText | None = None
) -> Provenance:
    """What made this output set, taken as it is written."""
    version = code_version()
    return Provenance(
        command=shlex.join(["posenc", *sys.argv[1:]]),
        options=json.loads(json.dumps(options, default=str)),
        date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        posenc_version=__version__,
        git_hash=version.removeprefix("git:") if version.startswith("git:") else None,
        versions={name: library_version(name) for name in LIBRARIES},
        machine={
            "cpu": cpu_model(),
            "cpu_bf16": cpu_bf16(),
            "device": str(device),
            "native_bf16": native_bf16(device),
        },
        targets=[target_identity(t) for t in targets],
        data=data_identity(data_path, text),
    )


# -- writing ---------------------------------------------------------------------------------------


def labels_as_text(df: pd.DataFrame) -> pd.DataFrame:
    """The table as its csv shows it: each column's Label as its text (what a reader of the table, a
    csv or a notebook, selects by: `df[df.scheme == "rope"]`)."""
    plain = df.copy()
    if "scheme" in plain:
        plain["scheme"] = plain["scheme"].map(str)
    return plain


def table_record(df: pd.DataFrame) -> dict[str, Any]:
    """A table as columns, dtypes and rows (JSON null for nan), labels as their text: exact floats."""
    plain = labels_as_text(df)
    rows = plain.astype(object).where(plain.notna(), None).to_dict("records")
    return {"columns": list(df.columns), "dtypes": {c: str(t) for c, t in df.dtypes.items()}, "rows": rows}


def section_record(section: ResultsSection) -> dict[str, Any]:
    labels = {
        str(label): asdict(label)
        for table in section.tables.values()
        if "scheme" in table
        for label in table["scheme"]
        if isinstance(label, Label)
    }
    return {
        "provenance": [asdict(p) for p in section.made],
        "labels": labels,
        "info": {str(k): v for k, v in section.info.items()},
        "results": {name: table_record(df) for name, df in section.tables.items()},
    }


def write_results_file(out: Path, section: ResultsSection, carried: bytes | None) -> Path:
    """results.json with `section`, and the other kind's section from the file this set found here when its
    manifest vouched for it (`carried`: eval and probe share a directory)."""
    document = {"format": FORMAT, "format_version": FORMAT_VERSION}
    if carried is not None:
        try:
            earlier = parse_results(carried, out / RESULTS)
            document.update({k: v for k, v in earlier.items() if k in TABLES and k != section.kind})
        except UsageError:
            pass  # a file from another format version: not carried
    document[section.kind] = section_record(section)
    text = json.dumps(document, indent=1, allow_nan=False, default=lambda v: v.item()) + "\n"
    write_text(out / RESULTS, text)
    return out / RESULTS


# -- reading ---------------------------------------------------------------------------------------


def parse_results(data: bytes, where: Path) -> dict[str, Any]:
    """results.json's document, its format and version checked."""
    try:
        document = json.loads(data.decode("utf-8"))
    except RecursionError:
        raise UsageError(
            f"{where} is nested too deep to be a posenc results file; rerun the command that wrote it"
        ) from None
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise UsageError(f"{where} is not valid JSON ({err}); rerun the command that wrote it") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise UsageError(f"{where} is not a posenc results file (format {FORMAT!r})")
    if document.get("format_version") not in READABLE_VERSIONS:
        raise UsageError(
            f"{where} has format version {document.get('format_version')!r}; this posenc reads "
            f"versions {', '.join(map(str, READABLE_VERSIONS[:-1]))} and {READABLE_VERSIONS[-1]} (use the posenc that wrote it, or rerun the command)"
        )
    return document


def earlier_section(data: bytes | None, kind: str, where: Path) -> ResultsSection | None:
    """The `kind` section of a results.json an earlier set of this directory wrote (`data`: None when its
    manifest did not vouch for it); None when it has none or cannot be read (another format version)."""
    try:
        document = parse_results(data, where / RESULTS) if data is not None else {}
        return read_section(kind, document[kind], where) if kind in document else None
    except UsageError:
        return None


def read_results_file(directory: Path) -> list[ResultsSection]:
    """The sections of `directory`'s results.json, which its complete manifest must list with this sha256
    and size; anything else is refused in one line."""
    if not directory.is_dir():
        raise UsageError(f"{directory} is not a directory; give an output directory of posenc eval or probe")
    listed = read_manifest(directory).get("files", {})
    if RESULTS not in listed:
        raise UsageError(
            f"{directory} has no results.json that a complete manifest.json lists: not an output set of "
            "this posenc's eval or probe (rerun it)"
        )
    try:
        data = (directory / RESULTS).read_bytes()
    except OSError as err:
        raise UsageError(f"{directory / RESULTS}: cannot read it ({err.strerror})") from None
    if file_entry(data) != listed[RESULTS]:
        raise UsageError(
            f"{directory / RESULTS} does not match its manifest (sha256 and size): changed since it was written"
        )
    document = parse_results(data, directory / RESULTS)
    if not any(kind in document for kind in TABLES):
        raise UsageError(f"{directory / RESULTS} holds no {' or '.join(TABLES)} results")
    return [read_section(kind, document[kind], directory) for kind in TABLES if kind in document]


def read_section(kind: str, record: Any, directory: Path) -> ResultsSection:
    try:
        labels = {text: read_label(fields_of) for text, fields_of in record["labels"].items()}
        tables = {name: read_table(record["results"][name], labels) for name in TABLES[kind]}
        made = [Provenance(**p) for p in record["provenance"]]
        info = {labels[text]: facts for text, facts in record["info"].items()}
    except (KeyError, TypeError, ValueError, AttributeError, RecursionError) as err:
        raise UsageError(
            f"{directory / RESULTS}: its {kind} section is damaged ({type(err).__name__})"
        ) from None
    first = TABLES[kind][0]
    if tables[first].empty:  # a set always has rows: none means it was emptied since
        raise UsageError(
            f"{directory / RESULTS}: its {kind} section has no rows of {first}; rerun the command"
        )
    return ResultsSection(kind, tables, info, made)


def read_label(record: dict[str, Any]) -> Label:
    """A column's Label from the fields section_record wrote (legacy_label: a file from before Variant)."""
    if set(record) == LEGACY_LABEL:
        return legacy_label(record)
    variant = record["variant"]
    for found, kind in ((record, Label), (variant, Variant)):
        names = {f.name for f in fields(kind)}
        if set(found) != names and not (kind is Variant and set(found) == names - ADDED_IN_3):
            raise ValueError(f"a {kind.__name__} with fields {sorted(found)}")
    return Label(
        tuple(map(str, record["scheme"])),
        Variant(
            tuple(map(str, variant["options"])),
            str(variant["scaling"]),
            factor=None if variant["factor"] is None else float(variant["factor"]),
            extension=tuple(map(str, variant.get("extension", ()))),
            settings=tuple((str(k), str(v)) for k, v in variant.get("settings", ())),
            randomized=bool(variant["randomized"]),
            overflow=str(variant["overflow"]),
        ),
        model=str(record["model"]),
        tokenizer=str(record["tokenizer"]),
        distinct=tuple((str(k), str(v)) for k, v in record["distinct"]),
        context=None if record["context"] is None else int(record["context"]),
    )


# A label as results.json held it before Variant: the scheme and its variant as the text a column shows.
LEGACY_LABEL = {"scheme", "variant", "scaling", "model", "overflow", "tokenizer", "distinct"}


def legacy_label(record: dict[str, Any]) -> Label:
    """A label from a results.json of an older posenc: the one place a label's text is split, because such
    a file keeps nothing else to read a composite's parts, a variant's options, the --rope-factor or the
    pretended context from (they were joined by "+" or kept among the distinctions: s, hf-context)."""
    options = [part for part in str(record["variant"]).split("+") if part]
    randomized = options[-1:] == ["randomized"]
    del options[len(options) - randomized :]
    scaling = options.pop() if options and options[-1] in METHODS else ""
    marks = {str(k): str(v) for k, v in record["distinct"]}
    return Label(
        tuple(str(record["scheme"]).split("+")),
        Variant(
            tuple(options),
            scaling,
            factor=float(marks["s"]) if "s" in marks else None,
            randomized=randomized,
            overflow=str(record["overflow"]),
        ),
        model=str(record["model"]),
        tokenizer=str(record["tokenizer"]),
        distinct=tuple((k, v) for k, v in marks.items() if k not in ("s", "hf-context")),
        context=int(marks["hf-context"]) if "hf-context" in marks else None,
    )


def read_table(record: dict[str, Any], labels: dict[str, Label]) -> pd.DataFrame:
    """A table as table_record wrote it: its columns, dtypes and Labels again."""
    df = pd.DataFrame(record["rows"], columns=record["columns"])
    if df.empty:
        return df.astype(record["dtypes"])
    df = df.astype({c: t for c, t in record["dtypes"].items() if t != "object"})
    if "scheme" in df:
        unknown = set(df["scheme"]) - set(labels)
        if unknown:
            raise ValueError(f"columns without a label: {sorted(unknown)}")
        df["scheme"] = df["scheme"].map(labels)
    return df
