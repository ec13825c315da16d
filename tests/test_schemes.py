"""The positional schemes' maths, stated as properties.

One table of schemes (every scheme, and composites), and each law runs on the schemes whose declared facts
say it holds: the class's `kind`, `relative`, `preserves_norms`, `adds_bias`, `max_len` and options, never
its name. A new scheme joins every law that its facts claim by being in SCHEMES. After the laws: each
scheme's own formula worked by hand, the composites' laws, and the bias-attention kernel against the
written-out softmax formula. (RoPE context extension has its own file, test_rope_scaling.py.)
"""

from __future__ import annotations

import inspect
import math

import pytest
import torch
import torch.nn.functional as F

from posenc_cli.core.errors import PositionOutOfRange, UsageError
from posenc_cli.model import GPT, ModelConfig, ModelSize
from posenc_cli.model import blocks as blocks_module
from posenc_cli.model.attention import attend
from posenc_cli.model.layer_attention import LayerAttention
from posenc_cli.model.positional import SCHEMES, build_scheme, scheme_options
from posenc_cli.model.positional.alibi import alibi_slopes
from posenc_cli.model.positional.composite import Composite
from posenc_cli.model.positional.sinusoidal import sinusoidal_table
from posenc_cli.model.positional.t5 import t5_bucket


def interleaved_order(head_dim: int) -> torch.Tensor:
    """Dimension order that takes a half-layout vector to the interleaved layout: x_int = x_half[order]."""
    return torch.arange(head_dim).view(2, -1).T.flatten()


DIM, HEADS, LENGTH = 32, 4, 24
POSITIONS = torch.arange(LENGTH)
# every scheme with hooks of its own, and composites of each hook kind; a layer schedule's hooks are its
# layers' (tests/test_layer_schedules.py), so it joins only the laws of a whole model (MODEL_CASES)
CASES = [*(n for n in SCHEMES if SCHEMES[n].kind != "schedule"), "sinusoidal+learned", "rope+alibi"]
MODEL_CASES = [*CASES, *(n for n in SCHEMES if SCHEMES[n].kind == "schedule")]


def fresh(name: str, dim: int = DIM, heads: int = HEADS, length: int = LENGTH, **options):
    torch.manual_seed(0)  # the same initial parameters wherever a scheme is built
    return build_scheme(name, dim, heads, block_size=length, **options)


def where(law) -> list[str]:
    """The cases whose declared facts say `law` applies."""
    return [name for name in CASES if law(fresh(name))]


def reaching(name: str, length: int) -> dict:
    """Options that let a scheme represent `length` positions: every bounded table gets max_len=length."""

    def bounded(part: str) -> bool:
        return fresh(part).max_len is not None

    if "+" not in name:
        return {"max_len": length} if bounded(name) else {}
    return {"parts": [{"name": p, "max_len": length} if bounded(p) else p for p in name.split("+")]}


def tiny_model(name: str, block_size: int = 16, reach: int | None = None, **sizes) -> GPT:
    torch.manual_seed(1)
    options = reaching(name, reach) if reach else {}
    depth = max(2, SCHEMES[name].layers_needed if name in SCHEMES else 1)
    config = dict(vocab_size=11, block_size=block_size, n_layer=depth, n_head=2, n_embd=16, **sizes)
    return GPT(ModelConfig.from_dict({**config, "scheme": name, "scheme_options": options})).eval()


def scores(scheme, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Attention logits before the mask: rotated q·kᵀ plus the scheme's bias at p_i − p_j, plus what it
    reads from content (every key seen; the heads' queries, joined, stand for the layer's input)."""
    rq, rk = scheme.rotate(q, k, positions)
    logits = rq @ rk.transpose(-1, -2)
    if scheme.adds_bias:
        logits = logits + pair_bias(scheme, positions).to(logits.dtype)
    if scheme.reads_content:
        seen = torch.ones(q.size(2), k.size(2), dtype=torch.bool)
        x = q.transpose(1, 2).flatten(2)
        logits = logits + scheme.content_bias(rq, rk, x.to(torch.float32), seen=seen).to(logits.dtype)
    return logits


def pair_bias(scheme, positions: torch.Tensor) -> torch.Tensor:
    """(H, T, T): the scheme's bias of each query p_i and key p_j, through the hook that reads both."""
    return scheme.query_bias(positions[:, None], positions[:, None] - positions[None, :])


# ---- Laws over every scheme ------------------------------------------------------------------------


def test_attention_without_positions_is_permutation_equivariant():
    """Self-attention with no positional information and no causal mask: Attn(PX) = P·Attn(X)."""
    x = torch.randn(1, 2, 10, 8)  # (B, H, T, D); q = k = v = x for simplicity
    perm = torch.randperm(10)
    out = F.scaled_dot_product_attention(x, x, x)
    out_permuted = F.scaled_dot_product_attention(x[:, :, perm], x[:, :, perm], x[:, :, perm])
    assert torch.allclose(out_permuted, out[:, :, perm], atol=1e-6)


@pytest.mark.parametrize("name", CASES)
def test_a_scheme_breaks_the_permutation_symmetry_unless_it_has_no_hooks(name):
    """Unmasked attention through a scheme's three hooks is permutation-equivariant exactly when the scheme
    gives no positional information (kind none, no bias): that is what a scheme is for."""
    scheme = fresh(name)
    x = torch.randn(1, LENGTH, DIM, generator=torch.Generator().manual_seed(2))
    perm = torch.randperm(LENGTH, generator=torch.Generator().manual_seed(3))

    def attend(tokens):
        heads = scheme.embed(tokens, POSITIONS).view(1, LENGTH, HEADS, -1).transpose(1, 2)
        logits = scores(scheme, heads, heads, POSITIONS) / 8**0.5
        if scheme.replaces_softmax:  # its own weights, in the keys' order
            seen = torch.ones(LENGTH, LENGTH, dtype=torch.bool)
            return scheme.weigh(logits, seen=seen, own=torch.eye(LENGTH, dtype=torch.bool)) @ heads
        return logits.softmax(-1) @ heads

    equivariant = torch.allclose(attend(x[:, perm]), attend(x)[:, :, perm], atol=1e-5)
    hooked = scheme.adds_bias or scheme.reads_content or scheme.replaces_softmax
    assert equivariant == (scheme.kind == "none" and not hooked)


@pytest.mark.parametrize("name", CASES)
def test_only_additive_schemes_change_the_embeddings_and_add_the_same_vector_to_every_sequence(name):
    """kind additive: embed(x, p) = s·x + PE(p): one PE for every sequence of the batch (learned included:
    a table row per position, identical across the batch), and a token part that does not depend on the
    position. Any other kind leaves x alone."""
    scheme = fresh(name)
    x = torch.randn(3, LENGTH, DIM)
    if scheme.kind != "additive":
        assert torch.equal(scheme.embed(x, POSITIONS), x)
        return
    reversed_positions = POSITIONS.flip(0)
    pe, pe_reversed = (scheme.embed(torch.zeros_like(x), p) for p in (POSITIONS, reversed_positions))
    assert not torch.allclose(pe, pe_reversed)
    assert torch.equal(pe[0], pe[1]) and torch.equal(pe[1], pe[2])
    tokens = scheme.embed(x, POSITIONS) - pe
    torch.testing.assert_close(tokens, scheme.embed(x, reversed_positions) - pe_reversed)


@pytest.mark.parametrize("name", where(lambda s: s.relative == "explicit" and not s.bias_reads_query))
@pytest.mark.parametrize("shift", [1, 17, 1000])
def test_explicit_relative_logits_depend_only_on_m_minus_n(name, shift):
    """relative=explicit: q_m·k_n (+ bias) is unchanged when both positions move by the same shift."""
    scheme = fresh(name)
    q, k = torch.randn(2, 1, HEADS, 12, DIM // HEADS, dtype=torch.float64)
    positions = torch.arange(12)
    torch.testing.assert_close(
        scores(scheme, q, k, positions + shift), scores(scheme, q, k, positions), rtol=1e-4, atol=1e-4
    )


@pytest.mark.parametrize("name", [n for n in SCHEMES if SCHEMES[n].relative == "implicit"])
@pytest.mark.parametrize("k", [1, 5, 37])
def test_implicit_relative_encodings_are_linear_in_the_shift(name, k):
    """relative=implicit: PE(pos + k) = M(k)·PE(pos) with one matrix M(k) for every pos, so a layer can
    learn to attend by offset. (A composite's relative kind is its strongest part's: see below.)"""
    scheme = fresh(name, scale_embeddings=False)
    positions = torch.arange(0, 400, 3)
    pe, shifted = (
        scheme.embed(torch.zeros(1, len(positions), DIM), p)[0].double() for p in (positions, positions + k)
    )
    fit = torch.linalg.lstsq(pe, shifted).solution
    torch.testing.assert_close(pe @ fit, shifted, atol=1e-4, rtol=0)


@pytest.mark.parametrize("name", CASES)
def test_rotations_keep_norms_exactly_where_the_scheme_says_so(name):
    """preserves_norms: |rotate(q)| = |q| and |rotate(k)| = |k| at every position (rope: a rotation);
    xPos declares False, and does rescale them."""
    scheme = fresh(name)
    q, k = torch.randn(2, 1, HEADS, LENGTH, DIM // HEADS, dtype=torch.float64)
    rq, rk = scheme.rotate(q, k, POSITIONS)
    kept = torch.allclose(rq.norm(dim=-1), q.norm(dim=-1), atol=1e-5) and torch.allclose(
        rk.norm(dim=-1), k.norm(dim=-1), atol=1e-5
    )
    assert kept == scheme.preserves_norms


@pytest.mark.parametrize("name", CASES)
def test_a_bias_is_one_value_per_head_and_distance_exactly_when_the_scheme_adds_one(name):
    """Within the training length (below FIRE's threshold too): what the query-reading hook gives is
    `bias(distance)`, one value per head and distance."""
    scheme = fresh(name)
    distance = POSITIONS[:, None] - POSITIONS[None, :]
    if not scheme.adds_bias:
        assert scheme.bias(distance) is None and scheme.query_bias(POSITIONS[:, None], distance) is None
        return
    bias = scheme.bias(distance)
    assert bias.shape == (HEADS, LENGTH, LENGTH)
    torch.testing.assert_close(scheme.query_bias(POSITIONS[:, None], distance), bias)
    torch.testing.assert_close(bias[:, 20, 5], bias[:, 23, 8])  # same distance, same bias
    assert torch.equal(scheme.bias(torch.arange(LENGTH)), bias[:, LENGTH - 1, :].flip(-1))  # any shape


@pytest.mark.parametrize("name", CASES)
def test_bounded_schemes_refuse_positions_past_max_len_and_unbounded_ones_reach_far(name):
    scheme = fresh(name)
    if scheme.max_len is None:
        far = torch.arange(5000)
        out = scheme.embed(torch.zeros(1, 5000, DIM), far)
        assert out.shape == (1, 5000, DIM) and torch.isfinite(out).all()
        q = torch.randn(1, HEADS, 5000, DIM // HEADS)
        assert all(torch.isfinite(t).all() for t in scheme.rotate(q, q, far))
        if scheme.adds_bias:
            assert torch.isfinite(scheme.bias(far)).all()
            assert torch.isfinite(scheme.query_bias(far, far // 2)).all()
        return
    assert scheme.embed(torch.zeros(1, scheme.max_len, DIM), torch.arange(scheme.max_len)).isfinite().all()
    with pytest.raises(PositionOutOfRange, match=f"max_len={scheme.max_len}"):
        scheme.embed(torch.zeros(1, scheme.max_len + 1, DIM), torch.arange(scheme.max_len + 1))


@pytest.mark.parametrize("name", MODEL_CASES)
def test_positional_parameters_are_the_declared_formula(name):
    """param_formula (shown in comparison.md) evaluated at this model's sizes is the parameter count, and
    the model's count is the scheme's. The chapters' four fixed schemes have none."""
    scheme = fresh(name)
    sizes = {"d": DIM, "h": HEADS, "max_len": scheme.max_len, "buckets": getattr(scheme, "n_buckets", None)}
    sizes["npos"] = getattr(scheme, "npos", None)  # CoPE's table rows
    assert scheme.positional_params == eval(scheme.param_formula.replace("·", "*"), {}, sizes)
    model = tiny_model(name)
    assert model.n_positional_params == sum(p.numel() for p in model.scheme.parameters())
    assert model.scheme.relative in ("none", "implicit", "explicit")
    assert model(torch.randint(0, 11, (2, 16))).shape == (2, 16, 11)


@pytest.mark.parametrize("name", MODEL_CASES)
def test_the_model_is_causal_for_every_scheme(name):
    """Changing a later token never changes earlier logits."""
    model = tiny_model(name)
    idx = torch.randint(0, 11, (1, 16))
    changed = idx.clone()
    changed[0, 10] = (idx[0, 10] + 1) % 11
    assert torch.allclose(model(idx)[0, :10], model(changed)[0, :10], atol=1e-5)


@pytest.mark.parametrize("name", MODEL_CASES)
def test_eval_past_training_length_does_not_depend_on_the_query_block_size(name, monkeypatch):
    """4x the training length, one query block vs blocks of 5 queries: the same logits."""
    model = tiny_model(name, reach=64)
    idx = torch.randint(11, (2, 64))
    with torch.no_grad():
        whole = model(idx)
        monkeypatch.setattr(blocks_module, "MASK_BUDGET", 2 * 64 * 5)
        blocked = model(idx)
    torch.testing.assert_close(blocked, whole, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", MODEL_CASES)
def test_blocked_attention_is_causal(name, monkeypatch):
    """Changing the last tokens changes no logit before them, with several query blocks in play."""
    monkeypatch.setattr(blocks_module, "MASK_BUDGET", 2 * 32 * 4)
    model = tiny_model(name, block_size=32)
    idx = torch.randint(11, (1, 32))
    changed = idx.clone()
    changed[0, 20:] = (changed[0, 20:] + 1) % 11
    with torch.no_grad():
        torch.testing.assert_close(model(changed)[:, :20], model(idx)[:, :20], rtol=1e-5, atol=1e-5)


LEARNED_BIAS = where(lambda s: s.adds_bias and any(p.requires_grad for p in s.parameters()))


@pytest.mark.parametrize("name", LEARNED_BIAS)
def test_learned_biases_reach_the_attention_scores(name):
    model = tiny_model(name)
    idx = torch.randint(0, 11, (1, 16))
    before = model(idx)
    with torch.no_grad():
        for p in model.scheme.parameters():
            p.copy_(torch.randn_like(p))  # random, not a constant shift, which softmax would ignore
    assert not torch.allclose(before, model(idx))


@pytest.mark.parametrize("name", [n for n in SCHEMES if "layout" in scheme_options(n)])
def test_interleaved_layout_is_half_layout_with_q_k_rows_permuted(name):
    """The chapter's pairs (2i, 2i+1) and GPT-NeoX's (i, i + D/2) are one rotation up to a fixed
    permutation of each head's dimensions: permute the q and k rows of every qkv projection and an
    interleaved model gives the half model's logits exactly (attention logits included)."""
    torch.manual_seed(0)
    cfg = dict(vocab_size=11, block_size=16, n_layer=2, n_head=2, n_embd=16, scheme=name)
    half = GPT(ModelConfig.from_dict(cfg)).eval()
    interleaved = GPT(ModelConfig.from_dict({**cfg, "scheme_options": {"layout": "interleaved"}})).eval()
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


ADDITIVE = [name for name, cls in SCHEMES.items() if cls.kind == "additive"]


@pytest.mark.parametrize("name", ADDITIVE)
def test_scale_embeddings_defaults_to_the_paper_and_the_config_says_so(name):
    """sinusoidal scales token embeddings by sqrt(d) as Vaswani et al. do; every other additive scheme does not,
    and configs/scheme/<name>.yaml spells the default out."""
    from omegaconf import OmegaConf

    from posenc_cli.config.location import config_dir

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


# ---- Each scheme's own formula, worked by hand -------------------------------------------------------


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


def test_sinusoidal_values_stay_within_one_and_learned_stops_at_its_table():
    assert (
        fresh("sinusoidal", scale_embeddings=False)
        .embed(torch.zeros(1, 5000, DIM), torch.arange(5000))
        .abs()
        .max()
        <= 1.0
    )
    assert fresh("learned").max_len == LENGTH and fresh("learned", max_len=7).max_len == 7


def test_rope_at_position_zero_is_the_identity_and_rotates_elsewhere():
    scheme = fresh("rope", 16, 2, 12)
    q, k = torch.randn(2, 1, 2, 12, 8, dtype=torch.float64)
    rq, _ = scheme.rotate(q, k, torch.arange(12))
    assert torch.allclose(rq[..., 0, :], q[..., 0, :], atol=1e-6)
    assert not torch.allclose(rq[..., 5, :], q[..., 5, :], atol=1e-3)


def test_rope_rejects_an_odd_head_dim_and_an_unknown_layout():
    with pytest.raises(UsageError, match="even head_dim"):
        build_scheme("rope", 12, 4, block_size=8)  # head_dim 3
    with pytest.raises(UsageError, match="scheme.layout=diagonal"):
        build_scheme("rope", 16, 2, block_size=8, layout="diagonal")


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
def test_alibi_slopes_are_geometric(n_head, expected):
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
        scheme = build_scheme("alibi", 8 * n_head, n_head, block_size=16, slopes=rule)
        assert scheme.slopes.tolist() == pytest.approx(expected)
        assert torch.allclose(
            scheme.bias(torch.arange(5)), -torch.tensor(expected)[:, None] * torch.arange(5.0)
        )
    with pytest.raises(UsageError, match="scheme.slopes=bloom.*paper, chapter"):
        build_scheme("alibi", 16, 2, block_size=8, slopes="bloom")


def test_t5_buckets_by_hand():
    # 32 causal buckets, max distance 128: distances 0..15 exact; beyond, 16 + floor(log(d/16)/log(8)·16)
    # d=20: 16 + floor(0.107·16) = 17; d=32: 16 + floor(16/3) = 21; d=64: 16 + floor(32/3) = 26;
    # d=127: 16 + floor(15.94) = 31; d >= 128 caps at 31. Keys after the query (d < 0) count as 0.
    distances = torch.tensor([-3, 0, 1, 15, 16, 20, 32, 64, 127, 128, 1000])
    assert t5_bucket(distances).tolist() == [0, 0, 1, 15, 16, 17, 21, 26, 31, 31, 31]


def test_t5_bias_is_its_table_read_at_each_distance_bucket():
    t5 = build_scheme("t5", 32, 4, block_size=64)
    torch.nn.init.normal_(t5.table.weight)
    positions = torch.arange(300)
    bias = t5.bias(positions[:, None] - positions[None, :])
    torch.testing.assert_close(bias[:, 250, 10], t5.table.weight[t5_bucket(torch.tensor(240))])


def test_t5_has_one_table_shared_by_every_layer():
    model = GPT(
        ModelConfig(vocab_size=10, block_size=16, size=ModelSize(n_layer=3, n_head=4, n_embd=32), scheme="t5")
    )
    assert model.n_positional_params == 32 * 4
    assert [name for name, _ in model.named_parameters() if "table" in name] == ["scheme.table.weight"]


def same_vectors_everywhere(scheme, q: torch.Tensor, k: torch.Tensor, T: int) -> torch.Tensor:
    """(T, T) q_m·k_n for the same q and k vectors placed at every position."""
    qs, ks = (v.expand(1, 1, T, v.numel()) for v in (q, k))
    q_rot, k_rot = scheme.rotate(qs, ks, torch.arange(T))
    return (q_rot[0, 0] @ k_rot[0, 0].T).double()


def test_xpos_is_rope_times_a_decay_in_distance():
    xpos, rope = build_scheme("xpos", 32, 2, block_size=64), build_scheme("rope", 32, 2, block_size=64)
    j = 1  # one rotary pair: dims j and j + 8 of a 16-dim head
    q, k = torch.zeros(16), torch.zeros(16)
    q[[j, j + 8]], k[[j, j + 8]] = torch.tensor([0.6, -0.8]), torch.tensor([1.0, 0.3])
    T = 600
    ratio = same_vectors_everywhere(xpos, q, k, T) / same_vectors_everywhere(rope, q, k, T)
    zeta = (2 * j / 16 + 0.4) / 1.4
    m, n = torch.meshgrid(torch.arange(T), torch.arange(T), indexing="ij")
    torch.testing.assert_close(ratio, zeta ** ((m - n).double() / 512), rtol=2e-3, atol=0)
    along_row = ratio[T - 1, : T - 1].flip(0)  # distances 1, 2, ..., T-1 from the last query
    assert (along_row.diff() < 0).all() and along_row[-1] < 0.6


def test_kerple_bias_is_minus_p_log_one_plus_a_distance():
    kerple = build_scheme("kerple", 32, 2, block_size=64)
    with torch.no_grad():
        kerple.log_p.copy_(torch.tensor([2.0, 0.5]).log())
        kerple.log_a.copy_(torch.tensor([0.5, 3.0]).log())
    bias = kerple.bias(torch.arange(10)[:, None] - torch.arange(10)[None, :])
    # head 0, distance 2: -2·log(1 + 0.5·2) = -2 log 2; head 1, distance 3: -0.5·log(10)
    assert bias[0, 5, 3].item() == pytest.approx(-2 * math.log(2), rel=1e-6)
    assert bias[1, 9, 6].item() == pytest.approx(-0.5 * math.log(10), rel=1e-6)


def test_kerple_bias_is_a_non_positive_decreasing_function_of_distance():
    kerple = build_scheme("kerple", 32, 4, block_size=64)
    positions = torch.arange(500)
    bias = kerple.bias(positions[:, None] - positions[None, :])
    assert (bias <= 0).all() and (bias.diagonal(dim1=1, dim2=2) == 0).all()
    from_last = bias[:, 499, :].flip(1)  # distances 0..499
    assert (from_last.diff(dim=1) < 0).all()


def fire_with_identity_mlp(threshold: float, c: float = 0.1):
    """FIRE whose MLP is relu(x) for one head: its bias is its normalized distance, to check by hand."""
    fire = build_scheme("fire", 8, 1, block_size=64, mlp_width=1, c=c, threshold=threshold)
    with torch.no_grad():
        for layer in (fire.mlp[0], fire.mlp[2]):
            layer.weight.fill_(1.0)
            layer.bias.zero_()
    return fire


def test_fire_bias_by_hand_is_log_distance_over_log_of_the_query_or_threshold():
    fire = fire_with_identity_mlp(threshold=10)
    query, distance = torch.tensor([[4], [20]]), torch.tensor([[3], [5]])
    bias = fire.query_bias(query, distance)[0, :, 0]
    # query 4 is below L = 10: log(1 + 0.3) / log(1 + 1); query 20 is past it: log(1.5) / log(3)
    torch.testing.assert_close(bias, torch.tensor([math.log(1.3) / math.log(2), math.log(1.5) / math.log(3)]))


@pytest.mark.parametrize("c, threshold", [(0.1, 8), (3.0, 1), (0.01, 300)])
def test_fire_input_is_bounded_in_zero_one_for_every_causal_pair_at_any_length(c, threshold):
    """The progressive interpolation: ψ(i − j) / ψ(max(i, L)) lies in [0, 1] for 0 <= j <= i, far past L."""
    fire = build_scheme("fire", 8, 2, block_size=16, c=c, threshold=threshold)
    query = torch.arange(3000)[:, None]
    distance = query - torch.arange(3000)
    normalized = fire.normalized_distance(query, distance)[distance >= 0]
    assert normalized.min() >= 0 and normalized.max() <= 1
    assert normalized.max() > 0.99  # the farthest key of a long query reaches the top of the range


def test_fire_bias_at_distance_zero_is_the_same_for_every_query():
    fire = fresh("fire")
    query = torch.arange(0, 5000, 7)
    at_zero = fire.query_bias(query, torch.zeros_like(query))
    torch.testing.assert_close(at_zero, at_zero[:, :1].expand_as(at_zero))
    torch.testing.assert_close(at_zero[:, 0], fire.mlp(torch.zeros(1)))  # f_θ(0): ψ(0) = 0


def test_fire_is_relative_below_its_threshold_and_reads_the_query_past_it():
    fire = fresh("fire", threshold=100)
    distance = torch.arange(10)
    below = [fire.query_bias(torch.tensor(q), distance) for q in (20, 60, 99)]
    for other in below[1:]:
        torch.testing.assert_close(other, below[0])
    past = fire.query_bias(torch.tensor(400), distance)
    assert not torch.allclose(past[:, 1:], below[0][:, 1:])  # the same distance, interpolated further


def test_fire_refuses_bad_options():
    for option in ({"mlp_width": 0}, {"mlp_depth": 0}, {"c": 0}, {"threshold": -1.0}, {"per_layer": "yes"}):
        with pytest.raises(UsageError, match=f"scheme.{next(iter(option))}"):
            fresh("fire", **option)


def numeric_options(name: str) -> list[tuple[str, bool]]:
    """(option, takes an integer) for each option of a scheme that takes a number, from its constructors."""
    found = {}
    for klass in SCHEMES[name].__mro__[:-2]:  # the scheme's classes, not nn.Module's nor object's
        for option, param in inspect.signature(klass.__init__).parameters.items():
            kind = str(param.annotation)
            if option in scheme_options(name) and ("int" in kind or "float" in kind):
                found.setdefault(option, "int" in kind)
    return sorted(found.items())


@pytest.mark.parametrize(
    ("name", "option", "integer"), [(n, o, i) for n in SCHEMES for o, i in numeric_options(n)]
)
def test_every_number_a_scheme_takes_has_finite_bounds_and_a_value_past_them_is_one_line(
    name, option, integer
):
    """scheme=fire scheme.c=1e308 once trained to NaN: every numeric option of every scheme is refused
    past finite bounds (huge, huge negative, infinite, NaN), in one line naming it and its range."""
    scaling = (
        {"scaling": "yarn"} if SCHEMES[name].scalable and option.startswith(("scaling_", "yarn_")) else {}
    )
    for value in (10**30, -(10**30)) if integer else (1e308, -1e308, math.inf, math.nan):
        with pytest.raises(UsageError) as caught:
            fresh(name, **scaling, **{option: value})
        message = str(caught.value)
        assert f"scheme.{option}" in message and "\n" not in message
        assert "must be" in message or "needs" in message


# ---- Composites: scheme=A+B is its parts through the same three hooks, and nothing else -------------


def composite(*parts):
    torch.manual_seed(0)
    name = "+".join(p if isinstance(p, str) else p["name"] for p in parts)
    return Composite(DIM, HEADS, LENGTH, name=name, parts=list(parts), build=build_scheme)


def hooks(scheme):
    g = torch.Generator().manual_seed(1)
    x, q, k = (
        torch.randn(2, LENGTH, DIM, generator=g),
        *torch.randn(2, 2, HEADS, LENGTH, DIM // HEADS, generator=g),
    )
    bias = scheme.bias(torch.arange(LENGTH)) if scheme.adds_bias else None
    return scheme.embed(x, POSITIONS), scheme.rotate(q, k, POSITIONS), bias


@pytest.mark.parametrize("name", list(SCHEMES))
def test_a_composite_of_one_part_is_that_part(name):
    alone, wrapped = fresh(name), composite(name)
    (x1, (q1, k1), b1), (x2, (q2, k2), b2) = hooks(alone), hooks(wrapped)
    assert torch.equal(x1, x2) and torch.equal(q1, q2) and torch.equal(k1, k2)
    assert (b1 is None and b2 is None) or torch.equal(b1, b2)
    facts = (
        "kind",
        "relative",
        "max_len",
        "positional_params",
        "adds_bias",
        "preserves_norms",
        "param_formula",
    )
    for fact in facts:
        assert getattr(wrapped, fact) == getattr(alone, fact), fact


def test_embeddings_add_in_any_order():
    both, sinusoidal, learned = composite("sinusoidal", "learned"), fresh("sinusoidal"), fresh("learned")
    learned.load_state_dict(both.parts[1].state_dict())
    x = torch.randn(2, LENGTH, DIM)
    added = x + (sinusoidal.embed(x, POSITIONS) - x) + (learned.embed(x, POSITIONS) - x)
    assert torch.allclose(both.embed(x, POSITIONS), added, atol=1e-6)
    swapped = composite("learned", "sinusoidal")
    swapped.parts[0].load_state_dict(both.parts[1].state_dict())
    assert torch.allclose(swapped.embed(x, POSITIONS), added, atol=1e-6)


def test_rotations_apply_in_order_and_biases_sum():
    rotated = composite("rope", {"name": "xpos", "base": 500.0})
    q, k = torch.randn(2, 1, HEADS, LENGTH, DIM // HEADS)
    expected = fresh("xpos", base=500.0).rotate(*fresh("rope").rotate(q, k, POSITIONS), POSITIONS)
    for got, want in zip(rotated.rotate(q, k, POSITIONS), expected):
        assert torch.allclose(got, want, atol=1e-6)
    biased = composite("alibi", "t5", "kerple")
    distance = torch.arange(LENGTH)
    assert torch.allclose(biased.bias(distance), sum(part.bias(distance) for part in biased.parts))
    assert biased.adds_bias and not composite("sinusoidal", "rope").adds_bias


def test_facts_follow_the_parts():
    table = composite("sinusoidal", "learned", {"name": "learned", "max_len": 16}, "t5")
    assert (
        table.positional_params
        == sum(p.positional_params for p in table.parts)
        == (24 + 16) * DIM + 32 * HEADS
    )
    assert table.max_len == 16  # the tightest table
    assert table.param_formula == "max_len·d + max_len·d + buckets·h"
    assert composite("sinusoidal", "rope").max_len is None
    assert composite("learned", "none").relative == "none"
    assert composite("sinusoidal", "learned").relative == "implicit"
    assert composite("learned", "alibi").relative == "explicit"
    assert composite("sinusoidal", "learned").kind == "additive"
    assert not composite("rope", "xpos").preserves_norms


# ---- Bias attention: a mask as a view of one bias per distance, query blocks, its own CPU backward ---

BIAS_CASES = where(lambda s: s.adds_bias)


def reference_attention(q, k, v, positions, scheme) -> torch.Tensor:
    """softmax(q·kᵀ/√d + bias + causal mask)·v, written out with the whole (H, T, T) score matrix."""
    logits = q @ k.transpose(-1, -2) / math.sqrt(q.size(-1)) + pair_bias(scheme, positions)
    future = positions[None, :] > positions[:, None]
    return logits.masked_fill(future, float("-inf")).softmax(-1) @ v


@pytest.mark.parametrize("name", BIAS_CASES)
@pytest.mark.parametrize("block", [1, 3, 37])
def test_query_blocks_equal_the_plain_reference(name, block, monkeypatch):
    torch.manual_seed(0)
    B, H, T, D = 2, 4, 37, 8  # T prime: the last query block is shorter than the others
    scheme = build_scheme(name, H * D, H, block_size=T // 4)  # queries past FIRE's threshold too
    q, k, v = (torch.randn(B, H, T, D) for _ in range(3))
    monkeypatch.setattr(blocks_module, "MASK_BUDGET", H * T * block)  # forces blocks of `block` queries
    got = attend(q, k, v, layer=LayerAttention(scheme))
    torch.testing.assert_close(
        got, reference_attention(q, k, v, torch.arange(T), scheme), rtol=1e-5, atol=1e-5
    )


def gradients(attention, scheme, q, k, v):
    """Gradients of a fixed random projection of the output w.r.t. q, k, v and the scheme's parameters."""
    leaves = [q, k, v, *scheme.parameters()]
    out = attention(q, k, v)
    weights = torch.randn(out.shape, generator=torch.Generator().manual_seed(1))
    return torch.autograd.grad((out.float() * weights).sum(), leaves)


@pytest.mark.parametrize("name", LEARNED_BIAS)
@pytest.mark.parametrize("block", [5, 37])
def test_learned_bias_gradients_equal_the_reference(name, block, monkeypatch):
    """The mask needs a gradient here, so on CPU MaskGradAttention's own backward runs: it must give
    the gradients autograd gives through softmax(q·kᵀ/√d + bias)·v written out."""
    torch.manual_seed(0)
    B, H, T, D = 3, 4, 37, 8  # B odd: the backward's last batch chunk is short
    scheme = build_scheme(name, H * D, H, block_size=T // 4)
    for p in scheme.parameters():
        torch.nn.init.normal_(p)
    q, k, v = (torch.randn(B, H, T, D, requires_grad=True) for _ in range(3))
    monkeypatch.setattr(blocks_module, "MASK_BUDGET", H * T * block)
    got = gradients(lambda q, k, v: attend(q, k, v, layer=LayerAttention(scheme)), scheme, q, k, v)
    expected = gradients(
        lambda q, k, v: reference_attention(q, k, v, torch.arange(T), scheme), scheme, q, k, v
    )
    assert len(got) > 3  # the scheme's parameters got gradients too
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", LEARNED_BIAS)
def test_learned_bias_gradients_under_bf16_autocast_stay_close(name):
    """bf16 training (train.precision=auto on bf16 CPUs): the same gradients to bf16 precision, i.e.
    within 5% or 2.5x the error of autograd's own bf16 path, whichever is larger. (FIRE's scalars c and
    L sum every pair's gradient: even autograd's bf16 path is 3-5% off there.) A gradient that is zero
    by symmetry (a per-head constant, which softmax ignores) has no relative error to keep."""
    torch.manual_seed(0)
    B, H, T, D = 2, 4, 64, 16
    scheme = build_scheme(name, H * D, H, block_size=T // 4)
    q, k, v = (torch.randn(B, H, T, D, requires_grad=True) for _ in range(3))

    def bf16(attention):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return gradients(
                lambda q, k, v: attention(q.bfloat16(), k.bfloat16(), v.bfloat16()), scheme, q, k, v
            )

    def reference(q, k, v):
        return reference_attention(q, k, v, torch.arange(T), scheme)

    got = bf16(lambda q, k, v: attend(q, k, v, layer=LayerAttention(scheme)))
    autograd_bf16 = bf16(reference)
    expected = gradients(reference, scheme, q, k, v)
    largest = max(e.norm() for e in expected)
    for g, a, e in zip(got, autograd_bf16, expected):
        if e.norm() < 1e-3 * largest:
            continue
        error, autograd_error = ((g - e).norm() / e.norm()).item(), ((a.float() - e).norm() / e.norm()).item()
        assert error < max(0.05, 2.5 * autograd_error)


@pytest.mark.parametrize("name", BIAS_CASES)
def test_per_sequence_positions_bias_by_their_differences(name):
    """Randomized positions: each sequence's scores get bias(p_i - p_j) for its own increasing positions,
    in values and in the gradients of q, k, v and a learned bias (its own CPU backward, one mask per row)."""
    torch.manual_seed(0)
    B, H, T, D = 3, 2, 19, 8
    scheme = build_scheme(name, H * D, H, block_size=T)
    positions = torch.stack([torch.randperm(200)[:T].sort().values for _ in range(B)])
    q, k, v = (torch.randn(B, H, T, D, requires_grad=True) for _ in range(3))
    got = attend(q, k, v, layer=LayerAttention(scheme), positions=positions)
    want = torch.stack([reference_attention(q[b], k[b], v[b], positions[b], scheme) for b in range(B)])
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    weights = torch.randn_like(want)
    inputs = [q, k, v, *scheme.parameters()]
    got_grads = torch.autograd.grad((got * weights).sum(), inputs)
    want_grads = torch.autograd.grad((want * weights).sum(), inputs)
    for g, w in zip(got_grads, want_grads):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("seed", range(3))
def test_fires_evaluation_bias_is_its_one_hidden_layer_mlp_exactly(seed):
    """A ReLU MLP of one scalar is linear between the points where its units turn on or off, so the
    interpolation evaluation uses (no gradient) equals the MLP itself on every pair, whatever its weights."""
    torch.manual_seed(seed)
    fire = build_scheme("fire", 32, 4, block_size=64)
    for parameter in fire.mlp.parameters():
        torch.nn.init.normal_(parameter, std=2.0)
    query = torch.arange(300)[:, None]
    distance = query - torch.arange(300)
    with torch.no_grad():
        interpolated = fire.query_bias(query, distance)
    run_through = fire.query_bias(query, distance).detach()  # grad enabled: the MLP on every pair
    torch.testing.assert_close(interpolated, run_through, rtol=1e-5, atol=1e-5)
