"""One column of `--rope-scaling`: `yarn`, `self_extend`, `yarn+logn`, `ntk+dca` parsed once into a
ContextMethod, so nothing past the command line reads the text again.

A method is at most one frequency scaling (rope_scaling.py), at most one remap (remap.py) and log-n,
joined by `+` in any order. The remaps' parameters come from their options (ExtensionSettings), each
None until a model's training length gives the paper's default (ContextMethod.extension).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields, replace

from posenc_cli.core.choices import HF_ROPE_SCALING, LOGN, ROPE_SCALING
from posenc_cli.core.errors import UsageError
from posenc_cli.core.option_groups import Extension
from posenc_cli.model.extension import ContextExtension
from posenc_cli.model.extension.dual_chunk import DualChunk
from posenc_cli.model.extension.remap import PositionRemap
from posenc_cli.model.extension.rerope import ReRoPE
from posenc_cli.model.extension.self_extend import SelfExtend
from posenc_cli.model.extension.streaming import Streaming
from posenc_cli.model.extension.string import String
from posenc_cli.model.positional.rope_scaling import LongRopeFactors

# each remap by its --rope-scaling name: the options (ExtensionSettings' fields) it reads, and how it is
# built from them; core.choices.CONTEXT_REMAPS lists the same names for the command line
REMAPS: dict[str, tuple[tuple[str, ...], Callable[[Extension], PositionRemap]]] = {
    "self_extend": (
        ("self_extend_group", "self_extend_window"),
        lambda s: SelfExtend(s.self_extend_group, s.self_extend_window),
    ),
    "rerope": (("rerope_window",), lambda s: ReRoPE(s.rerope_window)),
    "leaky_rerope": (
        ("rerope_window", "rerope_leak"),
        lambda s: ReRoPE(s.rerope_window, s.rerope_leak, leaky=True),
    ),
    "dca": (("dca_chunk", "dca_local"), lambda s: DualChunk(s.dca_chunk, s.dca_local)),
    "string": (("string_offset", "string_window"), lambda s: String(s.string_offset, s.string_window)),
    "streaming": (
        ("streaming_sinks", "streaming_window"),
        lambda s: Streaming(s.streaming_sinks, s.streaming_window),
    ),
}


@dataclass(frozen=True)
class ExtensionSettings(Extension):
    """The remaps' options as eval and probe take them (--self-extend-group, ...; None: the default):
    the command line's Extension group itself, so each option is defined once, there."""

    def remap(self, name: str) -> PositionRemap:
        return REMAPS[name][1](self)

    def check_read(self, methods: list[ContextMethod]) -> None:
        """An option no asked method reads is refused by name (--dca-chunk without dca)."""
        used = {m.remap.name for m in methods if m.remap is not None}
        for item in fields(self):
            readers = [name for name, (reads, _) in REMAPS.items() if item.name in reads]
            if getattr(self, item.name) is not None and not used & set(readers):
                option = "--" + item.name.replace("_", "-")
                raise UsageError(
                    f"{option} applies only with --rope-scaling {' or '.join(readers)}; add it or drop {option}"
                )


@dataclass(frozen=True)
class ContextMethod:
    """A column's context extension: `scaling` (a rope_scaling.py method, "none" for the model's own
    frequencies), `remap` (None: none), `logn`; `long_factors`: longrope's λ as --longrope-factors gives
    them (None: its rule)."""

    scaling: str = "none"
    remap: PositionRemap | None = None
    logn: bool = False
    long_factors: LongRopeFactors | None = None

    @property
    def text(self) -> str:
        """As --rope-scaling names it: `none`, `yarn+logn`, `self_extend`."""
        parts = [self.scaling] if self.scaling != "none" or not self.extends else []
        parts += [self.remap.name] if self.remap is not None else []
        return "+".join(parts + ([LOGN] if self.logn else []))

    @property
    def scales(self) -> bool:
        """Whether it scales the RoPE frequencies (a rope_scaling.py method); False: the model's own."""
        return self.scaling != "none"

    @property
    def as_trained(self) -> bool:
        """Whether it changes nothing (`none`): the model's own frequencies and attention."""
        return not self.scales and not self.extends

    @property
    def whole_window_twin(self) -> ContextMethod | None:
        """The method that computes what this one does at every full window when no factor is given
        (dynamic NTK: ntk, with the same remap and log-n), or None."""
        return replace(self, scaling="ntk") if self.scaling == "dynamic" else None

    @property
    def extends(self) -> bool:
        """Whether it changes attention beyond the frequencies (a remap or log-n)."""
        return self.remap is not None or self.logn

    def extension(self, train_len: int) -> ContextExtension | None:
        """The extension for a model trained at `train_len` tokens, its parameters defaulted and checked
        against that context; None where the method only scales frequencies."""
        if not self.extends:
            return None
        remap = None
        if self.remap is not None:
            self.remap.check_context(train_len)
            remap = self.remap.for_length(train_len)
        return ContextExtension(remap, train_len if self.logn else None)


def parse_method(text: str, settings: ExtensionSettings) -> ContextMethod:
    """`yarn+logn` -> ContextMethod("yarn", None, True); an unknown or doubled part is one line."""
    scalings = ROPE_SCALING + HF_ROPE_SCALING
    scaling, remap, logn = "none", None, False
    for part in (p.strip() for p in text.split("+")):
        if part in scalings and scaling == "none" and part != "none":
            scaling = part
        elif part in REMAPS and remap is None:
            remap = settings.remap(part)
        elif part == LOGN and not logn:
            logn = True
        elif part != "none" or "+" in text:
            raise UsageError(f"--rope-scaling {text!r}: {refused_part(part, scalings)}")
    return ContextMethod(scaling, remap, logn)


def refused_part(part: str, scalings: tuple[str, ...]) -> str:
    """Why `part` cannot join its column: not a method, or a second of its kind."""
    kinds = (
        (scalings, "frequency scaling"),
        (tuple(REMAPS), f"remap ({', '.join(REMAPS)})"),
        ((LOGN,), "logn"),
    )
    kind = next((what for names, what in kinds if part in names), None)
    if part == "none":
        return "'none' joins nothing with +: name the other parts alone (logn, not none+logn)"
    if kind is None:
        known = ", ".join(scalings + tuple(REMAPS) + (LOGN,))
        return f"{part!r} is not a method to join with +; choose from: {known}"
    return f"{part!r} is a second {kind}; a column joins at most one scaling, one remap and logn"


def parse_methods(text: str, settings: ExtensionSettings) -> list[ContextMethod]:
    """`none,yarn+logn,self_extend` -> the columns in the order given, duplicates once."""
    methods = list(dict.fromkeys(parse_method(p, settings) for p in str(text).split(",")))
    settings.check_read(methods)
    return methods
