"""The one seam between the GPT and a positional scheme.

A scheme may add to the token embeddings (`embed`), rotate queries and keys (`rotate`), add a bias
to the attention scores (`bias`), or add scores it reads from the queries' and keys' content
(`content_bias`). Every hook defaults to "do nothing", so NoPE is the empty subclass. The model calls
`embed` and `rotate` always, `bias` when `adds_bias` is set and `content_bias` when `reads_content` is,
without ever asking which scheme it holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn

from posenc_cli.core.errors import UsageError, require_bool
from posenc_cli.model.extension import ContextExtension
from posenc_cli.model.temperature import QueryTemperature
from posenc_cli.model.window import FULL, AttentionWindow

# Bounds of scheme options (each constructor checks its own; the pre-flight builds the scheme): every option
# is finite and inside a range where the maths holds in float32 and the value still means something.
# a rotary or sinusoidal base: its slowest pair turns once in 2π·base positions, so past 1e12 (beyond
# MAX_LENGTH) a larger base changes nothing a run can see; published models' bases are far below
MAX_BASE = 1e12


@dataclass(frozen=True)
class Claim:
    """What the chapters say of a scheme (their English and Chinese words), and who uses it; shown
    beside the measured numbers in comparison.md and `posenc schemes`."""

    extrapolation: str = "not in the chapters"
    extrapolation_zh: str = "章节未涉及"
    used_by: str = "—"


def past_max_len(max_len: int | None, length: int) -> str | None:
    """Why a model whose positions stop at `max_len` (None: no limit) cannot read `length` tokens, or
    None when it can: the one rule eval, probe and bench skip such lengths by."""
    if max_len is None or length <= max_len:
        return None
    return f"cannot represent positions ≥ max_len={max_len}"


class PositionalScheme(nn.Module):
    """A scheme's class is the one home of what it is: its hooks, kind, relative-position kind,
    parameter count formula and the chapters' claim. SCHEMES' order is the order every table shows."""

    name: ClassVar[str] = "none"
    kind: ClassVar[str] = "none"  # additive | rotary | bias | none
    relative: ClassVar[str] = "none"  # none | implicit | explicit
    param_formula: ClassVar[str] = "0"
    preserves_norms: ClassVar[bool] = True  # rotary schemes: False where q and k are also rescaled (xPos)
    adds_bias: ClassVar[bool] = False  # True: the model calls `bias` and cannot use the plain causal kernel
    # True: the bias depends on the query's position as well as the distance (FIRE), so the attention
    # builds it per query block with `query_bias` instead of once per distance
    bias_reads_query: ClassVar[bool] = False
    # True: the model calls `content_bias`, per query block: what the scheme adds to a score reads the
    # content of the query and of the keys up to it, not positions (CoPE, FoX), so positions are unread
    reads_content: ClassVar[bool] = False
    claim: ClassVar[Claim] = Claim()
    # True: `rotate` depends on how many positions it is given (dynamic NTK scaling), so every hidden
    # state changes as the context grows and a KV cache of earlier tokens would be stale
    rotation_reads_length: bool = False
    # True: `rotate` of one position depends on the others it is given (xPos centres on their mean), so
    # a KV cache keeps keys unrotated and rotates the whole context again at each step
    rotation_reads_context: ClassVar[bool] = False
    # True: the constructor takes RoPE context extension (scaling, scaling_factor, scaling_len,
    # yarn_alpha, yarn_beta; see rope_scaling.py), both for training and for `posenc eval --rope-scaling`
    scalable: ClassVar[bool] = False
    # the model depth the scheme needs at its defaults (a layer schedule's interval): what tests and
    # benchmarks build it at; a shallower model is refused by for_layers
    layers_needed: ClassVar[int] = 1
    scales_embeddings: ClassVar[bool | None] = None  # additive schemes: the default of scale_embeddings
    # the training-free context extension `attend` computes with (RoPE only: extend_context); None: none
    extension: ContextExtension | None = None
    # Properties of the layer a scheme instance serves, options of every scheme (build_scheme sets them):
    # the keys its queries see, and the factor its queries are multiplied by (model/temperature.py)
    window: AttentionWindow = FULL
    temperature: QueryTemperature | None  # a submodule (SSMax learns), so set per instance in __init__

    def __init__(self, n_embd: int, n_head: int, block_size: int):
        super().__init__()
        self.n_embd, self.n_head, self.block_size = n_embd, n_head, block_size
        self.head_dim = n_embd // n_head
        self.temperature = None

    @property
    def max_len(self) -> int | None:
        """Longest sequence the scheme can represent; None when unbounded."""
        return None

    @property
    def label(self) -> str:
        """The name reports show: the scheme's name, plus any option that changes what it computes."""
        return "+".join((self.name, *self.column_options, *filter(None, [self.scaling_method])))

    @property
    def column_options(self) -> tuple[str, ...]:
        """label_options, then the layer's window and temperature: what `label` names after the scheme."""
        temperature = self.temperature.options if self.temperature is not None else ()
        return self.label_options + self.window.options + temperature

    @property
    def label_options(self) -> tuple[str, ...]:
        """The options off their defaults that `label` names after the scheme (interleaved, unscaled,
        per-layer), its RoPE scaling aside: what a column's Variant holds, never cut out of `label`."""
        return ()

    @property
    def part_names(self) -> tuple[str, ...]:
        """The schemes it is made of, by name: itself; a composite's parts, in order."""
        return (self.name,)

    @property
    def scaling_method(self) -> str:
        """The RoPE scaling it computes with (rope_scaling.py's methods), "" for none: what a column's
        label says of it without reading `label`."""
        return ""

    @property
    def positional_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def bias_activations(self, length: int) -> int:
        """Floats one attention layer keeps for the backward of this scheme's bias at `length`, beyond
        the (H, 2T - 1) vector per distance every bias scheme costs: what the memory model adds. Most
        schemes keep none; one that reads content keeps them per sequence, as its bias is."""
        return 0

    def for_layers(self, n_layer: int) -> list[PositionalScheme]:
        """The scheme each of the model's `n_layer` blocks calls, once the model is built: this one
        instance, shared by every block, unless the scheme keeps its own per layer (FIRE's per_layer)."""
        return [self] * n_layer

    def extend_state(self, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """This scheme's weights from a run trained with other sizes (train.init_from at a longer
        length) -> weights shaped for this instance. Most schemes' parameters do not depend on the
        length: as they are."""
        return state

    # Hooks. `positions`: (T,) shared by every sequence of the batch, or (B, T) increasing positions
    # per sequence (train.positions=randomized).

    def embed(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """x: (B, T, C) token embeddings -> (B, T, C)."""
        return x

    def rotate(
        self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """q, k: (B, H, T, D) -> rotated q, k."""
        return q, k

    def scale_queries(self, q: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """q: (B, H, T, D) rotated queries at `positions` -> as the layer's temperature scales them."""
        return q if self.temperature is None else self.temperature.scale(q, positions)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor | None:
        """The attention the scheme computes itself, or None: the model's causal kernels (plus `bias`).
        q: (B, H, Tq, D) the newest Tq of Tk tokens, k, v: (B, H, Tk, D), after `rotate`. Only a rotary
        scheme given a training-free context extension computes its own (model/extension): those
        methods score a query–key pair at positions other than the tokens' own, which neither one
        rotation per token nor an additive bias can say."""
        return None

    def extend_context(self, extension: ContextExtension) -> None:
        """Compute attention with `extension` (a model/extension ContextExtension) from now on."""
        self.check_takes_extension()
        self.extension = extension

    def check_takes_extension(self) -> None:
        """One line (UsageError) unless the scheme can take a context extension: only RoPE can, so
        eval asks before any scoring, without changing the model."""
        raise UsageError(
            f"scheme {self.label} has no RoPE rotation to extend; self_extend, rerope, leaky_rerope, dca "
            "and logn apply to rope runs and RoPE hf: models only"
        )

    def bias(self, distance: torch.Tensor) -> torch.Tensor | None:
        """(H, *distance.shape): what a head adds to the score of a key `distance` = p_i - p_j positions
        before its query (only distances >= 0 are ever attended), or None. A function of distance
        alone, so with positions 0..T-1 the attention evaluates it once per distance, not per pair."""
        return None

    def query_bias(self, query: torch.Tensor, distance: torch.Tensor) -> torch.Tensor | None:
        """(H, *shape): the bias of a key `distance` positions before a query at position `query`, the two
        broadcast together. The model calls it only where `bias_reads_query`; for every other scheme it
        is `bias(distance)`, the query's position unread."""
        return self.bias(distance)

    def content_bias(
        self, q: torch.Tensor, k: torch.Tensor, x: torch.Tensor, *, seen: torch.Tensor
    ) -> torch.Tensor | None:
        """(B, H, Tq, Tk): what a head adds to the score of each key for each query, read from content, or
        None. q (B, H, Tq, D): the queries of the newest Tq of Tk tokens, k (B, H, Tk, D) their keys, as
        they are scored (rotated, scaled); x (B, Tk, C): the layer's input at those tokens; seen (Tq, Tk)
        bool: the keys each query sees (causal, in the window); the caller masks the others."""
        return None


class AdditiveScheme(PositionalScheme):
    """Adds a vector per position to the token embeddings (`encoding`).

    `scale_embeddings` multiplies the token embeddings by sqrt(d) first, as Vaswani et al. (2017,
    section 3.4) do. It sets how loud the tokens are against the positions: token embeddings start at
    std `model.embed_std` (0.02), a sinusoidal encoding has unit amplitude, so unscaled the position
    signal is ~37x the token signal at d = 128. It is an option of every additive scheme, so a
    comparison can hold it fixed; each scheme's default is its paper's.
    """

    kind = "additive"
    scales_embeddings = False

    def __init__(self, n_embd: int, n_head: int, block_size: int, *, scale_embeddings: bool | None = None):
        super().__init__(n_embd, n_head, block_size)
        scale = type(self).scales_embeddings if scale_embeddings is None else scale_embeddings
        require_bool("scheme.scale_embeddings", scale)
        self.scale_embeddings = scale

    @property
    def label_options(self) -> tuple[str, ...]:
        if self.scale_embeddings == type(self).scales_embeddings:
            return ()
        return ("scaled" if self.scale_embeddings else "unscaled",)

    def encoding(self, positions: torch.Tensor) -> torch.Tensor:
        """(T,) positions -> (T, C) vectors added to the token embeddings."""
        raise NotImplementedError

    def embed(self, x, positions):
        scaled = x * self.n_embd**0.5 if self.scale_embeddings else x
        return scaled + self.encoding(positions).to(x.dtype)


class NoPE(PositionalScheme):
    """No positional information at all: only the causal mask tells tokens apart by order."""

    claim = Claim(used_by="NoPE studies (Kazemnejad et al. 2023)")


def per_head(values: torch.Tensor, distance: torch.Tensor) -> torch.Tensor:
    """(H,) per-head values shaped (H, 1, ...) to broadcast against a tensor of distances."""
    return values.view(-1, *[1] * distance.dim())
