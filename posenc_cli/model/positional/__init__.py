"""Positional schemes by name. Adding one: a module here, an entry in SCHEMES, a yaml in configs/scheme/.
A scheme's options are the keyword arguments of its __init__ after the model sizes; it checks their ranges.

SCHEMES' order is the chapters' order, the one every table and help text shows. Any of them combine as
`A+B` (composite.py).
"""

from __future__ import annotations

import inspect
from typing import Any

from posenc_cli.core.choices import LAYER_OPTIONS
from posenc_cli.core.errors import UsageError, nearest, require_bool
from posenc_cli.model.positional.alibi import ALiBi
from posenc_cli.model.positional.base import Claim, NoPE, PositionalScheme, past_max_len
from posenc_cli.model.positional.composite import Composite
from posenc_cli.model.positional.cope import CoPE
from posenc_cli.model.positional.fire import FIRE
from posenc_cli.model.positional.fox import FoX
from posenc_cli.model.positional.kerple import Kerple
from posenc_cli.model.positional.learned import Learned
from posenc_cli.model.positional.p_rope import PRoPE
from posenc_cli.model.positional.rope import RoPE
from posenc_cli.model.positional.schedule import IRoPE, LayerSchedule, LocalGlobal, RNoPESWA
from posenc_cli.model.positional.sinusoidal import Sinusoidal
from posenc_cli.model.positional.stickbreaking import StickBreaking
from posenc_cli.model.positional.t5 import T5Bias
from posenc_cli.model.positional.xpos import XPos
from posenc_cli.model.temperature import build_temperature
from posenc_cli.model.window import AttentionWindow

SCHEMES: dict[str, type[PositionalScheme]] = {
    cls.name: cls
    for cls in (NoPE, Sinusoidal, Learned, RoPE, ALiBi, T5Bias, XPos, Kerple, FIRE, PRoPE)
    + (LayerSchedule, IRoPE, RNoPESWA, LocalGlobal)
    + (CoPE, FoX, StickBreaking)
}
# a scheme class's __init__ arguments that are not options: the model's sizes, and the builder a layer
# schedule builds its layers' schemes with (given by build_scheme)
NOT_OPTIONS = ("self", "n_embd", "n_head", "block_size", "build")


def scheme_options(name: str | None = None) -> list[str]:
    """The option names of one scheme (or of any scheme): its __init__'s arguments past the model sizes,
    and its parent's where it passes **options on, and the layer options it takes (a schedule sets its
    layers' windows and temperatures per layer: only sinks)."""
    layer = (
        LAYER_OPTIONS if name is None or "+" in name or name not in SCHEMES else SCHEMES[name].layer_options
    )
    return sorted(set(class_options(name)) | set(layer))


def class_options(name: str | None = None) -> list[str]:
    """The options a scheme's class takes itself (see scheme_options)."""
    options: set[str] = set()
    for cls in [SCHEMES[name]] if name else SCHEMES.values():
        for klass in cls.__mro__:
            params = inspect.signature(klass.__init__).parameters
            options |= {
                p for p, v in params.items() if v.kind == v.POSITIONAL_OR_KEYWORD or v.kind == v.KEYWORD_ONLY
            }
            if not any(v.kind == v.VAR_KEYWORD for v in params.values()):
                break
    return sorted(options - set(NOT_OPTIONS))


def claim_for(label: str) -> Claim:
    """The chapters' claim for a scheme; a variant such as `rope+yarn` or an unknown label has none."""
    return SCHEMES[label].claim if label in SCHEMES else Claim()


def build_scheme(name: str, n_embd: int, n_head: int, *, block_size: int, **options: Any) -> PositionalScheme:
    """One scheme by name; `A+B` is the composite of A and B, its options per part in `parts`. The layer
    options (LAYER_OPTIONS) set its window, temperature and sinks, where its class does not take them itself."""
    own = class_options(name) if name in SCHEMES else []
    layer = {key: options.pop(key) for key in LAYER_OPTIONS if key in options and key not in own}
    scheme = scheme_alone(name, n_embd, n_head, block_size=block_size, **options)
    if layer:
        scheme.window = AttentionWindow(layer.pop("window", None), layer.pop("chunk", None))
        sinks = layer.pop("sinks", False)
        require_bool("scheme.sinks", sinks)
        if sinks and scheme.replaces_softmax:
            raise UsageError(
                f"scheme.sinks joins a softmax's denominator, and scheme={name} weighs its keys without one; "
                "drop scheme.sinks"
            )
        scheme.has_sinks = sinks
        scheme.temperature = build_temperature(
            layer.pop("temperature", "none"), n_head=n_head, train_len=block_size, **option_keywords(layer)
        )
    return scheme


def option_keywords(layer: dict[str, Any]) -> dict[str, Any]:
    """temperature_beta, temperature_floor -> build_temperature's beta, floor."""
    return {key.removeprefix("temperature_"): value for key, value in layer.items()}


def scheme_alone(name: str, n_embd: int, n_head: int, *, block_size: int, **options: Any) -> PositionalScheme:
    """build_scheme without the layer options."""
    if "+" in name:
        parts = options.pop("parts", None) or name.split("+")
        if options:
            raise UsageError(
                f"scheme={name} takes options per part (scheme.parts.N.OPTION), not {', '.join(options)}"
            )
        return Composite(n_embd, n_head, block_size, name=name, parts=parts, build=build_scheme)
    if name not in SCHEMES:
        raise UsageError(
            f"unknown scheme {name!r}; choose one of: {', '.join(SCHEMES)}, or parts joined by +"
        )
    known = scheme_options(name)
    for option in options:
        if option not in known:
            raise UsageError(
                f"scheme.{option} is not an option of scheme={name}"
                f"{nearest(option, known) if known else '; it takes no options'}"
            )
    cls = SCHEMES[name]
    builder = {"build": build_scheme} if "build" in inspect.signature(cls.__init__).parameters else {}
    return cls(n_embd, n_head, block_size, **options, **builder)


__all__ = [
    "SCHEMES",
    "Claim",
    "PositionalScheme",
    "build_scheme",
    "claim_for",
    "past_max_len",
    "scheme_options",
]
