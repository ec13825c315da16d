"""A small decoder-only GPT. It knows positional schemes only through their hooks.

Read top to bottom: attention, MLP, block, GPT (its config: model/shape.py).
"""

from __future__ import annotations

import copy
import math

import torch
import torch.nn.functional as F
from torch import nn

from posenc_cli.core.device import ATTENTION_IN_FP32
from posenc_cli.core.errors import UsageError
from posenc_cli.model.attention import attend
from posenc_cli.model.extension import ContextExtension
from posenc_cli.model.layer_attention import LayerAttention
from posenc_cli.model.positional import PositionalScheme, build_scheme
from posenc_cli.model.shape import ModelConfig
from posenc_cli.model.sinks import AttentionSinks
from posenc_cli.model.window import FULL, AttentionWindow

QK_NORM_EPS = 1e-5  # the rms_norm_eps of the Llama and SmolLM configs DroPE recalibrates


class LayerCache:
    """One layer's keys and values for the tokens seen so far that a later query can still see: the
    last W under a sliding window, the current chunk's under chunked attention, else all of them. For a
    scheme that reads content, their layer inputs too (FoX's forget gates read them)."""

    def __init__(self) -> None:
        self.keys: torch.Tensor | None = None
        self.values: torch.Tensor | None = None
        self.inputs: torch.Tensor | None = None
        self.length = 0  # tokens seen, the kept keys' last ones

    def extend(
        self, k: torch.Tensor, v: torch.Tensor, window: AttentionWindow, *, x: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, int]:
        """Append the new tokens' (B, H, T, D) keys and values and (B, T, C) inputs (None: not kept);
        returns the kept and new ones, and the token index of the first. Keeps from then on only those
        the next token's query sees."""
        start = self.length - (0 if self.keys is None else self.keys.size(2))
        if self.keys is not None and self.values is not None:
            k, v = torch.cat([self.keys, k], dim=2), torch.cat([self.values, v], dim=2)
        if self.inputs is not None and x is not None:
            x = torch.cat([self.inputs, x], dim=1)
        self.length = start + k.size(2)  # k now holds tokens start..: the kept and the new
        dropped = window.first_key(self.length) - start
        self.keys, self.values = k[:, :, dropped:], v[:, :, dropped:]
        self.inputs = None if x is None else x[:, dropped:]
        return k, v, x, start


class KVCache:
    """What generation keeps between tokens so each step runs only the new token through the model.

    Keys are kept rotated at their absolute positions, except where a scheme's rotation of a position
    reads the others (`rotation_reads_context`, xPos): there they are kept unrotated and the whole
    context is rotated again at each step, as the uncached forward rotates it."""

    def __init__(self, n_layer: int):
        self.layers = [LayerCache() for _ in range(n_layer)]

    @property
    def length(self) -> int:
        return self.layers[0].length


def rotate_with_context(
    q: torch.Tensor, k: torch.Tensor, scheme: PositionalScheme
) -> tuple[torch.Tensor, torch.Tensor]:
    """The T newest queries (B, H, T, D) and all L keys, rotated as a forward over positions 0..L-1
    rotates them: the queries are padded to L rows for the hook, then the new rows kept."""
    T, L = q.size(2), k.size(2)
    padded = F.pad(q, (0, 0, L - T, 0))
    q, k = scheme.rotate(padded, k, torch.arange(L, device=q.device))
    return q[:, :, L - T :], k


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.n_head = cfg.size.n_head
        self.qkv = nn.Linear(cfg.size.n_embd, 3 * cfg.size.n_embd, bias=False)
        self.proj = nn.Linear(cfg.size.n_embd, cfg.size.n_embd, bias=False)
        # model.qk_norm: DroPE's QK-norm, one RMSNorm over all heads' q (and k), before the split
        self.q_norm = nn.RMSNorm(cfg.size.n_embd, eps=QK_NORM_EPS) if cfg.size.qk_norm else None
        self.k_norm = nn.RMSNorm(cfg.size.n_embd, eps=QK_NORM_EPS) if cfg.size.qk_norm else None
        self.sinks: AttentionSinks | None = None  # scheme.sinks: this layer's own, set by the GPT

    def project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x (B, T, C) -> q, k, v (B, H, T, D), q and k normalised where model.qk_norm."""
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        if self.q_norm is not None and self.k_norm is not None:  # in fp32, as its weight is (bf16 autocast)
            q, k = self.q_norm(q.float()).to(q.dtype), self.k_norm(k.float()).to(k.dtype)
        return tuple(t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))  # type: ignore[return-value]

    def forward(
        self,
        x: torch.Tensor,
        positions: torch.Tensor,
        scheme: PositionalScheme,
        layer: LayerAttention,
        given: torch.Tensor | None = None,
        cache: LayerCache | None = None,
    ) -> torch.Tensor:
        """`scheme` rotates, `layer` says how the rotated queries attend (model/attention.py executes it).
        `given`: the caller's (B, T) positions, None when they are 0..T-1 (then a bias is cheap).
        `cache`: x holds the newest tokens of a context whose earlier keys and values it keeps."""
        B, T, C = x.shape
        q, k, v = self.project(x)
        first = 0  # the token index of k's first key
        inputs = x if layer.reads_content else None  # the layer inputs at k's tokens, where read
        if cache is not None and scheme.rotation_reads_context:
            k, v, inputs, first = cache.extend(k, v, FULL, x=inputs)  # every key kept: all rotated again
            q, k = rotate_with_context(q, k, scheme)
        else:
            q, k = scheme.rotate(q, k, positions)
            if cache is not None:
                k, v, inputs, first = cache.extend(k, v, layer.window, x=inputs)
        rotation = layer.rotation(first + k.size(2)) if layer.remap is not None else None
        if ATTENTION_IN_FP32.get():  # bf16 autocast around fp32 attention (core.device.AUTOCAST_PRECISIONS)
            with torch.autocast(x.device.type, enabled=False):
                q, k, v = q.float(), k.float(), v.float()
                inputs = None if inputs is None else inputs.float()
                y = attend(
                    q, k, v, layer=layer, first=first, positions=given, inputs=inputs, rotation=rotation
                )
        else:
            y = attend(q, k, v, layer=layer, first=first, positions=given, inputs=inputs, rotation=rotation)
        return self.proj(y.transpose(1, 2).reshape(B, T, C))


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.fc = nn.Linear(cfg.size.n_embd, 4 * cfg.size.n_embd, bias=False)
        self.proj = nn.Linear(4 * cfg.size.n_embd, cfg.size.n_embd, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(F.gelu(self.fc(x)))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.size.n_embd)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.size.n_embd)
        self.mlp = MLP(cfg)

    def forward(self, x, positions, scheme, layer, given=None, cache=None):
        x = x + self.attn(self.ln_1(x), positions, scheme, layer, given, cache)
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.scheme = build_scheme(
            cfg.scheme, cfg.size.n_embd, cfg.size.n_head, block_size=cfg.block_size, **cfg.scheme_options
        )
        # the scheme each block calls: one shared instance, or the scheme's own per layer (FIRE per_layer);
        # a plain list, since the scheme already holds (and registers) every instance
        self.layer_schemes = self.scheme.for_layers(cfg.size.n_layer)
        self.tok = nn.Embedding(cfg.vocab_size, cfg.size.n_embd)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.size.n_layer))
        for block, scheme in zip(self.blocks, self.layer_schemes):  # scheme.sinks: each layer its own
            block.attn.sinks = AttentionSinks(cfg.size.n_head) if scheme.has_sinks else None
        # how each block attends, built once from its scheme's options (with_extension builds others)
        self.trained_attention = [
            LayerAttention.of(scheme, sinks=block.attn.sinks)
            for block, scheme in zip(self.blocks, self.layer_schemes)
        ]
        self.attention = self.trained_attention
        self.ln_f = nn.LayerNorm(cfg.size.n_embd)
        self.head = nn.Linear(cfg.size.n_embd, cfg.vocab_size, bias=False)
        self.head.weight = self.tok.weight  # tied input and output embeddings
        self._init_weights()
        self.register_load_state_dict_pre_hook(rename_legacy_scheme_keys)

    def _init_weights(self) -> None:
        for name, p in self.named_parameters():
            if name.startswith("scheme."):
                continue  # schemes initialise their own parameters
            if name == "tok.weight":
                nn.init.normal_(p, std=self.cfg.size.embed_std)
            elif p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * self.cfg.size.n_layer) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, std=std)

    def forward(
        self, idx: torch.Tensor, positions: torch.Tensor | None = None, cache: KVCache | None = None
    ) -> torch.Tensor:
        """(B, T) token ids -> (B, T, vocab) logits. positions: (B, T) increasing positions of each
        token (train.positions=randomized); None: 0..T-1, as in evaluation. cache: idx continues the
        tokens the cache holds, at positions cache.length.., and the cache gains them (generation)."""
        given = positions
        start = 0 if cache is None else cache.length
        if positions is None:
            positions = torch.arange(start, start + idx.size(1), device=idx.device)
        elif cache is not None:
            raise ValueError("a KV cache continues positions 0..L-1; it takes no positions")
        x = self.scheme.embed(self.tok(idx), positions)
        layers = zip(self.blocks, self.layer_schemes, self.attention)
        for i, (block, scheme, layer) in enumerate(layers):
            x = block(x, positions, scheme, layer, given, None if cache is None else cache.layers[i])
        return self.head(self.ln_f(x))

    def with_extension(self, extension: ContextExtension | None) -> GPT:
        """This model, its weights shared, with `extension` on each layer that takes one (full-attention
        RoPE) and every other layer as trained; None: every layer as trained. Nothing in `self` changes.
        Refused in one line (UsageError) where no layer takes it."""
        trained = self.trained_attention
        layers = trained
        if extension is not None:
            refusals = [layer.extension_refusal(extension) for layer in trained]
            if all(refusals):
                raise UsageError(f"scheme {self.scheme.label} {extension_refusal(refusals)}")
            layers = [layer if why else layer.extended(extension) for layer, why in zip(trained, refusals)]
        model = copy.copy(self)
        model.attention = layers
        return model

    def new_cache(self) -> KVCache:
        return KVCache(len(self.blocks))

    @property
    def n_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    @property
    def n_positional_params(self) -> int:
        return self.scheme.positional_params


def extension_refusal(refusals: list[str | None]) -> str:
    """Why no layer takes an extension (each layer's reason given), each distinct reason once."""
    reasons = dict.fromkeys(why for why in refusals if why)
    if len(reasons) == 1:
        why = next(iter(reasons))
        return why if len(refusals) == 1 else f"has no layer that takes it: every layer {why}"
    layers = {why: ",".join(str(i) for i, r in enumerate(refusals) if r == why) for why in reasons}
    return "has no layer that takes it: " + "; ".join(f"layers {ids} {why}" for why, ids in layers.items())


def rename_legacy_scheme_keys(module, state_dict, prefix, *_) -> None:
    """Checkpoints written before the scheme attribute was renamed hold its weights as `pos.*`."""
    for key in [k for k in state_dict if k.startswith(prefix + "pos.")]:
        state_dict[prefix + "scheme." + key[len(prefix) + 4 :]] = state_dict.pop(key)


def token_nll(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Per-token negative log-likelihood in nats, shaped like `targets`."""
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), reduction="none").view_as(targets)
