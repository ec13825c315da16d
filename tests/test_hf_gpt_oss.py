"""GPT-OSS's layout for hf: models, as transformers builds it (models/gpt_oss): sliding-window and full
layers alternating (layer 0 sliding), a learned sink logit per query head on every layer, YaRN by
default (factor 32 from 4,096, base 150k, truncate False), its experts transformers' own. posenc scores
it as transformers' forward does; a training-free extension reaches its full-attention layers only,
each extended softmax with the layer's sinks. A tiny random model built here, 4 layers, nothing
downloaded; top-k equal to the experts, so routing is a smooth softmax, and sinks redrawn at std 1, so a
head mixed up shows.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from test_hf_extension import assert_one_line, load, method, nll, relative, tokens
from test_hf_files import passkey_tokenizer
from test_hf_layouts import turn

from posenc_cli.core.errors import UsageError
from posenc_cli.hf.extended_attention import ATTENTION

transformers = pytest.importorskip("transformers")

CONTEXT = 32  # max_position_embeddings: the extensions' L
LONG = 44  # tokens past it
WINDOW = 8  # the sliding layers' window (GPT-OSS's 128), shorter than every scored window
YARN = {  # GptOssConfig's own rope_parameters (transformers 5.x __post_init__)
    "rope_type": "yarn",
    "factor": 32.0,
    "beta_fast": 32.0,
    "beta_slow": 1.0,
    "truncate": False,
    "original_max_position_embeddings": 4096,
    "rope_theta": 150000.0,
}


def gpt_oss_config(vocab: int):
    return transformers.GptOssConfig(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=32,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,  # YaRN's ramp at L0 = 4,096 falls between pairs 1 and 2 of 4
        num_local_experts=4,
        num_experts_per_tok=4,  # every expert: routing weights a smooth softmax, no top-k flip
        sliding_window=WINDOW,
        max_position_embeddings=CONTEXT,
        initializer_range=0.5,  # large weights, so positions matter
        bos_token_id=0,
        eos_token_id=0,
        pad_token_id=0,
    )


@pytest.fixture(scope="module")
def gpt_oss(tmp_path_factory):
    tokenizer = passkey_tokenizer()
    config = gpt_oss_config(len(tokenizer))
    assert config.layer_types == ["sliding_attention", "full_attention"] * 2
    assert {k: config.rope_parameters[k] for k in YARN} == YARN
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.sinks.normal_(0, 1.0)  # N(0, 0.02) would be one weight for every head
    directory = tmp_path_factory.mktemp("gpt_oss") / "model"
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def test_gpt_oss_scores_as_transformers_own_forward(gpt_oss):
    model = load(gpt_oss)
    assert model.attention == "eager" and model.train_len == CONTEXT
    ids = tokens(LONG, model.config.vocab_size)
    with torch.no_grad():
        logits = model.model(ids[:, :-1]).logits
    want = F.cross_entropy(logits[0].float(), ids[0, 1:], reduction="none")
    torch.testing.assert_close(nll(model, ids)[0], want, atol=1e-5, rtol=0)


def test_an_extension_within_its_window_reaches_the_full_layers_and_equals_transformers_forward(gpt_oss):
    model = load(gpt_oss)
    ids = tokens(24, model.config.vocab_size)
    plain = nll(model, ids)
    (variant,) = model.variants([method("self_extend", self_extend_window=24, self_extend_group=2)], None)
    model.use_variant(variant)
    assert model.model.config._attn_implementation == ATTENTION
    reached = [a.self_attn.context_extension is not None for a in model.model.model.layers]
    assert reached == [False, True, False, True]  # the full-attention layers only
    torch.testing.assert_close(nll(model, ids), plain, atol=1e-5, rtol=0)


def sink_attention(q, k, v, *, distance, inv_freq, factor, sinks, window=None):
    """The eager GptOssAttention per pair, q, k, v (H, T, D) float64 unrotated -> (H, T, D): query i
    meets key j turned by distance(i, j) on rotate_half's pairs, cos and sin × `factor` (YaRN's), within
    the window, its softmax over the pairs and the head's sink logit, whose column is dropped after."""
    H, T, D = q.shape
    out = torch.empty_like(q)
    for i in range(T):
        seen = range(max(0, i - window + 1) if window else 0, i + 1)
        scores = torch.empty(H, len(seen) + 1, dtype=torch.float64)
        for n, j in enumerate(seen):
            qi = turn(q[:, i], distance(i, j) * inv_freq, "half")
            scores[:, n] = (qi * k[:, j]).sum(-1) * factor**2 * D**-0.5
        scores[:, -1] = sinks
        weights = scores.softmax(-1)[:, :-1]
        out[:, i] = torch.einsum("hj,hjd->hd", weights, v[:, seen.start : i + 1])
    return out


@pytest.mark.parametrize(
    "text, settings",
    [
        ("self_extend", {"self_extend_group": 3, "self_extend_window": 5}),
        ("dca", {"dca_chunk": 7, "dca_local": 3}),
    ],
)
def test_past_its_window_each_full_layer_attends_as_the_paper_with_its_sinks_and_each_sliding_layer_as_its_own(
    gpt_oss, text, settings
):
    model = load(gpt_oss)
    (variant,) = model.variants([method(text, **settings)], None)
    model.use_variant(variant)
    layers = model.model.model.layers
    seen: dict[int, dict] = {index: {} for index in range(len(layers))}
    for index, layer in enumerate(layers):
        for part in ("q_proj", "k_proj", "v_proj"):
            getattr(layer.self_attn, part).register_forward_hook(
                lambda m, a, out, part=part, into=seen[index]: into.update({part: out})
            )
        layer.self_attn.register_forward_hook(lambda m, a, out, into=seen[index]: into.update(out=out[0]))
    nll(model, tokens(LONG, model.config.vocab_size))
    rotary = model.model.model.rotary_emb
    remap = variant.extension.remap
    for index, layer in enumerate(layers):
        attention = layer.self_attn
        D, groups = attention.head_dim, attention.num_key_value_groups
        q, k, v = (
            seen[index][p][0].double().view(LONG, -1, D).transpose(0, 1)
            for p in ("q_proj", "k_proj", "v_proj")
        )
        k, v = (x.repeat_interleave(groups, 0) for x in (k, v))
        full = attention.sliding_window is None
        want = sink_attention(
            q,
            k,
            v,
            distance=(lambda i, j: relative(remap.name, i, j, remap)) if full else (lambda i, j: i - j),
            inv_freq=rotary.inv_freq.double(),
            factor=rotary.attention_scaling,
            sinks=attention.sinks.detach().double(),
            window=None if full else WINDOW,
        )
        o = attention.o_proj
        out = want.transpose(0, 1).reshape(LONG, -1) @ o.weight.detach().double().T + o.bias.detach().double()
        scale = float(out.abs().max())
        torch.testing.assert_close(seen[index]["out"][0].double(), out, atol=1e-5 * scale, rtol=1e-5)


def test_without_its_sinks_the_extended_layers_would_differ(gpt_oss):
    """The sinks carry weight in the extended layers: zeroing the full layers' sinks changes the score."""
    model = load(gpt_oss)
    (variant,) = model.variants([method("rerope", rerope_window=6)], None)
    model.use_variant(variant)
    ids = tokens(LONG, model.config.vocab_size)
    with_sinks = nll(model, ids)
    with torch.no_grad():
        for layer in model.model.model.layers[1::2]:
            layer.self_attn.sinks.zero_()
    assert (nll(model, ids) - with_sinks).abs().max() > 1e-3


def test_gpt_oss_with_only_sliding_layers_refuses_an_extension_in_one_line(tmp_path):
    tokenizer = passkey_tokenizer()
    config = gpt_oss_config(len(tokenizer))
    config.layer_types = ["sliding_attention"] * 4
    torch.manual_seed(0)
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path / "m")
    tokenizer.save_pretrained(tmp_path / "m")
    with pytest.raises(UsageError) as refused:
        load(tmp_path / "m").variants([method("string")], None)
    assert_one_line(
        refused.value, "--rope-scaling string", f"sliding window of {WINDOW} tokens", "no layer to extend"
    )
