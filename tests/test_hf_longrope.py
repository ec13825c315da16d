"""LongRoPE on hf: models (transformers' rope_type "longrope"): a Phi-3 whose config has it (Phi-3-mini-128k,
Phi-3.5-mini, Phi-4-mini) is scored as transformers computes it, its short or long factors switched per
forward on the scored length; posenc's own `--rope-scaling longrope` (the rule, or a factors file) is
transformers' longrope with short factors 1, and its frequencies equal transformers'
`_compute_longrope_parameters`. Tiny random models built here, nothing downloaded.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from test_hf_extension import CONTEXT, LONG, load, method, nll, saved, tokens
from test_hf_files import passkey_tokenizer

from posenc_cli.model.extension.method import ContextMethod
from posenc_cli.model.positional.rope_scaling import LongRopeFactors, RopeScaling, longrope_rule

transformers = pytest.importorskip("transformers")
rope_utils = pytest.importorskip("transformers.modeling_rope_utils")

L0 = 16  # the tiny Phi-3's original_max_position_embeddings: where its factors switch
SHORT, LONG_FACTORS = [1.0, 1.1, 1.2, 1.3], [1.0, 2.0, 4.0, 8.0]


@pytest.fixture(scope="module")
def tokenizer():
    return passkey_tokenizer()


@pytest.fixture(scope="module")
def phi3(tmp_path_factory, tokenizer):
    config = transformers.Phi3Config(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        original_max_position_embeddings=L0,
        rope_scaling={"type": "longrope", "short_factor": SHORT, "long_factor": LONG_FACTORS},
        initializer_range=0.5,
        pad_token_id=0,
        bos_token_id=0,
        eos_token_id=0,
    )
    assert config.rope_parameters["rope_type"] == "longrope"
    return saved(tmp_path_factory.mktemp("phi3"), config, tokenizer)


def transformers_nll(model, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        logits = model(ids[:, :-1]).logits
    return F.cross_entropy(logits[0].float(), ids[0, 1:], reduction="none")


@pytest.mark.parametrize("length", [10, 20])  # within L0: short factors; past it: long ones
def test_a_phi3_with_longrope_in_its_config_scores_as_transformers_forward(phi3, length):
    model = load(phi3)
    assert model.scheme.scalable
    ids = tokens(length, model.config.vocab_size)
    want = transformers_nll(transformers.AutoModelForCausalLM.from_pretrained(phi3), ids)
    torch.testing.assert_close(nll(model, ids)[0], want, atol=1e-5, rtol=0)


def test_the_factor_set_is_switched_per_forward_on_the_scored_length(phi3):
    """Past L0 every position takes the long factors, its first ones too: the first 10 tokens of a
    20-token window score otherwise than the same 10 tokens alone."""
    model = load(phi3)
    ids = tokens(20, model.config.vocab_size)
    alone, within = nll(model, ids[:, :11])[0], nll(model, ids)[0, :10]
    assert (alone - within).abs().max() > 1e-4


def phi3_rope_config(dim_pairs: int, factor: float, long: list[float]):
    return transformers.Phi3Config(
        hidden_size=8 * dim_pairs,
        num_attention_heads=4,
        max_position_embeddings=128,
        original_max_position_embeddings=L0,
        rope_scaling={
            "type": "longrope",
            "short_factor": [1.0] * dim_pairs,
            "long_factor": long,
            "factor": factor,
        },
    )


@pytest.mark.parametrize("given", [None, (1.0, 1.0, 1.5, 3.0)])
def test_posencs_longrope_frequencies_equal_transformers_compute_longrope_parameters(given):
    """Past L: the long set (the rule's or the file's) and sqrt(1 + ln s / ln L), as transformers computes
    them for short factors 1, those long factors and factor s."""
    s, seq_len, base = 2.5, 40, 10000.0
    factors = LongRopeFactors(given, "f.txt") if given else None
    ours, temperature = RopeScaling("longrope", L0, s, long_factors=factors).frequencies(8, base, seq_len)
    long = list(given) if given else longrope_rule(8, base, L0, s=s).tolist()
    config = phi3_rope_config(4, s, long)
    inv_freq, attention = rope_utils._compute_longrope_parameters(config, "cpu", seq_len=seq_len)
    torch.testing.assert_close(ours.float(), inv_freq, atol=0, rtol=1e-6)
    assert temperature == pytest.approx(attention) == pytest.approx(math.sqrt(1 + math.log(s) / math.log(L0)))


@pytest.fixture(scope="module")
def llama(tmp_path_factory, tokenizer):
    config = transformers.LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=CONTEXT,
        initializer_range=0.5,
        bos_token_id=0,
        eos_token_id=0,
    )
    return saved(tmp_path_factory.mktemp("llama"), config, tokenizer)


@pytest.mark.parametrize("given", [None, LongRopeFactors((1.0, 1.0, 2.0, 3.0), "f.txt")])
def test_rope_scaling_longrope_on_an_hf_model_is_transformers_longrope_past_its_context_and_its_own_within(
    llama, given
):
    model = load(llama)
    (variant,) = model.variants([ContextMethod("longrope", long_factors=given)], None)
    model.use_variant(variant)
    ids = tokens(LONG, model.config.vocab_size)
    s = LONG / CONTEXT
    config = transformers.AutoConfig.from_pretrained(llama)
    long = (
        list(given.values)
        if given
        else longrope_rule(8, config.rope_parameters["rope_theta"], CONTEXT, s=s).tolist()
    )
    config.rope_parameters = {
        "rope_type": "longrope",
        "rope_theta": config.rope_parameters["rope_theta"],
        "factor": s,
        "original_max_position_embeddings": CONTEXT,
        "short_factor": [1.0] * 4,
        "long_factor": long,
    }
    want_model = transformers.AutoModelForCausalLM.from_pretrained(llama, config=config)
    torch.testing.assert_close(nll(model, ids)[0], transformers_nll(want_model, ids), atol=1e-5, rtol=0)
    within = tokens(24, model.config.vocab_size)
    plain = load(llama)
    torch.testing.assert_close(nll(model, within), nll(plain, within), atol=1e-6, rtol=0)
    assert (nll(model, ids) - nll(plain, ids)).abs().max() > 1e-4


def test_a_longrope_column_is_labelled_by_its_method(llama):
    model = load(llama)
    (variant,) = model.variants([method("longrope")], None)
    assert str(model.use_variant(variant)).endswith("(rope+longrope)")


def test_an_extension_on_a_phi3_takes_the_long_factors_it_rotated_with_and_within_its_window_changes_nothing(
    phi3,
):
    model = load(phi3)
    ids = tokens(24, model.config.vocab_size)  # past L0: the long factors
    plain = nll(model, ids)
    (variant,) = model.variants([method("self_extend", self_extend_window=24, self_extend_group=2)], None)
    model.use_variant(variant)
    torch.testing.assert_close(nll(model, ids), plain, atol=1e-5, rtol=0)
    pairs = torch.arange(0, 8, 2, dtype=torch.float32) / 8
    long = 1 / (torch.tensor(LONG_FACTORS) * model.config.rope_parameters["rope_theta"] ** pairs)
    torch.testing.assert_close(model.layers.rotation().inv_freq, long)  # what a remap moves rows by
    (variant,) = model.variants([method("rerope", rerope_window=6)], None)
    model.use_variant(variant)
    assert (nll(model, ids) - plain).abs().max() > 1e-4
