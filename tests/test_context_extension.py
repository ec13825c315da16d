"""Training-free context extension (model/extension): each method against an independent reference
written from its paper's equations (one relative position per query–key pair), plain attention
wherever a sequence stays within the method's window, and the blocked computation equal to one block.

The reference never moves rotated rows: it rotates each raw query by the pair's relative position
r(i, j) and dots it with the raw key, since RoPE makes q_i·k_j depend on r alone.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from posenc_cli.core.errors import UsageError
from posenc_cli.model import GPT, ModelConfig
from posenc_cli.model import blocks as blocks_module
from posenc_cli.model.attention import attend
from posenc_cli.model.extension.method import ExtensionSettings, parse_method, parse_methods
from posenc_cli.model.layer_attention import LayerAttention
from posenc_cli.model.positional.rope import LAYOUTS, RoPE

B, H, D, L = 2, 3, 8, 32  # batch, heads, head dim, the training length the methods are built for


def extended(extension, q, k, v, *, rotation):
    """A transformers model's rotary layer under `extension`, as the executor computes it."""
    return attend(q, k, v, layer=LayerAttention.of_extension(extension), rotation=rotation)


def relative(name: str, p, i: int, j: int) -> float:
    """r(i, j) as each paper defines it (notes: /work/notes/extension_refs.md)."""
    d = i - j
    if name == "self_extend":  # LongLM: neighbours exact, then floor(i/G) - floor(j/G) + W - W/G
        return d if d < p.window else i // p.group - j // p.group + p.window - p.window / p.group
    if name == "rerope":  # Su: min(d, w)
        return min(d, p.window)
    if name == "leaky_rerope":  # Su: w + (d - w)/k past the window
        return d if d < p.window else p.window + (d - p.window) / p.leak
    if name == "dca":  # An et al.: intra-chunk exact, successive capped at s + w, inter at min(2s - 1, s + w)
        s, w = p.chunk, p.local
        if i // s == j // s:
            return d
        query = min(i % s + s, s + w) if i // s == j // s + 1 else min(2 * s - 1, s + w)
        return query - j % s
    if name == "string":  # An et al.: d past the offset S is read as d - S + W
        return d if d < p.window else d - p.window + p.local
    if name == "streaming":  # Xiao et al.: recent pairs exact, a sink met from the cache's last slot
        return d if d < p.window else min(i, p.sinks + p.window - 1) - j
    return d


def reference(q, k, v, *, layout: str, extension) -> torch.Tensor:
    """Causal attention from raw q, k: each pair's score at the paper's r(i, j), log-n on the logits."""
    turn, spread = LAYOUTS[layout]
    inv_freq = 10000.0 ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
    name = extension.remap.name if extension.remap else "none"
    T = q.size(2)
    out = torch.empty_like(v)
    for i in range(T):
        kept = [
            j
            for j in range(i + 1)
            if name != "streaming" or i - j < extension.remap.window or j < extension.remap.sinks
        ]
        r = torch.tensor([relative(name, extension.remap, i, j) for j in kept], dtype=torch.float64)
        angles = spread(r[:, None] * inv_freq)  # (len(kept), D)
        turned = (
            q[:, :, i, None] * angles.cos()
            + turn(q[:, :, i, None].expand(-1, -1, len(kept), -1)) * angles.sin()
        )
        scores = (turned * k[:, :, kept]).sum(-1) / math.sqrt(D)
        if extension.logn_len:
            scores = scores * max(1.0, math.log(i + 1) / math.log(extension.logn_len))
        out[:, :, i] = (scores.softmax(-1)[..., None] * v[:, :, kept]).sum(-2)
    return out


SMALL = ExtensionSettings(
    self_extend_group=3,
    self_extend_window=5,
    rerope_window=6,
    rerope_leak=4.0,
    dca_chunk=7,
    dca_local=3,
    string_offset=9,
    string_window=2,
    streaming_sinks=3,
    streaming_window=7,
)
METHODS = [
    "self_extend",
    "rerope",
    "leaky_rerope",
    "dca",
    "string",
    "streaming",
    "logn",
    "self_extend+logn",
    "dca+logn",
]


def settings_for(text: str) -> ExtensionSettings:
    """SMALL's options that `text`'s method reads (the others are refused when given)."""
    reads = {
        "self_extend": "self_extend_",
        "leaky_rerope": "rerope_",
        "rerope": "rerope_window",
        "dca": "dca_",
        "string": "string_",
        "streaming": "streaming_",
    }
    prefix = next((reads[name] for name in reads if name in text), None)
    kept = {key: value for key, value in vars(SMALL).items() if prefix and key.startswith(prefix)}
    return ExtensionSettings(**kept)


def rotated(layout: str, T: int):
    torch.manual_seed(0)
    q, k, v = (torch.randn(B, H, T, D, dtype=torch.float64) for _ in range(3))
    rope = RoPE(H * D, H, L, layout=layout).double()
    qr, kr = rope.rotate(q, k, torch.arange(T))
    return (q, k, v), (qr, kr), rope


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("text", METHODS)
def test_each_method_is_its_papers_relative_positions_for_every_pair(text, layout):
    (q, k, v), (qr, kr), rope = rotated(layout, 40)  # 40 > every window, and > L for log-n
    extension = parse_method(text, settings_for(text)).extension(L)
    got = extended(extension, qr, kr, v, rotation=rope.rotation(40))
    want = reference(q, k, v, layout=layout, extension=extension)
    assert (got - want).abs().max() < 1e-5


@pytest.mark.parametrize(
    "text, options",
    [
        ("self_extend", {"self_extend_window": 24}),
        ("rerope", {"rerope_window": 24}),
        ("leaky_rerope", {"rerope_window": 24}),
        ("dca", {"dca_chunk": 24, "dca_local": 8}),
        ("string", {"string_offset": 24}),
        ("streaming", {"streaming_sinks": 4, "streaming_window": 20}),
        ("logn", {}),
        ("dca+logn", {"dca_chunk": 24, "dca_local": 8}),
    ],
)
def test_within_its_window_each_method_is_plain_attention_exactly(text, options):
    """Self-Extend with W ≥ T, ReRoPE with w ≥ T, DCA with a chunk ≥ T, log-n at T ≤ L: the same bits
    as the model's plain causal kernel."""
    _, (qr, kr), rope = rotated("half", 24)
    _, _, v = rotated("half", 24)[0]
    extension = parse_method(text, ExtensionSettings(**options)).extension(L)
    plain = F.scaled_dot_product_attention(qr, kr, v, is_causal=True)
    assert torch.equal(extended(extension, qr, kr, v, rotation=rope.rotation(24)), plain)


@pytest.mark.parametrize("text", ["self_extend", "rerope", "dca", "logn"])
def test_a_model_within_the_window_gives_the_same_logits_as_without_the_method(text):
    model = GPT(
        ModelConfig.from_dict(
            {"scheme": "rope", "n_layer": 2, "n_head": 2, "n_embd": 16, "block_size": 32, "vocab_size": 11}
        )
    ).eval()
    idx = torch.randint(0, 11, (2, 32))
    with torch.no_grad():
        plain = model(idx)
        extended = model.with_extension(parse_method(text, ExtensionSettings()).extension(32 * 8))(idx)
    assert torch.equal(plain, extended)


@pytest.mark.parametrize("text", ["self_extend", "leaky_rerope", "dca+logn"])
def test_blocks_of_queries_give_what_one_block_gives(text, monkeypatch):
    _, (qr, kr), rope = rotated("half", 40)
    v = rotated("half", 40)[0][2]
    extension = parse_method(text, settings_for(text)).extension(L)
    whole = extended(extension, qr, kr, v, rotation=rope.rotation(40))
    monkeypatch.setattr(blocks_module, "MASK_BUDGET", 3 * 40 * 3)  # a few queries per block
    assert (extended(extension, qr, kr, v, rotation=rope.rotation(40)) - whole).abs().max() < 1e-12


@pytest.mark.parametrize("text", ["self_extend", "dca", "logn"])
def test_the_newest_queries_against_every_key_are_the_last_rows_of_the_whole(text):
    """Queries after cached keys (generation) attend as the same tokens do in one forward."""
    _, (qr, kr), rope = rotated("half", 40)
    v = rotated("half", 40)[0][2]
    extension = parse_method(text, settings_for(text)).extension(L)
    whole = extended(extension, qr, kr, v, rotation=rope.rotation(40))
    newest = extended(extension, qr[:, :, -4:], kr, v, rotation=rope.rotation(40))
    assert (newest - whole[:, :, -4:]).abs().max() < 1e-12


def test_self_extend_reads_its_readme_capacity_without_a_distance_past_training():
    """LongLM's rule: a model trained at L reads (L - W)·G + W tokens with every distance below L."""
    group, window = 4, 8
    remap = parse_method("self_extend", ExtensionSettings(group, window)).extension(L).remap
    T = (L - window) * group + window
    index = torch.arange(T)
    far_query, far_key = remap.positions(index)[1]
    assert far_query[-1] - far_key[0] < L <= far_query[-1] - far_key[0] + 1 + group


def test_dual_chunk_attention_never_uses_a_distance_past_chunk_plus_local():
    remap = parse_method("dca", ExtensionSettings(dca_chunk=7, dca_local=3)).extension(L).remap
    T = 200
    index = torch.arange(T)
    region = remap.region(index[:, None], index[None, :])
    relative = torch.zeros(T, T, dtype=torch.float64)
    for part, (query, key) in enumerate(remap.positions(index)):
        relative = torch.where(region == part, query[:, None] - key[None, :], relative)
    causal = index[:, None] >= index[None, :]
    assert relative[causal].max() == 7 + 3 and relative[causal].min() == 0


def test_a_method_list_reads_back_as_its_text():
    methods = parse_methods("none,yarn+logn,logn+dca,self_extend,ntk+leaky_rerope", ExtensionSettings())
    assert [m.text for m in methods] == ["none", "yarn+logn", "dca+logn", "self_extend", "ntk+leaky_rerope"]


@pytest.mark.parametrize(
    "text, settings, says",
    [
        ("yarn+ntk", ExtensionSettings(), "'ntk' is a second frequency scaling"),
        ("dca+rerope", ExtensionSettings(), "'rerope' is a second remap"),
        ("self_extnd", ExtensionSettings(), "'self_extnd' is not a method to join"),
        ("none+logn", ExtensionSettings(), "'none' joins nothing with \\+"),
        ("logn+logn", ExtensionSettings(), "'logn' is a second logn"),
        ("none", ExtensionSettings(dca_chunk=64), "--dca-chunk applies only with --rope-scaling dca"),
        (
            "rerope",
            ExtensionSettings(rerope_leak=4.0),
            "--rerope-leak applies only with --rope-scaling leaky_rerope",
        ),
    ],
)
def test_a_bad_method_list_is_one_line_naming_it(text, settings, says):
    with pytest.raises(UsageError, match=says):
        parse_methods(text, settings)


@pytest.mark.parametrize(
    "options, says",
    [
        ({"self_extend_group": 0}, "--self-extend-group must be an integer between 1"),
        ({"self_extend_window": 2.5}, "--self-extend-window must be an integer"),
        ({"rerope_leak": 1}, "--rerope-leak must be"),
        ({"dca_chunk": -3}, "--dca-chunk must be an integer"),
    ],
)
def test_a_bad_parameter_is_one_line_naming_the_option(options, says):
    text = {"self": "self_extend", "rerope": "leaky_rerope", "dca": "dca"}[next(iter(options)).split("_")[0]]
    with pytest.raises(UsageError, match=says):
        parse_methods(text, ExtensionSettings(**options))


@pytest.mark.parametrize(
    "text, options, says",
    [
        (
            "self_extend",
            {"self_extend_window": 33},
            "--self-extend-window 33 is past the model's context of 32",
        ),
        ("rerope", {"rerope_window": 40}, "--rerope-window 40 is past the model's context of 32"),
        ("dca", {"dca_chunk": 30}, "--dca-chunk 30 \\+ --dca-local 4 = 34 is past the model's context of 32"),
    ],
)
def test_a_window_past_the_models_context_is_one_line(text, options, says):
    with pytest.raises(UsageError, match=says):
        parse_method(text, ExtensionSettings(**options)).extension(L)


@pytest.mark.parametrize("scheme", ["alibi", "xpos", "rope+alibi", "learned"])
def test_a_scheme_without_a_plain_rope_rotation_refuses_an_extension(scheme):
    model = GPT(
        ModelConfig.from_dict(
            {"scheme": scheme, "n_layer": 1, "n_head": 2, "n_embd": 16, "block_size": 32, "vocab_size": 11}
        )
    )
    with pytest.raises(UsageError, match="has no RoPE rotation to extend"):
        model.with_extension(parse_method("self_extend", ExtensionSettings()).extension(32))


@pytest.mark.parametrize("text", ["self_extend", "dca", "logn"])
def test_an_extensions_memory_grows_linearly_with_the_length(text):
    """What the memory models add for a column (ContextExtension.extra_bytes) at most doubles when the
    length doubles, and at 32k tokens stays far below one head's T×T scores."""
    extension = parse_method(text, ExtensionSettings()).extension(8192)
    at = {T: extension.extra_bytes(batch=1, heads=9, length=T, head_dim=64) for T in (16384, 32768)}
    assert at[32768] <= 2 * at[16384] and at[32768] < 32768**2 * 4 / 4


@pytest.mark.parametrize(
    "scheme, method",
    [
        ("rope", None),  # the kernel's whole causal path
        ("alibi", None),  # a bias of the distance: the Toeplitz path
        ("fire", None),  # a bias built per pair: the blocked path
        ("cope", None),  # a content score: blocked, per sequence and head
        ("fox", None),
        ("stickbreaking", None),  # a softmax replaced: four planes per block
        ("rope", "self_extend"),  # a remap's parts (ContextExtension.extra_bytes)
        ("rope", "dca"),
        ("rope", "logn"),
    ],
)
def test_the_forward_estimate_bounds_what_a_forward_holds(scheme, method):
    """What the memory checks read (config.forward_memory: eval's memory_short, sample's
    check_context_memory, training's activations) is at least the tensor memory a scoring forward holds
    at once, measured, on every path of the executor, at a length past one block of queries; and its
    attention stays a few blocks of queries at any length, where the old estimate counted the T x T
    scores of every head at once."""
    from posenc_cli.bench.scheme_costs import peak_tensor_mib
    from posenc_cli.config.forward_memory import forward_of
    from posenc_cli.evaluation.perplexity import LogitsScorer

    batch, length, vocab = 2, 2048, 256
    cfg = ModelConfig.from_dict(
        {"scheme": scheme, "n_layer": 2, "n_head": 4, "n_embd": 64, "block_size": 256, "vocab_size": vocab}
    )
    model, extensions = GPT(cfg), []
    if method is not None:
        extensions = [parse_method(method, ExtensionSettings()).extension(256)]
        model = model.with_extension(extensions[0])
    ids = torch.randint(0, vocab, (batch, length + 1), generator=torch.Generator().manual_seed(0))
    scorer = LogitsScorer(model)
    measured = peak_tensor_mib(lambda: scorer.token_nll(ids[:, :-1], ids[:, 1:])) * 2**20
    forward = forward_of(cfg.size, vocab, batch=batch, length=length)
    assert measured <= forward.bytes(extensions)
    longer = forward_of(cfg.size, vocab, batch=batch, length=8 * length)
    assert longer.attention() <= forward.attention()  # blocks within MASK_BUDGET; every score at once: 64x
