"""Layer schedules, attention windows and query temperature: identities with what they generalise,
independent per-pair references, the released models' layouts, and refusals before any work."""

from __future__ import annotations

import math

import pytest
import torch

from posenc_cli.core.errors import UsageError
from posenc_cli.model import GPT, ModelConfig, ModelSize
from posenc_cli.model import blocks as blocks_module
from posenc_cli.model.attention import attend
from posenc_cli.model.layer_attention import LayerAttention
from posenc_cli.model.positional import build_scheme
from posenc_cli.model.temperature import Llama4Temperature, logn_factors
from posenc_cli.model.window import AttentionWindow


def gpt(scheme: str, *, n_layer: int = 4, block_size: int = 32, **options) -> GPT:
    torch.manual_seed(0)
    size = ModelSize(n_layer=n_layer, n_head=2, n_embd=16)
    config = ModelConfig(
        vocab_size=13, block_size=block_size, size=size, scheme=scheme, scheme_options=options
    )
    return GPT(config).eval()


TOKENS = torch.randint(0, 13, (2, 48), generator=torch.Generator().manual_seed(1))


def logits(model: GPT, tokens: torch.Tensor = TOKENS) -> torch.Tensor:
    with torch.no_grad():
        return model(tokens)


# ---- Identities: a schedule, a window or a temperature that changes nothing computes the plain model ----


def test_a_schedule_whose_every_layer_is_rope_is_scheme_rope_bit_for_bit():
    assert torch.equal(logits(gpt("schedule", pattern=["rope"] * 4)), logits(gpt("rope")))


def test_a_schedule_of_rope_and_alibi_layers_gives_each_layer_its_own_scheme():
    model = gpt("schedule", pattern=["rope", "alibi", {"name": "rope", "base": 500.0}, "none"])
    names = [layer.name for layer in model.layer_schemes]
    assert names == ["rope", "alibi", "rope", "none"] and model.layer_schemes[2].base == 500.0
    assert model.scheme.adds_bias and model.scheme.label == "schedule+rope,alibi,rope(base=500),none"


@pytest.mark.parametrize("scheme", ["rope", "alibi", "fire", "none"])
@pytest.mark.parametrize("window", [{"window": 48}, {"chunk": 48}, {"window": 100, "chunk": 200}])
def test_a_window_at_least_as_long_as_the_sequence_is_full_attention_bit_for_bit(scheme, window):
    assert torch.equal(logits(gpt(scheme, **window)), logits(gpt(scheme)))


def test_the_llama4_temperature_below_its_floor_is_plain_attention_bit_for_bit():
    plain = logits(gpt("rope"))
    assert torch.equal(logits(gpt("rope", temperature="llama4", temperature_floor=49)), plain)
    assert not torch.allclose(logits(gpt("rope", temperature="llama4", temperature_floor=8)), plain)


def test_ssmax_with_s_ln_n_equal_to_one_is_plain_attention_for_that_query():
    """SSMax multiplies a query's logits by s·ln n (n = p + 1 keys): with s = 1/ln n the query at p = n − 1
    attends exactly as plain attention; the others do not."""
    scheme, n = build_scheme("none", 16, 2, block_size=8, temperature="ssmax"), 21
    with torch.no_grad():
        scheme.temperature.s.fill_(1 / math.log(n))
    q, k, v = torch.randn(3, 2, 2, n, 8, generator=torch.Generator().manual_seed(4))
    plain = attend(q, k, v, layer=LayerAttention(scheme))
    scaled = attend(q, k, v, layer=LayerAttention(scheme, temperature=scheme.temperature))
    torch.testing.assert_close(scaled[:, :, -1], plain[:, :, -1], rtol=0, atol=1e-6)
    assert (scaled[:, :, 1:-1] - plain[:, :, 1:-1]).abs().amax(-1).min() > 1e-4


def test_the_logn_temperature_is_the_training_free_extensions_logn():
    positions = torch.arange(200)
    scheme = build_scheme("rope", 16, 2, block_size=32, temperature="logn")
    assert torch.equal(scheme.temperature.factors(positions), logn_factors(positions, 32))
    assert torch.equal(scheme.temperature.factors(positions[:32]), torch.ones(32, dtype=torch.float64))


def test_the_llama4_temperature_is_transformers_formula():
    """Llama4TextAttention: attn_scales = log1p(floor((p + 1) / floor_scale)) · attn_scale + 1."""
    positions = torch.arange(0, 40000, 37)
    expected = torch.log1p(torch.floor((positions.double() + 1.0) / 8192)) * 0.1 + 1.0
    assert torch.equal(Llama4Temperature(0.1, 8192).factors(positions), expected)


# ---- Windows against an independent per-pair reference ------------------------------------------------


def reference_attention(q, k, v, *, visible, bias=None):
    """softmax over the keys j a query i sees of q_i·k_j/√D (+ bias[h, i − j]), pair by pair."""
    B, H, T, D = q.shape
    out = torch.zeros_like(q, dtype=torch.float64)
    for i in range(T):
        keys = [j for j in range(T) if visible(i, j)]
        scores = torch.stack([(q[:, :, i] * k[:, :, j]).double().sum(-1) / math.sqrt(D) for j in keys], -1)
        if bias is not None:
            scores = scores + torch.stack([bias[:, i - j].double() for j in keys], -1)
        out[:, :, i] = torch.einsum("bhk,bhkd->bhd", scores.softmax(-1), v[:, :, keys].double())
    return out


@pytest.mark.parametrize(
    ("size", "chunk", "visible"),
    [
        (5, None, lambda i, j: 0 <= i - j < 5),
        (None, 8, lambda i, j: j <= i and i // 8 == j // 8),
        (3, 8, lambda i, j: 0 <= i - j < 3 and i // 8 == j // 8),
    ],
)
@pytest.mark.parametrize("scheme", ["none", "alibi"])
@pytest.mark.parametrize("budget", [None, 40])
def test_windowed_attention_is_the_per_pair_softmax_over_the_keys_in_view(
    size, chunk, visible, scheme, budget, monkeypatch
):
    """Sliding, chunked and both, with and without a bias, in one block and in blocks of a few queries."""
    if budget:
        monkeypatch.setattr(blocks_module, "MASK_BUDGET", budget)
    built = build_scheme(scheme, 16, 2, block_size=8, window=size, chunk=chunk)
    g = torch.Generator().manual_seed(3)
    q, k, v = torch.randn(3, 2, 2, 21, 8, generator=g)
    bias = built.bias(torch.arange(21)) if built.adds_bias else None
    got = attend(q, k, v, layer=LayerAttention(built, built.window))
    torch.testing.assert_close(
        got.double(), reference_attention(q, k, v, visible=visible, bias=bias), rtol=0, atol=1e-5
    )


@pytest.mark.parametrize("options", [{"window": 6}, {"chunk": 8}, {"window": 3, "chunk": 8}])
def test_a_windows_kv_cache_keeps_only_the_keys_the_next_query_sees_and_gives_the_full_logits(options):
    model = gpt("rope", n_layer=2, **options)
    with torch.no_grad():
        cache = model.new_cache()
        steps = [model(TOKENS[:, :7], cache=cache)[:, -1]]
        for t in range(7, 40):
            steps.append(model(TOKENS[:, t : t + 1], cache=cache)[:, -1])
            window = AttentionWindow(options.get("window"), options.get("chunk"))
            assert cache.layers[0].keys.size(2) == t + 1 - window.first_key(t + 1)
        full = model(TOKENS[:, :40])[:, 6:]
    torch.testing.assert_close(torch.stack(steps, 1), full, rtol=0, atol=1e-5)
    assert cache.layers[0].keys.size(2) <= options.get("window", options.get("chunk"))


# ---- The presets are the released models' layouts --------------------------------------------------


def layout(scheme: str, n_layer: int, **options) -> list[tuple[str, int | None, int | None, float | None]]:
    model = gpt(scheme, n_layer=n_layer, block_size=64, **options)
    return [(s.name, s.window.size, s.window.chunk, getattr(s, "base", None)) for s in model.layer_schemes]


def test_irope_puts_nope_where_llama4_and_smollm3_do():
    transformers = pytest.importorskip("transformers")
    config = transformers.Llama4TextConfig(num_hidden_layers=8)
    uses_rope = [bool(flag) for flag in config.no_rope_layers]
    got = layout("irope", 8, chunk=16)
    assert [name == "rope" for name, *_ in got] == uses_rope
    assert all(chunk == (16 if name == "rope" else None) for name, _, chunk, _ in got)


def test_rnope_swa_puts_windows_and_global_nope_where_cohere2_does():
    transformers = pytest.importorskip("transformers")
    types = transformers.Cohere2Config(num_hidden_layers=8).layer_types
    got = layout("rnope_swa", 8)
    assert [("rope", 32) if t == "sliding_attention" else ("none", None) for t in types] == [
        g[:2] for g in got
    ]


def test_local_global_puts_local_and_global_layers_and_bases_where_gemma3_does():
    transformers = pytest.importorskip("transformers")
    config = transformers.Gemma3TextConfig(num_hidden_layers=12)
    expected = [
        ("rope", 16, None, 10000.0) if t == "sliding_attention" else ("rope", None, None, 1000000.0)
        for t in config.layer_types
    ]
    assert layout("local_global", 12) == expected


def test_the_presets_labels_name_their_window_and_options_off_their_defaults():
    assert gpt("irope").scheme.label == "irope"
    assert gpt("irope", chunk=16, temperature="llama4").scheme.label == "irope+chunk=16+temperature=llama4"
    assert gpt("rnope_swa").scheme.label == "rnope_swa+window=16"
    assert gpt("local_global", n_layer=6, every=3).scheme.label == "local_global+every=3+window=8"
    assert gpt("rope", window=8, temperature="ssmax").scheme.label == "rope+window=8+temperature=ssmax"


def test_the_nope_layers_of_irope_alone_take_its_temperature():
    model = gpt("irope", temperature="llama4", temperature_floor=8)
    assert [s.temperature is not None for s in model.layer_schemes] == [False, False, False, True]


def test_ssmax_learns_one_s_per_head_per_layer_that_holds_it():
    model = gpt("schedule", pattern=[{"name": "rope", "temperature": "ssmax"}, "none", "rope", "none"])
    model.train()
    model(TOKENS).square().mean().backward()
    s = model.layer_schemes[0].temperature.s
    assert s.shape == (2,) and s.grad is not None and s.grad.abs().sum() > 0


# ---- Refusals, one line, when the scheme is built ---------------------------------------------------


@pytest.mark.parametrize(
    ("scheme", "options", "n_layer", "needle"),
    [
        ("rope", {"window": 0}, 2, "scheme.window must be an integer between 1"),
        ("rope", {"chunk": -3}, 2, "scheme.chunk must be an integer between 1"),
        ("rope", {"window": 9, "chunk": 8}, 2, "scheme.window=9 is longer than scheme.chunk=8"),
        ("schedule", {"pattern": ["rope", "bogus"]}, 2, "unknown scheme 'bogus'"),
        ("schedule", {"pattern": ["rope"]}, 2, "scheme.pattern lists 1 layers but model.n_layer=2"),
        ("schedule", {"pattern": "rope"}, 2, "scheme.pattern must be a list"),
        ("schedule", {"pattern": ["rope", "learned"]}, 2, "layer 1 is learned, which acts on the token"),
        ("irope", {}, 2, "scheme=irope needs model.n_layer>=4"),
        ("local_global", {}, 4, "scheme=local_global needs model.n_layer>=6"),
        ("irope", {"every": 0}, 4, "scheme.every"),
        ("rnope_swa", {"window": 0}, 4, "scheme.window must be"),
        ("local_global", {"local_base": 0.5}, 6, "scheme.local_base must be"),
        ("irope", {"temperature": "hot"}, 4, "scheme.temperature=hot is not known"),
        ("rope", {"temperature_beta": 0.2}, 2, "apply to scheme.temperature=llama4 only"),
        ("rope", {"temperature": "llama4", "temperature_floor": 0}, 2, "scheme.temperature_floor must be"),
        ("rnope_swa", {"temperature": "ssmax"}, 4, "scheme=rnope_swa sets windows and temperatures per"),
    ],
)
def test_a_bad_schedule_window_or_temperature_is_refused_in_one_line(scheme, options, n_layer, needle):
    with pytest.raises(UsageError) as refused:
        gpt(scheme, n_layer=n_layer, **options)
    assert needle in str(refused.value) and "\n" not in str(refused.value)


# ---- Training-free extensions reach the full-attention RoPE layers only --------------------------------


def test_an_extension_applies_to_a_schedules_full_attention_rope_layers_only():
    from posenc_cli.model.extension.method import ExtensionSettings, parse_method

    model = gpt("local_global", n_layer=6, every=3, block_size=16)
    plain, plain_within = logits(model), logits(model, TOKENS[:, :4])  # within W = L/4
    extended = model.with_extension(parse_method("self_extend", ExtensionSettings()).extension(16))
    assert [layer.remap is not None for layer in extended.attention] == [
        False,
        False,
        True,
        False,
        False,
        True,
    ]
    within = logits(extended, TOKENS[:, :4])
    assert torch.equal(within, plain_within) and (logits(extended) - plain).abs().max() > 1e-5
    assert torch.equal(logits(model), plain)  # the trained model is left as it was


@pytest.mark.parametrize("scheme", ["rnope_swa", "schedule"])
def test_a_schedule_without_a_full_attention_rope_layer_refuses_an_extension_in_one_line(scheme):
    options = (
        {"pattern": [{"name": "rope", "chunk": 8}, "none", "alibi", "none"]} if scheme == "schedule" else {}
    )
    from posenc_cli.model.extension.method import ExtensionSettings, parse_method

    extension = parse_method("self_extend", ExtensionSettings()).extension(16)
    with pytest.raises(UsageError, match="has no layer that takes it") as refused:
        gpt(scheme, **options).with_extension(extension)
    assert "\n" not in str(refused.value) and "within a window" in str(refused.value)


# ---- End to end, as a user runs it ---------------------------------------------------------------


@pytest.mark.slow  # trains
def test_a_scheduled_run_trains_evaluates_samples_and_exports_with_its_layers(tmp_path):
    from conftest import evaluate, invoke, train
    from posenc_cli.hf.export_loading import load_export
    from posenc_cli.rundir.loading import load_run

    run = train(tmp_path, "scheme=irope", "model.n_layer=4", "scheme.chunk=16", "scheme.temperature=llama4")
    table = evaluate(tmp_path, str(run), "--lengths", "64,256", "--rope-scaling", "none,self_extend")
    # chunked RoPE layers: scored once as trained, the extension's column shown unscored with why
    assert set(table["scheme"]) == {
        "irope+chunk=16+temperature=llama4",
        "irope+chunk=16+temperature=llama4+self_extend",
    }
    refused = table[table["scheme"].str.endswith("self_extend")]
    assert refused["ppl"].isna().all() and refused["note"].str.contains("has no layer that takes it").all()
    assert table[~table["scheme"].str.endswith("self_extend")]["ppl"].notna().all() and len(table) == 4
    sampled = invoke("sample", str(run), "--tokens", "40", "--seed", "1")
    assert sampled.code == 0, sampled.stderr
    exported = invoke("export", str(run), "--out", str(tmp_path / "export"))
    assert exported.code == 0, exported.stderr
    (model, _, _), trained = load_export(tmp_path / "export"), load_run(run).model
    tokens = torch.randint(0, trained.cfg.vocab_size, (1, 80))
    with torch.no_grad():
        torch.testing.assert_close(model(tokens), trained(tokens), rtol=0, atol=0)
    assert [s.window.chunk for s in model.layer_schemes] == [16, 16, 16, None]


def test_inspect_picks_a_layer_of_a_schedule_but_refuses_layer_for_a_plain_scheme(tmp_path):
    from conftest import invoke

    inspected = invoke("inspect", "local_global", "--layer", "5", "--out", str(tmp_path / "lg"))
    assert inspected.code == 0 and "layer 5 of 6: rope" in inspected.stdout, inspected.stderr
    refused = invoke("inspect", "rope", "--layer", "1", "--out", str(tmp_path / "r"))
    assert refused.code == 2 and "--layer 1 applies only with --run" in refused.stderr
    assert not (tmp_path / "r").exists()
