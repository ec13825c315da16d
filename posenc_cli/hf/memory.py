"""The memory an `hf:` model needs, weights and a forward, against what each device it uses has free."""

from __future__ import annotations

import torch

from posenc_cli.config.forward_memory import extension_bytes
from posenc_cli.core.device import free_memory
from posenc_cli.core.errors import UsageError
from posenc_cli.model.extension import ContextExtension

LOGITS_CHUNK = 1024  # positions whose logits exist at once


def forward_bytes(config, length: int, *, weights: int, element: int, eager: bool) -> int:
    """Bytes a forward over `length` tokens needs, batch 1, without gradients: the weights, a layer's
    activations (a mixture of experts' routed copies included: Llama 4 runs each token through every
    expert's weights, weighted by its router), the chunk of logits, the T x T scores where attention is
    eager (ALiBi in BLOOM), and one T x T mask per layer type (full, sliding, chunked: each built whole,
    so a window or chunk never needs more than full attention)."""
    hidden = config.hidden_size
    inner = max(
        getattr(config, "intermediate_size", None) or getattr(config, "n_inner", None) or 4 * hidden,
        getattr(config, "intermediate_size_mlp", None) or 0,  # Llama 4's dense layers
    )
    heads = config.num_attention_heads
    width = max(hidden, heads * (getattr(config, "head_dim", None) or hidden // heads))  # Gemma 3's q wider
    activations = length * (8 * width + 2 * inner) * element
    experts = getattr(config, "num_local_experts", None) or 0
    if experts:
        activations += experts * length * (2 * hidden + 4 * config.intermediate_size) * element
    masks = len(set(getattr(config, "layer_types", None) or ["full_attention"]))
    scores = 3 * heads * length * length * element if eager else 0
    scores += masks * length * length * (element if eager else 1)
    logits = 2 * LOGITS_CHUNK * config.vocab_size * 4
    return weights + activations + scores + logits


def extended_bytes(config, extension: ContextExtension, length: int) -> int:
    """What a column with a training-free extension adds to forward_bytes: the extension's own blocks
    and moved rows (config.forward_memory.extension_bytes, as for a posenc run's forward), and the fp32
    queries, keys and values it is given, keys and values repeated for grouped-query attention
    (hf.extended_attention)."""
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    given = 3 * heads * length * head_dim * 4
    return given + extension_bytes([extension], batch=1, heads=heads, length=length, head_dim=head_dim)


def check_weights_fit(config, elements: int, *, element: int, devices: list[torch.device], name: str) -> None:
    """The model's weights, counted on the meta device before it is built, must fit what each device
    it passes through (the CPU it is loaded on, the one it runs on) has free."""
    need = forward_bytes(config, 0, weights=elements * element, element=element, eager=False)
    for device in dict.fromkeys(devices):
        have = free_memory(device)
        if have is not None and need > have:
            raise UsageError(
                f"{name} has {elements:,} weights, about {need / 2**30:.1f} GiB at {element} bytes each, more "
                f"than the {have / 2**30:.1f} GiB free on {device}; use --dtype bf16, --device-map auto, or a "
                "smaller model"
            )
