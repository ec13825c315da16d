"""Loading a pretrained causal LM for `hf:ID_OR_PATH`: a local directory, a local GGUF file (`hf:FILE.gguf`,
through transformers' gguf_file=, with the tokenizer the file carries and its weights dequantized to
--dtype), or the hub where it is reachable; its training length from its config; `--device-map auto`
spreads it with accelerate; every failure one line. A posenc export is loaded from a private copy of
the bytes posenc verified (export_loading.private_export), and a GGUF file from a private directory
holding it alone (model_files.gguf_alone): transformers reads nothing posenc did not check, and nothing
beside."""

from __future__ import annotations

import pickle
import socket
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator
from urllib.parse import urlparse

import torch

from posenc_cli.core.errors import UsageError
from posenc_cli.core.install import install_hint
from posenc_cli.hf.export_loading import (
    VerifiedExport,
    is_export,
    private_export,
    refuse_foreign_code,
)
from posenc_cli.hf.export_target import ExportModel
from posenc_cli.hf.loading_options import hf_options
from posenc_cli.hf.memory import check_weights_fit
from posenc_cli.hf.model_checks import (
    CONTEXT_KEYS,
    GGUF_SUFFIX,
    Weights,
    check_floating,
    check_layers,
    check_loading_info,
    check_positional_config,
    check_vocabulary,
    first_line,
    local_weights,
)
from posenc_cli.hf.model_files import gguf_alone, json_value, local_path
from posenc_cli.hf.models import (
    MODEL_TYPE_SCHEMES,
    PREFIX,
    HFModel,
    learned_table,
    model_scheme,
    transformers_module,
)

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}  # --dtype's names (core.choices.HF_DTYPES)

# Configs that state no context: BLOOM was trained on 2,048-token sequences (BigScience 2022, §3.3)
KNOWN_CONTEXT = {"bloom": 2048}


NETWORK_TIMEOUT_S = 3.0


def hub_reachable() -> bool:
    """Whether the hub's host answers within a few seconds (no network here means no hub)."""
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return False
    host = urlparse(constants.ENDPOINT).hostname or "huggingface.co"
    try:
        socket.create_connection((host, 443), timeout=NETWORK_TIMEOUT_S).close()
        return True
    except OSError:
        return False


def load_pretrained(loader, source: str, name: str, **kwargs):
    """`loader.from_pretrained` from a local GGUF file, a local directory, the local cache, or the hub,
    in that order; never waits on a network that is not there."""
    local = Path(source).expanduser()
    if local.suffix == GGUF_SUFFIX:
        if not local.is_file():
            raise UsageError(f"{name}: {local} is not a file; give the path of a .gguf file")
        return loader.from_pretrained(
            str(local.parent), gguf_file=local.name, local_files_only=True, **kwargs
        )
    if local.is_dir():
        return loader.from_pretrained(str(Path(source).expanduser()), local_files_only=True, **kwargs)
    try:
        return loader.from_pretrained(source, local_files_only=True, **kwargs)
    except OSError:
        if not hub_reachable():
            raise UsageError(
                f"{name} is neither a local directory nor in the Hugging Face cache, and the hub cannot be "
                "reached (no network, or HF_HUB_OFFLINE=1); give a local model directory"
            ) from None
    return loader.from_pretrained(source, **kwargs)


def gguf_architectures() -> list[str]:
    """The architectures transformers can read from a GGUF file (its GGUF_CONFIG_MAPPING, less metadata)."""
    from transformers.integrations.ggml import GGUF_CONFIG_MAPPING

    return sorted(set(GGUF_CONFIG_MAPPING) - {"general", "tokenizer"})


def load_config(tf, source: str, name: str, **kwargs):
    """The model's config; a GGUF architecture transformers cannot read is one line naming those it can."""
    try:
        return load_pretrained(tf.AutoConfig, source, name, **kwargs)
    except UsageError:
        raise
    except ImportError as err:  # a GGUF file without the gguf package
        raise UsageError(f"{name} cannot be loaded: {first_line(err)}; {install_hint('hf')}") from None
    except (OSError, ValueError, KeyError) as err:
        if source.endswith(GGUF_SUFFIX) and "not supported" in str(err):
            raise UsageError(
                f"{name} cannot be loaded: its GGUF architecture is not one transformers reads from GGUF "
                f"({first_line(err)}); those it reads: {', '.join(gguf_architectures())}"
            ) from None
        raise UsageError(f"{name} cannot be loaded: {first_line(err)}") from None


@dataclass(frozen=True)
class ModelFiles:
    """Where transformers loads an `hf:` model from, and what posenc verified of it there."""

    source: str  # as transformers takes it: a hub id, a directory, a GGUF file (a private copy or link)
    shown: str  # where it is as the user named it, for messages
    export: VerifiedExport | None = None  # a posenc export, verified in the private copy `source` is


@contextmanager
def model_files(source: str) -> Iterator[ModelFiles]:
    """Where transformers reads `source` from while the model loads: a posenc export's private copy of
    the bytes posenc verified, a GGUF file alone in a private directory, or the source as given."""
    local = local_path(source)
    if is_export(local, in_a_run=True):
        with private_export(local) as (copy, verified):
            yield ModelFiles(str(copy), str(local), verified)
    elif local.suffix == GGUF_SUFFIX and local.is_file():
        with gguf_alone(local) as alone:
            yield ModelFiles(str(alone), str(local))
    else:
        yield ModelFiles(str(local) if local.is_dir() else source, str(local))


def load_hf_model(
    name: str,
    *,
    context: int | None = None,
    device: torch.device | str = "cpu",
    dtype: str = "fp32",
    device_map: str | None = None,
) -> HFModel:
    """`hf:ID_OR_PATH` -> HFModel; every way it can fail is one line."""
    options = hf_options(context, device, dtype, device_map=device_map)  # the CLI's and the API's one check
    tf = transformers_module()
    source = name[len(PREFIX) :]
    if not source:
        raise UsageError(
            f"{name!r} names no model; give hf:ID (a hub id such as gpt2) or hf:PATH (a local directory)"
        )
    refuse_foreign_code(source)  # before transformers reads a file: no code but a posenc export's own
    with model_files(source) as files:
        return loaded_model(tf, files, name, **options)


def loaded_model(
    tf, files: ModelFiles, name: str, *, context: int | None, device, dtype: str, device_map: str | None
) -> HFModel:
    """The model in `files`, checked before transformers builds it and after it loads."""
    export, source = files.export is not None, files.source
    # posenc's own code, in an export private_export vouches for; every other model is told never to run
    # code (a hub id's too: without the explicit False, transformers asks on a terminal whether to run it)
    trusted = {"trust_remote_code": export}
    # a damaged file is named before transformers reads it (an export's weights: by private_export)
    weights = None if export else local_weights(local_path(files.shown))
    config = load_config(tf, source, name, **trusted)
    check_positional_config(config, *written_config(files, name))
    model_class = None if export else causal_lm_class(tf, config, name)
    train_len = checked_context(config, context, name)
    if not export:  # an export's weights are verified name by name against its config (verified_export)
        check_weights(tf, config, weights, name=name, dtype=dtype, devices=None if device_map else [device])
    attention = "sdpa" if getattr(model_class, "_supports_sdpa", False) else "eager"
    placement = {"dtype": DTYPES[dtype], "attn_implementation": attention, **trusted}
    if source.endswith(GGUF_SUFFIX):  # dense weights in --dtype, whatever kernels are installed
        placement["quantization_config"] = tf.GgufConfig(dequantize=True)
    if device_map is not None:
        placement["device_map"] = device_map
    tokenizer, model = load_weights(tf, source, name, config=config, placement=placement, checked=not export)
    check_tokenizer(tokenizer, name)
    check_vocabulary(tokenizer, model.get_input_embeddings().weight.shape[0], name)
    if source != files.shown:  # a private copy or link: results.json names the model where the user did
        model.config._name_or_path = files.shown
    return (ExportModel if export else HFModel)(
        name,
        model.eval(),
        tokenizer,
        train_len=int(train_len),
        real_context=int(training_length(config) or train_len),
        attention=attention,
        device=torch.device(device),
        mapped=device_map is not None,
        trained_text=files.export.trained_text if export else None,
    )


def causal_lm_class(tf, config, name: str):
    """The transformers class of the model's causal LM, refused when posenc does not know its scheme."""
    model_class = tf.models.auto.modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING.get(type(config), None)
    if model_class is None:
        raise UsageError(
            f"{name} is a {config.model_type} model, not a causal LM; posenc evaluates causal LMs "
            f"({', '.join(sorted(MODEL_TYPE_SCHEMES))})"
        )
    if model_scheme(config) is None:
        raise UsageError(
            f"{name} is a {config.model_type} model, whose positional scheme posenc does not know; "
            f"known: {', '.join(sorted(MODEL_TYPE_SCHEMES))}"
        )
    return model_class


def checked_context(config, context: int | None, name: str) -> int:
    """The training length: --hf-context, else the config's; never past a learned table's end."""
    train_len = context or training_length(config)
    if not train_len:
        raise UsageError(f"{name}'s config states no context length; give it with --hf-context N")
    table = training_length(config)
    if learned_table(model_scheme(config)) and table and train_len > table:
        raise UsageError(
            f"--hf-context {train_len} is past {name}'s table of {table} learned positions, which it cannot "
            f"be scored beyond; give --hf-context <= {table}"
        )
    return train_len


def written_config(files: ModelFiles, name: str) -> tuple[str, dict]:
    """(where the config is, as a message names it; its JSON as written, {} where posenc does not read it)."""
    local = Path(files.source)
    if local.suffix == GGUF_SUFFIX:
        return files.shown, {}
    if not local.is_dir():
        return f"{name}'s config.json", {}
    written = json_value(local / "config.json")  # transformers read it already
    return str(Path(files.shown) / "config.json"), written if isinstance(written, dict) else {}


def check_weights(
    tf, config, weights: Weights | None, *, name: str, dtype: str, devices: list | None
) -> None:
    """Before the model is built: the config's layers are those its weight files hold, and the model it
    describes (counted on the meta device, where building costs nothing) fits in memory (`devices`: where
    it is loaded and run; None: accelerate places it), and every weight is stored as floats (one stored as
    integers would be cast and scored). transformers' report names any other mismatch."""
    if weights is None or not weights.sizes:  # a hub id, pickled weights: transformers' report only
        return
    check_layers(config, weights, name)
    try:
        with torch.device("meta"):
            model = tf.AutoModelForCausalLM.from_config(config)
    except (ValueError, TypeError, KeyError, AttributeError, RuntimeError) as err:
        raise UsageError(
            f"{name}'s config describes no model transformers can build: {first_line(err)}"
        ) from None
    check_floating(weights, {buffer for buffer, _ in model.named_buffers()})
    elements = sum(p.numel() for p in model.parameters())
    cpu = torch.device("cpu")  # transformers loads it there, then it moves to its device
    places = [] if devices is None else [cpu, *map(torch.device, devices)]
    try:
        check_weights_fit(config, elements, element=DTYPES[dtype].itemsize, devices=places, name=name)
    except UsageError:
        if elements <= weights.elements:
            raise
        raise UsageError(
            f"{name}'s config describes a model of {elements:,} weights, more than memory holds, but "
            f"{weights.where} holds {weights.elements:,}: give a config that matches its weights"
        ) from None


def load_weights(tf, source: str, name: str, *, config, placement: dict, checked: bool = True):
    """(tokenizer, model), the model loaded with `placement` (dtype, attention, device map); weights that
    are more than plain tensors are refused, never run. `checked`: transformers' report of missing,
    unexpected and mismatched weights refuses a model with any (an export's are verified beforehand)."""
    report = {"output_loading_info": True, "ignore_mismatched_sizes": True} if checked else {}
    try:
        trusted = {k: v for k, v in placement.items() if k == "trust_remote_code"}  # the tokenizer too
        tokenizer = load_pretrained(tf.AutoTokenizer, source, name, **trusted)  # config names its code
        model = load_pretrained(tf.AutoModelForCausalLM, source, name, config=config, **placement, **report)
    except UsageError:
        raise
    except pickle.UnpicklingError:  # torch's weights-only loader refused it: its code never ran
        raise UsageError(
            f"{name} cannot be loaded: its pickled weights (pytorch_model.bin) hold more than plain tensors, "
            "and posenc loads only plain tensors (nothing in the file was run); use a copy saved as "
            "model.safetensors"
        ) from None
    except (OSError, ValueError, KeyError, RuntimeError, ImportError) as err:  # ImportError: gguf, accelerate
        raise UsageError(f"{name} cannot be loaded: {first_line(err)}") from None
    if checked:
        model, info = model
        check_loading_info(info, name)
    return tokenizer, model


def check_tokenizer(tokenizer, name: str) -> None:
    """A real, fast tokenizer: posenc scores a model in its own tokens and counts bytes per token."""
    if len(tokenizer) <= len(set(tokenizer.all_special_ids)):  # transformers makes an empty one
        raise UsageError(
            f"{name} has no tokenizer (tokenizer.json, or vocabulary files, beside its config.json); "
            "posenc scores a model in its own tokenizer, so add the one it was trained with"
        )
    if not getattr(tokenizer, "is_fast", False):
        raise UsageError(
            f"{name} has no fast tokenizer (tokenizer.json), which posenc needs to count bytes per token"
        )


def training_length(config) -> int | None:
    """The model's configured context: the first of CONTEXT_KEYS it sets, else what is known."""
    for key in CONTEXT_KEYS:
        value = getattr(config, key, None)
        if isinstance(value, int) and value > 0:
            return value
    return KNOWN_CONTEXT.get(config.model_type)
