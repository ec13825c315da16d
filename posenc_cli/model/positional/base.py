"""The one seam between the GPT and a positional scheme.

A scheme may add to the token embeddings (`embed`), rotate queries and keys (`rotate`), add a bias
to the attention scores (`bias`), or add scores it reads from the queries' and keys' content
(`content_bias`). Every hook defaults to "do nothing", so NoPE is the empty subclass. The model calls
`embed` and `rotate` always; each layer's attention (model/layer_attention.py) calls `bias` and
`content_bias` where the scheme overrides them: `adds_bias` and `reads_content` are derived from the
hooks, never declared. The model never asks which scheme it holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn

from posenc_cli.core.choices import LAYER_OPTIONS
from posenc_cli.core.errors import require_bool
from posenc_cli.model.extension.rotation import Rotation
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
    # the attention options (core.choices.LAYER_OPTIONS) the scheme's layers take from it
    layer_options: ClassVar[tuple[str, ...]] = LAYER_OPTIONS
    # the model depth the scheme needs at its defaults (a layer schedule's interval): what tests and
    # benchmarks build it at; a shallower model is refused by for_layers
    layers_needed: ClassVar[int] = 1
    scales_embeddings: ClassVar[bool | None] = None  # additive schemes: the default of scale_embeddings
    # The attention options the scheme was given for its layer (build_scheme sets them; the model reads
    # them once into each layer's LayerAttention, model/layer_attention.py): the keys its queries see,
    # and the factor its queries are multiplied by (model/temperature.py)
    window: AttentionWindow = FULL
    temperature: QueryTemperature | None  # a submodule (SSMax learns), so set per instance in __init__
    has_sinks: bool = (
        False  # scheme.sinks: each layer learns a sink logit per head (model/sinks.py, the model's)
    )

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
        return self.label_options + self.window.options + temperature + (("sinks",) if self.has_sinks else ())

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
    def members(self) -> tuple[PositionalScheme, ...]:
        """The schemes whose hooks the model calls for this one: itself; a composite's parts, a schedule's
        layers. What every derived capability below is read from."""
        return (self,)

    @property
    def adds_bias(self) -> bool:
        """The model adds `bias` (`query_bias`) to the scores, and cannot use the plain causal kernel:
        derived from the hooks a member overrides, so no flag can disagree with them."""
        return derived(self, ("bias", "query_bias"))

    @property
    def bias_reads_query(self) -> bool:
        """The bias depends on the query's position as well as the distance (FIRE: `query_bias`), so the
        attention builds it per query block instead of once per distance."""
        return derived(self, ("query_bias",))

    @property
    def replaces_softmax(self) -> bool:
        """The scheme weighs the keys itself (`weigh`: stick-breaking) instead of the softmax."""
        return derived(self, ("weigh",))

    @property
    def reads_content(self) -> bool:
        """The model adds `content_bias`, read from the queries' and keys' content (CoPE, FoX)."""
        return derived(self, ("content_bias",))

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

    def rotation(self, seq_len: int) -> Rotation | None:
        """How `rotate` turns a sequence of `seq_len` tokens, where it is RoPE's turn per pair, which a
        training-free extension can move queries and keys by (model/extension/rotation.py); None: no such
        rotation, so no extension applies."""
        return None

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

    def weigh(self, logits: torch.Tensor, *, seen: torch.Tensor, own: torch.Tensor) -> torch.Tensor | None:
        """(B, H, Tq, Tk) weights of the keys from their logits (q·k/√D plus what the scheme adds, -inf
        where unseen), where the scheme replaces the softmax, or None: the softmax. `seen` (Tq, Tk): the
        keys each query sees; `own`: the pair of each query's token with itself."""
        return None

    def content_bias(
        self, q: torch.Tensor, k: torch.Tensor, x: torch.Tensor, *, seen: torch.Tensor
    ) -> torch.Tensor | None:
        """(B, H, Tq, Tk): what a head adds to the score of each key for each query, read from content, or
        None. q (B, H, Tq, D): the queries of the newest Tq of Tk tokens, k (B, H, Tk, D) their keys, as
        they are scored (rotated, scaled); x (B, Tk, C): the layer's input at those tokens; seen (Tq, Tk)
        bool: the keys each query sees (causal, in the window); the caller masks the others."""
        return None


def overrides(scheme: PositionalScheme | type[PositionalScheme], hook: str) -> bool:
    """Whether a scheme (or its class: what tables of the registry ask) defines `hook` itself."""
    cls = scheme if isinstance(scheme, type) else type(scheme)
    return getattr(cls, hook) is not getattr(PositionalScheme, hook)


def derived(scheme: PositionalScheme, hooks: tuple[str, ...]) -> bool:
    """Whether any member of `scheme` overrides one of `hooks`: the one rule every capability is read by,
    for a scheme alone, a composite's parts and a schedule's layers alike."""
    if scheme.members == (scheme,):
        return any(overrides(scheme, hook) for hook in hooks)
    return any(derived(member, hooks) for member in scheme.members)


RELATIVE_STRENGTH = ("none", "implicit", "explicit")


def join_facts(scheme: PositionalScheme) -> None:
    """Set the facts of a scheme made of members (a composite's parts, a schedule's layers) from theirs:
    the strongest relative-position kind, norms preserved where all preserve them, a rotation that reads
    the length or the context where any does."""
    members = scheme.members
    scheme.relative = max((m.relative for m in members), key=RELATIVE_STRENGTH.index)
    scheme.preserves_norms = all(m.preserves_norms for m in members)
    scheme.rotation_reads_length = any(m.rotation_reads_length for m in members)
    scheme.rotation_reads_context = any(m.rotation_reads_context for m in members)


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
