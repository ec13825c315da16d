"""Device choice: `auto` means cuda, then mps, then cpu. bf16 autocast only where it pays (CUDA)."""

from __future__ import annotations

import contextlib

import torch

from posenc_cli.errors import UsageError

DEVICES = ("auto", "cpu", "cuda", "mps")


def resolve_device(name: str) -> torch.device:
    kind = str(name).split(":")[0]
    if kind not in DEVICES:
        raise UsageError(f"device={name} is not known; choose one of: {', '.join(DEVICES)} (cuda:N also works)")
    if kind == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    if kind == "cuda" and not torch.cuda.is_available():
        raise UsageError(f"device={name} was asked for, but this torch sees no CUDA GPU; use device=auto or cpu")
    if kind == "mps" and not torch.backends.mps.is_available():
        raise UsageError(f"device={name} was asked for, but MPS is not available here; use device=auto or cpu")
    return torch.device(name)


def autocast(device: torch.device):
    if device.type == "cuda" and torch.cuda.is_bf16_supported():
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()
