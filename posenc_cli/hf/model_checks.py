"""What posenc checks of an `hf:` model before transformers reads it, and after: files posenc did not
write are trusted for nothing.

Before: each weight file's header (a safetensors file's length, JSON, dtypes, metadata and data offsets;
a GGUF file's magic, version, counts and tensor extents, aligned, inside its data and apart) is read and
bounded by the file's size, so a damaged file is one line naming it rather than a traceback from deep
inside a reader, or weights read from another tensor's bytes; a weight stored as integers is refused
(transformers would cast it to floats and score it); the config's positional fields
are checked (a bad rope_theta would run a whole evaluation to NaN); and the config's layer count is
checked against the layers the weights hold, so a config claiming 100,000 layers is refused before a
model of that size is built. After: transformers' own report of missing, unexpected and mismatched
weights, any of which would leave random numbers in the model, refuses it.
"""

from __future__ import annotations

import json
import math
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from posenc_cli.core.errors import UsageError, require_number, require_positive_int
from posenc_cli.hf.model_files import json_value

CONTEXT_KEYS = ("n_positions", "max_position_embeddings", "max_seq_len", "seq_length", "n_ctx")
GGUF_SUFFIX = ".gguf"
SAFETENSORS = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
SAFETENSORS_HEADER_CAP = 100_000_000  # the safetensors library's own limit on a header's bytes
DTYPE_BYTES = {  # the dtypes a safetensors header may name, each element's bytes
    **dict.fromkeys(("BOOL", "U8", "I8", "F8_E4M3", "F8_E5M2", "F8_E8M0"), 1),
    **dict.fromkeys(("U16", "I16", "F16", "BF16"), 2),
    **dict.fromkeys(("U32", "I32", "F32"), 4),
    **dict.fromkeys(("U64", "I64", "F64"), 8),
}
# stored types that are not floating point (safetensors' names, and GGUF's own I8 to I64)
INTEGER_DTYPES = ("BOOL", "U8", "I8", "U16", "I16", "U32", "I32", "U64", "I64")
GGUF_MAGIC = b"GGUF"
GGUF_VERSIONS = (2, 3)  # those transformers' reader (the gguf package) reads
GGUF_HEADER = struct.Struct("<4sIQQ")  # magic, version, tensor count, key-value count
GGUF_MIN_TENSOR = 8 + 1 + 4 + 8 + 4 + 8  # name length and a byte of it, dims, one dim, type, offset
GGUF_MIN_KV = 8 + 1 + 4 + 1  # key length and a byte of it, value type, a byte of value
LAYER_INDEX = re.compile(r"\.(\d+)\.")  # model.layers.3.mlp…, transformer.h.3.attn…, blk.3.attn_q…
# buffers older transformers saved with the weights (causal masks, rotary frequencies, position ids), which
# the model computes or no longer uses: a stored one is no weight, and unused says nothing about the others
STALE_BUFFERS = re.compile(
    r"(^|\.)(attn|attention)\.(masked_)?bias$|rotary_emb\.inv_freq$|(^|\.)position_ids$"
)
ROPE_FACTORS = ("attention_factor", "beta_fast", "beta_slow", "low_freq_factor", "high_freq_factor")
SCALED_ROPE_TYPES = ("linear", "dynamic", "yarn", "llama3")  # those whose factor is required


def first_line(err: BaseException) -> str:
    return " ".join(str(err).split("\n")[0].split())[:200]


@dataclass(frozen=True)
class Weights:
    """What a model's weight files hold, read from their headers alone: element counts by tensor name."""

    where: str  # the file, or the index naming the shards, as a message names it
    sizes: dict[str, int]
    dtypes: dict[str, str]  # each tensor's stored type: safetensors' name (F32, I64) or GGUF's (F32, Q4_0)

    @property
    def layers(self) -> int:
        """Layers the weights hold: distinct first numeric components of the tensors' names."""
        return len({m.group(1) for m in map(LAYER_INDEX.search, self.sizes) if m})

    @property
    def elements(self) -> int:
        return sum(self.sizes.values())


def local_weights(source: Path) -> Weights | None:
    """A local GGUF file's or directory's weights, each file's header checked; None where posenc cannot
    read them cheaply (a hub id, pickled weights): transformers' loading report still covers those."""
    if source.suffix == GGUF_SUFFIX and source.is_file():
        return Weights(str(source), *gguf_tensors(source))
    if not source.is_dir():
        return None
    if (source / SAFETENSORS_INDEX).is_file():
        sizes, dtypes = {}, {}
        for shard in index_shards(source / SAFETENSORS_INDEX):
            shard_sizes, shard_dtypes = safetensors_tensors(shard)
            sizes, dtypes = sizes | shard_sizes, dtypes | shard_dtypes
        return Weights(str(source / SAFETENSORS_INDEX), sizes, dtypes)
    if (source / SAFETENSORS).is_file():
        return Weights(str(source / SAFETENSORS), *safetensors_tensors(source / SAFETENSORS))
    return None


def index_shards(index: Path) -> list[Path]:
    """The shard files a model.safetensors.index.json names, each present beside it."""
    try:
        weight_map = json_value(index)["weight_map"]
        names = sorted(set(weight_map.values()))
    except (ValueError, KeyError, TypeError, AttributeError):
        raise UsageError(
            f"{index} is not a safetensors index (JSON with a weight_map of tensor -> file)"
        ) from None
    for name in names:
        shard = index.parent / str(name)
        if Path(str(name)).name != str(name) or not shard.is_file():
            raise UsageError(f"{index} names the shard {name!r}, which is not a file beside it")
    return [index.parent / name for name in names]


def damaged(path: Path, kind: str, why: str) -> UsageError:
    return UsageError(f"{path} is not a complete {kind} file: {why}; replace it with a complete copy")


def safetensors_tensors(path: Path) -> tuple[dict[str, int], dict[str, str]]:
    """(element counts, stored dtypes) by tensor name from a safetensors header, its length, JSON,
    metadata, dtypes and offsets checked against the file's size as the safetensors library checks them
    before it reads."""
    header, data = safetensors_header(path)
    sizes, dtypes, spans = {}, {}, []
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            begin, end = (int(x) for x in entry["data_offsets"])
            sizes[name] = math.prod(int(d) for d in entry["shape"])
            dtypes[name], width = entry["dtype"], DTYPE_BYTES.get(entry["dtype"])
        except (KeyError, TypeError, ValueError):
            raise damaged(path, "safetensors", f"its header's entry {name!r} is not a tensor") from None
        if width is None:
            known = ", ".join(DTYPE_BYTES)
            raise damaged(path, "safetensors", f"{name} has dtype {entry['dtype']!r}, not one of {known}")
        if end - begin != sizes[name] * width:
            raise damaged(path, "safetensors", f"{name} takes {end - begin:,} bytes, not those of its shape")
        spans.append((begin, end))
    check_metadata(path, header.get("__metadata__", {}))
    covered = 0
    for begin, end in sorted(spans):
        if begin != covered:
            raise damaged(path, "safetensors", f"its tensors' data does not follow on at byte {covered:,}")
        covered = end
    if covered != data:
        raise damaged(path, "safetensors", f"its tensors need {covered:,} bytes of data and it has {data:,}")
    return sizes, dtypes


def check_metadata(path: Path, metadata: Any) -> None:
    """A header's __metadata__ is a map of text to text (the safetensors format's rule)."""
    if not isinstance(metadata, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
    ):
        raise damaged(path, "safetensors", "its header's __metadata__ is not a map of text to text")


def safetensors_header(path: Path) -> tuple[dict, int]:
    """(a safetensors file's header, the bytes of data after it), the header's length within the file."""
    size = path.stat().st_size
    with path.open("rb") as f:
        if size < 8:
            raise damaged(path, "safetensors", f"it has {size} bytes, fewer than a header's length takes")
        length = int.from_bytes(f.read(8), "little")
        if length > min(size - 8, SAFETENSORS_HEADER_CAP):
            raise damaged(path, "safetensors", f"its header claims {length:,} bytes of a {size:,}-byte file")
        try:
            header = json.loads(f.read(length))
        except ValueError:
            raise damaged(path, "safetensors", "its header is not JSON") from None
    if not isinstance(header, dict):
        raise damaged(path, "safetensors", "its header is not a JSON object")
    return header, size - 8 - length


def gguf_tensors(path: Path) -> tuple[dict[str, int], dict[str, str]]:
    """(element counts, stored types) by tensor name from a GGUF file: its header bounded by the file's
    size, then the gguf package's reader (transformers' own), whose failures on a cut file are named
    here, and each tensor's extent (gguf_extents)."""
    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(GGUF_HEADER.size)
    if len(head) < GGUF_HEADER.size or head[:4] != GGUF_MAGIC:
        raise UsageError(f"{path} is not a GGUF file (it does not start with a GGUF header)")
    _, version, tensors, kvs = GGUF_HEADER.unpack(head)
    if version not in GGUF_VERSIONS:
        raise UsageError(
            f"{path} is GGUF version {version}; those read: {', '.join(map(str, GGUF_VERSIONS))}"
        )
    if tensors * GGUF_MIN_TENSOR + kvs * GGUF_MIN_KV > size - GGUF_HEADER.size:
        raise damaged(
            path, "GGUF", f"its header claims {tensors:,} tensors and {kvs:,} keys in {size:,} bytes"
        )
    try:
        import gguf
    except ImportError:  # transformers cannot read it either, and says how to install it
        return {}, {}
    try:
        reader = gguf.GGUFReader(path)
    except (ValueError, IndexError, KeyError, OverflowError, struct.error) as err:
        raise damaged(path, "GGUF", f"it is truncated or damaged ({first_line(err)})") from None
    check_gguf_extents(path, reader, data=size - reader.data_offset)
    return {str(t.name): int(t.n_elements) for t in reader.tensors}, {
        str(t.name): t.tensor_type.name for t in reader.tensors
    }


def check_gguf_extents(path: Path, reader, *, data: int) -> None:
    """Each tensor's bytes (its offset in the data section, and the size its type and dims give) start
    on the file's alignment, end inside the data section, and overlap no other tensor's: the reader
    would read a tensor from another's bytes (an offset of 0) and transformers score it."""
    extents = []
    for tensor in reader.tensors:
        begin = int(tensor.data_offset) - int(reader.data_offset)
        end, name = begin + int(tensor.n_bytes), str(tensor.name)
        if begin % reader.alignment:
            raise damaged(
                path,
                "GGUF",
                f"tensor {name} starts at byte {begin:,}, off its {reader.alignment}-byte alignment",
            )
        if begin < 0 or end > data:
            raise damaged(
                path,
                "GGUF",
                f"tensor {name} takes bytes {begin:,} to {end:,} of a {data:,}-byte data section",
            )
        extents.append((begin, end, name))
    extents.sort()
    for (_, end, before), (begin, _, name) in zip(extents, extents[1:]):
        if begin < end:
            raise damaged(path, "GGUF", f"tensor {name} overlaps the bytes of tensor {before}")


def check_layers(config, weights: Weights, name: str) -> None:
    """A config claiming more layers than the weights hold would build (for minutes) a model whose extra
    layers are random: refused before it is built."""
    layers = getattr(config, "num_hidden_layers", None)
    if layers is None or not weights.sizes:
        return
    require_positive_int(f"{name}'s num_hidden_layers", layers)
    if layers > weights.layers:
        raise UsageError(
            f"{name}'s config has num_hidden_layers {layers:,} but {weights.where} holds weights for "
            f"{weights.layers:,}; a layer without weights would be random: give a config that matches its weights"
        )


def check_floating(weights: Weights, buffers: set[str]) -> None:
    """Every weight stored as floats: transformers would cast one stored as integers (an int64 q_proj) to
    floats and score it. A buffer the model keeps (`buffers`, by the model's names, which a checkpoint
    may prefix or not) or once kept (STALE_BUFFERS: causal masks, position ids) may be integers."""
    for tensor, dtype in sorted(weights.dtypes.items()):
        kept = any(b == tensor or b.endswith(f".{tensor}") or tensor.endswith(f".{b}") for b in buffers)
        if dtype in INTEGER_DTYPES and not kept and not STALE_BUFFERS.search(tensor):
            raise UsageError(
                f"{weights.where} stores the weight {tensor} as {dtype}, not floating point: it would be "
                "cast and scored; posenc loads a model only with floating-point weights"
            )


def check_vocabulary(tokenizer, rows: int, name: str) -> None:
    """The tokenizer's largest id has a row in the model's input embedding (`rows`): an added token past
    it would be an IndexError midway through an eval or a sample."""
    largest = max(tokenizer.get_vocab().values(), default=-1)
    if largest >= rows:
        token = next(t for t, i in tokenizer.get_vocab().items() if i == largest)
        raise UsageError(
            f"{name}'s tokenizer gives ids up to {largest} ({token!r}), past its model's {rows:,} embedding "
            "rows: give the tokenizer the model was trained with"
        )


def check_loading_info(info: dict, name: str) -> None:
    """transformers' loading report: any weight missing (left random), unexpected (not used) or of
    another shape (replaced by a random one) refuses the model, naming a few of them."""
    problems = {
        "missing": sorted(info.get("missing_keys") or []),
        "unexpected": sorted(k for k in info.get("unexpected_keys") or [] if not STALE_BUFFERS.search(k)),
        "of another shape than its config's": sorted(str(k[0]) for k in info.get("mismatched_keys") or []),
    }
    said = [f"{kind}: {named(keys)}" for kind, keys in problems.items() if keys]
    if said:
        raise UsageError(
            f"{name}'s weights do not match its config ({'; '.join(said)}); its numbers would be those of "
            "random weights: give a model whose weights and config agree"
        )


def named(keys: list[str], shown: int = 3) -> str:
    more = f" and {len(keys) - shown:,} more" if len(keys) > shown else ""
    return ", ".join(keys[:shown]) + more


def check_positional_config(config, where: str, raw: dict) -> None:
    """The fields that place positions, checked before any work: a context length is a positive
    integer, rope_theta finite and > 0, a RoPE scaling a type transformers knows with a factor >= 1,
    partial_rotary_factor in (0, 1]. `raw`: the config file as written, to name its keys as written."""
    for key in (*CONTEXT_KEYS, "head_dim", "num_attention_heads", "hidden_size"):
        if getattr(config, key, None) is not None:
            require_positive_int(f"{where}: {key}", getattr(config, key))
    for key in ("partial_rotary_factor", "rotary_pct"):
        if getattr(config, key, None) is not None:
            require_number(f"{where}: {key}", getattr(config, key), above=0, at_most=1)
    if getattr(config, "rope_theta", None) is not None:
        require_number(f"{where}: rope_theta", config.rope_theta, above=0)
    rope = getattr(config, "rope_parameters", None)
    if not isinstance(rope, dict):
        return
    nested = rope and all(isinstance(v, dict) for v in rope.values())  # one set per layer type
    for section, params in rope.items() if nested else [("", rope)]:
        check_rope_parameters(params, where=where, raw=raw, section=section)


def check_rope_parameters(params: dict[str, Any], *, where: str, raw: dict, section: str = "") -> None:
    """One set of rope_parameters (transformers' name; older configs' rope_scaling and rope_theta)."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    def key(field: str) -> str:
        return f"{where}: {written_key(raw, '.'.join(filter(None, [section, field])))}"

    rope_type = params.get("rope_type", params.get("type", "default"))
    known = ["default", *sorted(ROPE_INIT_FUNCTIONS)]
    if rope_type not in known:
        raise UsageError(
            f"{key('rope_type')} is {rope_type!r}, not a RoPE type transformers knows: {', '.join(known)}"
        )
    if params.get("rope_theta") is not None:
        require_number(key("rope_theta"), params["rope_theta"], above=0)
    if "factor" in params or rope_type in SCALED_ROPE_TYPES:
        require_number(key("factor"), params.get("factor"), at_least=1)
    if params.get("original_max_position_embeddings") is not None:
        require_positive_int(
            key("original_max_position_embeddings"), params["original_max_position_embeddings"]
        )
    if params.get("partial_rotary_factor") is not None:
        require_number(key("partial_rotary_factor"), params["partial_rotary_factor"], above=0, at_most=1)
    for field in ROPE_FACTORS:
        if params.get(field) is not None:
            require_number(key(field), params[field], above=0)


def written_key(raw: dict, field: str) -> str:
    """A rope field as the config file wrote it: rope_parameters.F, rope_scaling.F, or F at the top."""
    leaf = field.rpartition(".")[2]
    for section in ("rope_parameters", "rope_scaling"):
        if isinstance(raw.get(section), dict) and field.partition(".")[0] in raw[section]:
            return f"{section}.{field}"
    return leaf if leaf in raw and field == leaf else f"rope_parameters.{field}"
