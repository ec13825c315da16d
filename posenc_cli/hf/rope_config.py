"""posenc's RoPE scaling methods as transformers' own: a copy of a model's config with rope_parameters set.

posenc's method names map as follows, with s the factor and L the training length (the model's context,
or --hf-context):

    none     the model's own rope_parameters, unchanged
    linear   rope_type "linear", factor s
    ntk      rope_type "default" with rope_theta × s^(d/(d-2)), d the rotary dim (static NTK-aware;
             transformers has no rope_type for it)
    dynamic  rope_type "dynamic", factor s (default 1), max_position_embeddings L
    yarn     rope_type "yarn", factor s, original_max_position_embeddings L
    llama3   rope_type "llama3", factor s, original_max_position_embeddings L, low/high_freq_factor 1/4
    longrope rope_type "longrope", factor s, original_max_position_embeddings L, short_factor 1 per pair,
             long_factor the --longrope-factors file's or the rule's (rope_scaling.longrope_rule): the
             attention factor sqrt(1 + ln s / ln L) and the switch at L are transformers'; s is 1 within L
             (RopeScaling.scale), so a window within L is the model's own

A model whose own config has LongRoPE (Phi-3, Phi-3.5, Phi-4-mini) is scored under `none` as transformers
computes it: its short and long factors switched per forward on the positions' length.

A config with one set per layer type (Gemma 3) has only its full-attention set scaled, as transformers
does with a `rope_scaling` given to that config.
"""

from __future__ import annotations

import copy

from posenc_cli.core.errors import UsageError
from posenc_cli.hf.layouts import FULL
from posenc_cli.model.positional.rope_scaling import LongRopeFactors, longrope_rule


def scaled_config(
    config, method: str, factor: float, *, train_len: int, long_factors: LongRopeFactors | None = None
):
    """A copy of `config` whose rope_parameters ask transformers for `method` (see the module docstring).
    A config with one set per layer type (Gemma 3: sliding_attention, full_attention) has its
    full-attention layers' set scaled, where transformers puts a config's rope_scaling; the local layers
    keep theirs."""
    config = copy.deepcopy(config)
    own = dict(config.rope_parameters)
    nested = bool(own) and all(isinstance(v, dict) for v in own.values())
    if nested and FULL not in own:
        raise UsageError(f"--rope-scaling {method}: the model has no {FULL} layers' RoPE to scale")
    params = scaled_parameters(config, own[FULL] if nested else own, method=method, factor=factor)
    if method == "dynamic":
        config.max_position_embeddings = train_len  # where transformers' dynamic NTK starts to scale
    elif method in ("yarn", "llama3", "longrope"):
        params.update(original_max_position_embeddings=train_len)
    if method == "longrope":
        params.update(
            longrope_parameters(params, rotary_dim(config, own), train_len=train_len, given=long_factors)
        )
    config.rope_parameters = {**own, FULL: params} if nested else params
    return config


def scaled_parameters(config, own: dict, *, method: str, factor: float) -> dict:
    """One set of rope_parameters for `method` at `factor`, from the model's own set `own`."""
    params = {"rope_theta": own["rope_theta"]}
    if "partial_rotary_factor" in own:
        params["partial_rotary_factor"] = own["partial_rotary_factor"]
    if method == "ntk":
        dim = rotary_dim(config, own)
        if dim <= 2:
            raise UsageError(f"--rope-scaling ntk needs a rotary dim above 2, the model has {dim}")
        params.update(rope_type="default", rope_theta=own["rope_theta"] * factor ** (dim / (dim - 2)))
    elif method in ("linear", "dynamic", "yarn", "llama3", "longrope"):
        params.update(rope_type=method, factor=float(factor))
        if method == "llama3":
            params.update(low_freq_factor=1.0, high_freq_factor=4.0)
    else:
        raise UsageError(f"--rope-scaling {method} has no transformers counterpart")
    return params


def rotary_dim(config, own: dict) -> int:
    """The dims each head rotates: head_dim × partial_rotary_factor, as transformers reads them."""
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return int(head_dim * own.get("partial_rotary_factor", 1.0))


def longrope_parameters(params: dict, dim: int, *, train_len: int, given: LongRopeFactors | None) -> dict:
    """LongRoPE's factors per pair for transformers: short 1 (the model's own frequencies within L), long
    the given ones or the rule's at the set's factor s."""
    if given is not None:
        given.check_pairs(dim // 2)
    long = (
        given.values
        if given is not None
        else longrope_rule(dim, params["rope_theta"], train_len, s=params["factor"])
    )
    return {"short_factor": [1.0] * (dim // 2), "long_factor": [float(x) for x in long]}
