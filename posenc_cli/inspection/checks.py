"""The chapters' claims about a positional scheme, each measured on tensors as a PASS/FAIL Check.

Every check talks to a scheme only through the PositionalScheme contract (the embed / rotate / bias
hooks, kind, adds_bias, max_len), so a new scheme gets the checks of its kind without edits here,
and a scheme that breaks a claim fails its check. Each check returns the number it measured.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch

from posenc_cli.core.errors import PositionOutOfRange
from posenc_cli.model.attention import attend
from posenc_cli.model.attention_reference import reference_weights
from posenc_cli.model.layer_attention import LayerAttention
from posenc_cli.model.positional import PositionalScheme
from posenc_cli.model.positional.alibi import SLOPE_RULES
from posenc_cli.model.positional.rope import RoPE

TOL = 1e-4  # float32 round-off, relative to the size of the compared values
SEED = 0


@dataclass(frozen=True)
class Check:
    claim: str
    passed: bool
    measured: str
    needs: str
    note: str = ""


def below(claim: str, value: float, tol: float = TOL) -> Check:
    return Check(claim, value < tol, f"{value:.1e}", f"< {tol:g}")


def generator() -> torch.Generator:
    return torch.Generator().manual_seed(SEED)


def diagonal_spread(m: torch.Tensor, offsets: range) -> float:
    """Largest max − min along any diagonal m[..., i, i + o]: zero iff m depends only on j − i."""
    spreads = [(d.amax(-1) - d.amin(-1)).max() for d in (m.diagonal(o, -2, -1) for o in offsets)]
    return float(torch.stack(spreads).max())


# ---- attention, as the model computes it ------------------------------------------------------


def attention_probs(
    q, k, positions, *, scheme: PositionalScheme, causal: bool = True, x: torch.Tensor | None = None
) -> torch.Tensor:
    """(B, H, T, T) weights: the scheme rotates q and k, scores q·k/√D plus its bias, plus what it reads
    from content (x: the layer's input (B, T, C), read where `reads_content`), causal mask, softmax (or
    the scheme's own weighing)."""
    q, k = scheme.rotate(q, k, positions)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    seen = positions[None, :] <= positions[:, None] if causal else torch.ones_like(scores[0, 0], dtype=bool)
    if scheme.adds_bias:
        distance = positions[:, None] - positions[None, :]
        scores = scores + scheme.query_bias(positions[:, None], distance).to(scores.dtype)
    if scheme.reads_content:
        scores = scores + scheme.content_bias(q, k, x, seen=seen).to(scores.dtype)
    scores = scores.masked_fill(~seen, float("-inf"))
    if scheme.replaces_softmax:  # stick-breaking: its own weights, nearest key first
        return scheme.weigh(scores, seen=seen, own=positions[:, None] == positions[None, :])
    return scores.softmax(-1)


def split_heads(x: torch.Tensor, n_head: int) -> torch.Tensor:
    B, T, C = x.shape
    return x.view(B, T, n_head, C // n_head).transpose(1, 2)


@torch.no_grad()
def layer_attention(model, idx: torch.Tensor, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention weights (B, H, T, T) of a trained GPT's `layer` on tokens idx, recomputed from the
    block's own qkv weights by the executor's per-pair reference (its window, temperature and any
    remap included: what the model computes), and that layer's values v (B, H, T, D)."""
    positions = torch.arange(idx.size(1))
    x = model.scheme.embed(model.tok(idx), positions)
    for block, scheme, attention in zip(model.blocks[:layer], model.layer_schemes, model.attention):
        x = block(x, positions, scheme, attention)
    block = model.blocks[layer]
    x = block.ln_1(x)
    q, k, v = block.attn.project(x)
    scheme, attention = model.layer_schemes[layer], model.attention[layer]
    q, k = scheme.rotate(q, k, positions)
    rotation = attention.rotation(idx.size(1)) if attention.remap is not None else None
    return reference_weights(q, k, attention, inputs=x, rotation=rotation), v


# ---- checks -----------------------------------------------------------------------------------


def unmasked_attention(
    scheme: PositionalScheme, x: torch.Tensor, weights: list[torch.Tensor]
) -> torch.Tensor:
    """Self-attention on x (1, T, C) through every hook of the scheme, with no causal mask (the mask
    alone would order the tokens): (1, H, T, D)."""
    positions = torch.arange(x.size(1))
    x = scheme.embed(x, positions)
    q, k, v = (split_heads(x @ w, scheme.n_head) for w in weights)
    return attention_probs(q, k, positions, scheme=scheme, causal=False, x=x) @ v


@torch.no_grad()
def check_permutation(scheme: PositionalScheme, length: int) -> Check:
    """Without positions attention is permutation-equivariant; any positional scheme must break that."""
    g, C = generator(), scheme.n_embd
    x = torch.randn(1, length, C, generator=g)
    weights = [torch.randn(C, C, generator=g) / math.sqrt(C) for _ in range(3)]
    perm = torch.randperm(length, generator=g)
    out = unmasked_attention(scheme, x, weights)
    error = float(
        (unmasked_attention(scheme, x[:, perm], weights) - out[:, :, perm]).abs().max() / out.abs().max()
    )
    if scheme.kind == "none":
        return below("no positions: attention is permutation-equivariant, max|Attn(PX) − P·Attn(X)|", error)
    return Check(
        "positions break permutation equivariance: max|Attn(PX) − P·Attn(X)|",
        error > 1e-3,
        f"{error:.1e}",
        "> 0.001",
    )


def position_vectors(scheme: PositionalScheme, length: int) -> torch.Tensor:
    """What `embed` adds to zero token embeddings at positions 0..length-1: (length, C)."""
    return scheme.embed(torch.zeros(1, length, scheme.n_embd), torch.arange(length))[0].detach()


@torch.no_grad()
def check_same_across_batch(scheme: PositionalScheme, length: int) -> Check:
    batch = scheme.embed(torch.zeros(3, length, scheme.n_embd), torch.arange(length))
    error = float((batch - position_vectors(scheme, length)).abs().max())
    return below("same vector for the same position in every batch row", error)


def check_unique(scheme: PositionalScheme, length: int) -> Check:
    pe = position_vectors(scheme, length)
    distances = torch.cdist(pe, pe).fill_diagonal_(math.inf)
    ratio = float(distances.min() / pe.norm(dim=1).mean().clamp(min=1e-12))
    return Check(
        "unique per position: min ‖PE_i − PE_j‖ / mean ‖PE‖", ratio > 1e-3, f"{ratio:.1e}", "> 0.001"
    )


def check_bounded(scheme: PositionalScheme, length: int) -> Check:
    peak = float(position_vectors(scheme, length).abs().max())
    return Check("values bounded in [−1, 1]: max |PE|", peak <= 1 + 1e-6, f"{peak:.4f}", "≤ 1")


@torch.no_grad()
def check_shift_linear(scheme: PositionalScheme, length: int) -> Check:
    """For every shift k one 2×2 map R(k) per frequency pair (2i, 2i+1) takes PE(pos) to PE(pos+k):
    R is fitted by least squares over all pos, and the error is the worst residual over pos, k, pairs."""
    pe = position_vectors(scheme, length).double()
    pairs = pe[:, : pe.size(1) // 2 * 2].view(length, -1, 2).transpose(0, 1)  # (pairs, T, 2)
    worst = 0.0
    for k in range(1, length // 2 + 1):
        now, later = pairs[:, :-k], pairs[:, k:]
        R = torch.linalg.lstsq(now, later).solution
        worst = max(worst, float((now @ R - later).abs().max()))
    return below("shift-linear: PE(pos+k) = R(k)·PE(pos) per pair, max error", worst)


def check_past_max_len(scheme: PositionalScheme) -> Check:
    """The chapter's exercise: ask a table of max_len rows for position max_len."""
    n = scheme.max_len + 1
    claim = f"past max_len: position {n - 1} is refused with a clear error"
    try:
        scheme.embed(torch.zeros(1, n, scheme.n_embd), torch.arange(n))
    except PositionOutOfRange as err:
        return Check(claim, True, "PositionOutOfRange", "clear error", note=str(err))
    except Exception as err:  # noqa: BLE001 - any other exception is the crash this check reports
        return Check(claim, False, f"crashed: {type(err).__name__}", "clear error", note=str(err)[:200])
    return Check(claim, False, "silently returned vectors", "clear error")


def rotated_pairs(scheme: PositionalScheme, length: int, g: torch.Generator):
    """One random q and k per head placed at every position and rotated: q_m, k_n (1, H, T, D), and
    the norms of the unrotated q and k."""
    q, k = torch.randn(2, 1, scheme.n_head, 1, scheme.head_dim, generator=g)
    shape = (1, scheme.n_head, length, scheme.head_dim)
    q_m, k_n = scheme.rotate(q.expand(shape).contiguous(), k.expand(shape).contiguous(), torch.arange(length))
    return q_m, k_n, q.norm(dim=-1), k.norm(dim=-1)


@torch.no_grad()
def check_norms(scheme: PositionalScheme, length: int) -> Check:
    q_m, k_n, q_norm, k_norm = rotated_pairs(scheme, length, generator())
    error = max(
        float((q_m.norm(dim=-1) / q_norm - 1).abs().max()), float((k_n.norm(dim=-1) / k_norm - 1).abs().max())
    )
    return below("rotation preserves norms: max | ‖R_m q‖/‖q‖ − 1 |", error)


@torch.no_grad()
def check_relative(scheme: PositionalScheme, length: int) -> Check:
    q_m, k_n, q_norm, k_norm = rotated_pairs(scheme, length, generator())
    logits = (q_m @ k_n.transpose(-2, -1)) / (q_norm * k_norm)[..., None]
    error = diagonal_spread(logits, range(-(length - 1), length))
    return below("q·k depends on m − n only: max|q_m·k_n − q_{m+s}·k_{n+s}| / ‖q‖‖k‖", error)


@torch.no_grad()
def check_unrotated(scheme: RoPE, length: int) -> Check:
    """A partial rotation (rotary_fraction, p-RoPE) leaves what it states as it is: the dimensions whose
    value no position changes, counted on a random q per head at every position."""
    q_m = rotated_pairs(scheme, length, generator())[0]
    still = int((q_m == q_m[:, :, :1]).all(dim=2).all(dim=1).sum())
    return Check(
        f"leaves unrotated what it states ({scheme.unrotated}): dimensions no position turns",
        still == scheme.unrotated_dims,
        str(still),
        f"= {scheme.unrotated_dims}",
    )


def bias_matrix(scheme: PositionalScheme, length: int) -> torch.Tensor:
    positions = torch.arange(length)
    return scheme.bias(positions[:, None] - positions[None, :]).detach().float()


def bias_by_distance(scheme: PositionalScheme, length: int) -> torch.Tensor:
    """(H, length): the bias a query gives the key `d` positions back, d = 0..length-1."""
    return scheme.bias(torch.arange(length)).detach().float()


@torch.no_grad()
def check_bias_attention(scheme: PositionalScheme, length: int) -> Check:
    """The model evaluates the bias once per distance and reads the mask as a view of that vector;
    that must equal softmax(q·k/√D + bias(i − j)) computed pair by pair."""
    g = generator()
    q, k, v = (torch.randn(1, scheme.n_head, length, 16, generator=g) for _ in range(3))
    expected = attention_probs(q, k, torch.arange(length), scheme=scheme) @ v
    error = float(
        (attend(q, k, v, layer=LayerAttention(scheme)) - expected).abs().max() / expected.abs().max()
    )
    return below(
        "attention with the bias built per distance = the pair-by-pair formula: max rel. error", error
    )


def check_linear_slopes(scheme: PositionalScheme, length: int) -> Check | None:
    """A fixed bias that is a sloped straight line in distance (ALiBi's family) has a slope per head,
    and each known rule gives them: the paper's geometric 2^(−8h/H), or the chapter's code's 1/2^h. The
    check names the rule the slopes follow. Biases with trained parameters (T5, KERPLE) or curved ones
    make no such claim: no check."""
    curve = bias_by_distance(scheme, length)
    slopes = curve[:, 0] - curve[:, 1]
    distance = torch.arange(length, dtype=curve.dtype)
    line = curve[:, :1] - slopes[:, None] * distance
    curved = float((curve - line).abs().max()) > TOL * (float(curve.abs().max()) or 1.0)
    if scheme.positional_params or curved or not slopes.any():
        return None
    errors = {
        rule: float((slopes / torch.tensor(rule_slopes(scheme.n_head)) - 1).abs().max())
        for rule, (rule_slopes, _) in SLOPE_RULES.items()
    }
    rule = min(errors, key=errors.get)
    measured = ", ".join(f"{s:.4g}" for s in slopes.tolist())
    claim = f"linear bias: slopes follow a known rule, nearest {rule} {SLOPE_RULES[rule][1]}, max |slope/rule − 1|"
    return replace(below(claim, errors[rule]), note=f"measured slopes per head: {measured}")


def rotated_by_distance(scheme: PositionalScheme, x: torch.Tensor, length: int) -> torch.Tensor:
    """(N, length, D): each of the N vectors x (N, D) rotated as a query at positions 0..length-1, head 0."""
    shape = (x.size(0), scheme.n_head, length, scheme.head_dim)
    q = x[:, None, None, :].expand(shape).contiguous()
    return scheme.rotate(q, q, torch.arange(length))[0][:, 0]


@torch.no_grad()
def difference_by_distance(scheme: PositionalScheme, length: int) -> torch.Tensor:
    """(length,) ‖rope(x, k) − rope(x, 0)‖ / ‖x‖ for k = 0..length-1, the mean over 64 random x."""
    x = torch.randn(64, scheme.head_dim, generator=generator())
    turned = rotated_by_distance(scheme, x, length)
    return ((turned - turned[:, :1]).norm(dim=-1) / x.norm(dim=-1, keepdim=True)).mean(0)


def check_farther_differs_more(scheme: PositionalScheme, length: int) -> Check:
    """The chapter: farther positions → larger difference. Measured as a curve over every distance k:
    each pair's share of the difference, 2 − 2cos(kθ_i), falls again once kθ_i passes π, so the
    claim holds only up to the distance where the fastest pairs start to wrap."""
    curve = difference_by_distance(scheme, length)
    rises = curve[1:] > curve[:-1]
    holds_to = int((~rises).nonzero()[0]) if not rises.all() else length - 1
    claim = "farther → larger difference: ‖rope(x, k) − rope(x, 0)‖ grows with k, for every k < length"
    note = (
        f"grows for k = 0..{holds_to}; after that it grows on {float(rises[holds_to:].float().mean()):.0%} "
        f"of the steps k → k+1 up to {length - 1} (the fast pairs wrap past kθ = π)"
    )
    return Check(claim, holds_to == length - 1, f"holds up to k = {holds_to}", f"k = {length - 1}", note=note)


@torch.no_grad()
def rotary_demo(scheme: PositionalScheme) -> dict[str, float]:
    """The chapter's demo on one vector x (seed 0): norms kept, and the difference from position 0 at
    positions 1 and 3."""
    x = torch.randn(1, scheme.head_dim, generator=generator())
    turned = rotated_by_distance(scheme, x, 4)[0]
    return {
        "‖x‖": float(x.norm()),
        "‖rope(x, 1)‖": float(turned[1].norm()),
        "‖rope(x, 3)‖": float(turned[3].norm()),
        "|rope(x, 1) − rope(x, 0)|": float((turned[1] - turned[0]).norm()),
        "|rope(x, 3) − rope(x, 0)|": float((turned[3] - turned[0]).norm()),
    }


def run_checks(scheme: PositionalScheme, length: int) -> list[Check]:
    """The checks that apply to this scheme, chosen by its kind and hooks, never by its name."""
    checks = [check_permutation(scheme, length)]
    if scheme.kind == "additive":
        checks += [check_same_across_batch(scheme, length), check_unique(scheme, length)]
        if scheme.max_len is None:
            checks += [check_bounded(scheme, length), check_shift_linear(scheme, length)]
        else:
            checks.append(check_past_max_len(scheme))
    if scheme.kind == "rotary":
        checks += [check_norms(scheme, length)] if scheme.preserves_norms else []
        checks += [check_relative(scheme, length), check_farther_differs_more(scheme, length)]
        checks += (
            [check_unrotated(scheme, length)] if isinstance(scheme, RoPE) and scheme.unrotated_dims else []
        )
    if scheme.adds_bias:
        checks.append(check_bias_attention(scheme, length))
        slopes = check_linear_slopes(scheme, length)
        checks += [slopes] if slopes else []
    return checks
