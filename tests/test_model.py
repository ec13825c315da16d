"""The GPT around the schemes: its config's sizes, its initialisation, and checkpoints of older versions."""

from __future__ import annotations

import pytest
import torch

from posenc_cli.core.device import autocast
from posenc_cli.core.errors import UsageError
from posenc_cli.model import GPT, ModelConfig, ModelSize
from posenc_cli.model import gpt as gpt_module
from posenc_cli.model.positional import SCHEMES


def test_model_config_rejects_bad_sizes():
    with pytest.raises(UsageError, match="not divisible"):
        ModelConfig(vocab_size=5, block_size=8, size=ModelSize(n_head=3, n_embd=8))
    with pytest.raises(UsageError, match="positive integer"):
        ModelConfig(vocab_size=5, block_size=0)


def test_embed_std_sets_the_tied_embedding_init_only():
    """model.embed_std scales the token embedding (shared with the output head) and nothing else."""
    torch.manual_seed(0)
    small, large = (
        GPT(ModelConfig(vocab_size=500, block_size=8, size=ModelSize(n_embd=64, embed_std=s)))
        for s in (0.02, 0.1)
    )
    assert small.tok.weight.std().item() == pytest.approx(0.02, rel=0.05)
    assert large.tok.weight.std().item() == pytest.approx(0.1, rel=0.05)
    assert large.head.weight is large.tok.weight
    assert large.blocks[0].mlp.fc.weight.std().item() == pytest.approx(0.02, rel=0.05)


def test_a_checkpoint_from_before_the_rename_loads_its_scheme_weights():
    """Runs saved when the scheme attribute was called `pos` evaluate with the same weights."""
    config = ModelConfig(
        vocab_size=11, block_size=16, size=ModelSize(n_layer=1, n_head=2, n_embd=8), scheme="kerple"
    )
    saved = GPT(config).state_dict()
    legacy = {key.replace("scheme.", "pos.", 1): value for key, value in saved.items()}
    assert any(key.startswith("pos.") for key in legacy)
    torch.manual_seed(1)
    model = GPT(config)
    model.load_state_dict(legacy)
    assert all(torch.equal(value, saved[key]) for key, value in model.state_dict().items())


CACHED_SCHEMES = [*SCHEMES, "rope+alibi", "sinusoidal+fire"]


def random_model(scheme: str, **options) -> GPT:
    """Every parameter random, scheme's included, so a bias or table left out of a path shows."""
    torch.manual_seed(0)
    model = GPT(
        ModelConfig(
            vocab_size=13,
            block_size=16,
            size=ModelSize(
                n_layer=max(2, SCHEMES[scheme].layers_needed if scheme in SCHEMES else 1), n_head=2, n_embd=16
            ),
            scheme=scheme,
            scheme_options=options,
        )
    )
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.5)
    return model.eval()


@pytest.mark.parametrize(
    ("scheme", "options"),
    [(s, {}) for s in CACHED_SCHEMES]
    + [("rope", {"scaling": "yarn", "scaling_factor": 2.0}), ("fire", {"per_layer": True})],
)
def test_a_kv_cache_gives_each_token_the_logits_of_its_whole_context_to_fp32_rounding(scheme, options):
    """A prompt, then one token at a time: each step's logits are those of a forward over every token so
    far (what sampling without a cache computes), past the training length too (learned: inside its
    table), to 1e-5 of logits of size ~1."""
    model = random_model(scheme, **options)
    length = 16 if scheme == "learned" else 24
    idx = torch.randint(0, 13, (1, length), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        cache = model.new_cache()
        prompt = model(idx[:, :5], cache=cache)
        torch.testing.assert_close(prompt, model(idx[:, :5]), rtol=0, atol=0)
        steps = torch.cat([model(idx[:, t : t + 1], cache=cache)[:, -1] for t in range(5, length)])
        uncached = torch.cat([model(idx[:, : t + 1])[:, -1] for t in range(5, length)])
    assert cache.length == length
    torch.testing.assert_close(steps, uncached, rtol=0, atol=1e-5)


def test_dynamic_ntk_scaling_says_its_rotation_reads_the_length_so_sampling_runs_it_uncached():
    """Their frequencies change with the context's length, so every hidden state does: a cache is stale.
    A fixed factor (yarn at 2, in the test above) keeps them fixed."""
    assert random_model("rope", scaling="dynamic", scaling_factor=2.0).scheme.rotation_reads_length
    assert random_model("rope", scaling="yarn").scheme.rotation_reads_length  # its factor: length / L
    assert random_model(
        "alibi+rope", parts=["alibi", {"name": "rope", "scaling": "dynamic", "scaling_factor": 2.0}]
    ).scheme.rotation_reads_length
    assert not any(random_model(s).scheme.rotation_reads_length for s in CACHED_SCHEMES)


def test_a_per_layer_fire_is_the_shared_one_when_its_layers_agree_and_learns_each_layer_apart():
    """per_layer gives each block its own MLP, c and L: with every layer's copied from the first it computes
    exactly the shared FIRE's logits; as built, the layers differ, and each gets its own gradient."""
    shared, per_layer = random_model("fire"), random_model("fire", per_layer=True)
    state = {k: v for k, v in per_layer.state_dict().items() if "later_layers" not in k}
    shared.load_state_dict(state)
    first = {k: v for k, v in per_layer.scheme.state_dict().items() if "later_layers" not in k}
    idx = torch.randint(0, 13, (2, 24), generator=torch.Generator().manual_seed(1))
    assert not torch.allclose(per_layer(idx), shared(idx))
    for later in per_layer.scheme.later_layers:
        later.load_state_dict(first)
    torch.testing.assert_close(per_layer(idx), shared(idx), rtol=0, atol=0)
    per_layer.layer_schemes[1].mlp[0].weight.data.add_(1.0)
    per_layer.train()
    per_layer(idx).square().mean().backward()
    blocks = per_layer.layer_schemes
    assert len({id(b) for b in blocks}) == 2 and all(b.mlp[0].weight.grad.abs().sum() > 0 for b in blocks)
    assert per_layer.n_positional_params == 2 * shared.n_positional_params


def test_a_per_layer_part_of_a_composite_scheme_is_refused_in_one_line():
    with pytest.raises(UsageError, match="fire\\+per-layer keeps its own instance per layer"):
        random_model("rope+fire", parts=["rope", {"name": "fire", "per_layer": True}])


@pytest.mark.parametrize("scheme", sorted(SCHEMES))
def test_bf16_autocast_with_fp32_attention_gives_every_schemes_attention_fp32_inputs_outside_autocast(
    scheme, monkeypatch
):
    """train.precision=bf16-fp32-attention: the attention kernel (and a scheme's bias) computes in fp32,
    the rest under bf16 autocast; plain bf16-autocast leaves the attention to autocast. Gradients
    reach every parameter either way."""
    seen = []
    attend = gpt_module.attend

    def spy(q, k, v, **options):
        seen.append((q.dtype, k.dtype, v.dtype, torch.is_autocast_enabled("cpu")))
        return attend(q, k, v, **options)

    monkeypatch.setattr(gpt_module, "attend", spy)
    model = random_model(scheme).train()
    idx = torch.randint(0, 13, (2, 12), generator=torch.Generator().manual_seed(2))
    for effective, expected in (
        ("bf16-autocast-fp32-attention", (torch.float32, torch.float32, torch.float32, False)),
        ("bf16-autocast", None),
    ):
        seen.clear()
        with autocast(torch.device("cpu"), effective):
            logits = model(idx)
        assert logits.dtype == torch.bfloat16 and torch.isfinite(logits.float()).all()
        logits.float().logsumexp(-1).mean().backward()
        assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())
        model.zero_grad(set_to_none=True)
        if expected:
            assert seen == [expected] * len(model.blocks)
        else:
            assert all(autocast_on for *_, autocast_on in seen) and len(seen) == len(model.blocks)


def test_qk_norm_divides_each_tokens_queries_and_keys_by_their_rms_over_all_heads():
    """model.qk_norm (DroPE's): one RMSNorm over the n_embd values of q (and of k) before the head split,
    its weight starting at 1: x / sqrt(mean(x²) + eps) per token across all heads; v left as projected."""
    model = GPT(ModelConfig(vocab_size=11, block_size=8, size=ModelSize(n_head=4, n_embd=32, qk_norm=True)))
    attn = model.blocks[0].attn
    x = torch.randn(2, 8, 32)
    raw = attn.qkv(x).split(32, dim=2)
    for got, made in zip(attn.project(x), raw):
        flat = got.transpose(1, 2).flatten(2)
        want = made / (made.pow(2).mean(-1, keepdim=True) + 1e-5).sqrt() if made is not raw[2] else made
        torch.testing.assert_close(flat, want, rtol=1e-5, atol=1e-6)
