"""`data=hf`: the text column of a Hugging Face dataset, streamed row by row into the token cache.

`data.name` is a Hub name (`wikitext`, with `data.config=wikitext-103-raw-v1`; `pg19`), which needs a
network, or a directory written by `Dataset.save_to_disk` / `DatasetDict.save_to_disk`. The text is
the `data.text_field` column of `data.split`, each row followed by a newline. The validation text is the
dataset's own `validation` split, else its `test` split (`data.val_split`, default auto), read after the
training rows; a dataset without either (or `data.val_split=null`) holds out the last
`data.val_fraction` of the training split, as `data=text` does.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from posenc_cli.core.errors import UsageError
from posenc_cli.core.install import install_hint
from posenc_cli.data.corpus_config import HfData
from posenc_cli.data.stream import TextSource

ROWS_PER_BLOCK = 1000
TEXT_TYPES = ("string", "large_string")  # the Arrow types of a text column
VALIDATION_SPLITS = ("validation", "test")  # what data.val_split=auto looks for, in this order


def column_type(feature) -> str:
    """A column's type as a message names it: its Arrow dtype (int64, string), or the feature's kind
    (List, Sequence, ClassLabel...) when it is not a plain value."""
    return getattr(feature, "dtype", None) if type(feature).__name__ == "Value" else type(feature).__name__


def import_datasets():
    try:
        import datasets
    except ImportError:
        raise UsageError(f"data=hf needs the Hugging Face datasets package: {install_hint('data')}") from None
    return datasets


@dataclass(frozen=True)
class Splits:
    """The split trained on, and the dataset's own split validated on (None: the training split's tail)."""

    train: Any  # a datasets.Dataset
    validation: Any | None
    validation_name: str | None


def pick_validation(val_split: str | None, *, names: list[str], train: str, dataset: str) -> str | None:
    """data.val_split: auto takes `validation`, else `test`, else none; a name must be one of the
    dataset's other splits; None (null): none, the last data.val_fraction of the training split."""
    others = [n for n in names if n != train]
    if val_split == "auto":
        return next((n for n in VALIDATION_SPLITS if n in others), None)
    if val_split is not None and val_split not in others:
        held = f"its other splits are: {', '.join(others)}" if others else "it has no other split"
        raise UsageError(f"data.val_split={val_split} is not a split of {dataset} to validate on; {held}")
    return val_split


def open_dataset(name: str, config: str | None, *, what: str):
    """A save_to_disk directory (a Dataset or a DatasetDict) or a Hub dataset with all its splits, or
    one line saying why not (`what` names it as the user wrote it)."""
    datasets = import_datasets()
    local = Path(name).expanduser()
    try:
        return datasets.load_from_disk(str(local)) if local.is_dir() else datasets.load_dataset(name, config)
    except Exception as err:  # network, missing dataset or config, bad directory: the library's own words
        raise UsageError(
            f"{what} could not be loaded ({type(err).__name__}: {' '.join(str(err).split())[:200]})"
        ) from None


def load_splits(data: HfData) -> Splits:
    """The splits as `datasets.Dataset`s (memory-mapped Arrow), or one clear line saying why not."""
    datasets = import_datasets()
    name, split, val_split = data.name, data.split or "train", data.val_split
    if not name or name == "hf":
        raise UsageError(
            "data=hf needs data.name=DATASET: a Hub name (e.g. wikitext with "
            "data.config=wikitext-103-raw-v1) or a directory saved with save_to_disk"
        )
    found = open_dataset(str(name), data.config, what=f"data.name={name}")
    if not isinstance(found, datasets.DatasetDict):  # one Dataset, saved without splits
        if val_split not in ("auto", None):
            raise UsageError(f"data.val_split={val_split}: {name} is one dataset without splits; drop it")
        return Splits(found, None, None)
    if split not in found:
        raise UsageError(f"data.split={split} is not in {name}; it has: {', '.join(found)}")
    held = pick_validation(val_split, names=list(found), train=split, dataset=str(name))
    return Splits(found[split], None if held is None else found[held], held)


def text_column(dataset, field: str, *, where: str, option: str = "data.text_field") -> str:
    """The `field` column of one split (`where` names it), checked to hold text."""
    if field not in dataset.column_names:
        raise UsageError(
            f"{option}={field} is not a column of {where}; its columns are: {', '.join(dataset.column_names)}"
        )
    found = column_type(dataset.features[field])
    if found not in TEXT_TYPES:
        raise UsageError(
            f"{option}={field} of {where} holds {found}, not strings; "
            "name a column of text (its words would otherwise be read as Python reprs)"
        )
    return field


def rows_text(dataset, field: str) -> Iterator[str]:
    """A split's text in blocks of ROWS_PER_BLOCK rows, each row followed by a newline."""
    for batch in dataset.iter(batch_size=ROWS_PER_BLOCK):
        yield "".join(f"{row}\n" for row in batch[field] if row is not None)


def hf_source(data: HfData) -> tuple[TextSource, dict[str, Any]]:
    """The training split's rows, then the validation split's where the dataset has one (the source's
    validation_start is where they begin)."""
    splits = load_splits(data)
    train_split, field = data.split or "train", data.text_field or "text"
    named = f"data.name={data.name}"
    parts = [(splits.train, text_column(splits.train, field, where=f"{named} (split {train_split})"))]
    if splits.validation is not None:
        where = f"{named} (split {splits.validation_name})"
        parts.append((splits.validation, text_column(splits.validation, field, where=where)))

    def blocks():
        for dataset, field in parts:
            yield from rows_text(dataset, field)

    start = None
    if splits.validation is not None:
        start = sum(len(block) for block in rows_text(*parts[0]))
    facts = {
        "dataset": str(data.name),
        "config": data.config,
        "split": train_split,
        "rows": len(splits.train),
        "val_split": splits.validation_name,
        "val_rows": None if splits.validation is None else len(splits.validation),
    }
    return TextSource(named, blocks, validation_start=start), facts


@dataclass(frozen=True)
class HfText:
    """`--data hf:NAME[:CONFIG]:SPLIT`, `hf:DIR` (a saved Dataset) or `hf:DIR:SPLIT` (a saved DatasetDict):
    one split of a dataset whose rows are the evaluation text (or, with --documents, its documents)."""

    name: str
    config: str | None
    split: str | None
    text_field: str = "text"

    @property
    def spec(self) -> str:
        return ":".join(["hf", self.name, *[p for p in (self.config, self.split) if p]])


def parse_hf_text(spec: str, text_field: str) -> HfText:
    """hf:DIR, hf:DIR:SPLIT (a local directory), hf:NAME:SPLIT or hf:NAME:CONFIG:SPLIT (the Hub)."""
    parts = spec.removeprefix("hf:").split(":")
    if Path(parts[0]).expanduser().is_dir() and len(parts) <= 2:
        return HfText(parts[0], None, parts[1] if len(parts) == 2 else None, text_field)
    if len(parts) in (2, 3) and all(parts):
        return HfText(parts[0], parts[1] if len(parts) == 3 else None, parts[-1], text_field)
    raise UsageError(
        f"--data {spec}: give hf:DIR or hf:DIR:SPLIT (a save_to_disk directory) or hf:NAME:SPLIT or "
        "hf:NAME:CONFIG:SPLIT (a Hugging Face dataset)"
    )


def hf_rows(text: HfText) -> list[str]:
    """The split's rows of text, in order (rows without text left out)."""
    datasets = import_datasets()
    found = open_dataset(text.name, text.config, what=f"--data {text.spec}")
    if isinstance(found, datasets.DatasetDict):
        if text.split is None:
            raise UsageError(
                f"--data {text.spec} holds splits; name one: hf:{text.name}:SPLIT ({', '.join(found)})"
            )
        if text.split not in found:
            raise UsageError(
                f"--data {text.spec}: {text.name} has no split {text.split}; it has: {', '.join(found)}"
            )
        found = found[text.split]
    elif text.split is not None and Path(text.name).expanduser().is_dir():
        raise UsageError(f"--data {text.spec}: {text.name} is one dataset without splits; use hf:{text.name}")
    field = text_column(found, text.text_field, where=f"--data {text.spec}", option="--text-field")
    return [row for batch in found.iter(batch_size=ROWS_PER_BLOCK) for row in batch[field] if row is not None]
