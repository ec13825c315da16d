"""The only code posenc lets transformers run from a model directory: the modelling code this posenc ships
(MODELING_SOURCE, which `posenc export` writes as modeling_posenc.py), reached only through the auto_map
entries posenc writes (OWN_AUTO_MAPS). Given trust_remote_code, transformers imports the module that any
`auto_map` of a JSON it reads names (config, tokenizer, processor, any key, a list or a `repo--module`
on the hub), a `custom_pipelines` implementation, or custom_generate/generate.py; so every JSON at the
top of a local `hf:` directory is read first (each up to model_files.JSON_CAP: a larger one is refused),
and any such entry that is not posenc's own, in a directory that is not a posenc export, or beside a
modeling_posenc.py of other bytes, is refused in one line naming the file and the key, before
transformers reads anything there. An export is then loaded from a private copy
(export_loading.private_export)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from posenc_cli.core.errors import UsageError
from posenc_cli.hf.model_files import JSON_ERRORS, json_value

CONFIG = "config.json"
TOKENIZER_CONFIG = "tokenizer_config.json"
MODELING = "modeling_posenc.py"
MODELING_SOURCE = (  # the module transformers imports with trust_remote_code: posenc's classes, not a copy
    '"""posenc\'s GPT for transformers (pip install posenc): see posenc_cli/evaluation/hf_modeling.py."""\n\n'
    "from posenc_cli.evaluation.hf_modeling import PosencConfig, PosencForCausalLM, PosencTokenizerFast  # noqa: F401\n"
)
MODULE = MODELING.removesuffix(".py")
OWN_AUTO_MAPS = {  # the auto_map of each JSON posenc writes into an export, the only code references it trusts
    CONFIG: {"AutoConfig": f"{MODULE}.PosencConfig", "AutoModelForCausalLM": f"{MODULE}.PosencForCausalLM"},
    TOKENIZER_CONFIG: {"AutoTokenizer": [None, f"{MODULE}.PosencTokenizerFast"]},
}
CODE_KEYS = ("auto_map", "custom_pipelines")  # the JSON keys through which transformers imports a module
CUSTOM_GENERATE = "custom_generate"  # a folder whose generate.py replaces generate() under trust_remote_code


@dataclass(frozen=True)
class CodeReference:
    """One JSON entry that names code for transformers to import: where, under which key, and what."""

    file: Path
    key: str  # its path in the JSON, dotted: "auto_map", "text_config.auto_map"
    value: Any

    @property
    def own(self) -> bool:
        """Whether it is an auto_map posenc writes, exactly (same keys, same values)."""
        return self.key == "auto_map" and OWN_AUTO_MAPS.get(self.file.name) == self.value

    def foreign_entry(self) -> tuple[str, Any]:
        """(key, value) to name in a refusal: the first entry of a map that is not posenc's, else the whole."""
        own = OWN_AUTO_MAPS.get(self.file.name, {}) if self.key == "auto_map" else {}
        if isinstance(self.value, dict):
            for name, target in self.value.items():
                if own.get(name) != target:
                    return f"{self.key}.{name}", target
        return self.key, self.value


def code_references(directory: Path) -> list[CodeReference]:
    """Every auto_map and custom_pipelines entry, at any depth, of every JSON file at the top of
    `directory` (transformers reads its configs there, whatever their names)."""
    found = []
    for path in sorted(p for p in directory.glob("*.json") if p.is_file()):  # a FIFO is never opened
        try:
            value = json_value(path)  # a 30 GB one: one line
        except JSON_ERRORS as err:
            raise UsageError(
                f"{path} cannot be read as JSON ({type(err).__name__}), so posenc cannot tell which code it "
                "names for transformers; remove or repair it"
            ) from None
        found += [CodeReference(path, key, entry) for key, entry in entries(value, CODE_KEYS)]
    return found


def entries(value: Any, keys: tuple[str, ...]) -> list[tuple[str, Any]]:
    """(dotted key, value) of each of `keys` anywhere in a JSON value (no recursion: any depth json reads)."""
    found, pending = [], [("", value)]
    while pending:
        prefix, item = pending.pop()
        children = (
            item.items() if isinstance(item, dict) else enumerate(item) if isinstance(item, list) else ()
        )
        for name, child in children:
            key = f"{prefix}{name}"
            if isinstance(item, dict) and name in keys:
                found.append((key, child))
            else:
                pending.append((f"{key}.", child))
    return sorted(found, key=lambda entry: entry[0])


def checked_code(directory: Path, *, export: bool) -> bool:
    """Whether transformers needs trust_remote_code for `directory` (only posenc's own code is named
    there); any other code reference is refused in one line naming the file and the key, and so is
    posenc's own outside a posenc export (`export`) or beside a modeling_posenc.py of other bytes."""
    if (directory / CUSTOM_GENERATE).exists():
        raise UsageError(
            f"{directory / CUSTOM_GENERATE} holds code transformers would run in place of generate(); "
            "posenc runs no code from a model directory but the modelling code it ships"
        )
    references = code_references(directory)
    for ref in references:
        if not export:
            raise UsageError(
                f"{ref.file}: its key {ref.key!r} names code for transformers to run "
                f"({json.dumps(ref.value)[:120]}); posenc gives trust_remote_code to no directory but a posenc "
                "export's own modelling code, so it never loads this one"
            )
        if not ref.own:
            key, value = ref.foreign_entry()
            raise UsageError(
                f"{ref.file}: its key {key!r} names code posenc did not write ({json.dumps(value)[:120]}); "
                "posenc runs no code from a model directory but the modelling code it ships, so it never "
                "loads this one"
            )
    if references and not same_bytes(directory / MODELING, MODELING_SOURCE.encode("utf-8")):
        raise UsageError(
            f"{directory / MODELING} is not the one posenc writes (byte for byte), and posenc runs no other "
            "code; export the run again with this posenc"
        )
    return bool(references)


def same_bytes(path: Path, expected: bytes) -> bool:
    """Whether `path` is a regular file holding exactly `expected` (read no further than one byte past)."""
    if not path.is_file():
        return False
    with open(path, "rb") as f:
        return f.read(len(expected) + 1) == expected
