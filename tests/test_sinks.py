"""Attention sinks: a learned logit per head in every softmax's denominator, with no value (GPT-OSS).

The executor adds the sink as one more key whose value is zero; these tests hold it to transformers'
GptOssAttention softmax written out (concatenate the sink to the logits, softmax, drop its column), in
one query block and in several, with a window and a remap, in values and in the sink's gradient."""

from __future__ import annotations

import math

import pytest
import torch

from posenc_cli.model import GPT, ModelConfig
from posenc_cli.model import blocks as blocks_module
from posenc_cli.model.attention import attend
from posenc_cli.model.attention_reference import reference_weights
from posenc_cli.model.extension.method import ExtensionSettings, parse_method
from posenc_cli.model.layer_attention import LayerAttention
from posenc_cli.model.positional import build_scheme
from posenc_cli.model.shape import ModelSize

B, H, T, D = 2, 3, 21, 8


def gpt_oss_attention(q, k, v, sinks, *, window: int | None = None) -> torch.Tensor:
    """transformers' GptOssAttention eager_attention_forward: logits, the sink column, softmax, dropped."""
    logits = q @ k.mT / math.sqrt(D)
    i, j = torch.arange(T)[:, None], torch.arange(T)
    allowed = (j <= i) & (i - j < (window or T))
    logits = logits.masked_fill(~allowed, float("-inf"))
    sink = sinks.reshape(1, -1, 1, 1).expand(q.size(0), -1, q.size(2), -1)
    combined = torch.cat([logits, sink], dim=-1)
    combined = combined - combined.max(dim=-1, keepdim=True).values
    return combined.softmax(-1)[..., :-1] @ v


def sunk_rope(window: int | None = None) -> LayerAttention:
    """A rope layer with sinks (a window where given), its sink logits drawn wide so each head's counts."""
    layer = LayerAttention.of(build_scheme("rope", H * D, H, block_size=8, sinks=True, window=window))
    with torch.no_grad():
        layer.sinks.logits.normal_(0, 2.0, generator=torch.Generator().manual_seed(5))
    return layer


@pytest.mark.parametrize("window", [None, 5])
@pytest.mark.parametrize("budget", [None, 3 * 21 * 3])
def test_the_sink_is_gpt_oss_softmax_in_values_and_the_sinks_gradient(window, budget, monkeypatch):
    if budget:
        monkeypatch.setattr(blocks_module, "MASK_BUDGET", budget)  # a few queries per block
    layer = sunk_rope(window)
    q, k, v = (torch.randn(B, H, T, D, generator=torch.Generator().manual_seed(s)) for s in (1, 2, 3))
    got = attend(q, k, v, layer=layer)
    want = gpt_oss_attention(q, k, v, layer.sinks.logits, window=window)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    weights = torch.randn(got.shape, generator=torch.Generator().manual_seed(4))
    (got_grad,) = torch.autograd.grad((got * weights).sum(), layer.sinks.logits)
    (want_grad,) = torch.autograd.grad((want * weights).sum(), layer.sinks.logits)
    torch.testing.assert_close(got_grad, want_grad, rtol=1e-4, atol=1e-5)


def test_the_reference_weights_drop_the_sinks_share_and_sum_to_less_than_one():
    layer = sunk_rope()
    q, k, v = (torch.randn(B, H, T, D, generator=torch.Generator().manual_seed(s)) for s in (1, 2, 3))
    weights = reference_weights(q, k, layer)
    torch.testing.assert_close(
        weights @ v, gpt_oss_attention(q, k, v, layer.sinks.logits), rtol=1e-5, atol=1e-5
    )
    assert (weights.sum(-1) < 1).all()


def test_a_sink_far_below_every_logit_is_plain_attention():
    layer = sunk_rope()
    with torch.no_grad():
        layer.sinks.logits.fill_(-1e4)
    q, k, v = (torch.randn(B, H, T, D, generator=torch.Generator().manual_seed(s)) for s in (1, 2, 3))
    plain = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(attend(q, k, v, layer=layer), plain, rtol=1e-5, atol=1e-6)


def test_a_remap_with_sinks_merges_the_sink_as_one_more_part():
    """Self-Extend past its window with sinks: the remap's parts and the sink, merged by log-sum-exp,
    equal the per-pair reference (its weights over every pair at its part's positions)."""
    sunk = sunk_rope()
    scheme = sunk.scores
    extension = parse_method(
        "self_extend", ExtensionSettings(self_extend_window=4, self_extend_group=2)
    ).extension(8)
    layer = sunk.extended(extension)
    q, k, v = (torch.randn(B, H, T, D, generator=torch.Generator().manual_seed(s)) for s in (1, 2, 3))
    q, k = scheme.rotate(q, k, torch.arange(T))
    rotation = scheme.rotation(T)
    got = attend(q, k, v, layer=layer, rotation=rotation)
    want = reference_weights(q, k, layer, rotation=rotation) @ v
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_sinks_on_a_preset_give_every_layer_its_own_and_name_the_column():
    cfg = ModelConfig(11, 16, ModelSize(n_layer=4, n_head=2, n_embd=16), "rnope_swa", {"sinks": True})
    model = GPT(cfg)
    logits = [layer.sinks.logits for layer in model.attention]
    assert len({id(t) for t in logits}) == 4 and model.scheme.label == "rnope_swa+window=8+sinks"
    assert sum("sinks" in name for name, _ in model.named_parameters()) == 4


def test_sinks_on_a_plain_scheme_are_each_layers_own_as_gpt_osss_are():
    model = GPT(ModelConfig(11, 16, ModelSize(n_layer=3, n_head=2, n_embd=16), "rope", {"sinks": True}))
    names = [name for name, _ in model.named_parameters() if "sinks" in name]
    assert names == [f"blocks.{i}.attn.sinks.logits" for i in range(3)]
    assert model.scheme.label == "rope+sinks"
