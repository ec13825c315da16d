"""How `hf:` models are loaded, as eval, probe, sample and the Python API take it from their options
(light: no torch, so that the command line's --help stays fast)."""

from __future__ import annotations

from posenc_cli.core.choices import HF_DEVICE_MAPS, HF_DTYPES, MAX_LENGTH
from posenc_cli.core.errors import require_choice, require_int


def hf_options(context, device, dtype, *, device_map=None) -> dict:
    """How hf: models are loaded, checked here before any model is: the one check the command line,
    posenc.evaluate and probe, and posenc.load_hf go through. --hf-context is a whole number of positions
    (not a bool, a float or a text) up to MAX_LENGTH; `device` is resolved by the caller (resolve_device)."""
    if context is not None:
        require_int("--hf-context", context, at_least=1, at_most=MAX_LENGTH)
    require_choice("--dtype", dtype, HF_DTYPES)
    if device_map is not None:
        require_choice("--device-map", device_map, HF_DEVICE_MAPS)
    return {"context": context, "device": device, "dtype": dtype, "device_map": device_map}
