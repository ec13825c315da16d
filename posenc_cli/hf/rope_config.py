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

A config with one set per layer type (Gemma 3) has only its full-attention set scaled, as transformers
does with a `rope_scaling` given to that config.
"""

from __future__ import annotations

import copy

from posenc_cli.core.errors import UsageError
from posenc_cli.hf.layouts import FULL


def scaled_config(config, method: str, factor: float, *, train_len: int):
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
    elif method in ("yarn", "llama3"):
        params.update(original_max_position_embeddings=train_len)
    config.rope_parameters = {**own, FULL: params} if nested else params
    return config


def scaled_parameters(config, own: dict, *, method: str, factor: float) -> dict:
    """One set of rope_parameters for `method` at `factor`, from the model's own set `own`."""
    params = {"rope_theta": own["rope_theta"]}
    if "partial_rotary_factor" in own:
        params["partial_rotary_factor"] = own["partial_rotary_factor"]
    if method == "ntk":
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        dim = int(head_dim * own.get("partial_rotary_factor", 1.0))
        if dim <= 2:
            raise UsageError(f"--rope-scaling ntk needs a rotary dim above 2, the model has {dim}")
        params.update(rope_type="default", rope_theta=own["rope_theta"] * factor ** (dim / (dim - 2)))
    elif method in ("linear", "dynamic", "yarn", "llama3"):
        params.update(rope_type=method, factor=float(factor))
        if method == "llama3":
            params.update(low_freq_factor=1.0, high_freq_factor=4.0)
    else:
        raise UsageError(f"--rope-scaling {method} has no transformers counterpart")
    return params
