"""`posenc inspect`: the chapters' claims about a positional scheme, measured on tensors and drawn.

Every check talks to a scheme only through the PositionalScheme contract (the embed / rotate / bias
hooks, kind, adds_bias, max_len), so a new scheme gets the checks of its kind without edits here,
and a scheme that breaks a claim fails its check. Each check returns the number it measured.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch

from posenc_cli.atomic import write_with
from posenc_cli.errors import PositionOutOfRange, UsageError
from posenc_cli.model.attention import biased_causal_attention
from posenc_cli.model.positional import SCHEMES, PositionalScheme, build_scheme
from posenc_cli.model.positional.alibi import alibi_slopes

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


def attention_probs(q, k, positions, scheme: PositionalScheme, causal: bool = True) -> torch.Tensor:
    """(B, H, T, T) weights: the scheme rotates q and k, scores q·k/√D plus its bias, causal mask, softmax."""
    q, k = scheme.rotate(q, k, positions)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if scheme.adds_bias:
        scores = scores + scheme.bias(positions[:, None] - positions[None, :]).to(scores.dtype)
    if causal:
        scores = scores.masked_fill(positions[None, :] > positions[:, None], float("-inf"))
    return scores.softmax(-1)


def split_heads(x: torch.Tensor, n_head: int) -> torch.Tensor:
    B, T, C = x.shape
    return x.view(B, T, n_head, C // n_head).transpose(1, 2)


@torch.no_grad()
def layer_attention(model, idx: torch.Tensor, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention weights (B, H, T, T) of a trained GPT's `layer` on tokens idx, recomputed from the
    block's own qkv weights, and that layer's values v (B, H, T, D)."""
    positions = torch.arange(idx.size(1))
    x = model.pos.embed(model.tok(idx), positions)
    for block in model.blocks[:layer]:
        x = block(x, positions, model.pos)
    block = model.blocks[layer]
    q, k, v = (split_heads(t, model.cfg.n_head) for t in block.attn.qkv(block.ln_1(x)).split(model.cfg.n_embd, dim=2))
    return attention_probs(q, k, positions, model.pos), v


# ---- checks -----------------------------------------------------------------------------------


def unmasked_attention(scheme: PositionalScheme, x: torch.Tensor, weights: list[torch.Tensor]) -> torch.Tensor:
    """Self-attention on x (1, T, C) through every hook of the scheme, with no causal mask (the mask
    alone would order the tokens): (1, H, T, D)."""
    positions = torch.arange(x.size(1))
    x = scheme.embed(x, positions)
    q, k, v = (split_heads(x @ w, scheme.n_head) for w in weights)
    return attention_probs(q, k, positions, scheme, causal=False) @ v


@torch.no_grad()
def check_permutation(scheme: PositionalScheme, length: int) -> Check:
    """Without positions attention is permutation-equivariant; any positional scheme must break that."""
    g, C = generator(), scheme.n_embd
    x = torch.randn(1, length, C, generator=g)
    weights = [torch.randn(C, C, generator=g) / math.sqrt(C) for _ in range(3)]
    perm = torch.randperm(length, generator=g)
    out = unmasked_attention(scheme, x, weights)
    error = float((unmasked_attention(scheme, x[:, perm], weights) - out[:, :, perm]).abs().max() / out.abs().max())
    if scheme.kind == "none":
        return below("no positions: attention is permutation-equivariant, max|Attn(PX) − P·Attn(X)|", error)
    return Check("positions break permutation equivariance: max|Attn(PX) − P·Attn(X)|", error > 1e-3,
                 f"{error:.1e}", "> 0.001")


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
    return Check("unique per position: min ‖PE_i − PE_j‖ / mean ‖PE‖", ratio > 1e-3, f"{ratio:.1e}", "> 0.001")


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
    error = max(float((q_m.norm(dim=-1) / q_norm - 1).abs().max()), float((k_n.norm(dim=-1) / k_norm - 1).abs().max()))
    return below("rotation preserves norms: max | ‖R_m q‖/‖q‖ − 1 |", error)


@torch.no_grad()
def check_relative(scheme: PositionalScheme, length: int) -> Check:
    q_m, k_n, q_norm, k_norm = rotated_pairs(scheme, length, generator())
    logits = (q_m @ k_n.transpose(-2, -1)) / (q_norm * k_norm)[..., None]
    error = diagonal_spread(logits, range(-(length - 1), length))
    return below("q·k depends on m − n only: max|q_m·k_n − q_{m+s}·k_{n+s}| / ‖q‖‖k‖", error)


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
    expected = attention_probs(q, k, torch.arange(length), scheme) @ v
    error = float((biased_causal_attention(q, k, v, scheme) - expected).abs().max() / expected.abs().max())
    return below("attention with the bias built per distance = the pair-by-pair formula: max rel. error", error)


def check_linear_slopes(scheme: PositionalScheme, length: int) -> Check | None:
    """A fixed bias that is a sloped straight line in distance (ALiBi's family) has a slope per head,
    and the chapter gives their rule: the geometric sequence 2^(−8/H), 2^(−16/H), ... Biases with
    trained parameters (T5, KERPLE) or curved ones make no such claim: no check."""
    curve = bias_by_distance(scheme, length)
    slopes = curve[:, 0] - curve[:, 1]
    distance = torch.arange(length, dtype=curve.dtype)
    line = curve[:, :1] - slopes[:, None] * distance
    curved = float((curve - line).abs().max()) > TOL * (float(curve.abs().max()) or 1.0)
    if scheme.positional_params or curved or not slopes.any():
        return None
    rule = torch.tensor(alibi_slopes(scheme.n_head))
    error = float((slopes / rule - 1).abs().max())
    measured = ", ".join(f"{s:.4g}" for s in slopes.tolist())
    return replace(below(f"linear bias: slopes follow 2^(−8h/{scheme.n_head}), max |slope/rule − 1|", error),
                   note=f"measured slopes per head: {measured}")


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
        checks.append(check_relative(scheme, length))
    if scheme.adds_bias:
        checks.append(check_bias_attention(scheme, length))
        slopes = check_linear_slopes(scheme, length)
        checks += [slopes] if slopes else []
    return checks


# ---- figures ----------------------------------------------------------------------------------


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig, path: Path) -> Path:
    fig.tight_layout()
    write_with(path, lambda p: fig.savefig(p, format="png", dpi=100))
    pyplot().close(fig)
    return path


def rotation_angles(scheme: PositionalScheme, length: int) -> torch.Tensor:
    """(pairs, T) angle each rotated 2-D plane has turned at each position, read off the rotate hook by
    rotating basis vectors: e_j goes to cos·e_j + sin·e_partner, whatever the pair layout."""
    D = scheme.head_dim
    basis = torch.eye(D)[:, None, None, :].expand(D, 1, length, D).contiguous()
    turned, _ = scheme.rotate(basis, basis, torch.arange(length))
    turned = turned[:, 0].detach().double()  # (D, T, D): basis vector j at every position
    probe = turned[:, 1].abs().clone()
    probe.fill_diagonal_(-1)
    partner = probe.argmax(-1)
    rows = torch.arange(D)
    firsts = rows[rows < partner]
    angles = torch.atan2(turned[firsts, :, partner[firsts]], turned[firsts, :, firsts])
    return torch.from_numpy(np.unwrap(angles.numpy(), axis=-1))


def figures_additive(scheme: PositionalScheme, length: int, out: Path, label: str) -> list[Path]:
    plt = pyplot()
    pe = position_vectors(scheme, length).numpy()
    fig, ax = plt.subplots(figsize=(6.4, 4))
    image = ax.imshow(pe, aspect="auto", cmap="RdBu_r", interpolation="nearest")
    ax.set(xlabel="dimension", ylabel="position", title=f"{label}: position vectors")
    fig.colorbar(image, ax=ax)
    written = [save(fig, out / "pe_heatmap.png")]
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    width = pe.shape[1]
    for dim in sorted({0, 1, width // 32 * 2, width // 16 * 2, width // 8 * 2} - {width}):
        ax.plot(pe[:, dim], label=f"dim {dim}")
    ax.set(xlabel="position", ylabel="value", title=f"{label}: dimensions as waveforms")
    ax.legend(fontsize=7, ncol=5, loc="lower right")
    written.append(save(fig, out / "pe_waveforms.png"))
    unit = torch.nn.functional.normalize(torch.from_numpy(pe), dim=1)
    fig, ax = plt.subplots(figsize=(5.6, 4.6))
    image = ax.imshow((unit @ unit.T).numpy(), cmap="viridis", vmin=-1, vmax=1, interpolation="nearest")
    ax.set(xlabel="position j", ylabel="position i", title=f"{label}: cosine similarity of positions")
    fig.colorbar(image, ax=ax)
    written.append(save(fig, out / "pe_cosine.png"))
    return written


@torch.no_grad()
def figures_rotary(scheme: PositionalScheme, length: int, out: Path, label: str) -> list[Path]:
    plt = pyplot()
    angles = rotation_angles(scheme, length)
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.8))
    image = left.imshow(torch.remainder(angles, 2 * math.pi).T.numpy(), aspect="auto", cmap="twilight",
                        vmin=0, vmax=2 * math.pi, interpolation="nearest")
    left.set(xlabel="frequency pair i", ylabel="position m", title="rotation angle m·θ_i (mod 2π)")
    fig.colorbar(image, ax=left)
    right.semilogy(angles[:, 1].abs().numpy(), marker="o")
    right.set(xlabel="frequency pair i", ylabel="θ_i (radians per position)", title=f"{label}: angle per step")
    written = [save(fig, out / "rotary_angles.png")]
    g = generator()
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    for name, vectors in (("q = k = all ones", torch.ones(1, scheme.head_dim)),
                          ("q = k, random (mean of 64)", torch.randn(64, scheme.head_dim, generator=g))):
        x = vectors[:, None, None, :].expand(-1, scheme.n_head, length, -1).contiguous()
        q_m, k_n = scheme.rotate(x, x, torch.arange(length))
        logit = (q_m[:, 0] * k_n[:, 0, :1]).sum(-1) / vectors.norm(dim=-1, keepdim=True) ** 2
        ax.plot(logit.mean(0).numpy(), label=name)
    ax.set(xlabel="relative distance m − n", ylabel="q_m·k_n / ‖q‖‖k‖", title=f"{label}: logit vs distance")
    ax.legend(fontsize=8)
    written.append(save(fig, out / "rotary_logit_vs_distance.png"))
    return written


def figures_bias(scheme: PositionalScheme, length: int, out: Path, label: str) -> list[Path]:
    plt = pyplot()
    bias = bias_matrix(scheme, length)
    bias = bias.masked_fill(~torch.ones(length, length, dtype=torch.bool).tril(), math.nan)
    heads = min(scheme.n_head, 8)
    fig, axes = plt.subplots(1, heads, figsize=(2.4 * heads + 0.8, 3.2), squeeze=False)
    for h, ax in enumerate(axes[0]):
        image = ax.imshow(bias[h].numpy(), cmap="magma", interpolation="nearest")
        ax.set(title=f"head {h}", xlabel="key j", ylabel="query i" if h == 0 else None)
        fig.colorbar(image, ax=ax, fraction=0.046)
    fig.suptitle(f"{label}: attention bias per head (masked above the diagonal)")
    written = [save(fig, out / "bias_matrices.png")]
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    for h, curve in enumerate(bias_by_distance(scheme, length)):
        ax.plot(curve.numpy(), label=f"head {h}")
    ax.set(xlabel="distance i − j", ylabel="bias added to the score", title=f"{label}: bias vs distance")
    ax.legend(fontsize=7, ncol=2)
    written.append(save(fig, out / "bias_vs_distance.png"))
    return written


def write_figures(scheme: PositionalScheme, length: int, out: Path, label: str) -> list[Path]:
    written: list[Path] = []
    if scheme.kind == "additive":
        written += figures_additive(scheme, length, out, label)
    if scheme.kind == "rotary":
        written += figures_rotary(scheme, length, out, label)
    if scheme.adds_bias:
        written += figures_bias(scheme, length, out, label)
    return written


def figure_attention(run, layer: int, head: int, length: int, out: Path) -> Path:
    """The attention pattern of one head on the first `length` tokens of the run's validation text."""
    from posenc_cli.runs import run_corpus

    tokens = run_corpus(run).val[:length]
    probs, _ = layer_attention(run.model, tokens[None], layer)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.6, 4.8))
    from matplotlib.colors import PowerNorm

    image = ax.imshow(probs[0, head].numpy(), cmap="viridis", norm=PowerNorm(0.5, 0, 1), interpolation="nearest")
    ax.set(xlabel="key position", ylabel="query position",
           title=f"{run.scheme} (trained): attention, layer {layer} head {head}")
    if len(tokens) <= 48:
        chars = [repr(run.vocab.decode([t]))[1:-1] for t in tokens.tolist()]
        ax.set_xticks(range(len(chars)), chars, fontsize=6)
        ax.set_yticks(range(len(chars)), chars, fontsize=6)
    fig.colorbar(image, ax=ax, label="attention weight (square-root colour scale)")
    return save(fig, out / f"attention_layer{layer}_head{head}.png")


# ---- the command ------------------------------------------------------------------------------


@dataclass
class Inspection:
    scheme: PositionalScheme
    label: str
    length: int
    checks: list[Check]
    figures: list[Path] = field(default_factory=list)


def check_length(length: int) -> int:
    if length < 4:
        raise UsageError(f"--length must be at least 4, got {length}")
    return length


def fresh_scheme(name: str, dim: int, heads: int, length: int) -> PositionalScheme:
    if name not in SCHEMES:
        raise UsageError(f"unknown scheme {name!r}; choose one of: {', '.join(SCHEMES)}")
    if dim < 1 or heads < 1 or dim % heads:
        raise UsageError(f"--dim {dim} and --heads {heads}: both must be positive and dim a multiple of heads")
    torch.manual_seed(SEED)  # a learned table's initial vectors, so the report repeats exactly
    return build_scheme(name, dim, heads, check_length(length))


def inspect_scheme(name: str | None, dim: int | None, length: int | None, heads: int | None, out: Path | None,
                   run_dir: Path | None = None, layer: int = 0, head: int = 0) -> Inspection:
    """Checks and figures for a fresh scheme, or for the trained scheme of `run_dir`."""
    if run_dir is None:
        if name is None:
            raise UsageError("name a scheme (posenc inspect SCHEME) or a run (--run RUN_DIR)")
        length = length or 128
        scheme, label = fresh_scheme(name, dim or 128, heads or 4, length), name
    else:
        from posenc_cli.runs import load_run

        run = load_run(run_dir)
        if name is not None and name != run.scheme:
            raise UsageError(f"--run {run_dir} was trained with scheme {run.scheme}, not {name}; drop SCHEME or match it")
        cfg = run.model.cfg
        for option, given, actual in (("--dim", dim, cfg.n_embd), ("--heads", heads, cfg.n_head)):
            if given is not None and given != actual:
                raise UsageError(f"{option} {given} does not match --run's model ({option[2:]} = {actual}); drop {option}")
        if not 0 <= layer < cfg.n_layer or not 0 <= head < cfg.n_head:
            raise UsageError(f"--layer {layer} --head {head}: the run has layers 0..{cfg.n_layer - 1} and heads 0..{cfg.n_head - 1}")
        length = check_length(length or run.train_len)
        scheme, label = run.model.pos, f"{run.scheme} (trained)"
    out = out or Path("outputs") / "inspect" / (run.path.name if run_dir else name)
    length = min(length, scheme.max_len or length)  # a learned table has no rows past max_len
    result = Inspection(scheme, label, length, run_checks(scheme, length))
    result.figures = write_figures(scheme, length, out, label)
    if run_dir is not None:
        result.figures.append(figure_attention(run, layer, head, length, out))
    return result


def print_report(result: Inspection) -> None:
    from rich import box
    from rich.table import Table

    from posenc_cli import ui

    s = result.scheme
    params = f"{s.positional_params:,}" + (f" = {s.param_formula}" if s.param_formula != str(s.positional_params) else "")
    ui.out.print(f"[bold]{result.label}[/]: kind {s.kind}, relative position {s.relative}, "
                 f"positional parameters {params} (d={s.n_embd}, heads={s.n_head}, length={result.length})",
                 highlight=False)
    table = Table(title="The chapters' claims, measured", box=box.SIMPLE_HEAD)
    for column in ("", "claim", "measured", "needs"):
        table.add_column(column, overflow="fold")
    for check in result.checks:
        table.add_row("[green]PASS[/]" if check.passed else "[red]FAIL[/]", check.claim, check.measured, check.needs)
    ui.out.print(table)
    for check in result.checks:
        if check.note:
            ui.out.print(f"  {check.claim.split(':')[0]}: {check.note}", markup=False, highlight=False)
    if s.adds_bias:
        print_bias_by_distance(s, result.length)
    failed = sum(not c.passed for c in result.checks)
    ui.out.print(f"{len(result.checks)} checks: {len(result.checks) - failed} PASS, {failed} FAIL", highlight=False)
    for path in result.figures:
        ui.err.print(f"wrote {path}", highlight=False)
    if not result.figures:
        ui.err.print(f"no figures: {s.name} adds no positions to draw (--run RUN_DIR draws a trained model's attention)")


def print_bias_by_distance(scheme: PositionalScheme, length: int) -> None:
    from rich import box
    from rich.table import Table

    from posenc_cli import ui

    curve = bias_by_distance(scheme, length)
    distances = sorted({0, 1, 2, length - 1} | {4**i for i in range(1, int(math.log(length, 4)) + 1) if 4**i < length})
    table = Table(title="Bias as a function of distance i − j", box=box.SIMPLE_HEAD)
    for column in ["head"] + [str(d) for d in distances]:
        table.add_column(column, justify="right")
    for h in range(min(scheme.n_head, 8)):
        table.add_row(str(h), *(f"{float(curve[h, d]) + 0.0:.3g}" for d in distances))
    ui.out.print(table)
