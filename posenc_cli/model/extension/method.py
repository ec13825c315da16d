"""One column of `--rope-scaling`: `yarn`, `self_extend`, `yarn+logn`, `ntk+dca` parsed once into a
ContextMethod, so nothing past the command line reads the text again.

A method is at most one frequency scaling (rope_scaling.py), at most one remap (remap.py) and log-n,
joined by `+` in any order. The remaps' parameters come from their options (ExtensionSettings), each
None until a model's training length gives the paper's default (ContextMethod.extension).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from posenc_cli.core.choices import CONTEXT_REMAPS as REMAPS
from posenc_cli.core.choices import HF_ROPE_SCALING, LOGN, ROPE_SCALING
from posenc_cli.core.errors import UsageError
from posenc_cli.model.extension import ContextExtension
from posenc_cli.model.extension.dual_chunk import DualChunk
from posenc_cli.model.extension.remap import PositionRemap
from posenc_cli.model.extension.rerope import ReRoPE
from posenc_cli.model.extension.self_extend import SelfExtend


@dataclass(frozen=True)
class ExtensionSettings:
    """The remaps' options as eval and probe take them (--self-extend-group, ...); None: the default."""

    self_extend_group: int | None = None
    self_extend_window: int | None = None
    rerope_window: int | None = None
    rerope_leak: float | None = None
    dca_chunk: int | None = None
    dca_local: int | None = None

    def remap(self, name: str) -> PositionRemap:
        if name == "self_extend":
            return SelfExtend(self.self_extend_group, self.self_extend_window)
        if name == "dca":
            return DualChunk(self.dca_chunk, self.dca_local)
        return ReRoPE(self.rerope_window, self.rerope_leak, leaky=name == "leaky_rerope")

    def check_read(self, methods: list[ContextMethod]) -> None:
        """An option no asked method reads is refused by name (--dca-chunk without dca)."""
        used = {m.remap.name for m in methods if m.remap is not None}
        readers = {
            "self_extend_group": ("self_extend",),
            "self_extend_window": ("self_extend",),
            "rerope_window": ("rerope", "leaky_rerope"),
            "rerope_leak": ("leaky_rerope",),
            "dca_chunk": ("dca",),
            "dca_local": ("dca",),
        }
        for item in fields(self):
            if getattr(self, item.name) is not None and not used & set(readers[item.name]):
                option = "--" + item.name.replace("_", "-")
                raise UsageError(
                    f"{option} applies only with --rope-scaling {' or '.join(readers[item.name])}; add it or drop {option}"
                )


@dataclass(frozen=True)
class ContextMethod:
    """A column's context extension: `scaling` (a rope_scaling.py method, "none" for the model's own
    frequencies), `remap` (None: none), `logn`."""

    scaling: str = "none"
    remap: PositionRemap | None = None
    logn: bool = False

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
    kinds = ((scalings, "frequency scaling"), (REMAPS, f"remap ({', '.join(REMAPS)})"), ((LOGN,), "logn"))
    kind = next((what for names, what in kinds if part in names), None)
    if part == "none":
        return "'none' joins nothing with +: name the other parts alone (logn, not none+logn)"
    if kind is None:
        known = ", ".join(scalings + REMAPS + (LOGN,))
        return f"{part!r} is not a method to join with +; choose from: {known}"
    return f"{part!r} is a second {kind}; a column joins at most one scaling, one remap and logn"


def parse_methods(text: str, settings: ExtensionSettings) -> list[ContextMethod]:
    """`none,yarn+logn,self_extend` -> the columns in the order given, duplicates once."""
    methods = list(dict.fromkeys(parse_method(p, settings) for p in str(text).split(",")))
    settings.check_read(methods)
    return methods
