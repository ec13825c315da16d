"""The chapters' maths, stated as properties of the scheme modules."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from posenc_cli.errors import PositionOutOfRange, UsageError
from posenc_cli.model import GPT, ModelConfig
from posenc_cli.model.positional import SCHEMES, build_scheme
from posenc_cli.model.positional.alibi import alibi_slopes
from posenc_cli.model.positional.rope import interleaved_order
from posenc_cli.model.positional.sinusoidal import sinusoidal_table

torch.manual_seed(0)


def test_attention_without_positions_is_permutation_equivariant():
    """Self-attention with no positional information and no causal mask: Attn(PX) = P·Attn(X)."""
    x = torch.randn(1, 2, 10, 8)  # (B, H, T, D); q = k = v = x for simplicity
    perm = torch.randperm(10)
    out = F.scaled_dot_product_attention(x, x, x)
    out_permuted = F.scaled_dot_product_attention(x[:, :, perm], x[:, :, perm], x[:, :, perm])
    assert torch.allclose(out_permuted, out[:, :, perm], atol=1e-6)
    # ...and a scheme that adds positions breaks the symmetry, which is the point of having one.
    pe = sinusoidal_table(torch.arange(10), 8)[None, None]
    y = x + pe
    y_perm = x[:, :, perm] + pe
    assert not torch.allclose(
        F.scaled_dot_product_attention(y_perm, y_perm, y_perm),
        F.scaled_dot_product_attention(y, y, y)[:, :, perm],
        atol=1e-3,
    )


def test_sinusoidal_values_from_the_chapter():
    pe = sinusoidal_table(torch.tensor([1, 2]), 16)
    assert pe[0, :4].tolist() == pytest.approx([0.8415, 0.5403, 0.3110, 0.9504], abs=5e-5)
    assert pe[1, :4].tolist() == pytest.approx([0.9093, -0.4161, 0.5911, 0.8066], abs=5e-5)


@pytest.mark.parametrize("k", [1, 5, 37])
def test_sinusoidal_shift_is_a_fixed_rotation_per_frequency_pair(k):
    """PE(pos + k) = R(k)·PE(pos) for each (sin, cos) pair, with R(k) independent of pos."""
    d, positions = 16, torch.arange(0, 200, 7)
    pe, shifted = sinusoidal_table(positions, d).double(), sinusoidal_table(positions + k, d).double()
    freqs = 10000 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    c, s = torch.cos(k * freqs), torch.sin(k * freqs)
    sin_part, cos_part = pe[:, 0::2], pe[:, 1::2]
    assert torch.allclose(shifted[:, 0::2], c * sin_part + s * cos_part, atol=1e-5)
    assert torch.allclose(shifted[:, 1::2], -s * sin_part + c * cos_part, atol=1e-5)


def test_sinusoidal_has_no_length_limit():
    scheme = build_scheme("sinusoidal", 16, 2, block_size=8)
    assert scheme.max_len is None and scheme.positional_params == 0
    out = scheme.embed(torch.zeros(1, 5000, 16), torch.arange(5000))
    assert out.shape == (1, 5000, 16) and out.abs().max() <= 1.0


def test_learned_is_the_same_vector_across_the_batch_and_stops_at_its_table():
    scheme = build_scheme("learned", 16, 2, block_size=32)
    out = scheme.embed(torch.zeros(3, 32, 16), torch.arange(32))
    assert torch.equal(out[0], out[1]) and torch.equal(out[1], out[2])
    assert scheme.max_len == 32 and scheme.positional_params == 32 * 16
    with pytest.raises(PositionOutOfRange, match="max_len=32"):
        scheme.embed(torch.zeros(1, 33, 16), torch.arange(33))


def _rope_qk(head_dim=8, T=12):
    scheme = build_scheme("rope", head_dim * 2, 2, block_size=T)
    return (
        scheme,
        torch.randn(1, 2, T, head_dim, dtype=torch.float64),
        torch.randn(1, 2, T, head_dim, dtype=torch.float64),
    )


def test_rope_preserves_norms():
    scheme, q, k = _rope_qk()
    rq, rk = scheme.rotate(q, k, torch.arange(12))
    assert torch.allclose(rq.norm(dim=-1), q.norm(dim=-1), atol=1e-5)
    assert torch.allclose(rk.norm(dim=-1), k.norm(dim=-1), atol=1e-5)


@pytest.mark.parametrize("shift", [1, 17, 1000])
def test_rope_logits_depend_only_on_relative_position(shift):
    """q_m·k_n is unchanged when both positions move by the same shift."""
    scheme, q, k = _rope_qk()
    positions = torch.arange(12)
    rq, rk = scheme.rotate(q, k, positions)
    sq, sk = scheme.rotate(q, k, positions + shift)
    assert torch.allclose(rq @ rk.transpose(-1, -2), sq @ sk.transpose(-1, -2), atol=1e-4)


def test_rope_at_position_zero_is_the_identity_and_rotates_elsewhere():
    scheme, q, k = _rope_qk()
    rq, _ = scheme.rotate(q, k, torch.arange(12))
    assert torch.allclose(rq[..., 0, :], q[..., 0, :], atol=1e-6)
    assert not torch.allclose(rq[..., 5, :], q[..., 5, :], atol=1e-3)


def test_rope_rejects_an_odd_head_dim():
    with pytest.raises(UsageError, match="even head_dim"):
        build_scheme("rope", 12, 4, block_size=8)  # head_dim 3


@pytest.mark.parametrize(
    "n_head, expected",
    [
        (4, [2**-2, 2**-4, 2**-6, 2**-8]),
        (8, [2 ** -(i + 1) for i in range(8)]),
        # not a power of two: the 4-head slopes, then every other slope of the 8-head sequence
        (6, [2**-2, 2**-4, 2**-6, 2**-8, 2**-1, 2**-3]),
        (12, [2 ** -(i + 1) for i in range(8)] + [2**-0.5, 2**-1.5, 2**-2.5, 2**-3.5]),
    ],
)
def test_alibi_slopes(n_head, expected):
    assert alibi_slopes(n_head) == pytest.approx(expected)


def test_alibi_bias_matrix_by_hand():
    scheme = build_scheme("alibi", 8, 2, block_size=4)
    slopes = alibi_slopes(2)
    assert slopes == pytest.approx([1 / 16, 1 / 256])
    distance = torch.tensor([[0, -1, -2, -3], [1, 0, -1, -2], [2, 1, 0, -1], [3, 2, 1, 0]])  # i - j
    bias = scheme.bias(distance)
    seen = distance.clamp(min=0).float()  # keys ahead of the query are masked out; their bias is 0
    assert torch.allclose(bias[0], -seen / 16)
    assert torch.allclose(bias[1], -seen / 256)
    # one value per distance, whatever shape the distances come in
    assert torch.equal(scheme.bias(torch.arange(4)), bias[:, 3, :].flip(-1))


@pytest.mark.parametrize("name", list(SCHEMES))
def test_every_scheme_reports_its_parameters_and_relative_kind(name):
    model = GPT(ModelConfig(vocab_size=11, block_size=16, n_layer=1, n_head=2, n_embd=8, scheme=name))
    assert model.scheme.relative in ("none", "implicit", "explicit")
    assert model.n_positional_params == sum(p.numel() for p in model.scheme.parameters())
    if name == "learned":
        assert model.n_positional_params == 16 * 8  # max_len·d
    elif name in ("none", "sinusoidal", "rope", "alibi"):
        assert model.n_positional_params == 0  # the chapters: no parameters
    logits = model(torch.randint(0, 11, (2, 16)))
    assert logits.shape == (2, 16, 11)


def test_a_checkpoint_from_before_the_rename_loads_its_scheme_weights():
    """Runs saved when the scheme attribute was called `pos` evaluate with the same weights."""
    config = ModelConfig(vocab_size=11, block_size=16, n_layer=1, n_head=2, n_embd=8, scheme="kerple")
    saved = GPT(config).state_dict()
    legacy = {key.replace("scheme.", "pos.", 1): value for key, value in saved.items()}
    assert any(key.startswith("pos.") for key in legacy)
    torch.manual_seed(1)
    model = GPT(config)
    model.load_state_dict(legacy)
    assert all(torch.equal(value, saved[key]) for key, value in model.state_dict().items())


@pytest.mark.parametrize("name", list(SCHEMES))
def test_the_model_is_causal_for_every_scheme(name):
    """Changing a later token never changes earlier logits."""
    torch.manual_seed(1)
    model = GPT(ModelConfig(vocab_size=11, block_size=16, n_layer=2, n_head=2, n_embd=8, scheme=name)).eval()
    idx = torch.randint(0, 11, (1, 16))
    changed = idx.clone()
    changed[0, 10] = (idx[0, 10] + 1) % 11
    assert torch.allclose(model(idx)[0, :10], model(changed)[0, :10], atol=1e-5)


def test_biased_attention_in_query_blocks_equals_one_block(monkeypatch):
    import posenc_cli.model.attention as attention

    torch.manual_seed(2)
    model = GPT(
        ModelConfig(vocab_size=11, block_size=32, n_layer=1, n_head=2, n_embd=8, scheme="alibi")
    ).eval()
    idx = torch.randint(0, 11, (1, 32))
    whole = model(idx)
    monkeypatch.setattr(attention, "MASK_BUDGET", 2 * 32 * 5)  # 5 queries per block
    assert torch.allclose(model(idx), whole, atol=1e-5)


def test_model_config_rejects_bad_sizes():
    with pytest.raises(UsageError, match="not divisible"):
        ModelConfig(vocab_size=5, block_size=8, n_head=3, n_embd=8)
    with pytest.raises(UsageError, match="positive integer"):
        ModelConfig(vocab_size=5, block_size=0)


def test_embed_std_sets_the_tied_embedding_init_only():
    """model.embed_std scales the token embedding (shared with the output head) and nothing else."""
    torch.manual_seed(0)
    small, large = (
        GPT(ModelConfig(vocab_size=500, block_size=8, n_embd=64, embed_std=s)) for s in (0.02, 0.1)
    )
    assert small.tok.weight.std().item() == pytest.approx(0.02, rel=0.05)
    assert large.tok.weight.std().item() == pytest.approx(0.1, rel=0.05)
    assert large.head.weight is large.tok.weight
    assert large.blocks[0].mlp.fc.weight.std().item() == pytest.approx(0.02, rel=0.05)


@pytest.mark.parametrize("name", ["rope", "xpos"])
def test_interleaved_layout_is_half_layout_with_q_k_rows_permuted(name):
    """The chapter's pairs (2i, 2i+1) and GPT-NeoX's (i, i + D/2) are one rotation up to a fixed
    permutation of each head's dimensions: permute the q and k rows of every qkv projection and an
    interleaved model gives the half model's logits exactly (attention logits included)."""
    torch.manual_seed(0)
    cfg = dict(vocab_size=11, block_size=16, n_layer=2, n_head=2, n_embd=16, scheme=name)
    half = GPT(ModelConfig(**cfg)).eval()
    interleaved = GPT(ModelConfig(**cfg, scheme_options={"layout": "interleaved"})).eval()
    head_dim, C = 8, 16
    per_head = interleaved_order(head_dim)
    rows = torch.cat([h * head_dim + per_head for h in range(2)])
    order = torch.cat([rows, C + rows, 2 * C + torch.arange(C)])  # q rows, k rows; v rows unchanged
    state = half.state_dict()
    for key in state:
        if key.endswith("attn.qkv.weight"):
            state[key] = state[key][order]
    interleaved.load_state_dict(state)
    x = torch.randn(1, 16, C)

    def attention_logits(model):
        q, k, _ = model.blocks[0].attn.qkv(x).split(C, dim=2)
        q, k = model.scheme.rotate(
            *(t.view(1, 16, 2, head_dim).transpose(1, 2) for t in (q, k)), torch.arange(16)
        )
        return q @ k.mT

    assert torch.allclose(attention_logits(interleaved), attention_logits(half), atol=1e-5)
    idx = torch.randint(0, 11, (2, 16))
    assert torch.allclose(interleaved(idx), half(idx), atol=1e-5)


def test_an_unknown_layout_or_slope_rule_is_refused():
    with pytest.raises(UsageError, match="scheme.layout=diagonal"):
        build_scheme("rope", 16, 2, 8, layout="diagonal")
    with pytest.raises(UsageError, match="scheme.slopes=bloom.*paper, chapter"):
        build_scheme("alibi", 16, 2, 8, slopes="bloom")


@pytest.mark.parametrize(
    "n_head, paper, chapter",
    [
        (4, [1 / 4, 1 / 16, 1 / 64, 1 / 256], [1 / 2, 1 / 4, 1 / 8, 1 / 16]),
        (8, [2 ** -(h + 1) for h in range(8)], [2 ** -(h + 1) for h in range(8)]),
    ],
)
def test_alibi_slope_rules(n_head, paper, chapter):
    """The paper's 2^(−8h/H) and the chapter's 1/2^h: different at H = 4, the same sequence at H = 8."""
    for rule, expected in (("paper", paper), ("chapter", chapter)):
        scheme = build_scheme("alibi", 8 * n_head, n_head, 16, slopes=rule)
        assert scheme.slopes.tolist() == pytest.approx(expected)
        assert torch.allclose(
            scheme.bias(torch.arange(5)), -torch.tensor(expected)[:, None] * torch.arange(5.0)
        )


ADDITIVE = [name for name, cls in SCHEMES.items() if cls.kind == "additive"]


@pytest.mark.parametrize("name", ADDITIVE)
def test_scale_embeddings_defaults_to_the_paper_and_the_config_says_so(name):
    """sinusoidal scales token embeddings by sqrt(d) as Vaswani et al. do; every other additive scheme does not,
    and configs/scheme/<name>.yaml spells the default out."""
    from omegaconf import OmegaConf

    from posenc_cli.config import config_dir

    default = build_scheme(name, 16, 2, block_size=8).scale_embeddings
    assert default is (name == "sinusoidal")
    assert OmegaConf.load(config_dir() / "scheme" / f"{name}.yaml").scale_embeddings is default


@pytest.mark.parametrize("name", ADDITIVE)
def test_scale_embeddings_changes_only_the_token_scaling(name):
    """embed_on(x) = embed_off(sqrt(d)·x): the position vectors are the same either way."""
    torch.manual_seed(0)
    on = build_scheme(name, 16, 2, block_size=8, scale_embeddings=True)
    off = build_scheme(name, 16, 2, block_size=8, scale_embeddings=False)
    off.load_state_dict(on.state_dict())
    x, positions = torch.randn(2, 8, 16), torch.arange(8)
    assert torch.allclose(on.embed(x, positions), off.embed(x * 16**0.5, positions), atol=1e-6)
    assert torch.allclose(off.embed(x, positions) - x, off.embed(torch.zeros_like(x), positions), atol=1e-6)
    assert {on.label, off.label} == {name, f"{name}+{'unscaled' if name == 'sinusoidal' else 'scaled'}"}


def test_scale_embeddings_is_a_boolean_of_additive_schemes_only():
    from posenc_cli.config import preflight

    with pytest.raises(UsageError, match="scale_embeddings='yes' is not a boolean"):
        build_scheme("sinusoidal", 16, 2, block_size=8, scale_embeddings="yes")
    with pytest.raises(UsageError, match="scale_embeddings"):
        preflight(["scheme=rope", "+scheme.scale_embeddings=true"])
    preflight(["scheme=learned", "scheme.scale_embeddings=true"])
