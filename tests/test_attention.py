"""Bias attention (mask as a view of one bias per distance, query blocks, its own backward on CPU)
is exactly the written-out formula, in values and in gradients, and stays causal."""

from __future__ import annotations

import math

import pytest
import torch

from posenc_cli.model import GPT, ModelConfig
from posenc_cli.model import attention as attention_module
from posenc_cli.model.attention import biased_causal_attention
from posenc_cli.model.positional import SCHEMES, build_scheme

BIAS_SCHEMES = [name for name, cls in SCHEMES.items() if cls.adds_bias]


def reference_attention(q, k, v, positions, pos) -> torch.Tensor:
    """softmax(q·kᵀ/√d + bias + causal mask)·v, written out with the whole (H, T, T) score matrix."""
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.size(-1)) + pos.bias(
        positions[:, None] - positions[None, :]
    )
    future = positions[None, :] > positions[:, None]
    return scores.masked_fill(future, float("-inf")).softmax(-1) @ v


@pytest.mark.parametrize("scheme", BIAS_SCHEMES)
@pytest.mark.parametrize("block", [1, 3, 37])
def test_query_blocks_equal_the_plain_reference(scheme, block, monkeypatch):
    torch.manual_seed(0)
    B, H, T, D = 2, 4, 37, 8  # T prime: the last query block is shorter than the others
    pos = build_scheme(scheme, H * D, H, T)
    q, k, v = (torch.randn(B, H, T, D) for _ in range(3))
    positions = torch.arange(T)
    monkeypatch.setattr(attention_module, "MASK_BUDGET", H * T * block)  # forces blocks of `block` queries
    got = biased_causal_attention(q, k, v, pos)
    torch.testing.assert_close(got, reference_attention(q, k, v, positions, pos), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_eval_past_training_length_does_not_depend_on_the_block_size(scheme, monkeypatch):
    """4x the training length, one query block vs blocks of 5 queries: the same logits."""
    torch.manual_seed(0)
    cfg = ModelConfig(
        vocab_size=11,
        block_size=16,
        n_layer=2,
        n_head=2,
        n_embd=16,
        scheme=scheme,
        scheme_options={"max_len": 64} if scheme == "learned" else {},
    )
    model = GPT(cfg).eval()
    idx = torch.randint(11, (2, 64))
    with torch.no_grad():
        whole = model(idx)
        monkeypatch.setattr(attention_module, "MASK_BUDGET", cfg.n_head * 64 * 5)
        blocked = model(idx)
    torch.testing.assert_close(blocked, whole, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_blocked_attention_is_causal(scheme, monkeypatch):
    """Changing the last tokens changes no logit before them, with several query blocks in play."""
    torch.manual_seed(0)
    monkeypatch.setattr(attention_module, "MASK_BUDGET", 2 * 32 * 4)
    model = GPT(
        ModelConfig(vocab_size=11, block_size=32, n_layer=2, n_head=2, n_embd=16, scheme=scheme)
    ).eval()
    idx = torch.randint(11, (1, 32))
    changed = idx.clone()
    changed[0, 20:] = (changed[0, 20:] + 1) % 11
    with torch.no_grad():
        torch.testing.assert_close(model(changed)[:, :20], model(idx)[:, :20], rtol=1e-5, atol=1e-5)


LEARNED_BIAS_SCHEMES = [
    name for name in BIAS_SCHEMES if any(p.requires_grad for p in build_scheme(name, 8, 2, 8).parameters())
]


def gradients(attention, pos, q, k, v):
    """Gradients of a fixed random projection of the output w.r.t. q, k, v and the scheme's parameters."""
    leaves = [q, k, v, *pos.parameters()]
    out = attention(q, k, v)
    weights = torch.randn(out.shape, generator=torch.Generator().manual_seed(1))
    return torch.autograd.grad((out.float() * weights).sum(), leaves)


@pytest.mark.parametrize("scheme", LEARNED_BIAS_SCHEMES)
@pytest.mark.parametrize("block", [5, 37])
def test_learned_bias_gradients_equal_the_reference(scheme, block, monkeypatch):
    """The mask needs a gradient here, so on CPU MaskGradAttention's own backward runs: it must give
    the gradients autograd gives through softmax(q·kᵀ/√d + bias)·v written out."""
    torch.manual_seed(0)
    B, H, T, D = 3, 4, 37, 8  # B odd: the backward's last batch chunk is short
    pos = build_scheme(scheme, H * D, H, T)
    for p in pos.parameters():
        torch.nn.init.normal_(p)
    q, k, v = (torch.randn(B, H, T, D, requires_grad=True) for _ in range(3))
    monkeypatch.setattr(attention_module, "MASK_BUDGET", H * T * block)
    got = gradients(lambda q, k, v: biased_causal_attention(q, k, v, pos), pos, q, k, v)
    expected = gradients(lambda q, k, v: reference_attention(q, k, v, torch.arange(T), pos), pos, q, k, v)
    assert len(got) > 3  # the scheme's parameters got gradients too
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("scheme", LEARNED_BIAS_SCHEMES)
def test_learned_bias_gradients_under_bf16_autocast_stay_close(scheme):
    """bf16 training (train.precision=auto on bf16 CPUs): the same gradients to bf16 precision."""
    torch.manual_seed(0)
    B, H, T, D = 2, 4, 64, 16
    pos = build_scheme(scheme, H * D, H, T)
    q, k, v = (torch.randn(B, H, T, D, requires_grad=True) for _ in range(3))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = gradients(
            lambda q, k, v: biased_causal_attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), pos),
            pos,
            q,
            k,
            v,
        )
    expected = gradients(lambda q, k, v: reference_attention(q, k, v, torch.arange(T), pos), pos, q, k, v)
    for g, e in zip(got, expected):
        assert ((g - e).norm() / e.norm()).item() < 0.05


@pytest.mark.parametrize("scheme", BIAS_SCHEMES)
def test_per_sequence_positions_bias_by_their_differences(scheme):
    """Randomized positions: each sequence's scores get bias(p_i - p_j) for its own increasing positions,
    in values and in the gradients of q, k, v and a learned bias (its own CPU backward, one mask per row)."""
    torch.manual_seed(0)
    B, H, T, D = 3, 2, 19, 8
    pos = build_scheme(scheme, H * D, H, T)
    positions = torch.stack([torch.randperm(200)[:T].sort().values for _ in range(B)])
    q, k, v = (torch.randn(B, H, T, D, requires_grad=True) for _ in range(3))
    got = biased_causal_attention(q, k, v, pos, positions)
    want = torch.stack([reference_attention(q[b], k[b], v[b], positions[b], pos) for b in range(B)])
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    weights = torch.randn_like(want)
    inputs = [q, k, v, *pos.parameters()]
    got_grads = torch.autograd.grad((got * weights).sum(), inputs)
    want_grads = torch.autograd.grad((want * weights).sum(), inputs)
    for g, w in zip(got_grads, want_grads):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)
