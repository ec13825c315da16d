"""The figures of `posenc inspect`: what a scheme adds, rotates or biases, drawn from its hooks."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch

from posenc_cli.core.plotting import pyplot, save_figure
from posenc_cli.data import token_window
from posenc_cli.inspection.checks import (
    bias_by_distance,
    bias_matrix,
    difference_by_distance,
    generator,
    layer_attention,
    position_vectors,
)
from posenc_cli.model.positional import PositionalScheme
from posenc_cli.rundir.loading import run_corpus


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


def figures_additive(scheme: PositionalScheme, length: int, *, out: Path, label: str) -> list[Path]:
    plt = pyplot()
    pe = position_vectors(scheme, length).numpy()
    fig, ax = plt.subplots(figsize=(6.4, 4))
    image = ax.imshow(pe, aspect="auto", cmap="RdBu_r", interpolation="nearest")
    ax.set(xlabel="dimension", ylabel="position", title=f"{label}: position vectors")
    fig.colorbar(image, ax=ax)
    written = [save_figure(fig, out / "pe_heatmap.png")]
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    width = pe.shape[1]
    for dim in sorted({0, 1, width // 32 * 2, width // 16 * 2, width // 8 * 2} - {width}):
        ax.plot(pe[:, dim], label=f"dim {dim}")
    ax.set(xlabel="position", ylabel="value", title=f"{label}: dimensions as waveforms")
    ax.legend(fontsize=7, ncol=5, loc="lower right")
    written.append(save_figure(fig, out / "pe_waveforms.png"))
    unit = torch.nn.functional.normalize(torch.from_numpy(pe), dim=1)
    fig, ax = plt.subplots(figsize=(5.6, 4.6))
    image = ax.imshow((unit @ unit.T).numpy(), cmap="viridis", vmin=-1, vmax=1, interpolation="nearest")
    ax.set(xlabel="position j", ylabel="position i", title=f"{label}: cosine similarity of positions")
    fig.colorbar(image, ax=ax)
    written.append(save_figure(fig, out / "pe_cosine.png"))
    if scheme.max_len is None:  # computed, so it can be drawn past the length it was trained or checked at
        written += figures_past_length(scheme, length, out=out, label=label)
    return written


def figures_past_length(scheme: PositionalScheme, length: int, *, out: Path, label: str) -> list[Path]:
    """The chapter: high-frequency components behave uncontrollably past the training length. Each
    dimension drawn to 4× the length, and PE(pos)·PE(pos+k) for offsets k inside and past it."""
    plt = pyplot()
    pe = position_vectors(scheme, 4 * length).numpy()
    width = pe.shape[1]
    fig, axes = plt.subplots(3, 1, figsize=(7.2, 5.6), sharex=True)
    for ax, dim in zip(axes, sorted({0, width // 4 * 2, width - 2})):
        ax.plot(pe[:, dim], linewidth=0.8)
        ax.axvspan(length, 4 * length, color="0.9")
        ax.set(ylabel=f"dim {dim}")
    axes[0].set_title(f"{label}: dimensions past the length {length} (shaded)")
    axes[-1].set(xlabel="position")
    written = [save_figure(fig, out / "pe_past_length.png")]
    fig, ax = plt.subplots(figsize=(7.2, 3.6))
    offsets = np.arange(3 * length + 1)
    for pos in (0, length // 2, length - 1):
        ax.plot(offsets, (pe[pos] * pe[pos + offsets]).sum(-1), linewidth=0.8, label=f"pos {pos}")
    ax.axvspan(length, 3 * length, color="0.9")
    ax.set(
        xlabel="offset k (shaded: k past the length)",
        ylabel="PE(pos)·PE(pos+k)",
        title=f"{label}: similarity of positions k apart",
    )
    ax.legend(fontsize=8)
    written.append(save_figure(fig, out / "pe_dot_by_offset.png"))
    return written


@torch.no_grad()
def figures_rotary(scheme: PositionalScheme, length: int, *, out: Path, label: str) -> list[Path]:
    plt = pyplot()
    angles = rotation_angles(scheme, length)
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.8))
    image = left.imshow(
        torch.remainder(angles, 2 * math.pi).T.numpy(),
        aspect="auto",
        cmap="twilight",
        vmin=0,
        vmax=2 * math.pi,
        interpolation="nearest",
    )
    left.set(xlabel="frequency pair i", ylabel="position m", title="rotation angle m·θ_i (mod 2π)")
    fig.colorbar(image, ax=left)
    right.semilogy(angles[:, 1].abs().numpy(), marker="o")
    right.set(
        xlabel="frequency pair i", ylabel="θ_i (radians per position)", title=f"{label}: angle per step"
    )
    written = [save_figure(fig, out / "rotary_angles.png")]
    g = generator()
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    for name, vectors in (
        ("q = k = all ones", torch.ones(1, scheme.head_dim)),
        ("q = k, random (mean of 64)", torch.randn(64, scheme.head_dim, generator=g)),
    ):
        x = vectors[:, None, None, :].expand(-1, scheme.n_head, length, -1).contiguous()
        q_m, k_n = scheme.rotate(x, x, torch.arange(length))
        logit = (q_m[:, 0] * k_n[:, 0, :1]).sum(-1) / vectors.norm(dim=-1, keepdim=True) ** 2
        ax.plot(logit.mean(0).numpy(), label=name)
    ax.set(xlabel="relative distance m − n", ylabel="q_m·k_n / ‖q‖‖k‖", title=f"{label}: logit vs distance")
    ax.legend(fontsize=8)
    written.append(save_figure(fig, out / "rotary_logit_vs_distance.png"))
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    ax.plot(difference_by_distance(scheme, length).numpy())
    ax.set(
        xlabel="distance k",
        ylabel="‖rope(x, k) − rope(x, 0)‖ / ‖x‖",
        title=f"{label}: farther → larger difference? (mean of 64 x)",
    )
    written.append(save_figure(fig, out / "rotary_difference_vs_distance.png"))
    return written


def figures_bias(scheme: PositionalScheme, length: int, *, out: Path, label: str) -> list[Path]:
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
    written = [save_figure(fig, out / "bias_matrices.png")]
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    for h, curve in enumerate(bias_by_distance(scheme, length)):
        ax.plot(curve.numpy(), label=f"head {h}")
    ax.set(xlabel="distance i − j", ylabel="bias added to the score", title=f"{label}: bias vs distance")
    ax.legend(fontsize=7, ncol=2)
    written.append(save_figure(fig, out / "bias_vs_distance.png"))
    return written


def write_figures(scheme: PositionalScheme, length: int, *, out: Path, label: str) -> list[Path]:
    written: list[Path] = []
    if scheme.kind == "additive":
        written += figures_additive(scheme, length, out=out, label=label)
    if scheme.kind == "rotary":
        written += figures_rotary(scheme, length, out=out, label=label)
    if scheme.adds_bias:
        written += figures_bias(scheme, length, out=out, label=label)
    return written


def attends(model, layer: int) -> str:
    """What a figure's title says of how the layer attends: ` (window=16)`, or nothing (full)."""
    attention = model.attention[layer]
    options = attention.window.options + (attention.temperature.options if attention.temperature else ())
    return f" ({', '.join(options)})" if options else ""


def figure_attention(run, layer: int, head: int, *, length: int, out: Path) -> Path:
    """The attention pattern of one head on the first `length` tokens of the run's validation text."""

    tokens = token_window(run_corpus(run).val, 0, length)
    probs, _ = layer_attention(run.model, tokens[None], layer)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.6, 4.8))
    from matplotlib.colors import PowerNorm

    image = ax.imshow(
        probs[0, head].numpy(), cmap="viridis", norm=PowerNorm(0.5, 0, 1), interpolation="nearest"
    )
    ax.set(
        xlabel="key position",
        ylabel="query position",
        title=f"{run.scheme} (trained): attention, layer {layer}{attends(run.model, layer)} head {head}",
    )
    if len(tokens) <= 48:
        chars = [repr(run.tokenizer.decode([t]))[1:-1] for t in tokens.tolist()]
        ax.set_xticks(range(len(chars)), chars, fontsize=6)
        ax.set_yticks(range(len(chars)), chars, fontsize=6)
    fig.colorbar(image, ax=ax, label="attention weight (square-root colour scale)")
    return save_figure(fig, out / f"attention_layer{layer}_head{head}.png")
