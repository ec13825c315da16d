"""How `hf:` models are loaded, as eval and probe take it from their options (light: no torch, so that
the command line's --help stays fast)."""

from __future__ import annotations

from posenc_cli.core.errors import UsageError


def hf_options(context: int | None, device, dtype: str, *, device_map: str | None = None) -> dict:
    """How hf: models are loaded (checked here, before any model is)."""
    if context is not None and context <= 0:
        raise UsageError(f"--hf-context must be a positive integer, got {context}")
    return {"context": context, "device": device, "dtype": dtype, "device_map": device_map}
