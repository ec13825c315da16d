"""Training-free context extension in transformers' models (hf/extended_attention.py) and in posenc
exports: within a method's window a model scores as it does plain; past it, each layer's attention is
the paper's, computed here from the model's own unrotated queries and keys, pair by pair; a model the
methods do not fit is refused in one line or, without RoPE, scored once. Tiny models built here: a
2-layer grouped-query Llama (4 heads, 2 key-value heads) with large weights, so positions matter.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from test_hf_files import passkey_tokenizer, tiny_model

from posenc_cli.core.errors import UsageError
from posenc_cli.hf.extended_attention import ATTENTION, HFVariant
from posenc_cli.model import ModelConfig, ModelSize, token_nll
from posenc_cli.model.extension.method import ExtensionSettings, parse_method

transformers = pytest.importorskip("transformers")

CONTEXT = 32  # the Llama's max_position_embeddings: the methods' L
LONG = 44  # tokens past it


@pytest.fixture(scope="module")
def tokenizer():
    return passkey_tokenizer()


@pytest.fixture(scope="module")
def llama(tmp_path_factory, tokenizer) -> Path:
    config = transformers.LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=CONTEXT,
        initializer_range=0.5,
        bos_token_id=0,
        eos_token_id=0,
    )
    return saved(tmp_path_factory.mktemp("llama"), config, tokenizer)


def saved(directory: Path, config, tokenizer) -> Path:
    torch.manual_seed(0)
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def load(directory: Path):
    from posenc_cli.hf.model_loading import load_hf_model

    return load_hf_model(f"hf:{directory}")


def assert_one_line(error: Exception, *needles: str) -> None:
    text = str(error)
    assert "\n" not in text and all(needle in text for needle in needles), text


def method(text: str, **settings):
    return parse_method(text, ExtensionSettings(**settings))


def tokens(n: int, vocab: int) -> torch.Tensor:
    return torch.randint(0, vocab, (1, n + 1), generator=torch.Generator().manual_seed(1))


def nll(model, ids: torch.Tensor) -> torch.Tensor:
    return model.token_nll(ids[:, :-1], ids[:, 1:])


WITHIN = [  # each method's window at least the 24 tokens scored
    ("self_extend", {"self_extend_window": 24, "self_extend_group": 2}),
    ("rerope", {"rerope_window": 24}),
    ("leaky_rerope", {"rerope_window": 24, "rerope_leak": 4.0}),
    ("dca", {"dca_chunk": 24, "dca_local": 8}),
    ("logn", {}),
    ("dca+logn", {"dca_chunk": 24, "dca_local": 8}),
]


@pytest.mark.parametrize("text, settings", WITHIN)
def test_within_its_window_each_extension_scores_as_the_plain_model(llama, text, settings):
    model = load(llama)
    ids = tokens(24, model.config.vocab_size)
    plain = nll(model, ids)
    (variant,) = model.variants([method(text, **settings)], None)
    model.use_variant(variant)
    assert model.model.config._attn_implementation == ATTENTION  # computed by the extension
    torch.testing.assert_close(nll(model, ids), plain, atol=1e-6, rtol=0)
    model.use_variant(None)
    assert model.model.config._attn_implementation == "sdpa"  # the model's own kernel again


def relative(name: str, i: int, j: int, remap) -> float:
    """The distance query i meets key j at, by each paper's equations (i >= j)."""
    if name == "self_extend":  # Jin et al. 2024, eq. 3-4 (LongLM's shift W - W/G)
        G, W = remap.group, remap.window
        return i - j if i - j < W else (i // G + W - W / G) - j // G
    if name == "rerope":
        return min(i - j, remap.window)
    if name == "leaky_rerope":
        w = remap.window
        return i - j if i - j < w else w + (i - j - w) / remap.leak
    if name == "dca":  # An et al. 2024: intra-, successive- and inter-chunk positions
        s, w = remap.chunk, remap.local
        if i // s == j // s:
            return i % s - j % s
        if i // s == j // s + 1:
            return min(i % s + s, s + w) - j % s
        return min(2 * s - 1, s + w) - j % s
    return i - j


def paper_attention(q, k, v, *, rotary, extension) -> torch.Tensor:
    """q, k, v: (H, T, D) unrotated, float64 -> (H, T, D): each pair scored with q turned by its
    distance (rotate_half's layout, the rotary module's frequencies and cos/sin factor), softmax, log-n."""
    H, T, D = q.shape
    inv_freq = rotary.inv_freq.to(torch.float64)
    factor = float(getattr(rotary, "attention_scaling", 1.0)) ** 2  # on q's cos/sin and k's
    remap, name = extension.remap, extension.remap.name if extension.remap else ""
    out = torch.empty_like(q)
    for i in range(T):
        scores = torch.empty(H, i + 1, dtype=torch.float64)
        for j in range(i + 1):
            angle = torch.cat([relative(name, i, j, remap) * inv_freq] * 2)
            turned = (
                q[:, i] * angle.cos() + torch.cat([-q[:, i, D // 2 :], q[:, i, : D // 2]], -1) * angle.sin()
            )
            scores[:, j] = (turned * k[:, j]).sum(-1) * factor / math.sqrt(D)
        if extension.logn_len:
            scores = scores * max(1.0, math.log(i + 1) / math.log(extension.logn_len))
        out[:, i] = torch.einsum("hj,hjd->hd", scores.softmax(-1), v[:, : i + 1])
    return out


PAST = [
    ("self_extend", {"self_extend_group": 3, "self_extend_window": 5}),
    ("dca", {"dca_chunk": 7, "dca_local": 3}),
    ("rerope", {"rerope_window": 6}),
    ("leaky_rerope", {"rerope_window": 6, "rerope_leak": 3.0}),
    ("self_extend+logn", {"self_extend_group": 4, "self_extend_window": 8}),
    ("yarn+dca", {"dca_chunk": 16, "dca_local": 4}),
    ("dynamic+rerope", {"rerope_window": 10}),
]


@pytest.mark.parametrize("text, settings", PAST)
def test_past_its_window_each_layer_attends_as_the_paper_over_the_models_own_queries_and_keys(
    llama, text, settings
):
    model = load(llama)
    (variant,) = model.variants([method(text, **settings)], 2.0)
    model.use_variant(variant)
    attention = model.model.model.layers[1].self_attn
    seen = {}
    for part in ("q_proj", "k_proj", "v_proj"):
        getattr(attention, part).register_forward_hook(lambda m, a, out, part=part: seen.update({part: out}))
    attention.register_forward_hook(lambda m, a, out: seen.update(out=out[0]))
    nll(model, tokens(LONG, model.config.vocab_size))
    H, D, groups = model.config.num_attention_heads, attention.head_dim, attention.num_key_value_groups
    q, k, v = (seen[p][0].double().view(LONG, -1, D).transpose(0, 1) for p in ("q_proj", "k_proj", "v_proj"))
    assert groups == 2  # grouped-query: transformers hands over 2 key-value heads for 4 query heads
    k, v = k.repeat_interleave(groups, 0), v.repeat_interleave(groups, 0)
    rotary = model.model.model.rotary_emb  # as build_rotary left it, and the forward updated it
    want = paper_attention(q, k, v, rotary=rotary, extension=variant.extension)
    out = want.transpose(0, 1).reshape(LONG, H * D) @ attention.o_proj.weight.detach().double().T
    scale = float(out.abs().max())  # fp32's angles and sums against float64's: 1e-5 of the layer's scale
    torch.testing.assert_close(seen["out"][0].double(), out, atol=1e-5 * scale, rtol=1e-5)
    plain = paper_attention(q, k, v, rotary=rotary, extension=method("logn").extension(10**9))
    assert (plain - want).abs().max() > 1e-2  # the positions it moved to did matter


def test_a_column_is_named_by_its_scaling_extension_and_parameters(llama):
    model = load(llama)
    variants = model.variants([method("none"), method("self_extend"), method("yarn+dca+logn")], 4.0)
    labels = [model.use_variant(v) for v in variants]
    assert variants[0] is None and labels[0] == model.label
    assert [label.positional for label in labels] == ["rope", "rope+self_extend", "rope+yarn+dca+logn"]
    assert labels[1].variant.settings == (("G", "8"), ("W", "8"))  # the defaults at L = 32
    assert labels[2].variant.settings == (("chunk", "20"), ("local", "4"))


def test_frequency_scalings_alone_keep_the_models_own_attention(llama):
    model = load(llama)
    (variant,) = model.variants([method("yarn")], 2.0)
    assert variant == HFVariant(variant.scaling, None)
    model.use_variant(variant)
    nll(model, tokens(LONG, model.config.vocab_size))
    assert model.model.config._attn_implementation == "sdpa"


def neox(tmp_path: Path, tokenizer) -> Path:
    config = transformers.GPTNeoXConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
    )
    return saved(tmp_path / "neox", config, tokenizer)


def test_a_partial_rotary_or_sliding_window_model_is_refused_naming_it_and_what_is_allowed(
    tmp_path, tokenizer
):
    for directory, why in [
        (neox(tmp_path, tokenizer), "is a gpt_neox model; self_extend applies to hf: models of type llama"),
        (
            saved(tmp_path / "mistral", mistral_config(tokenizer), tokenizer),
            "attends within a sliding window of 16 tokens",
        ),
    ]:
        model = load(directory)
        with pytest.raises(UsageError) as refused:
            model.variants([method("none"), method("self_extend")], None)
        assert_one_line(refused.value, why)
        assert str(directory) in str(refused.value)


def mistral_config(tokenizer):
    sizes = {"hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 2, "num_key_value_heads": 1}
    return transformers.MistralConfig(
        vocab_size=len(tokenizer), num_hidden_layers=1, sliding_window=16, **sizes
    )


def test_a_model_without_rope_takes_no_extension_and_is_scored_once(tmp_path, tokenizer):
    model = load(tiny_model(tmp_path / "gpt2", tokenizer, kind="gpt2"))
    assert model.variants([method("none"), method("self_extend"), method("dca+logn")], None) == [None]


def test_parameters_past_the_models_context_are_one_line(llama):
    model = load(llama)
    with pytest.raises(UsageError) as refused:
        model.variants([method("self_extend", self_extend_window=64)], None)
    assert_one_line(refused.value, "--self-extend-window 64 is past the model's context of 32 tokens")


def export_of(scheme: str):
    """A posenc export of a random 1-layer `scheme` model as transformers holds it (no run needed)."""
    from posenc_cli.evaluation.hf_modeling import PosencConfig, PosencForCausalLM
    from posenc_cli.hf.export_target import ExportModel

    torch.manual_seed(0)
    size = ModelSize(n_layer=1, n_head=2, n_embd=32)
    config = ModelConfig(vocab_size=20, block_size=CONTEXT, size=size, scheme=scheme)
    model = PosencForCausalLM(PosencConfig(model_config=config.to_dict(), train_len=CONTEXT))
    with torch.no_grad():
        model.gpt.blocks[0].attn.qkv.weight.mul_(20)  # large, so positions matter
    return ExportModel(
        "hf:export",
        model.eval(),
        None,
        train_len=CONTEXT,
        real_context=CONTEXT,
        attention="eager",
        device="cpu",
    )


def test_an_exports_extension_is_computed_by_its_own_scheme_and_dropped_after():
    export = export_of("rope")
    ids = tokens(LONG, 20)
    plain = nll(export, ids)
    variants = export.variants(
        [method("none"), method("self_extend", self_extend_group=2, self_extend_window=8)], None
    )
    assert variants[0] is None and export.use_variant(variants[1]).positional == "rope+self_extend"
    extended = export.trained.with_extension(variants[1].extension)  # what posenc's own run computes
    want = token_nll(extended(ids[:, :-1]), ids[:, 1:])
    torch.testing.assert_close(nll(export, ids), want, atol=0, rtol=0)
    assert (want - plain).abs().max() > 1e-3
    export.use_variant(None)
    torch.testing.assert_close(nll(export, ids), plain, atol=0, rtol=0)


def test_an_export_without_rope_is_scored_once_as_its_run_is():
    assert export_of("alibi").variants([method("none"), method("dca")], None) == [None]
    assert export_of("alibi").variants([method("yarn")], 2.0) == [None]  # a scaling: scored once, as today
