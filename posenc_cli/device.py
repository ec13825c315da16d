"""Device and precision. `auto` device means cuda, then mps, then cpu. `auto` precision means bf16
autocast where the hardware computes bf16 natively (CUDA with bf16, CPUs with AVX-512 BF16 or AMX),
fp32 elsewhere; the loss is always computed in fp32."""

from __future__ import annotations

import contextlib

import torch

from posenc_cli.choices import DEVICES
from posenc_cli.errors import UsageError

PRECISIONS = ("auto", "fp32", "bf16")


def resolve_device(name: str) -> torch.device:
    kind = str(name).split(":")[0]
    if kind not in DEVICES:
        raise UsageError(
            f"device={name} is not known; choose one of: {', '.join(DEVICES)} (cuda:N also works)"
        )
    if kind == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    if kind == "cuda" and not torch.cuda.is_available():
        raise UsageError(
            f"device={name} was asked for, but this torch sees no CUDA GPU; use device=auto or cpu"
        )
    if kind == "mps" and not torch.backends.mps.is_available():
        raise UsageError(
            f"device={name} was asked for, but MPS is not available here; use device=auto or cpu"
        )
    return torch.device(name)


def native_bf16(device: torch.device) -> bool:
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    if device.type == "cpu":
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    return False


def computes_in_bf16(device: torch.device, precision: str = "auto") -> bool:
    """Whether training at `precision` runs its matmuls in bf16: asked for (bf16), or auto where it
    pays (native-bf16 hardware); autocast exists on CUDA and CPU only."""
    bf16 = precision == "bf16" or (precision == "auto" and native_bf16(device))
    return bf16 and device.type in ("cuda", "cpu")


def autocast(device: torch.device, precision: str = "auto"):
    """bf16 autocast when asked for (bf16) or when it pays (auto on native-bf16 hardware)."""
    if computes_in_bf16(device, precision):
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()
