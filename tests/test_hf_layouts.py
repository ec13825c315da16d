"""hf: models whose layers mix schemes, as transformers builds them: SmolLM3 and Llama 4 (NoPE every
fourth layer; Llama 4's RoPE layers chunked, its NoPE layers' queries under a temperature), cohere2
(sliding-window RoPE layers, global NoPE layers) and Gemma 3 (local sliding layers at base 10k, global
ones at 1M, its own query scaling, q/k norms, final softcapping). posenc scores each as transformers'
own forward does; a training-free extension computes only the layers that rotate over full attention,
each pair as the paper places it, and the other layers keep transformers' attention; a layout with no
such layer is refused in one line. Tiny random models built here, 4 layers, nothing downloaded.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from test_hf_extension import assert_one_line, load, method, nll, relative, saved, tokens
from test_hf_files import passkey_tokenizer

from conftest import assert_refused, invoke, posenc
from posenc_cli.core.errors import UsageError
from posenc_cli.hf.extended_attention import ATTENTION
from posenc_cli.hf.memory import forward_bytes
from posenc_cli.hf.rope_config import scaled_config
from posenc_cli.model.positional.rope import RoPE

transformers = pytest.importorskip("transformers")

CONTEXT = 32  # max_position_embeddings: the methods' L
LONG = 44  # tokens past it
WINDOW = 8  # cohere2's and Gemma 3's sliding window, Llama 4's chunk: shorter than every scored window


def layout_config(kind: str, vocab: int, **changes):
    """A tiny config of the `kind` layout, with `changes` given to its constructor."""
    common = {
        "vocab_size": vocab,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": CONTEXT,
        "initializer_range": 0.5,  # large weights, so positions matter
        "bos_token_id": 0,
        "eos_token_id": 0,
        "pad_token_id": 0,
        **changes,
    }
    llama4 = {
        "head_dim": 8,
        "intermediate_size_mlp": 64,
        "num_local_experts": 2,
        "floor_scale": 4,
        "attn_scale": 0.5,
    }
    return {
        "smollm3": lambda: transformers.SmolLM3Config(**common),  # NoPE on layer 3
        "llama4": lambda: transformers.Llama4TextConfig(**common, **llama4, attention_chunk_size=WINDOW),
        "llama4_unchunked": lambda: transformers.Llama4TextConfig(
            **common, **llama4, attention_chunk_size=None
        ),
        "cohere2": lambda: transformers.Cohere2Config(
            **common, sliding_window=WINDOW, layer_types=["sliding_attention"] * 3 + ["full_attention"]
        ),
        "gemma3": lambda: transformers.Gemma3TextConfig(
            **common,
            head_dim=16,  # 4 heads of 16 on a hidden size of 32
            query_pre_attn_scalar=24,  # its scale, not head_dim**-0.5
            final_logit_softcapping=2.0,
            sliding_window=WINDOW,
            layer_types=["sliding_attention", "sliding_attention", "full_attention", "sliding_attention"],
        ),
    }[kind]()


KINDS = ("smollm3", "llama4", "llama4_unchunked", "cohere2", "gemma3")


@pytest.fixture(scope="module")
def tokenizer():
    return passkey_tokenizer()


@pytest.fixture(scope="module")
def layouts(tmp_path_factory, tokenizer) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("layouts")
    return {kind: saved(root / kind, layout_config(kind, len(tokenizer)), tokenizer) for kind in KINDS}


@pytest.mark.parametrize("kind", KINDS)
def test_each_layout_scores_as_transformers_own_forward(layouts, kind):
    """Windows, chunks, NoPE layers, Llama 4's temperature, cohere2's logit scale and Gemma 3's final
    softcapping: posenc's per-token NLL is the cross entropy of transformers' own logits."""
    model = load(layouts[kind])
    assert model.scheme is RoPE and model.attention == "sdpa"
    ids = tokens(LONG, model.config.vocab_size)
    with torch.no_grad():
        logits = model.model(ids[:, :-1]).logits
    want = F.cross_entropy(logits[0].float(), ids[0, 1:], reduction="none")
    torch.testing.assert_close(nll(model, ids)[0], want, atol=1e-5, rtol=0)
    head = model.model.get_output_embeddings()(model.hidden_states(ids[:, :-1])).float()
    if kind in ("cohere2", "gemma3"):  # the head alone is not the model's logits
        assert (head - logits).abs().max() > 1e-3


@pytest.mark.slow  # the whole eval and probe of five models, a minute and more
def test_eval_and_probe_run_each_layout_from_the_command_line(layouts, tmp_path):
    text = tmp_path / "text.txt"
    text.write_text(" ".join(["The grass is green. The sky is blue."] * 40))
    models = [f"hf:{layouts[kind]}" for kind in KINDS]
    out = tmp_path / "eval"
    result = invoke("eval", *models, "--data", str(text), "--lengths", "24,48", "--out", str(out))
    assert result.code == 0, result.stderr
    assert (out / "results.json").is_file()
    args = ("--lengths", "96", "--depths", "0.5", "--trials", "1", "--out", str(tmp_path / "probe"))
    result = invoke("probe", *models, *args)
    assert result.code == 0, result.stderr


# -- training-free extensions ------------------------------------------------------------------------

EXTENDED = {"smollm3": (0, 1, 2), "llama4_unchunked": (0, 1, 2), "gemma3": (2,)}  # full-attention RoPE


@pytest.mark.parametrize("kind", list(EXTENDED))
def test_an_extension_reaches_only_the_full_attention_rope_layers_and_within_its_window_changes_nothing(
    layouts, kind
):
    model = load(layouts[kind])
    ids = tokens(24, model.config.vocab_size)
    plain = nll(model, ids)
    (variant,) = model.variants([method("self_extend", self_extend_window=24, self_extend_group=2)], None)
    model.use_variant(variant)
    assert model.model.config._attn_implementation == ATTENTION
    attentions = [layer.self_attn for layer in model.model.model.layers]
    reached = [i for i, a in enumerate(attentions) if a.context_extension is not None]
    assert tuple(reached) == EXTENDED[kind]
    torch.testing.assert_close(nll(model, ids), plain, atol=1e-6, rtol=0)
    model.use_variant(None)
    assert model.model.config._attn_implementation == "sdpa"


def turn(x: torch.Tensor, angle: torch.Tensor, pairs: str) -> torch.Tensor:
    """x (H, D) turned by angle (D/2,) per pair: dims (i, i + D/2), or (2i, 2i + 1) interleaved."""
    cos, sin = angle.cos(), angle.sin()
    if pairs == "half":
        a, b = x.chunk(2, -1)
        return torch.cat([a * cos - b * sin, b * cos + a * sin], -1)
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack([a * cos - b * sin, b * cos + a * sin], -1).flatten(-2)


def pair_attention(q, k, v, *, distance, inv_freq, pairs, scale, window=None, norm=None, temperature=None):
    """q, k, v: (H, T, D) float64 as the projections give them (unrotated) -> (H, T, D): query i meets
    key j turned by distance(i, j) (None: no rotation), inside the window, normed after turning (Llama 4's
    L2 norm), its query under temperature(i)."""
    H, T, D = q.shape
    out = torch.empty_like(q)
    for i in range(T):
        seen = range(max(0, i - window + 1) if window else 0, i + 1)
        scores = torch.empty(H, len(seen), dtype=torch.float64)
        for n, j in enumerate(seen):
            qi, kj = q[:, i], k[:, j]
            if distance is not None:
                qi = turn(qi, distance(i, j) * inv_freq, pairs)
            if norm is not None:
                qi, kj = norm(qi), norm(kj)
            if temperature is not None:
                qi = qi * temperature(i)
            scores[:, n] = (qi * kj).sum(-1) * scale
        out[:, i] = torch.einsum("hj,hjd->hd", scores.softmax(-1), v[:, seen.start : i + 1])
    return out


def llama4_temperature(config):
    """Llama 4's NoPE-layer query scale: 1 + β·ln(1 + floor((i + 1) / floor_scale))."""
    return lambda i: 1 + config.attn_scale * math.log1p(math.floor((i + 1) / config.floor_scale))


def layer_reference(model, kind: str, index: int, extension, seen: dict) -> torch.Tensor:
    """The attention output of layer `index` by pair_attention, from its projections `seen`."""
    config, attention = model.config, model.model.model.layers[index].self_attn
    D = attention.head_dim
    q, k, v = (seen[p][0].double().view(LONG, -1, D).transpose(0, 1) for p in ("q_proj", "k_proj", "v_proj"))
    k, v = (x.repeat_interleave(attention.num_key_value_groups, 0) for x in (k, v))
    rotary = model.model.model.rotary_emb
    extended = index in EXTENDED[kind]
    name = extension.remap.name
    distance = (lambda i, j: relative(name, i, j, extension.remap)) if extended else (lambda i, j: i - j)
    options = {
        "pairs": "half",
        "scale": D**-0.5,
        "inv_freq": rotary.inv_freq.double() if kind != "gemma3" else None,
    }
    if kind == "smollm3" and not config.no_rope_layers[index]:
        options["distance"] = None
    elif kind == "llama4_unchunked":
        options.update(pairs="interleaved", distance=distance if config.no_rope_layers[index] else None)
        if config.no_rope_layers[index]:
            options["norm"] = lambda x: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + config.rms_norm_eps)
        else:
            options["temperature"] = llama4_temperature(config)
    elif kind == "gemma3":
        full = config.layer_types[index] == "full_attention"
        q, k = (
            norm(x.transpose(0, 1).float()).double().transpose(0, 1)
            for norm, x in ((attention.q_norm, q), (attention.k_norm, k))
        )
        frequencies = rotary.full_attention_inv_freq if full else rotary.sliding_attention_inv_freq
        options.update(inv_freq=frequencies.double(), scale=config.query_pre_attn_scalar**-0.5)
        options["window"] = None if full else config.sliding_window
    options.setdefault("distance", distance)
    return pair_attention(q, k, v, **options)


PAST = [  # each layout with each method once would be nine models' pair loops: four cover them
    ("smollm3", "self_extend", {"self_extend_group": 3, "self_extend_window": 5}),
    ("smollm3", "dca", {"dca_chunk": 7, "dca_local": 3}),
    ("llama4_unchunked", "dca", {"dca_chunk": 7, "dca_local": 3}),
    ("gemma3", "leaky_rerope", {"rerope_window": 6, "rerope_leak": 3.0}),
]


@pytest.mark.parametrize("kind, text, settings", PAST)
def test_past_its_window_each_layer_attends_as_the_paper_on_rope_layers_and_as_its_own_elsewhere(
    layouts, kind, text, settings
):
    model = load(layouts[kind])
    (variant,) = model.variants([method(text, **settings)], None)
    model.use_variant(variant)
    seen: dict[int, dict] = {}
    for index, layer in enumerate(model.model.model.layers):
        seen[index] = {}
        attention = layer.self_attn
        for part in ("q_proj", "k_proj", "v_proj"):
            getattr(attention, part).register_forward_hook(
                lambda m, a, out, part=part, into=seen[index]: into.update({part: out})
            )
        attention.register_forward_hook(lambda m, a, out, into=seen[index]: into.update(out=out[0]))
    nll(model, tokens(LONG, model.config.vocab_size))
    for index, layer in enumerate(model.model.model.layers):
        want = layer_reference(model, kind, index, variant.extension, seen[index])
        out = want.transpose(0, 1).reshape(LONG, -1) @ layer.self_attn.o_proj.weight.detach().double().T
        scale = float(out.detach().abs().max())
        torch.testing.assert_close(seen[index]["out"][0].double(), out, atol=1e-5 * scale, rtol=1e-5)


@pytest.mark.parametrize(
    "kind, why",
    [
        ("cohere2", f"attends within a sliding window of {WINDOW} tokens on every RoPE layer"),
        ("llama4", f"attends within chunks of {WINDOW} tokens on every RoPE layer"),
    ],
)
def test_a_layout_without_a_full_attention_rope_layer_refuses_an_extension_in_one_line(layouts, kind, why):
    model = load(layouts[kind])
    with pytest.raises(UsageError) as refused:
        model.variants([method("none"), method("dca")], None)
    assert_one_line(refused.value, "--rope-scaling dca", why, "its full-attention layers have no RoPE")


@pytest.mark.parametrize("kind", ["cohere2", "llama4"])
def test_the_command_line_refuses_it_before_any_scoring_with_exit_2(layouts, tmp_path, kind):
    text = tmp_path / "text.txt"
    text.write_text("The grass is green. " * 40)
    out = tmp_path / "out"
    code, stderr = posenc(
        "eval",
        f"hf:{layouts[kind]}",
        "--data",
        str(text),
        "--lengths",
        "24",
        "--rope-scaling",
        "none,self_extend",
        "--out",
        str(out),
    )
    assert_refused(code, stderr, "--rope-scaling self_extend", "no layer to extend")
    assert not out.exists()


def test_attention_softcapping_refuses_an_extension_in_one_line(tmp_path, tokenizer):
    config = layout_config("gemma3", len(tokenizer), attn_logit_softcapping=50.0)
    model = load(saved(tmp_path / "capped", config, tokenizer))
    with pytest.raises(UsageError) as refused:
        model.variants([method("rerope")], None)
    assert_one_line(refused.value, "caps its attention scores (attn_logit_softcapping 50.0)")


# -- frequency scalings ------------------------------------------------------------------------------


@pytest.mark.parametrize("scaling", [("linear", 2.0), ("yarn", 2.0)])
def test_gemma3s_frequency_scaling_is_transformers_rope_scaling_on_its_global_layers(layouts, scaling):
    """transformers puts a Gemma 3 config's rope_scaling on its full-attention layers' set: posenc's
    column scores as that model, and the local layers keep base 10k unscaled."""
    name, factor = scaling
    model = load(layouts["gemma3"])
    local = model.model.model.rotary_emb.sliding_attention_inv_freq.clone()
    (variant,) = model.variants([method(name)], factor)
    model.use_variant(variant)
    ids = tokens(LONG, model.config.vocab_size)
    got = nll(model, ids)
    rope_scaling = {"rope_type": name, "factor": factor}
    if name == "yarn":
        rope_scaling["original_max_position_embeddings"] = CONTEXT
    config = layout_config("gemma3", model.config.vocab_size, rope_scaling=rope_scaling)
    assert config.rope_parameters["sliding_attention"]["rope_type"] == "default"  # transformers' choice
    want_model = transformers.AutoModelForCausalLM.from_pretrained(layouts["gemma3"], config=config)
    with torch.no_grad():
        logits = want_model(ids[:, :-1]).logits
    want = F.cross_entropy(logits[0].float(), ids[0, 1:], reduction="none")
    torch.testing.assert_close(got[0], want, atol=1e-5, rtol=0)
    torch.testing.assert_close(model.model.model.rotary_emb.sliding_attention_inv_freq, local, atol=0, rtol=0)
    assert (got - nll(load(layouts["gemma3"]), ids)).abs().max() > 1e-4  # the scaling did change it


def test_scaled_config_keeps_gemma3s_local_rope_parameters(tokenizer):
    config = layout_config("gemma3", len(tokenizer))
    scaled = scaled_config(config, "ntk", 4.0, train_len=CONTEXT)
    assert scaled.rope_parameters["sliding_attention"] == config.rope_parameters["sliding_attention"]
    d = config.head_dim
    assert scaled.rope_parameters["full_attention"]["rope_theta"] == pytest.approx(
        config.rope_parameters["full_attention"]["rope_theta"] * 4.0 ** (d / (d - 2))
    )


# -- memory ------------------------------------------------------------------------------------------


def test_the_memory_estimate_of_a_windowed_or_expert_layout_is_at_least_its_full_attention_dense_one(
    tokenizer,
):
    """A sliding window or chunk builds a mask of its own besides the full one, and Llama 4's experts
    each see every token: the estimate counts both, so it never falls below the plain layout's."""
    for kind in ("gemma3", "cohere2", "llama4"):
        config = layout_config(kind, len(tokenizer))
        layered = forward_bytes(config, 4096, weights=0, element=4, eager=False)
        config.layer_types = ["full_attention"] * config.num_hidden_layers
        if kind == "llama4":
            config.num_local_experts = 0
        plain = forward_bytes(config, 4096, weights=0, element=4, eager=False)
        assert layered > plain
