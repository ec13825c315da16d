"""`data=hf`: the text column of a Hugging Face dataset, streamed row by row into the token cache.

`data.name` is a Hub name (`wikitext`, with `data.config=wikitext-103-raw-v1`; `pg19`), which needs a
network, or a directory written by `Dataset.save_to_disk` / `DatasetDict.save_to_disk`. The text is
the `data.text_field` column of `data.split`, each row followed by a newline; its last
`data.val_fraction` is the validation split, as for `data=text`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from posenc_cli.core.errors import UsageError
from posenc_cli.data.stream import TextSource

ROWS_PER_BLOCK = 1000
TEXT_TYPES = ("string", "large_string")  # the Arrow types of a text column


def column_type(feature) -> str:
    """A column's type as a message names it: its Arrow dtype (int64, string), or the feature's kind
    (List, Sequence, ClassLabel...) when it is not a plain value."""
    return getattr(feature, "dtype", None) if type(feature).__name__ == "Value" else type(feature).__name__


def load_dataset(data_cfg: Mapping[str, Any]):
    """The split as a `datasets.Dataset` (memory-mapped Arrow), or one clear line saying why not."""
    try:
        import datasets
    except ImportError:
        raise UsageError(
            "data=hf needs the Hugging Face datasets package: pip install 'posenc[data]'"
        ) from None
    name, split = data_cfg.get("name"), data_cfg.get("split") or "train"
    if not name or name == "hf":
        raise UsageError(
            "data=hf needs data.name=DATASET: a Hub name (e.g. wikitext with "
            "data.config=wikitext-103-raw-v1) or a directory saved with save_to_disk"
        )
    local = Path(str(name)).expanduser()
    try:
        if local.is_dir():
            found = datasets.load_from_disk(str(local))
            if isinstance(found, datasets.DatasetDict):
                if split not in found:
                    raise UsageError(f"data.split={split} is not in {name}; it has: {', '.join(found)}")
                found = found[split]
            return found
        return datasets.load_dataset(str(name), data_cfg.get("config"), split=split)
    except UsageError:
        raise
    except Exception as err:  # network, missing dataset or config, bad directory: the library's own words
        raise UsageError(
            f"data.name={name} could not be loaded ({type(err).__name__}: {' '.join(str(err).split())[:200]})"
        ) from None


def hf_source(data_cfg: Mapping[str, Any]) -> tuple[TextSource, dict[str, Any]]:
    dataset = load_dataset(data_cfg)
    field = data_cfg.get("text_field") or "text"
    if field not in dataset.column_names:
        raise UsageError(
            f"data.text_field={field} is not a column of data.name={data_cfg['name']}; "
            f"its columns are: {', '.join(dataset.column_names)}"
        )
    found = column_type(dataset.features[field])
    if found not in TEXT_TYPES:
        raise UsageError(
            f"data.text_field={field} of data.name={data_cfg['name']} holds {found}, not strings; "
            "name a column of text (its words would otherwise be trained on as Python reprs)"
        )

    def blocks():
        for batch in dataset.iter(batch_size=ROWS_PER_BLOCK):
            yield "".join(f"{row}\n" for row in batch[field] if row is not None)

    facts = {
        "dataset": str(data_cfg["name"]),
        "config": data_cfg.get("config"),
        "split": data_cfg.get("split") or "train",
        "rows": len(dataset),
    }
    return TextSource(f"data.name={data_cfg['name']}", blocks), facts
