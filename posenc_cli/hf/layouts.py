"""Which layers of a transformers model use RoPE, and over what attention, read as its modeling code
builds them (transformers 5.x), so that a training-free extension reaches only the layers it fits.

Released models mix layers: SmolLM3 and Llama 4 leave every fourth layer without RoPE
(`no_rope_layers`), Llama 4 attends in chunks on its RoPE layers (`attention_chunk_size`), cohere2
rotates only its sliding-window layers, Gemma 3 alternates local sliding layers with global ones, each
with its own RoPE base, GPT-OSS alternates 128-token sliding layers (layer 0 first) with full ones, a
learned sink logit per head on every layer, its RoPE YaRN (factor 32 from 4,096, base 150k). An
extension moves queries and keys past the training length; a sliding window or a chunk never lets a
pair that far apart meet, and a layer without RoPE has nothing to move, so those layers keep
transformers' own attention, and a model with no full-attention RoPE layer takes no extension.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import torch

from posenc_cli.core.errors import UsageError
from posenc_cli.model.extension import Rotation
from posenc_cli.model.positional.rope import LAYOUTS

FULL = "full_attention"  # transformers' layer type of a layer that attends to every earlier token


class Rotating(Enum):
    """Which of a model type's attention layers rotate queries and keys."""

    ALL = "all"
    LISTED = "listed"  # those config.no_rope_layers marks 1 (SmolLM3, Llama 4)
    SLIDING = "sliding"  # its sliding-window layers only (cohere2)


@dataclass(frozen=True)
class Layout:
    """How a model type applies RoPE: its pairs' layout (model.positional.rope.LAYOUTS) and its layers."""

    pairs: str = "half"  # rotate_half's halves; "interleaved": dims 2i and 2i + 1 (cohere2, Llama 4)
    rotating: Rotating = Rotating.ALL


# model types whose attention goes through transformers' attention interface with RoPE over the whole
# head (transformers 5.x: modeling_llama, _mistral, _qwen2, _qwen3, _olmo, _smollm3, _llama4, _gemma3,
# _cohere2, _gpt_oss, _phi3); GPT-NeoX rotates a part of each head only
MODEL_LAYOUTS = {
    "llama": Layout(),
    "mistral": Layout(),
    "qwen2": Layout(),
    "qwen3": Layout(),
    "olmo": Layout(),
    "smollm3": Layout(rotating=Rotating.LISTED),
    "llama4_text": Layout("interleaved", Rotating.LISTED),
    "gemma3_text": Layout(),
    "cohere2": Layout("interleaved", Rotating.SLIDING),
    "gpt_oss": Layout(),  # its halves as rotate_half's, cos and sin not repeated; sinks on every layer
    "phi3": Layout(),  # LongRoPE's frequencies as its rotary module switched them; Phi-4-mini's partial rotary refused
}


@dataclass(frozen=True)
class LayerAttention:
    """One attention layer as the extension sees it: whether it rotates, and the span it attends in."""

    module: torch.nn.Module
    rotates: bool
    span: str  # "" for full attention, else "a sliding window" or "chunks"
    span_len: int | None


@dataclass(frozen=True)
class ExtendedLayers:
    """The layers a training-free extension computes, and the rotation they share: the model's rotary
    module (by name: a frequency scaling replaces it), its buffer of their frequencies (`inv_freq`;
    Gemma 3's `full_attention_inv_freq`) and its pair layout."""

    modules: tuple[torch.nn.Module, ...]
    model: torch.nn.Module
    rotary: str
    frequencies: str
    pairs: str

    def rotation(self) -> Rotation:
        """How the rotary module turns queries and keys now (after HFModel.build_rotary, and after a
        dynamic NTK update in the forward that calls this)."""
        inv_freq = getattr(self.model.get_submodule(self.rotary), self.frequencies)
        return Rotation(inv_freq, *LAYOUTS[self.pairs])


def attention_modules(model) -> list[torch.nn.Module]:
    """The model's attention layers: those transformers' attention interface calls with themselves."""
    return [m for m in model.modules() if hasattr(m, "num_key_value_groups") and hasattr(m, "scaling")]


def rotary_modules(model) -> dict[str, torch.nn.Module]:
    """The model's rotary modules by name: those with a RoPE type and frequencies (Gemma 3's holds one
    set per layer type, `sliding_attention_inv_freq` and `full_attention_inv_freq`)."""
    return {
        n: m
        for n, m in model.named_modules()
        if hasattr(m, "rope_type") and any(b.endswith("inv_freq") for b, _ in m.named_buffers(recurse=False))
    }


def frequency_buffer(rotary: torch.nn.Module) -> str:
    """The rotary module's buffer full-attention layers take their frequencies from."""
    return f"{FULL}_inv_freq" if hasattr(rotary, f"{FULL}_inv_freq") else "inv_freq"


def layer_attention(config, module: torch.nn.Module, *, index: int, layout: Layout) -> LayerAttention:
    """Layer `index` of `config`: its layer type (layer_types; a Mistral with sliding_window has none and
    slides on every layer) and whether its modeling code rotates it."""
    types = getattr(config, "layer_types", None)
    kind = types[index] if types else ("sliding_attention" if config.model_type == "mistral" else FULL)
    span, span_len = "", None
    if kind == "chunked_attention" and getattr(config, "attention_chunk_size", None):
        span, span_len = "chunks", config.attention_chunk_size
    elif kind != FULL and getattr(config, "sliding_window", None) is not None:
        span, span_len = "a sliding window", config.sliding_window
    rotates = {
        Rotating.ALL: True,
        Rotating.LISTED: bool(getattr(config, "no_rope_layers", [1] * (index + 1))[index]),
        Rotating.SLIDING: kind == "sliding_attention",
    }[layout.rotating]
    return LayerAttention(module, rotates, span, span_len)


def extended_layers(model, rotary: dict, *, name: str, method: str) -> ExtendedLayers:
    """The layers `method` extends: those that rotate whole heads by RoPE and attend to every earlier
    token. One line where there are none, or the model is one the extension does not fit."""
    config = model.config
    refused = f"--rope-scaling {method}: {name}"
    allowed = f"{method} applies to hf: models of type {', '.join(MODEL_LAYOUTS)} only"
    if config.model_type not in MODEL_LAYOUTS:
        raise UsageError(f"{refused} is a {config.model_type} model; {allowed}")
    layout, modules = MODEL_LAYOUTS[config.model_type], attention_modules(model)
    if len(rotary) != 1 or not modules:
        raise UsageError(f"{refused} does not rotate whole heads by RoPE; {allowed}")
    ((rotary_name, module),) = rotary.items()
    frequencies = frequency_buffer(module)
    pairs = getattr(module, frequencies).numel()
    if any(2 * pairs != m.head_dim for m in modules):
        raise UsageError(f"{refused} does not rotate whole heads by RoPE; {allowed}")
    if getattr(config, "attn_logit_softcapping", None) is not None:
        raise UsageError(
            f"{refused} caps its attention scores (attn_logit_softcapping {config.attn_logit_softcapping}), "
            "which the extension does not compute; give a model without attention softcapping"
        )
    layers = [layer_attention(config, m, index=m.layer_idx, layout=layout) for m in modules]
    rotating = [layer for layer in layers if layer.rotates]
    extended = tuple(layer.module for layer in rotating if not layer.span)
    if not extended:
        if not rotating:
            raise UsageError(f"{refused} has no RoPE layer to extend")
        full = any(not layer.span for layer in layers)
        raise UsageError(
            f"{refused} attends within {rotating[0].span} of {rotating[0].span_len} tokens on every RoPE "
            f"layer, which the extension would drop{', and its full-attention layers have no RoPE' if full else ''}: "
            "no layer to extend; give a model with a full-attention RoPE layer"
        )
    return ExtendedLayers(extended, model, rotary_name, frequencies, layout.pairs)


def decoder(model) -> torch.nn.Module:
    """The causal LM's stack of layers, which returns the final hidden states: its base model, or where
    that is the causal LM itself (Llama 4's names the multimodal checkpoint's prefix) its `model`."""
    base = model.base_model
    return model.model if base is model else base


def output_logits(model, hidden: torch.Tensor) -> torch.Tensor:
    """The causal LM's logits for final hidden states, as its own forward computes them after the head:
    cohere2's logit_scale, Gemma's final_logit_softcapping (the others have neither)."""
    logits = model.get_output_embeddings()(hidden)
    scale = getattr(model, "logit_scale", None)
    if scale is not None:
        logits = logits * scale
    cap = getattr(model.config, "final_logit_softcapping", None)
    if cap is not None:
        logits = torch.tanh(logits / cap) * cap
    return logits
