"""An export checked before anything loads it (manifest, code, config, tokenizer files, weights), and
loaded only from a private copy of the bytes checked: the one way in for EXPORT, hf:EXPORT and load_export."""

from __future__ import annotations

import json
import os
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import torch

from posenc_cli.core.errors import UsageError
from posenc_cli.core.file_sets import MANIFEST, hashed_entry, read_manifest
from posenc_cli.data import data_config
from posenc_cli.data.tokenizers import from_payload
from posenc_cli.hf.export import (
    FORMAT,
    HF_FIELDS,
    TEXT_TOKENIZERS,
    TOKENIZER,
    VERSION,
    WEIGHTS,
    safetensors_torch,
    tokenizer_config,
)
from posenc_cli.hf.model_checks import INTEGER_DTYPES
from posenc_cli.hf.model_files import (
    JSON_CAP,
    JSON_ERRORS,
    copy_regular,
    json_value,
    local_path,
    open_directory,
    open_regular,
    private_directory,
    too_large,
)
from posenc_cli.hf.remote_code import (
    CONFIG,
    MODELING,
    MODELING_SOURCE,
    TOKENIZER_CONFIG,
    checked_code,
)
from posenc_cli.model import GPT, ModelConfig
from posenc_cli.rundir.layout import SUMMARY
from posenc_cli.rundir.record import TrainedText
from posenc_cli.rundir.summary import read_summary

# files transformers reads beside an export's own when it loads the directory: one the manifest does not
# list would change the tokenizer or the weights loaded, so an export holding one is refused
TRANSFORMERS_READS = (
    TOKENIZER,  # an export of token ids (data=bin) has none of its own
    TOKENIZER_CONFIG,
    "added_tokens.json",
    "special_tokens_map.json",
    "generation_config.json",
    "chat_template.jinja",
    "tokenizer.model",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
# posenc's own fields of config.json; an export written before corpus_sha256 lacks it (identity unknown)
POSENC_FIELDS = (
    "format",
    "version",
    "run_id",
    "model_config",
    "tokenizer",
    "train_len",
    "data",
    "step",
    "corpus_sha256",
)


def is_export(path: Path, *, in_a_run: bool = False) -> bool:
    """Whether `path` is a directory whose config.json says it is a posenc export (verified_export checks
    the rest). A run directory holding its own export (export's default) is the run, as RUN names it,
    unless `in_a_run` (hf:RUN names its export)."""
    if not in_a_run and (path / SUMMARY).is_file():
        return False
    if not (path / CONFIG).is_file():  # a FIFO named config.json is never opened
        return False
    try:
        config = json_value(path / CONFIG)
    except JSON_ERRORS:
        return False
    return isinstance(config, dict) and config.get("format") == FORMAT


def refuse_foreign_code(source: str) -> None:
    """For a local `hf:` source (a directory, or a file such as FILE.gguf, whose directory transformers
    reads too): any code a JSON there names for transformers, but a posenc export's own, is refused
    before transformers reads a file (remote_code). A hub id is left to transformers: posenc never gives
    trust_remote_code for one."""
    local = local_path(source)
    directory = local.parent if local.is_file() else local
    if directory.is_dir():
        checked_code(directory, export=is_export(directory, in_a_run=True))


def not_an_export(directory: Path, why: str) -> UsageError:
    return UsageError(
        f"{directory} is not a complete posenc export: {why} (write one with posenc export RUN)"
    )


def verified_config(directory: Path, *, beside: Path | None = None) -> dict:
    """config.json of an export whose manifest lists both files with their sha256 and size and the same
    run id as the config: a half-written or mixed export is refused. `beside`: where the files beside the
    export's own and its run's summary are (the export as named, when `directory` is its private copy)."""
    beside = beside or directory
    for name in (CONFIG, WEIGHTS, MANIFEST):
        if not (directory / name).is_file():
            raise not_an_export(directory, f"it has no {name}")
    manifest = read_manifest(directory)
    listed = manifest.get("files", {})
    # the tokenizer's files too, where it has them; modeling_posenc.py is held to posenc's own line instead
    for name in [n for n in dict.fromkeys((CONFIG, WEIGHTS, *listed)) if n != MODELING]:
        if not (directory / name).is_file():
            raise not_an_export(directory, f"it has no {name}, which its {MANIFEST} lists")
        if listed.get(name) != hashed_entry(directory / name):
            raise not_an_export(directory, f"its {name} is not the one its {MANIFEST} lists")
    foreign = [name for name in TRANSFORMERS_READS if name not in listed and (beside / name).exists()]
    if foreign:
        raise not_an_export(
            beside, f"it holds {foreign[0]}, which transformers would read and posenc did not write"
        )
    try:
        config = json_value(directory / CONFIG)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise UsageError(f"{directory / CONFIG} is not valid JSON ({err})") from None
    if isinstance(config, dict) and config.get("format") == FORMAT and config.get("version") != VERSION:
        raise not_an_export(
            directory,
            f"it is of export version {config.get('version')!r}, and this posenc reads version {VERSION}",
        )
    if not isinstance(config, dict) or config.get("format") != FORMAT:
        raise UsageError(
            f"{directory / CONFIG} is not a posenc model config (format {FORMAT!r} version {VERSION})"
        )
    if config.get("run_id") is None or config.get("run_id") != manifest.get("run_id"):
        raise not_an_export(
            directory, f"its {CONFIG} is of run {config.get('run_id')!r}, its {MANIFEST} of another"
        )
    if (beside / SUMMARY).is_file():  # an export into its own run directory (the default)
        now = read_summary(beside).checkpoint_step
        if now is not None and now != config.get("step"):
            raise not_an_export(
                directory,
                f"it holds step {config.get('step')} but the run has trained on to step {now}: export again",
            )
    return config


@dataclass(frozen=True)
class VerifiedExport:
    """An export as verified_export found it: what posenc rebuilds its model from."""

    config: dict  # config.json
    model_config: ModelConfig
    train_len: int
    tokenizer: Any  # a data.tokenizers.TokenizerBase

    @property
    def trained_text(self) -> TrainedText:
        """The run's corpus, as the export carries it (an export written before corpus_sha256: unknown)."""
        data = self.config.get("data")
        return TrainedText(
            self.config.get("corpus_sha256"), data_config(data) if isinstance(data, dict) and data else None
        )


@contextmanager
def private_export(directory: Path) -> Iterator[tuple[Path, VerifiedExport]]:
    """(a private copy of the export, what verified_export found in it): the one verification of an export
    however it is named (`posenc eval EXPORT`, `hf:EXPORT`, load_export), made on the bytes that are then
    loaded. Each file its manifest lists is read once, never through a link, into a private directory
    beside the modeling_posenc.py posenc writes, and checked there; what loads the export reads only the
    copy, so a file swapped in the export after the check (a modeling_posenc.py, a config.json, the
    weights) is never read. Refusals name the export, not its copy, which is removed on leaving."""
    checked_code(directory, export=True)  # the export as named: code it names beside its own is refused
    with private_directory() as copy:
        try:
            copy_export(directory, copy)
            yield copy, verified_export(copy, beside=directory)
        except UsageError as err:
            raise type(err)(str(err).replace(str(copy), str(directory))) from None


def copy_export(directory: Path, copy: Path) -> None:
    """The export's manifest and each file it lists (config.json and the weights, listed or not), each
    read once without following a link into `copy`, and posenc's own modeling_posenc.py written there."""
    with open_directory(directory) as fd:
        entry = copy_regular(fd, MANIFEST, source=directory, into=copy)
        if entry is not None and entry["size"] > JSON_CAP:
            raise too_large(directory / MANIFEST, entry["size"])
        listed = read_manifest(copy).get("files", {})
        for name in dict.fromkeys((CONFIG, WEIGHTS, *listed)):
            if name in ("", ".", "..", MANIFEST) or "/" in name:
                raise not_an_export(directory, f"its {MANIFEST} lists {name!r}, which is not a file of it")
            if name != MODELING:  # posenc's own, written below: never read from the export
                copy_regular(fd, name, source=directory, into=copy)
        own = open_regular(fd, MODELING, directory / MODELING)  # a link there is refused all the same
        if own is not None:
            os.close(own)
    (copy / MODELING).write_text(MODELING_SOURCE, encoding="utf-8")


def verified_export(directory: Path, *, beside: Path | None = None) -> VerifiedExport:
    """What private_export checks of an export's files in `directory` (`beside`: the export as named,
    where its copy came from): its manifest vouches for its files and run (verified_config), it names no
    code but posenc's own (remote_code), config.json's transformers fields and tokenizer_config.json are
    those posenc writes for its model config and tokenizer, and the weights are that model's, name by name,
    shape by shape and floating point: transformers would leave a missing weight random, drop an
    unexpected one and cast an integer one, unsaid."""
    config = verified_config(directory, beside=beside)
    checked_code(directory, export=True)
    export = parsed_export(directory, config)
    check_transformers_fields(directory, export)
    check_tokenizer_files(directory, export.tokenizer)
    check_weights(directory, export.model_config)
    return export


def parsed_export(directory: Path, config: dict) -> VerifiedExport:
    try:
        model_config = ModelConfig.from_dict(config["model_config"])
        train_len = int(config["train_len"])
    except (TypeError, ValueError, KeyError, UsageError) as err:
        raise UsageError(
            f"{directory / CONFIG} has a wrong model config ({type(err).__name__}: {err})"
        ) from None
    tokenizer = from_payload(config.get("tokenizer"), str(directory / CONFIG))
    return VerifiedExport(config, model_config, train_len, tokenizer)


def check_transformers_fields(directory: Path, export: VerifiedExport) -> None:
    """config.json holds posenc's fields and the transformers fields posenc writes for its model, with
    their values, and nothing else: any other key (quantization_config, custom_pipelines, a context)
    would change what transformers builds."""
    expected = HF_FIELDS | {
        "vocab_size": export.model_config.vocab_size,
        "max_position_embeddings": export.train_len,
    }
    for key, value in expected.items():
        if export.config.get(key) != value:
            found = json.dumps(export.config.get(key))[:80]
            raise not_an_export(
                directory, f"its {CONFIG} has {key} {found}, where posenc writes {json.dumps(value)[:80]}"
            )
    extra = sorted(set(export.config) - set(expected) - set(POSENC_FIELDS))
    if extra:
        raise not_an_export(directory, f"its {CONFIG} holds {extra[0]!r}, which posenc does not write")


def check_tokenizer_files(directory: Path, tokenizer) -> None:
    """tokenizer.json and tokenizer_config.json are there exactly when the tokenizer is text's, and
    tokenizer_config.json is the one posenc writes for it: without it transformers would load another
    tokenizer class, with another end of text, that drops characters a char vocabulary lacks."""
    text = tokenizer.kind in TEXT_TOKENIZERS
    for name in (TOKENIZER, TOKENIZER_CONFIG):
        if (directory / name).is_file() != text:
            why = f"it has no {name}" if text else f"it holds {name}, and its tokenizer is of token ids"
            raise not_an_export(directory, why)
    if text and read_json_file(directory / TOKENIZER_CONFIG) != tokenizer_config(tokenizer):
        raise not_an_export(
            directory,
            f"its {TOKENIZER_CONFIG} is not the one posenc writes for the tokenizer in its {CONFIG}",
        )


def read_json_file(path: Path) -> Any:
    try:
        return json_value(path)
    except JSON_ERRORS as err:
        raise UsageError(f"{path} is not valid JSON ({type(err).__name__})") from None


def check_weights(directory: Path, model_config: ModelConfig) -> None:
    """model.safetensors holds each weight of `model_config`'s GPT once (a tied pair once), of its shape,
    and nothing else; read from the file's header, the model built on the meta device (no memory)."""
    path = directory / WEIGHTS
    try:
        with safetensors_torch().safe_open(str(path), framework="pt") as f:
            stored = {name: tuple(f.get_slice(name).get_shape()) for name in f.keys()}
            dtypes = {name: f.get_slice(name).get_dtype() for name in f.keys()}
    except Exception as err:  # safetensors' own error type for a truncated or foreign file
        raise UsageError(
            f"{path} cannot be read ({type(err).__name__}): it is truncated or not a safetensors file"
        ) from None
    if model_config.size.n_layer > len(stored):  # every block has weights: bounds the model built below
        raise UsageError(
            f"{path} holds {len(stored)} tensors, too few for the {model_config.size.n_layer} "
            f"layers its {CONFIG} states"
        )
    with torch.device("meta"):
        expected = GPT(model_config).state_dict(keep_vars=True)
    tied: dict[int, list[str]] = {}
    for name, tensor in expected.items():
        tied.setdefault(id(tensor), []).append(name)
    missing = [names[0] for names in tied.values() if not any(n in stored for n in names)]
    twice = [names[-1] for names in tied.values() if sum(n in stored for n in names) > 1]  # a tied pair
    unexpected = sorted(set(stored) - set(expected)) + twice
    reshaped = [n for n in stored if n in expected and stored[n] != tuple(expected[n].shape)]
    if missing or unexpected or reshaped:
        raise UsageError(
            f"{path} does not match its {CONFIG} (missing {missing[:3]}, unexpected {unexpected[:3]}, "
            f"of another shape {reshaped[:3]}); posenc loads a model only with every weight its config states"
        )
    integer = [
        n for n in stored if isinstance(expected[n], torch.nn.Parameter) and dtypes[n] in INTEGER_DTYPES
    ]
    if integer:
        raise UsageError(
            f"{path} stores the weight {integer[0]} as {dtypes[integer[0]]}, not floating point: it would be "
            "cast and scored; posenc loads a model only with floating-point weights"
        )


def load_export(directory: str | Path) -> tuple[GPT, object, int]:
    """(model, tokenizer, training length) from an export directory."""
    st = safetensors_torch()
    directory = Path(directory)
    with private_export(directory) as (copy, export):  # the weights read are those checked
        model = GPT(export.model_config)
        try:
            st.load_model(model, str(copy / WEIGHTS))
        except Exception as err:  # safetensors' own error type for a truncated or foreign file
            raise UsageError(f"{directory / WEIGHTS} cannot be read ({type(err).__name__})") from None
    return model.eval(), export.tokenizer, export.train_len
