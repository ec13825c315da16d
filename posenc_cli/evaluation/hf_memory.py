"""The memory an `hf:` model needs, weights and a forward, against what each device it uses has free."""

from __future__ import annotations

import torch

from posenc_cli.core.device import free_memory
from posenc_cli.core.errors import UsageError
from posenc_cli.model.extension import ContextExtension

LOGITS_CHUNK = 1024  # positions whose logits exist at once


def forward_bytes(config, length: int, *, weights: int, element: int, eager: bool) -> int:
    """Bytes a forward over `length` tokens needs, batch 1, without gradients: the weights, a layer's
    activations, the chunk of logits, and the T x T scores where attention is eager (ALiBi in BLOOM)."""
    hidden = config.hidden_size
    inner = getattr(config, "intermediate_size", None) or getattr(config, "n_inner", None) or 4 * hidden
    activations = length * (8 * hidden + 2 * inner) * element
    scores = 3 * config.num_attention_heads * length * length * element if eager else length * length  # mask
    logits = 2 * LOGITS_CHUNK * config.vocab_size * 4
    return weights + activations + scores + logits


def extended_bytes(config, extension: ContextExtension, length: int) -> int:
    """What a column with a training-free extension adds to forward_bytes: the extension's own blocks
    and moved rows (ContextExtension.extra_bytes), and the fp32 queries, keys and values it is given,
    keys and values repeated for grouped-query attention (evaluation.hf_extension)."""
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    given = 3 * heads * length * head_dim * 4
    return given + extension.extra_bytes(batch=1, heads=heads, length=length, head_dim=head_dim)


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
