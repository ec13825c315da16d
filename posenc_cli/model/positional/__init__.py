"""Positional schemes by name. Adding one: a module here, an entry in SCHEMES, a yaml in configs/scheme/.
A scheme's options are the keyword arguments of its __init__ after the model sizes; it checks their ranges."""

from __future__ import annotations

import inspect
from typing import Any

from posenc_cli.errors import UsageError, nearest
from posenc_cli.model.positional.alibi import ALiBi
from posenc_cli.model.positional.base import NoPE, PositionalScheme
from posenc_cli.model.positional.kerple import Kerple
from posenc_cli.model.positional.learned import Learned
from posenc_cli.model.positional.rope import RoPE
from posenc_cli.model.positional.sinusoidal import Sinusoidal
from posenc_cli.model.positional.t5 import T5Bias
from posenc_cli.model.positional.xpos import XPos

SCHEMES: dict[str, type[PositionalScheme]] = {
    cls.name: cls for cls in (NoPE, Sinusoidal, Learned, RoPE, ALiBi, T5Bias, XPos, Kerple)
}
MODEL_SIZES = ("self", "n_embd", "n_head", "block_size")


def scheme_options(name: str | None = None) -> list[str]:
    """The option names of one scheme (or of any scheme): its __init__'s arguments past the model sizes."""
    classes = [SCHEMES[name]] if name else SCHEMES.values()
    return sorted({p for cls in classes for p in inspect.signature(cls.__init__).parameters} - set(MODEL_SIZES))


def build_scheme(name: str, n_embd: int, n_head: int, block_size: int, **options: Any) -> PositionalScheme:
    if name not in SCHEMES:
        raise UsageError(f"unknown scheme {name!r}; choose one of: {', '.join(SCHEMES)}")
    known = scheme_options(name)
    for option in options:
        if option not in known:
            raise UsageError(f"scheme.{option} is not an option of scheme={name}"
                             f"{nearest(option, known) if known else '; it takes no options'}")
    return SCHEMES[name](n_embd, n_head, block_size, **options)


__all__ = ["SCHEMES", "PositionalScheme", "build_scheme", "scheme_options"]
