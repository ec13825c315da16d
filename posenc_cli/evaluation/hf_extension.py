"""Training-free context extension (model/extension) in transformers' models of the Llama family.

transformers rotates queries and keys, then hands them to the attention function the config names
(its AttentionInterface). posenc registers one such function, `extended_attention`: where a column's
extension is active it computes the attention as model/extension does for posenc's own runs, from
the rotated rows and the rotation the model's rotary module gives now (rotation.py: a frequency
scaling, YaRN's factor on cos and sin, dynamic NTK's per-forward frequencies all ride along). With no
extension the model keeps its own kernel (sdpa or eager), untouched. Batch 1, no padding, no cache:
posenc scores whole windows, so the function does causality itself (no mask interface is registered,
and transformers passes no mask).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from posenc_cli.core.errors import UsageError
from posenc_cli.evaluation.labels import Variant
from posenc_cli.model.extension import ContextExtension, Rotation
from posenc_cli.model.positional.rope_scaling import RopeScaling

ATTENTION = "posenc_extension"  # the name extended_attention is registered under in transformers
# model types whose attention goes through transformers' attention interface with RoPE over the whole
# head in rotate_half's layout (transformers 5.x: modeling_llama, _mistral, _qwen2, _qwen3, _olmo);
# GPT-NeoX rotates a part of each head only
EXTENDABLE = ("llama", "mistral", "qwen2", "qwen3", "olmo")


@dataclass(frozen=True)
class HFVariant:
    """What an hf: rotary model (or a posenc export) computes in one --rope-scaling column."""

    scaling: RopeScaling | None  # its frequencies; None: its own
    extension: ContextExtension | None  # its attention; None: the model's own kernel

    @property
    def variant(self) -> Variant:
        """The column's Variant: `rope+yarn`, `rope+self_extend (G=8, W=2048)`."""
        names = self.extension.names if self.extension is not None else ()
        marks = self.extension.marks if self.extension is not None else ()
        method = self.scaling.method if self.scaling is not None else ""
        return Variant(scaling=method, extension=names, settings=marks)


@dataclass(frozen=True)
class ActiveExtension:
    """What extended_attention computes for a model's attention layers: the extension, and the rotation
    the model's rotary module gives at the time of the call."""

    extension: ContextExtension
    rotation: Callable[[], Rotation]


def attention_modules(model) -> list[torch.nn.Module]:
    """The model's attention layers: those transformers' attention interface calls with themselves."""
    return [m for m in model.modules() if hasattr(m, "num_key_value_groups") and hasattr(m, "scaling")]


def check_extendable(model, rotary: dict, *, name: str, method: str) -> None:
    """One line where `model` cannot take a training-free extension: a model type outside EXTENDABLE,
    rotary over part of a head, a sliding window, its own query scaling."""
    config = model.config
    allowed = f"{method} applies to hf: models of type {', '.join(EXTENDABLE)} only"
    if config.model_type not in EXTENDABLE:
        raise UsageError(f"--rope-scaling {method}: {name} is a {config.model_type} model; {allowed}")
    layers, pairs = attention_modules(model), [m.inv_freq.numel() for m in rotary.values()]
    if not layers or len(pairs) != 1 or any(2 * pairs[0] != m.head_dim for m in layers):
        raise UsageError(f"--rope-scaling {method}: {name} does not rotate whole heads by RoPE; {allowed}")
    layer_types = getattr(config, "layer_types", None) or ()
    windowed = config.model_type == "mistral" or "sliding_attention" in layer_types
    if windowed and getattr(config, "sliding_window", None) is not None:
        raise UsageError(
            f"--rope-scaling {method}: {name} attends within a sliding window of {config.sliding_window} "
            "tokens, which the extension would drop; give a model without sliding_window"
        )
    if any(m.scaling != m.head_dim**-0.5 for m in layers):
        raise UsageError(
            f"--rope-scaling {method}: {name} scales its queries by its own factor, not head_dim**-0.5; "
            "a model with its own query scaling is not supported"
        )


def use_extension(model, active: ActiveExtension | None, *, plain: str, interface) -> None:
    """Compute attention with `active` from now on, or with the model's own `plain` kernel (None);
    `interface`: transformers' AttentionInterface, where extended_attention is registered."""
    for module in attention_modules(model):
        module.context_extension = active
    wanted = ATTENTION if active is not None else plain
    if model.config._attn_implementation == wanted:
        return
    if active is not None:
        interface.register(ATTENTION, extended_attention)
    model.set_attn_implementation(wanted)
    if model.config._attn_implementation != wanted:  # transformers only warns where it cannot switch
        raise UsageError(f"{type(model).__name__} cannot switch its attention to posenc's extension")


def extended_attention(module, query, key, value, attention_mask, **kwargs):
    """transformers' attention function (AttentionInterface): query (B, H, T, D), key and value
    (B, H_kv, T, D) rotated to positions 0..T-1 -> ((B, T, H, D), no weights), computed by the active
    extension in float32 at least; keys and values repeated for grouped-query attention. kwargs' scaling
    is head_dim**-0.5 (check_extendable), which the extension uses; dropout is 0 in eval mode."""
    active: ActiveExtension = module.context_extension
    groups = module.num_key_value_groups
    key, value = (x.repeat_interleave(groups, dim=1) for x in (key, value))
    compute = torch.promote_types(query.dtype, torch.float32)
    q, k, v = (x.to(compute) for x in (query, key, value))
    out = active.extension.attend(q, k, v, rotation=active.rotation())
    return out.to(query.dtype).transpose(1, 2).contiguous(), None
