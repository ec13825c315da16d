"""Layer schedules: a model whose layers use different schemes, RoPE bases and attention windows, as the
models released since 2024 do.

- `schedule`: any list, one entry per layer (`scheme.pattern`, as long as `model.n_layer`);
- `irope`: NoPE every 4th layer, RoPE on the others (Llama 4, SmolLM3), chunked attention and the
  NoPE layers' temperature as options;
- `rnope_swa`: RoPE within a sliding window, every 4th layer global NoPE (cohere2; Yang et al. 2025);
- `local_global`: local sliding-window RoPE at base 10k, every 6th layer global RoPE at base 1M (Gemma 3).

A preset states its pattern as an interval, so it applies at any depth. Each layer holds its own
scheme instance (`for_layers`), with its own window and temperature: the model still calls only the
hooks of the scheme each block is given.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from torch import nn

from posenc_cli.core.errors import UsageError, require_int, require_number
from posenc_cli.model.positional.base import MAX_BASE, Claim, PositionalScheme, join_facts
from posenc_cli.model.positional.composite import part_spec
from posenc_cli.model.shape import MAX_MODEL_SIZE
from posenc_cli.model.temperature import LLAMA4_BETA

LayerSpec = tuple[str, dict[str, Any]]  # a layer's scheme by name, and its options


class LayerSchedule(PositionalScheme):
    """`scheme=schedule`: `pattern` lists each layer's scheme, a name or {name: SCHEME, option: value}."""

    name = "schedule"
    kind = "schedule"
    layer_options = ("sinks",)  # windows and temperatures are each layer's own (pattern entries, presets)
    relative = "explicit"  # replaced per instance by the strongest of its layers'
    claim = Claim(used_by="Llama 4, SmolLM3, Command R7B, Gemma 3 (one scheme per layer)")

    def __init__(
        self,
        n_embd: int,
        n_head: int,
        block_size: int,
        *,
        pattern: Sequence[str | Mapping[str, Any]] = ("rope", "none"),
        build: Callable[..., PositionalScheme],
    ):
        super().__init__(n_embd, n_head, block_size)
        if isinstance(pattern, (str, bytes)) or not isinstance(pattern, Sequence):
            raise UsageError(f"scheme.pattern must be a list with one scheme per layer, got {pattern!r}")
        self.pattern = [part_spec(entry) for entry in pattern]
        self.build = build
        self.layer_sinks = False  # scheme.sinks=true on the whole schedule: every layer its own (for_layers)
        self.layers = nn.ModuleList()  # built by for_layers, which knows the depth
        for index, spec in enumerate(self.pattern):  # a bad entry is refused when the scheme is built
            self.layer(index, spec)

    def layer_specs(self, n_layer: int) -> list[LayerSpec]:
        """Each layer's scheme and options, first layer first."""
        if len(self.pattern) != n_layer:
            raise UsageError(
                f"scheme.pattern lists {len(self.pattern)} layers but model.n_layer={n_layer}; "
                f"give one entry per layer"
            )
        return self.pattern

    @property
    def label_options(self) -> tuple[str, ...]:
        """The layers, first to last, each with its options once built: `rope,alibi(window=8)`."""
        if not self.layers:
            return (",".join(name for name, _ in self.pattern),)
        shown = [
            f"{layer.name}({','.join(layer.column_options)})" if layer.column_options else layer.name
            for layer in self.layers
        ]
        return (",".join(shown),)

    @property
    def column_options(self) -> tuple[str, ...]:
        return super().column_options + (("sinks",) if self.layer_sinks else ())

    @property
    def least_depth(self) -> int:
        """The fewest layers the schedule builds at: its pattern's length."""
        return len(self.pattern)

    def for_layers(self, n_layer: int) -> list[PositionalScheme]:
        if not self.window.full or self.temperature is not None:
            raise UsageError(
                f"scheme={self.name} sets windows and temperatures per layer; "
                f"its options are {', '.join([*self.own_options, *self.layer_options])}"
            )
        if self.has_sinks:  # scheme.sinks=true on the schedule: each layer has its own
            self.has_sinks, self.layer_sinks = False, True
        if len(self.layers) != n_layer:
            specs = self.layer_specs(n_layer)
            if self.layer_sinks:
                specs = [(name, {"sinks": True, **options}) for name, options in specs]
            self.layers = nn.ModuleList(self.layer(i, spec) for i, spec in enumerate(specs))
            join_facts(self)
        return list(self.layers)

    @property
    def members(self) -> tuple[PositionalScheme, ...]:
        return tuple(self.layers)

    def bias_activations(self, length: int) -> int:
        """The layers' mean: the memory model counts this per layer, so their sum in all."""
        return sum(layer.bias_activations(length) for layer in self.layers) // max(1, len(self.layers))

    @property
    def own_options(self) -> list[str]:
        params = inspect.signature(type(self).__init__).parameters.values()
        return [p.name for p in params if p.kind == p.KEYWORD_ONLY and p.name != "build"]

    def layer(self, index: int, spec: LayerSpec) -> PositionalScheme:
        """Layer `index`'s scheme, built; one that adds to the token embeddings is refused: the model adds
        embeddings once, before the first layer, so no layer can have them alone."""
        name, options = spec
        built = self.build(name, self.n_embd, self.n_head, block_size=self.block_size, **dict(options))
        if built.kind in ("additive", "schedule"):
            raise UsageError(
                f"scheme={self.name}: layer {index} is {name}, which acts {where_it_acts(built)}; a layer "
                "schedule takes schemes that act inside attention (rotary, bias, content or none)"
            )
        return built

    @property
    def max_len(self) -> int | None:
        bounded = [layer.max_len for layer in self.layers if layer.max_len is not None]
        return min(bounded) if bounded else None


def where_it_acts(scheme: PositionalScheme) -> str:
    if scheme.kind == "additive":
        return "on the token embeddings, once, before the first layer"
    return "on every layer itself"


class IntervalSchedule(LayerSchedule):
    """A preset: every `every`-th layer (the 4th, 8th, ...) is the special one (`special`), the others
    `usual`; a model with fewer layers than `every` has none, and is refused naming the depth it needs."""

    layers_needed = 4  # the default interval: a model needs that many layers to hold one special layer

    def __init__(self, n_embd: int, n_head: int, block_size: int, *, every: int, build: Callable[..., Any]):
        super().__init__(n_embd, n_head, block_size, build=build)
        require_int(f"scheme.every (scheme={self.name})", every, at_least=1, at_most=MAX_MODEL_SIZE)
        self.every = every

    def check_layers(self) -> None:
        """Build one usual and one special layer, so a bad option is refused when the scheme is built."""
        for index, spec in ((0, self.usual()), (self.every - 1, self.special())):
            self.layer(index, spec)

    @property
    def least_depth(self) -> int:
        return self.every

    def usual(self) -> LayerSpec:
        raise NotImplementedError

    def special(self) -> LayerSpec:
        raise NotImplementedError

    def layer_specs(self, n_layer: int) -> list[LayerSpec]:
        if n_layer < self.every:
            raise UsageError(
                f"scheme={self.name} needs model.n_layer>={self.every}: its every {nth(self.every)} layer "
                f"(scheme.every={self.every}) is {self.special()[0]}, and model.n_layer={n_layer} has none; "
                f"use model.n_layer>={self.every} or a smaller scheme.every"
            )
        return [self.special() if (i + 1) % self.every == 0 else self.usual() for i in range(n_layer)]

    @property
    def label_options(self) -> tuple[str, ...]:
        return (f"every={self.every}",) if self.every != self.layers_needed else ()

    @property
    def local_window(self) -> tuple[str, ...]:
        """`window=W` for a label, where some layer is the usual, windowed one (every > 1)."""
        return (f"window={self.window_size}",) if self.every > 1 else ()


def nth(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def shown(key: str, value: Any, default: Any) -> tuple[str, ...]:
    """`key=value` for a label, where the value is off its default."""
    return () if value == default else (f"{key}={value:g}" if isinstance(value, float) else f"{key}={value}",)


class IRoPE(IntervalSchedule):
    """NoPE every 4th layer, RoPE on the others (Llama 4's `no_rope_layer_interval`, SmolLM3). Options:
    the RoPE layers' chunk (Llama 4's `attention_chunk_size`) or window, the NoPE layers' temperature."""

    name = "irope"
    claim = Claim(used_by="Llama 4, SmolLM3 (NoPE every 4th layer)")

    def __init__(
        self,
        n_embd: int,
        n_head: int,
        block_size: int,
        *,
        every: int = 4,
        base: float = 10000.0,
        chunk: int | None = None,
        window: int | None = None,
        temperature: str = "none",
        temperature_beta: float = LLAMA4_BETA,
        temperature_floor: int | None = None,
        build: Callable[..., Any],
    ):
        super().__init__(n_embd, n_head, block_size, every=every, build=build)
        self.rope = {"base": base, "chunk": chunk, "window": window}
        self.nope = {"temperature": temperature}
        if temperature_beta != LLAMA4_BETA or temperature_floor is not None:
            self.nope |= {"temperature_beta": temperature_beta, "temperature_floor": temperature_floor}
        self.check_layers()

    def usual(self) -> LayerSpec:
        return "rope", self.rope

    def special(self) -> LayerSpec:
        return "none", self.nope

    @property
    def label_options(self) -> tuple[str, ...]:
        return (
            super().label_options
            + shown("base", self.rope["base"], 10000.0)
            + shown("chunk", self.rope["chunk"], None)
            + shown("window", self.rope["window"], None)
            + shown("temperature", self.nope["temperature"], "none")
        )


class RNoPESWA(IntervalSchedule):
    """RoPE within a sliding window, every 4th layer global NoPE: cohere2 (Command R7B, its 4,096-token
    window at 8k: half its context) and Yang et al. 2025's RNoPE-SWA. window None: half the training
    length, as cohere2's."""

    name = "rnope_swa"
    claim = Claim(used_by="Command R7B (cohere2); Yang et al. 2025, SWAN-GPT")

    def __init__(
        self,
        n_embd: int,
        n_head: int,
        block_size: int,
        *,
        every: int = 4,
        window: int | None = None,
        base: float = 10000.0,
        build: Callable[..., Any],
    ):
        super().__init__(n_embd, n_head, block_size, every=every, build=build)
        self.window_size = max(1, block_size // 2) if window is None else window
        self.base = base
        self.check_layers()

    def usual(self) -> LayerSpec:
        return "rope", {"base": self.base, "window": self.window_size}

    def special(self) -> LayerSpec:
        return "none", {}

    @property
    def label_options(self) -> tuple[str, ...]:
        return super().label_options + self.local_window + shown("base", self.base, 10000.0)


class LocalGlobal(IntervalSchedule):
    """Local sliding-window RoPE at base 10k, every 6th layer global RoPE at base 1M (Gemma 3). window
    None: a quarter of the training length (Gemma 3's 1,024 of 32k would leave 4 tokens at 128)."""

    name = "local_global"
    claim = Claim(used_by="Gemma 3 (5 local : 1 global)")
    layers_needed = 6

    def __init__(
        self,
        n_embd: int,
        n_head: int,
        block_size: int,
        *,
        every: int = 6,
        window: int | None = None,
        local_base: float = 10000.0,
        global_base: float = 1000000.0,
        build: Callable[..., Any],
    ):
        super().__init__(n_embd, n_head, block_size, every=every, build=build)
        self.window_size = max(1, block_size // 4) if window is None else window
        for key, base in (("local_base", local_base), ("global_base", global_base)):
            require_number(f"scheme.{key}", base, above=1, at_most=MAX_BASE)
        self.local_base, self.global_base = local_base, global_base
        self.check_layers()

    def usual(self) -> LayerSpec:
        return "rope", {"base": self.local_base, "window": self.window_size}

    def special(self) -> LayerSpec:
        return "rope", {"base": self.global_base}

    @property
    def label_options(self) -> tuple[str, ...]:
        return (
            super().label_options
            + self.local_window
            + shown("local_base", self.local_base, 10000.0)
            + shown("global_base", self.global_base, 1000000.0)
        )
