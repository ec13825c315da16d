"""Training-free context extension (model/extension) in transformers' rotary models.

transformers rotates queries and keys, then hands them to the attention function the config names
(its AttentionInterface). posenc registers one such function, `extended_attention`: where a column's
extension is active it computes the attention as model/extension does for posenc's own runs, from
the rotated rows and the rotation the model's rotary module gives now (rotation.py: a frequency
scaling, YaRN's factor on cos and sin, dynamic NTK's per-forward frequencies all ride along). With no
extension the model keeps its own kernel (sdpa or eager), untouched. Only the layers that rotate by
RoPE over full attention are extended (hf.layouts); the others (NoPE, sliding-window, chunked) call
the model's own kernel from within the function, with the mask that kernel's mask function gives
(registered under the same name). Batch 1, no padding, no cache: posenc scores whole windows, so the
extended layers do causality themselves and ignore the mask.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from typing import Callable

import torch

from posenc_cli.core.errors import UsageError
from posenc_cli.evaluation.labels import Variant
from posenc_cli.hf.layouts import ExtendedLayers, attention_modules
from posenc_cli.model.attention import attend
from posenc_cli.model.extension import ContextExtension, Rotation
from posenc_cli.model.layer_attention import LayerAttention
from posenc_cli.model.positional.rope_scaling import RopeScaling

ATTENTION = "posenc_extension"  # the name extended_attention is registered under in transformers


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

    def layer(self, module: torch.nn.Module) -> LayerAttention:
        """How the extended layer `module` attends: plain scores, the extension's remap and log-n, and the
        module's own sinks where it has them (GPT-OSS: one logit per query head in every softmax)."""
        layer = LayerAttention.of_extension(self.extension)
        sinks = getattr(module, "sinks", None)
        return layer if sinks is None else replace(layer, sinks=ModuleSinks(sinks))  # type: ignore[arg-type]


@dataclass(frozen=True)
class ModuleSinks:
    """A transformers attention module's sink logits (GptOssAttention.sinks, (heads,)) as the executor
    takes a layer's sinks: by their `logits`."""

    logits: torch.Tensor


def use_extension(
    model, extension: ContextExtension | None, *, layers: ExtendedLayers | None, plain: str, tf
) -> None:
    """Compute the attention of `layers` with `extension` from now on, and every other layer's with the
    model's own `plain` kernel; or all with `plain` (no extension). `tf`: transformers, whose attention
    and mask interfaces extended_attention is registered in (its mask: the plain kernel's, which the
    other layers get as they would without it)."""
    active = None if extension is None or layers is None else ActiveExtension(extension, layers.rotation)
    extended = set(map(id, layers.modules)) if active is not None and layers is not None else set()
    for module in attention_modules(model):
        module.context_extension = active if id(module) in extended else None
        module.plain_attention = plain_kernel(module, plain, tf)
    wanted = ATTENTION if active is not None else plain
    if active is not None:
        tf.AttentionInterface.register(ATTENTION, extended_attention)
        tf.AttentionMaskInterface.register(ATTENTION, tf.masking_utils.ALL_MASK_ATTENTION_FUNCTIONS[plain])
    if model.config._attn_implementation == wanted:
        return
    model.set_attn_implementation(wanted)
    if model.config._attn_implementation != wanted:  # transformers only warns where it cannot switch
        raise UsageError(f"{type(model).__name__} cannot switch its attention to posenc's extension")


def plain_kernel(module: torch.nn.Module, plain: str, tf) -> Callable:
    """The attention function `module` calls under `plain`: sdpa's from transformers' interface, eager's
    from its own modeling module (transformers looks it up there too)."""
    if plain == "eager":
        return sys.modules[type(module).__module__].eager_attention_forward
    return tf.AttentionInterface()[plain]


def extended_attention(module, query, key, value, attention_mask, **kwargs):
    """transformers' attention function (AttentionInterface): query (B, H, T, D), key and value
    (B, H_kv, T, D) rotated to positions 0..T-1 -> ((B, T, H, D), no weights), computed by the active
    extension in float32 at least; keys and values repeated for grouped-query attention. The extension
    scales scores by head_dim**-0.5: a model's own scaling (Gemma 3's query_pre_attn_scalar**-0.5) is
    put on the queries first; a module's sinks join each softmax (GPT-OSS passes them as s_aux too). A
    layer the extension does not reach calls the model's own kernel, with the mask it would get; dropout
    is 0 in eval mode."""
    active: ActiveExtension | None = module.context_extension
    if active is None:
        return module.plain_attention(module, query, key, value, attention_mask, **kwargs)
    groups = module.num_key_value_groups
    key, value = (x.repeat_interleave(groups, dim=1) for x in (key, value))
    compute = torch.promote_types(query.dtype, torch.float32)
    q, k, v = (x.to(compute) for x in (query, key, value))
    scaling = kwargs.get("scaling")
    if scaling is not None and scaling != q.size(-1) ** -0.5:
        q = q * (scaling * q.size(-1) ** 0.5)
    out = attend(q, k, v, layer=active.layer(module), rotation=active.rotation())
    return out.to(query.dtype).transpose(1, 2).contiguous(), None
