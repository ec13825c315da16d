"""Partial RoPE in its two forms: GPT-NeoX's `scheme.rotary_fraction` (the first int(p·D) dimensions turn,
with frequencies over those dimensions; Pythia, Phi-4-mini) and p-RoPE (`scheme=p_rope`, Barbero et al.
2025: the whole head's spectrum with its lowest frequencies set to zero; Gemma 4). Each is checked
against an independent reference written from its equations (never posenc's RoPE), against
transformers' own code where it has one, and at its ends, where it is exactly rope or none.
"""

from __future__ import annotations

import math

import pytest
import torch
from test_context_extension import SMALL, relative

from conftest import invoke
from posenc_cli.core.errors import UsageError
from posenc_cli.model import GPT, ModelConfig, ModelSize
from posenc_cli.model.attention import attend
from posenc_cli.model.extension.method import parse_method
from posenc_cli.model.layer_attention import LayerAttention
from posenc_cli.model.positional import build_scheme

D, H, T, BASE = 32, 2, 24, 10000.0  # head dim, heads, positions, RoPE base
POSITIONS = torch.arange(T)


def scheme(name: str = "rope", **options):
    return build_scheme(name, D * H, H, block_size=T, **options)


def pairs(layout: str, dims: int) -> list[tuple[int, int]]:
    """The dimensions each frequency turns together: GPT-NeoX's (i, i + d/2), GPT-J's (2i, 2i + 1)."""
    return [(i, i + dims // 2) if layout == "half" else (2 * i, 2 * i + 1) for i in range(dims // 2)]


def turned(x: torch.Tensor, theta: list[float], layout: str, positions: torch.Tensor) -> torch.Tensor:
    """x (..., T, D) with pair i of its first 2·len(theta) dimensions turned by m·θ_i at position m,
    the rest copied: the rotation matrix of Su et al. written out per pair."""
    out = x.clone().double()
    m = positions.double()
    for (a, b), t in zip(pairs(layout, 2 * len(theta)), theta):
        cos, sin = torch.cos(m * t), torch.sin(m * t)
        out[..., a] = x[..., a] * cos - x[..., b] * sin
        out[..., b] = x[..., a] * sin + x[..., b] * cos
    return out


def neox_theta(fraction: float) -> list[float]:
    """GPT-NeoX: rotary_ndims = int(D·p), θ_i = base^(-2i/rotary_ndims)."""
    dims = int(D * fraction)
    return [BASE ** (-2 * i / dims) for i in range(dims // 2)]


def p_rope_theta(keep: float) -> list[float]:
    """Barbero et al.: θ_i = base^(-2i/D) over the whole head, the last pairs (lowest frequencies) zero."""
    kept = int(keep * D // 2)
    return [BASE ** (-2 * i / D) if i < kept else 0.0 for i in range(D // 2)]


def random_qk(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(2, 2, H, T, D, generator=g)


def gpt(scheme_name: str, **options) -> GPT:
    torch.manual_seed(0)
    config = ModelConfig(
        vocab_size=13,
        block_size=T,
        size=ModelSize(n_layer=2, n_head=H, n_embd=H * D),
        scheme=scheme_name,
        scheme_options=options,
    )
    return GPT(config).eval()


def same_logits(a: GPT, b: GPT) -> bool:
    b.load_state_dict(a.state_dict())
    idx = torch.randint(0, 13, (2, T), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        return torch.equal(a(idx), b(idx))


# ---- the ends: exactly rope, exactly none ----------------------------------------------------------


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_rotary_fraction_one_is_rope_bit_for_bit_in_a_whole_gpt(layout):
    assert same_logits(gpt("rope", layout=layout), gpt("rope", layout=layout, rotary_fraction=1.0))


@pytest.mark.parametrize(
    "options", [{}, {"layout": "interleaved"}, {"scaling": "yarn", "scaling_factor": 4.0}]
)
def test_keep_fraction_one_is_rope_bit_for_bit_in_a_whole_gpt(options):
    assert same_logits(gpt("rope", **options), gpt("p_rope", keep_fraction=1.0, **options))


def test_keep_fraction_zero_is_none_bit_for_bit_in_a_whole_gpt():
    assert same_logits(gpt("none"), gpt("p_rope", keep_fraction=0.0))


def test_a_partial_rotation_changes_the_model():
    """The identities above are not vacuous: a fraction off its end changes the logits."""
    assert not same_logits(gpt("rope"), gpt("rope", rotary_fraction=0.5))
    assert not same_logits(gpt("rope"), gpt("p_rope"))
    assert not same_logits(gpt("none"), gpt("p_rope", keep_fraction=0.25))


# ---- against the equations --------------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("fraction", [0.25, 0.5, 0.75, 0.7])
def test_partial_rotary_is_gpt_neox_rotary_written_from_its_equations(fraction, layout):
    """0.7 of 32 is 22.4: rotary_ndims rounds down to 22 (int), as GPT-NeoX's does."""
    q, k = random_qk()
    got = scheme(rotary_fraction=fraction, layout=layout).rotate(q, k, POSITIONS)
    for x, x_turned in zip((q, k), got):
        want = turned(x, neox_theta(fraction), layout, POSITIONS)
        assert (x_turned.double() - want).abs().max() < 1e-5
        rotated = int(D * fraction)
        assert torch.equal(x_turned[..., rotated:], x[..., rotated:])  # the last D - d untouched


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("keep", [0.75, 0.5, 0.3, 0.0, 1.0])
def test_p_rope_is_its_papers_rotation_written_from_its_equations(keep, layout):
    q, k = random_qk()
    got = scheme("p_rope", keep_fraction=keep, layout=layout).rotate(q, k, POSITIONS)
    for x, x_turned in zip((q, k), got):
        assert (x_turned.double() - turned(x, p_rope_theta(keep), layout, POSITIONS)).abs().max() < 1e-5


def scores_by_distance_spread(q_m: torch.Tensor, k_n: torch.Tensor) -> float:
    """One q and one k per head at every position: the largest spread of q_m·k_n along a diagonal m − n."""
    scores = q_m @ k_n.transpose(-2, -1)
    return max(
        float(d.amax(-1).sub(d.amin(-1)).max())
        for d in (scores.diagonal(o, -2, -1) for o in range(-T + 1, T))
    )


def one_vector_everywhere() -> tuple[torch.Tensor, torch.Tensor]:
    q, k = random_qk()
    return q[:, :, :1].expand(-1, -1, T, -1).contiguous(), k[:, :, :1].expand(-1, -1, T, -1).contiguous()


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_the_rotated_part_of_a_partial_rotary_score_depends_only_on_m_minus_n(layout):
    q, k = one_vector_everywhere()
    rotated = int(D * 0.5)
    q_m, k_n = scheme(rotary_fraction=0.5, layout=layout).rotate(q, k, POSITIONS)
    assert scores_by_distance_spread(q_m[..., :rotated], k_n[..., :rotated]) < 1e-4
    assert scores_by_distance_spread(q_m, k_n) < 1e-4  # the rest is constant: the whole score too


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_a_p_rope_score_depends_only_on_m_minus_n(layout):
    q, k = one_vector_everywhere()
    assert scores_by_distance_spread(*scheme("p_rope", layout=layout).rotate(q, k, POSITIONS)) < 1e-4


# ---- against transformers ------------------------------------------------------------------------


@pytest.mark.parametrize("fraction", [0.25, 0.5, 0.75, 1.0])
def test_partial_rotary_equals_transformers_gpt_neox_rotary(fraction):
    """GPTNeoXRotaryEmbedding's cos and sin over rotary_ndims, through its apply_rotary_pos_emb."""
    neox = pytest.importorskip("transformers.models.gpt_neox.modeling_gpt_neox")
    config = neox.GPTNeoXConfig(
        hidden_size=H * D,
        num_attention_heads=H,
        rope_parameters={"rope_type": "default", "rope_theta": BASE, "partial_rotary_factor": fraction},
    )
    q, k = random_qk()
    cos, sin = neox.GPTNeoXRotaryEmbedding(config)(q, POSITIONS[None])
    for got, want in zip(
        scheme(rotary_fraction=fraction).rotate(q, k, POSITIONS), neox.apply_rotary_pos_emb(q, k, cos, sin)
    ):
        assert (got - want).abs().max() < 1e-5


@pytest.mark.parametrize(
    "method, parameters",
    [
        ("linear", {"factor": 4.0}),
        ("dynamic", {"factor": 2.0}),
        ("yarn", {"factor": 4.0, "original_max_position_embeddings": T, "beta_fast": 32.0, "beta_slow": 1.0}),
    ],
)
def test_a_scaling_of_a_partial_rotary_is_transformers_over_the_rotated_dimensions(method, parameters):
    """transformers scales over int(head_dim·partial_rotary_factor) dimensions: so must posenc's."""
    transformers = pytest.importorskip("transformers")
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    config = transformers.GPTNeoXConfig(
        hidden_size=H * D,
        num_attention_heads=H,
        max_position_embeddings=T,
        rope_parameters={"rope_type": method, "rope_theta": BASE, "partial_rotary_factor": 0.5, **parameters},
    )
    seq_len = 4 * T  # past the training length, where dynamic NTK changes the base
    want, want_factor = ROPE_INIT_FUNCTIONS[method](config, seq_len=seq_len)
    rope = scheme(rotary_fraction=0.5, scaling=method, scaling_factor=parameters["factor"], scaling_len=T)
    got, got_factor = rope.frequencies(seq_len)
    assert got.shape == want.shape == (int(D * 0.5) // 2,)
    assert torch.allclose(got.float(), want, rtol=1e-5) and got_factor == pytest.approx(want_factor)


@pytest.mark.parametrize("keep", [0.75, 0.5, 0.3, 0.0, 1.0])
def test_p_rope_frequencies_are_transformers_proportional_ones(keep):
    """transformers' "proportional" RoPE, partial_rotary_factor the kept share, rounded as it rounds."""
    transformers = pytest.importorskip("transformers")
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    config = transformers.GPTNeoXConfig(
        hidden_size=H * D,
        num_attention_heads=H,
        rope_parameters={"rope_type": "proportional", "rope_theta": BASE, "partial_rotary_factor": keep},
    )
    want, _ = ROPE_INIT_FUNCTIONS["proportional"](config)
    got, _ = scheme("p_rope", keep_fraction=keep).frequencies(T)
    assert torch.allclose(got.float(), want, rtol=1e-6, atol=0)


# ---- a training-free extension moves the rotated dimensions only ------------------------------------


def self_extend_reference(q, k, v, *, theta: list[float], layout: str, remap) -> torch.Tensor:
    """Causal attention from raw q, k: pair i of each query turned by r(i, j)·θ_i (LongLM's r), the
    unrotated dimensions as they are, dotted with the raw key."""
    out = torch.empty_like(v)
    for i in range(q.size(2)):
        r = torch.tensor([relative("self_extend", remap, i, j) for j in range(i + 1)], dtype=torch.float64)
        turned_q = turned(q[:, :, i, None].expand(-1, -1, i + 1, -1), theta, layout, r)
        scores = (turned_q * k[:, :, : i + 1]).sum(-1) / math.sqrt(D)
        out[:, :, i] = (scores.softmax(-1)[..., None] * v[:, :, : i + 1]).sum(-2)
    return out


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize(
    "name, options, theta",
    [("rope", {"rotary_fraction": 0.5}, neox_theta(0.5)), ("p_rope", {}, p_rope_theta(0.75))],
)
def test_self_extend_on_a_partial_rotation_is_the_per_pair_reference(name, options, theta, layout):
    """Self-Extend moves rows by more turns of the model's frequencies: the pass-through dimensions of a
    partial rotary (and p-RoPE's zeroed pairs) must not move."""
    torch.manual_seed(0)
    length = 40  # past Self-Extend's window, past the training length
    q, k, v = (torch.randn(2, H, length, D, dtype=torch.float64) for _ in range(3))
    rope = build_scheme(name, D * H, H, block_size=T, layout=layout, **options).double()
    extension = parse_method("self_extend", SMALL).extension(T)
    layer = LayerAttention(rope).extended(extension)
    got = attend(*rope.rotate(q, k, torch.arange(length)), v, layer=layer, rotation=rope.rotation(length))
    want = self_extend_reference(q, k, v, theta=theta, layout=layout, remap=extension.remap)
    assert (got - want).abs().max() < 1e-5


# ---- names, refusals, inspect --------------------------------------------------------------------


def test_a_columns_label_names_the_fraction_only_off_its_default():
    assert scheme().label == "rope" and scheme(rotary_fraction=1.0).label == "rope"
    assert scheme(rotary_fraction=0.5).label == "rope+rotary=0.5"
    assert scheme(rotary_fraction=0.75, layout="interleaved").label == "rope+interleaved+rotary=0.75"
    assert scheme("p_rope").label == "p_rope" and scheme("p_rope", keep_fraction=0.75).label == "p_rope"
    assert scheme("p_rope", keep_fraction=0.5, scaling="yarn").label == "p_rope+keep=0.5+yarn"


@pytest.mark.parametrize("fraction, dims", [(0.3, 9), (0.01, 0), (0.97, 31)])
def test_a_fraction_leaving_an_odd_or_no_rotated_dimension_is_one_line_naming_head_dim(fraction, dims):
    with pytest.raises(UsageError) as caught:
        scheme(rotary_fraction=fraction)
    message = str(caught.value)
    assert f"= {dims} of head_dim {D}" in message and "multiple of 0.0625" in message and "\n" not in message


@pytest.mark.parametrize("name", ["xpos", "p_rope"])
def test_xpos_and_p_rope_refuse_a_rotary_fraction_in_one_line(name):
    with pytest.raises(UsageError, match=f"scheme={name} needs scheme.rotary_fraction=1, got 0.5"):
        scheme(name, rotary_fraction=0.5)


def test_inspect_states_what_each_partial_rotation_leaves_unrotated(tmp_path):
    cases = [
        (["rope", "--rotary-fraction", "0.75"], "rotates 24 of 32 dimensions per head; 8 left unrotated"),
        (["p_rope"], "rotates 12 of 16 pairs; the 4 lowest frequencies set to zero"),
    ]
    for args, says in cases:
        result = invoke(
            "inspect", *args, "--dim", "64", "--heads", "2", "--length", "16", "--out", str(tmp_path)
        )
        assert result.code == 0, result.stderr
        text = " ".join(result.stdout.split())
        assert f"Partial rotation: {says}" in text
        assert "PASS leaves unrotated what it states" in text
    assert (
        "Partial rotation"
        not in invoke("inspect", "rope", "--dim", "64", "--length", "16", "--out", str(tmp_path)).stdout
    )
