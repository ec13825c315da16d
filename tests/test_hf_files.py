"""`hf:` directories and GGUF files posenc did not write (issue #47): a model whose weights and config
disagree is refused, naming the weights, before it is scored or (where its config claims layers its
files lack) built; a damaged weight file is one line naming it; a config's positional fields are
checked before any work. Tiny models built here: a 1-layer Llama and GPT-2, and a 1-layer Llama GGUF.
"""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

import pytest
import torch

from conftest import assert_refused, invoke
from posenc_cli.core.errors import UsageError
from posenc_cli.model.positional.rope import RoPE

transformers = pytest.importorskip("transformers")
safetensors_torch = pytest.importorskip("safetensors.torch")

Q_PROJ = "model.layers.0.self_attn.q_proj.weight"
HIDDEN, INNER = 16, 32


@pytest.fixture(scope="module")
def tokenizer():
    return passkey_tokenizer()


def passkey_tokenizer():
    """A byte-level BPE trained on the passkey prompt's English, so a trial takes few tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from posenc_cli.data import passkey

    english = " ".join(
        [passkey.NATURAL_INTRO, *passkey.NATURAL_FILLER, passkey.NATURAL_KEY, passkey.NATURAL_QUESTION]
    )
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=["<|endoftext|>"]
    )
    bpe.train_from_iterator([english * 3], trainer)
    return transformers.PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|endoftext|>")


def tiny_model(directory: Path, tokenizer, *, kind: str = "llama", **config) -> Path:
    """A 1-layer `kind` (llama or gpt2) with `config`'s changes, saved with its tokenizer."""
    ids = {"bos_token_id": 0, "eos_token_id": 0, "vocab_size": len(tokenizer)}
    if kind == "gpt2":
        built = transformers.GPT2Config(n_embd=HIDDEN, n_layer=1, n_head=2, **ids, **config)
    else:
        sizes = {"hidden_size": HIDDEN, "intermediate_size": INNER, "num_attention_heads": 2}
        built = transformers.LlamaConfig(num_hidden_layers=1, num_key_value_heads=2, **sizes, **ids, **config)
    torch.manual_seed(0)
    transformers.AutoModelForCausalLM.from_config(built).save_pretrained(directory, **shard_size(config))
    tokenizer.save_pretrained(directory)
    return directory


def shard_size(config: dict) -> dict:
    return {"max_shard_size": config.pop("max_shard_size")} if "max_shard_size" in config else {}


def edit_config(directory: Path, **changes) -> Path:
    config = json.loads((directory / "config.json").read_text())
    for key, value in changes.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    (directory / "config.json").write_text(json.dumps(config))
    return directory


def edit_weights(path: Path, edit) -> None:
    weights = safetensors_torch.load_file(path)
    edit(weights)
    safetensors_torch.save_file(weights, path, metadata={"format": "pt"})


def load(directory: Path, **options):
    from posenc_cli.hf.model_loading import load_hf_model

    return load_hf_model(f"hf:{directory}", **options)


# -- weights and config disagree ---------------------------------------------------------------------


def drop_q_proj(weights: dict) -> None:
    del weights[Q_PROJ]


def add_unused(weights: dict) -> None:
    weights["model.layers.0.self_attn.extra.weight"] = torch.zeros(3)


def reshape_q_proj(weights: dict) -> None:
    weights[Q_PROJ] = torch.zeros(HIDDEN // 2, HIDDEN)


@pytest.mark.parametrize(
    "edit, named",
    [
        (drop_q_proj, f"missing: {Q_PROJ}"),
        (add_unused, "unexpected: model.layers.0.self_attn.extra.weight"),
        (reshape_q_proj, f"of another shape than its config's: {Q_PROJ}"),
    ],
)
@pytest.mark.parametrize("sharded", [False, True])
def test_a_weight_missing_unexpected_or_of_another_shape_is_refused_naming_it(
    tmp_path, tokenizer, edit, named, sharded
):
    """transformers would leave a missing or reshaped weight random and drop an unexpected one, unsaid."""
    model = tiny_model(tmp_path / "m", tokenizer, **({"max_shard_size": "8KB"} if sharded else {}))
    index = model / "model.safetensors.index.json"
    shard = json.loads(index.read_text())["weight_map"][Q_PROJ] if sharded else "model.safetensors"
    edit_weights(model / shard, edit)
    with pytest.raises(UsageError, match=f"weights do not match its config \\({named}\\)"):
        load(model)


def test_tied_embeddings_and_buffers_are_not_missing_or_unexpected_weights(tmp_path, tokenizer):
    """GPT-2's head is its token embedding, a tied Llama's too (neither saved twice); RoPE's inv_freq is
    computed, never saved; and the causal masks older transformers saved beside GPT-2's weights are unused
    buffers, not weights: each loads."""
    for kind, config in (("gpt2", {"n_positions": 64}), ("llama", {"tie_word_embeddings": True})):
        directory = tiny_model(tmp_path / kind, tokenizer, kind=kind, **config)
        assert "lm_head.weight" not in safetensors_torch.load_file(directory / "model.safetensors")
        assert load(directory).model.get_output_embeddings().weight.device.type == "cpu"
    masks = {
        "transformer.h.0.attn.bias": torch.ones(1, 1, 64, 64),
        "transformer.h.0.attn.masked_bias": torch.tensor(-1e4),
    }
    edit_weights(tmp_path / "gpt2" / "model.safetensors", lambda weights: weights.update(masks))
    assert load(tmp_path / "gpt2").model.get_output_embeddings().weight.device.type == "cpu"


def test_a_config_claiming_layers_its_weights_lack_is_refused_before_a_model_is_built(
    tmp_path, tokenizer, monkeypatch
):
    """100,000 layers over one layer's weights built for minutes, then scored random layers; a model
    100,000 wide would not fit in memory: both are refused from the headers, before anything is built."""
    model = tiny_model(tmp_path / "m", tokenizer)
    built = []
    monkeypatch.setattr(transformers.LlamaForCausalLM, "__init__", lambda *a, **k: built.append(a))
    for layers in (2, 100_000):
        edit_config(model, num_hidden_layers=layers)
        with pytest.raises(
            UsageError, match=f"num_hidden_layers {layers:,} but .*model.safetensors holds weights for 1;"
        ):
            load(model)
    assert not built


def test_a_config_wider_than_its_weights_is_refused_before_a_model_is_built(
    tmp_path, tokenizer, fixed_free_memory
):
    model = edit_config(tiny_model(tmp_path / "m", tokenizer), hidden_size=100_000, head_dim=50_000)
    with pytest.raises(
        UsageError, match=r"describes a model of [\d,]+ weights, more than memory holds, but .* holds"
    ):
        load(model)


# -- damaged files ---------------------------------------------------------------------------------


def cut(keep):
    return lambda data: data[:keep] if isinstance(keep, int) else data[: keep(len(data))]


def header_edit(edit):
    """A safetensors file whose JSON header is edited (`edit` changes the dict), its data kept: a dtype
    or __metadata__ safetensors itself refuses with a SafetensorError traceback."""

    def damage(data: bytes) -> bytes:
        length = int.from_bytes(data[:8], "little")
        header = json.loads(data[8 : 8 + length])
        edit(header)
        text = json.dumps(header).encode()
        text += b" " * (-len(text) % 8)
        return len(text).to_bytes(8, "little") + text + data[8 + length :]

    return damage


@pytest.mark.parametrize(
    "damage, why",
    [
        (cut(5), "it has 5 bytes"),
        (cut(500), "its header claims"),
        (cut(lambda n: n // 2), "its tensors need"),
        (cut(lambda n: n - 1), "its tensors need"),
        (lambda data: data + b"\0", "its tensors need"),
        (lambda data: b"x" * len(data), "its header claims"),
        (lambda data: data[:8] + b"[" + data[9:], "its header is not JSON"),
        (
            header_edit(lambda h: h["model.norm.weight"].update(dtype="C64")),
            "model.norm.weight has dtype 'C64'",
        ),
        (
            header_edit(lambda h: h["model.norm.weight"].update(dtype="X9")),
            "model.norm.weight has dtype 'X9'",
        ),
        (
            header_edit(lambda h: h.update(__metadata__={"x": {"y": 1}})),
            "its header.s __metadata__ is not a map of text",
        ),
        (
            header_edit(lambda h: h.update(__metadata__="pt")),
            "its header.s __metadata__ is not a map of text to text",
        ),
    ],
)
def test_a_damaged_safetensors_file_is_one_line_naming_it(tmp_path, tokenizer, damage, why):
    model = tiny_model(tmp_path / "m", tokenizer)
    weights = model / "model.safetensors"
    weights.write_bytes(damage(weights.read_bytes()))
    with pytest.raises(
        UsageError, match=f"{re.escape(str(weights))} is not a complete safetensors file: {why}"
    ):
        load(model)


def test_a_shard_its_index_names_and_that_is_gone_is_one_line(tmp_path, tokenizer):
    model = tiny_model(tmp_path / "m", tokenizer, max_shard_size="8KB")
    shard = json.loads((model / "model.safetensors.index.json").read_text())["weight_map"][Q_PROJ]
    (model / shard).unlink()
    with pytest.raises(UsageError, match=f"names the shard '{shard}', which is not a file beside it"):
        load(model)


def tiny_gguf(path: Path, tokenizer, *, skip: str = "", mkdir: bool = False) -> Path:
    """A 1-layer Llama in GGUF (float32 tensors, the BPE's vocabulary and merges), without `skip`."""
    gguf = pytest.importorskip("gguf")
    import numpy as np

    if mkdir:
        path.parent.mkdir(parents=True)

    model = json.loads(tokenizer.backend_tokenizer.to_str())["model"]
    tokens = [t for t, _ in sorted(model["vocab"].items(), key=lambda item: item[1])]
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(1)
    writer.add_context_length(128)
    writer.add_embedding_length(HIDDEN)
    writer.add_feed_forward_length(INNER)
    writer.add_head_count(2)
    writer.add_head_count_kv(2)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(tokens)
    writer.add_token_types([1] * len(tokens))
    writer.add_token_merges([" ".join(m) if isinstance(m, list) else m for m in model["merges"]])
    writer.add_eos_token_id(0)
    rng = np.random.default_rng(0)
    shapes = {"token_embd": (len(tokens), HIDDEN), "output_norm": (HIDDEN,), "output": (len(tokens), HIDDEN)}
    square = dict.fromkeys(("attn_q", "attn_k", "attn_v", "attn_output"), (HIDDEN, HIDDEN))
    layer = {**square, "ffn_gate": (INNER, HIDDEN), "ffn_up": (INNER, HIDDEN), "ffn_down": (HIDDEN, INNER)}
    shapes |= {f"blk.0.{n}": s for n, s in {**layer, "attn_norm": (HIDDEN,), "ffn_norm": (HIDDEN,)}.items()}
    for name, shape in shapes.items():
        if name != skip:
            writer.add_tensor(f"{name}.weight", rng.standard_normal(shape).astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_a_gguf_file_missing_a_tensor_is_refused_naming_it(tmp_path, tokenizer):
    assert load(tiny_gguf(tmp_path / "whole.gguf", tokenizer)).scheme is RoPE  # the file is complete
    with pytest.raises(UsageError, match=f"weights do not match its config \\(missing: {Q_PROJ}\\)"):
        load(tiny_gguf(tmp_path / "cut.gguf", tokenizer, skip="blk.0.attn_q"))


def tensor_offset(name: str, offset: int):
    """A GGUF file whose tensor `name` says its data starts at `offset` in the data section."""

    def damage(data: bytes) -> bytes:
        key = struct.pack("<Q", len(name)) + name.encode()
        at = data.index(key) + len(key)
        dims = struct.unpack_from("<I", data, at)[0]
        at += 4 + 8 * dims + 4  # the dims, the type
        return data[:at] + struct.pack("<Q", offset) + data[at + 8 :]

    return damage


def with_count(field: int, count: int):
    """A GGUF header whose tensor (field 0) or key-value (field 1) count is `count`."""
    return lambda data: data[: 8 + 8 * field] + struct.pack("<Q", count) + data[16 + 8 * field :]


@pytest.mark.parametrize(
    "damage, why",
    [
        (cut(0), "is not a GGUF file"),
        (cut(24), "is not a complete GGUF file: its header claims"),
        (cut(1000), "is not a complete GGUF file: it is truncated or damaged"),
        (cut(lambda n: n // 2), "is not a complete GGUF file: it is truncated or damaged"),
        (cut(lambda n: n - 5), "is not a complete GGUF file: it is truncated or damaged"),
        (with_count(0, 2**40), "is not a complete GGUF file: its header claims 1,099,511,627,776 tensors"),
        (with_count(1, 2**40), "is not a complete GGUF file: its header claims .* 1,099,511,627,776 keys"),
        (lambda data: b"GGUU" + data[4:], "is not a GGUF file"),
        (lambda data: data[:4] + struct.pack("<I", 99) + data[8:], "is GGUF version 99; those read: 2, 3"),
        (
            tensor_offset("output_norm.weight", 0),  # read from token_embd's bytes: it was scored
            "is not a complete GGUF file: tensor token_embd.weight overlaps the bytes of tensor output_norm",
        ),
        (
            tensor_offset("output_norm.weight", 4),
            "is not a complete GGUF file: tensor output_norm.weight starts at byte 4, off its 32-byte",
        ),
    ],
)
def test_a_damaged_gguf_file_is_one_line_naming_it(tmp_path, tokenizer, damage, why):
    """struct.error, 'cannot reshape array', 'not a valid JSON file' (a tensor count of 2**40) were tracebacks."""
    path = tiny_gguf(tmp_path / "model.gguf", tokenizer)
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(UsageError, match=f"{re.escape(str(path))} {why}"):
        load(path)


# -- positional fields of a config ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "changes, key, allowed",
    [
        (
            {"rope_parameters": {"rope_type": "linear", "factor": "abc", "rope_theta": 1e4}},
            "rope_parameters.factor",
            ">= 1",
        ),
        (
            {"rope_parameters": None, "rope_scaling": {"rope_type": "linear", "factor": "abc"}},
            "rope_scaling.factor",
            ">= 1",
        ),
        (
            {"rope_parameters": {"rope_type": "linear", "factor": 0.5, "rope_theta": 1e4}},
            "rope_parameters.factor",
            ">= 1",
        ),
        (
            {"rope_parameters": {"rope_type": "default", "rope_theta": -5}},
            "rope_parameters.rope_theta",
            "> 0",
        ),
        ({"rope_parameters": None, "rope_theta": float("inf")}, "rope_theta", "finite"),
        (
            {"rope_parameters": {"rope_type": "yarm", "factor": 2.0, "rope_theta": 1e4}},
            "rope_parameters.rope_type",
            "linear",
        ),
        ({"max_position_embeddings": -3}, "max_position_embeddings", "positive integer"),
        ({"partial_rotary_factor": 3}, "partial_rotary_factor", "> 0 and <= 1"),
        ({"head_dim": 0}, "head_dim", "positive integer"),
    ],
)
def test_a_config_positional_field_out_of_range_is_refused_naming_file_and_key(
    tmp_path, tokenizer, changes, key, allowed
):
    """rope_parameters.factor "abc" was a TypeError; rope_theta -5 ran a whole evaluation to NaN, then failed
    drawing it on a log axis."""
    model = edit_config(tiny_model(tmp_path / "m", tokenizer), **changes)
    with pytest.raises(UsageError, match=rf"^{re.escape(str(model / 'config.json'))}: {key} .*{allowed}"):
        load(model)


def test_a_refused_hf_model_is_one_line_before_any_work_and_writes_nothing(tmp_path, tokenizer):
    text = tmp_path / "text.txt"
    text.write_text("the grass is green. " * 100)
    model = edit_config(
        tiny_model(tmp_path / "m", tokenizer), rope_parameters={"rope_type": "default", "rope_theta": -5}
    )
    refused = invoke(
        "eval", f"hf:{model}", "--data", str(text), "--lengths", "64", "--out", str(tmp_path / "ev")
    )
    assert_refused(
        refused.code, refused.stderr, "config.json: rope_parameters.rope_theta must be a finite number > 0"
    )
    weights = tiny_model(tmp_path / "w", tokenizer) / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    refused = invoke("probe", f"hf:{weights.parent}", "--lengths", "64", "--out", str(tmp_path / "pr"))
    assert_refused(refused.code, refused.stderr, f"{weights} is not a complete safetensors file")
    assert not (tmp_path / "ev").exists() and not (tmp_path / "pr").exists()


def test_a_model_that_is_not_a_posenc_export_is_loaded_with_trust_remote_code_false(
    tmp_path, tokenizer, monkeypatch
):
    """Said, not left out: without an explicit False transformers asks on a terminal whether to run a
    repository's code (a hub id's); posenc's answer is no for its config, tokenizer and model alike."""
    from posenc_cli.hf import model_loading as hf_loading

    asked = []
    real = hf_loading.load_pretrained

    def recording(loader, source, name, **kwargs):
        asked.append(kwargs.get("trust_remote_code", "unsaid"))
        return real(loader, source, name, **kwargs)

    monkeypatch.setattr(hf_loading, "load_pretrained", recording)
    load(tiny_model(tmp_path / "m", tokenizer))
    assert len(asked) >= 3 and set(asked) == {False}


def byte_tokenizer():
    """A tokenizer of single bytes only (no merges): another count of tokens than the GGUF's BPE."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    bpe = Tokenizer(models.BPE({c: i for i, c in enumerate(sorted(alphabet))}, []))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=bpe)


def test_a_gguf_file_is_scored_with_its_own_tokenizer_never_one_beside_it(tmp_path, tokenizer):
    """transformers prefers a tokenizer.json (or tokenizer_config.json, config.json) in a GGUF file's
    directory to the tokenizer the file carries: scored with a stranger's tokens, unsaid. posenc loads
    the file alone, from a private directory."""
    text = " ".join(["the grass is green and the sky is blue"] * 20)
    alone = load(tiny_gguf(tmp_path / "alone" / "model.gguf", tokenizer, mkdir=True))
    count = len(alone.eval_tokens(text)[0])
    beside = tiny_gguf(tmp_path / "beside" / "model.gguf", tokenizer, mkdir=True)
    byte_tokenizer().save_pretrained(beside.parent)  # tokenizer.json, tokenizer_config.json
    assert len(byte_tokenizer()(text)["input_ids"]) != count  # the stranger's count differs
    loaded = load(beside)
    assert len(loaded.eval_tokens(text)[0]) == count
    # the table and results.json name the file, not the private directory it was loaded from
    assert loaded.tokenizer_name == f"hf:{beside}" and loaded.config._name_or_path == str(beside)


def test_a_weight_stored_as_integers_is_refused_naming_it_and_an_integer_buffer_is_not(tmp_path, tokenizer):
    """An int64 q_proj was cast to floats and scored; GPT-2's causal mask is a buffer, not a weight."""
    model = tiny_model(tmp_path / "m", tokenizer)
    edit_weights(model / "model.safetensors", lambda w: w.update({Q_PROJ: w[Q_PROJ].to(torch.int64)}))
    with pytest.raises(UsageError, match=f"stores the weight {Q_PROJ} as I64, not floating point"):
        load(model)
    gpt2 = tiny_model(tmp_path / "g", tokenizer, kind="gpt2")
    mask = torch.ones(1, 1, 128, 128, dtype=torch.uint8)
    edit_weights(gpt2 / "model.safetensors", lambda w: w.update({"transformer.h.0.attn.bias": mask}))
    load(gpt2)


def test_a_tokenizer_whose_ids_reach_past_the_models_vocabulary_is_refused_before_any_work(
    tmp_path, tokenizer
):
    """An added token past the embedding's rows was an IndexError midway through eval and sample."""
    model = tiny_model(tmp_path / "m", tokenizer)
    wider = passkey_tokenizer()
    wider.add_tokens(["dog", "fox"])
    wider.save_pretrained(model)
    with pytest.raises(
        UsageError, match=f"tokenizer gives ids up to {len(tokenizer) + 1} .*past its model's"
    ):
        load(model)


def test_a_home_directory_of_no_user_is_one_line(tmp_path):
    """`hf:~nosuchuser/x`: pathlib's RuntimeError was a traceback."""
    with pytest.raises(UsageError, match="~no-such-user-of-posenc names no user's home directory"):
        load("~no-such-user-of-posenc/x")
