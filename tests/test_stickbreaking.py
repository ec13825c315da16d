"""Stick-breaking attention against the reference's equations (shawntan/stickbreaking-attention's
`sb_ref.stickbreaking` and its tests' `o + rem·v`), in one query block and several, in a window, in
values and gradients; and as a scheme of the model, its KV cache and its refusals."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from posenc_cli.core.errors import UsageError
from posenc_cli.model import blocks as blocks_module
from posenc_cli.model.attention import attend
from posenc_cli.model.attention_reference import reference_weights
from posenc_cli.model.layer_attention import LayerAttention
from posenc_cli.model.positional import build_scheme

B, H, T, D = 2, 3, 19, 8


def sb_ref(q, k, v, *, window: int | None = None):
    """The reference's stickbreaking(q, k, v, mask, cum_weight) with attend_current=False, then o + rem·v."""
    logits = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    mask = torch.ones(T, T).triu(0).bool()  # True: not attended (the diagonal and the future)
    if window is not None:
        i, j = torch.arange(T)[:, None], torch.arange(T)
        mask = mask | (i - j >= window)
    cum_weight = torch.ones(T, T).tril(-1)
    log_z = F.logsigmoid(logits).masked_fill(mask, -1e5)
    log_beta = F.logsigmoid(-logits).masked_fill(mask, 0)
    re_cum_log_beta = torch.einsum("bhij,jk->bhik", log_beta, cum_weight)
    att = (log_z + re_cum_log_beta).exp()
    o, rem = att @ v, 1 - att.sum(dim=-1)
    return o + rem[..., None] * v


def inputs(requires_grad: bool = False):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(B, H, T, D, generator=g, requires_grad=requires_grad) for _ in range(3)]


@pytest.mark.parametrize("window", [None, 6])
@pytest.mark.parametrize("budget", [None, 4 * 3 * 2 * 19 * 3])
def test_stick_breaking_is_the_references_equations_in_values_and_gradients(window, budget, monkeypatch):
    if budget:
        monkeypatch.setattr(blocks_module, "MASK_BUDGET", budget)  # a few queries per block
    scheme = build_scheme("stickbreaking", H * D, H, block_size=8, window=window)
    q, k, v = inputs(requires_grad=True)
    got, want = attend(q, k, v, layer=LayerAttention.of(scheme)), sb_ref(q, k, v, window=window)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    weights = torch.randn(got.shape, generator=torch.Generator().manual_seed(1))
    for g, w in zip(
        torch.autograd.grad((got * weights).sum(), (q, k, v)),
        torch.autograd.grad((want * weights).sum(), (q, k, v)),
    ):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)


def test_each_querys_weights_are_a_stick_broken_nearest_first_and_sum_to_one():
    """A_ij = β_ij ∏_{j<k<i} (1 − β_ik), the rest on the query's own key: weights in [0, 1] summing to 1,
    and the nearest key takes exactly its β."""
    scheme = build_scheme("stickbreaking", H * D, H, block_size=8)
    q, k, _ = inputs()
    weights = reference_weights(q, k, LayerAttention.of(scheme))
    torch.testing.assert_close(weights.sum(-1), torch.ones(B, H, T))
    nearest = torch.sigmoid((q[:, :, 1:] * k[:, :, :-1]).sum(-1) / math.sqrt(D))
    torch.testing.assert_close(weights.diagonal(-1, -2, -1), nearest)
    assert (weights >= 0).all() and (weights.triu(1) == 0).all()


def test_sinks_on_stick_breaking_are_refused_in_one_line():
    with pytest.raises(UsageError, match="scheme.sinks joins a softmax's denominator"):
        build_scheme("stickbreaking", H * D, H, block_size=8, sinks=True)


def test_a_composite_may_hold_one_part_that_weighs_its_keys():
    build_scheme("stickbreaking+alibi", H * D, H, block_size=8)
    with pytest.raises(UsageError, match="two parts weigh the keys"):
        build_scheme(
            "stickbreaking+stickbreaking", H * D, H, block_size=8, parts=["stickbreaking", "stickbreaking"]
        )
