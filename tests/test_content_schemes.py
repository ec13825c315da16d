"""CoPE and the Forgetting Transformer: the schemes that read position from content (`content_bias`).

Each against a reference written from its paper's equations with explicit loops over (i, j), none of
the module's code called; FoX with its forget gate held at 1 is NoPE; query blocks equal one block, in
values and in gradients; the evaluation path at 4,096 tokens builds nothing past MASK_BUDGET; and the
memory model counts what training keeps. The laws every scheme obeys (causality, the KV cache, the
bf16 path, the parameter formula) run on them from test_schemes.py and test_model.py.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from posenc_cli.model import GPT, ModelConfig, ModelSize
from posenc_cli.model import blocks as attention_module
from posenc_cli.model.attention import attend
from posenc_cli.model.layer_attention import LayerAttention
from posenc_cli.model.positional import build_scheme
from posenc_cli.model.window import AttentionWindow

B, H, T, D = 2, 2, 13, 4  # T prime: the last query block is shorter than the others
CONTENT = ["cope", "fox"]


def content_attention(q, k, v, *, inputs, scheme, first=0):
    """The executor on a content scheme's layer, within the window the scheme was given."""
    return attend(q, k, v, layer=LayerAttention(scheme, scheme.window), inputs=inputs, first=first)


def scheme_with_random_parameters(name: str, **options):
    torch.manual_seed(0)
    scheme = build_scheme(name, H * D, H, block_size=8, **options)  # a table of 9: counts past it clamp
    with torch.no_grad():
        for p in scheme.parameters():
            p.normal_(0, 0.7)
    return scheme


def inputs(requires_grad: bool = False):
    g = torch.Generator().manual_seed(1)
    q, k, v = (2 * torch.randn(B, H, T, D, generator=g) for _ in range(3))  # gates spread over (0, 1)
    x = torch.randn(B, T, H * D, generator=g)
    return [t.requires_grad_(requires_grad) for t in (q, k, v, x)]


def loop_reference(name, scheme, q, k, v, x, window=AttentionWindow()):
    """softmax_j(q_i·k_j/√D + added_ij)·v over the keys j query i sees, one (i, j) at a time, in float64,
    from the papers' equations: CoPE interpolates the table's vectors, not their logits."""
    q, k, v, x = (t.detach().double() for t in (q, k, v, x))
    out = torch.zeros_like(q)
    for b in range(q.size(0)):
        for h in range(q.size(1)):
            for i in range(q.size(2)):
                keys = [j for j in range(i + 1) if window.visible(torch.tensor(i), torch.tensor(j))]
                logits = torch.stack([q[b, h, i] @ k[b, h, j] / math.sqrt(D) for j in keys])
                added = torch.stack([pair_term(name, scheme, q, k, x, (b, h, i, j)) for j in keys])
                weights = (logits + added).softmax(0)
                out[b, h, i] = sum(w * v[b, h, j] for w, j in zip(weights, keys))
    return out


def pair_term(name, scheme, q, k, x, index):
    b, h, i, j = index
    if name == "cope":  # p_ij = Σ_{t=j..i} σ(q_i·k_t/√D), clamped; e(p) between ⌊p⌋ and ⌈p⌉
        table = scheme.table.detach().double()
        p = sum(torch.sigmoid(q[b, h, i] @ k[b, h, t] / math.sqrt(D)) for t in range(j, i + 1))
        p = min(float(p), table.size(0) - 1)
        low, high = math.floor(p), math.ceil(p)
        e = (1 - (p - low)) * table[low] + (p - low) * table[high]
        return q[b, h, i] @ e / math.sqrt(D)
    weight, bias = scheme.gate.weight.detach().double(), scheme.gate.bias.detach().double()
    log_f = [torch.log(torch.sigmoid(weight[h] @ x[b, t] + bias[h])) for t in range(x.size(1))]
    return sum((log_f[t] for t in range(j + 1, i + 1)), torch.zeros((), dtype=torch.float64))


@pytest.mark.parametrize("window", [AttentionWindow(), AttentionWindow(size=4), AttentionWindow(chunk=5)])
@pytest.mark.parametrize("name", CONTENT)
def test_cope_and_fox_equal_their_papers_equations_written_pair_by_pair(name, window):
    scheme = scheme_with_random_parameters(name)
    scheme.window = window
    q, k, v, x = inputs()
    got = content_attention(q, k, v, inputs=x, scheme=scheme)
    torch.testing.assert_close(
        got.double(), loop_reference(name, scheme, q, k, v, x, window), rtol=1e-5, atol=1e-5
    )


@pytest.mark.parametrize("name", CONTENT)
def test_new_queries_after_cached_keys_get_the_rows_of_the_whole_context(name):
    """Generation: the last 3 queries against all 13 keys (first = 0), or against the 9 a cache kept of
    tokens 4.. (a window of 6), equal those rows of the whole forward."""
    scheme = scheme_with_random_parameters(name)
    q, k, v, x = inputs()
    whole = content_attention(q, k, v, inputs=x, scheme=scheme)
    torch.testing.assert_close(
        content_attention(q[:, :, -3:], k, v, inputs=x, scheme=scheme), whole[:, :, -3:]
    )
    scheme.window = AttentionWindow(size=6)
    whole = content_attention(q, k, v, inputs=x, scheme=scheme)
    kept = content_attention(q[:, :, -3:], k[:, :, 4:], v[:, :, 4:], inputs=x[:, 4:], scheme=scheme, first=4)
    torch.testing.assert_close(kept, whole[:, :, -3:])


def dense_reference(name, scheme, q, k, v, x):
    """The same equations as whole matrices, for autograd: p = masked gates times the (t >= j) matrix."""
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    logits = q @ k.mT / math.sqrt(D)
    if name == "cope":
        gates = torch.sigmoid(logits) * causal
        p = (gates @ causal.float()).clamp(max=scheme.table.size(0) - 1)  # Σ_{t: j <= t <= i} g_it
        low = p.detach().floor()
        frac = (p - low)[..., None]
        table = scheme.table
        e = (1 - frac) * table[low.long()] + frac * table[p.detach().ceil().long()]  # (B, H, T, T, D)
        added = (q[:, :, :, None] * e).sum(-1) / math.sqrt(D)
    else:
        log_f = torch.nn.functional.logsigmoid(x @ scheme.gate.weight.T + scheme.gate.bias).transpose(1, 2)
        added = torch.einsum("bhl,lij->bhij", log_f, in_span())
    return (logits + added).masked_fill(~causal, float("-inf")).softmax(-1) @ v


def in_span() -> torch.Tensor:
    """(l, i, j): 1 where j < l <= i, the forget gates FoX sums from key j to query i."""
    l, i, j = torch.arange(T)[:, None, None], torch.arange(T)[None, :, None], torch.arange(T)[None, None, :]
    return ((j < l) & (l <= i)).float()


@pytest.mark.parametrize("name", CONTENT)
@pytest.mark.parametrize("block", [1, 4, T])
def test_query_blocks_give_the_dense_references_values_and_gradients(name, block, monkeypatch):
    """On CPU the mask's gradient comes from MaskGradAttention's own backward: q, k, v, the layer input
    and the scheme's parameters get the gradients autograd gives through the written-out formula."""
    scheme = scheme_with_random_parameters(name)
    q, k, v, x = inputs(requires_grad=True)
    monkeypatch.setattr(attention_module, "MASK_BUDGET", H * T * block)
    leaves = [q, k, v, x, *scheme.parameters()]
    got, want = content_attention(q, k, v, inputs=x, scheme=scheme), dense_reference(name, scheme, q, k, v, x)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    weights = torch.randn(got.shape, generator=torch.Generator().manual_seed(2))
    got_grads = torch.autograd.grad((got * weights).sum(), leaves, allow_unused=True)
    want_grads = torch.autograd.grad((want * weights).sum(), leaves, allow_unused=True)
    for leaf, g, w in zip(leaves, got_grads, want_grads):
        if w is None:  # CoPE reads no layer input
            assert g is None or not g.any()
            continue
        assert w.abs().sum() > 0
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)


def tiny(scheme: str, **options) -> GPT:
    torch.manual_seed(0)
    size = ModelSize(n_layer=2, n_head=2, n_embd=16)
    return GPT(
        ModelConfig(vocab_size=13, block_size=16, size=size, scheme=scheme, scheme_options=options)
    ).eval()


def test_fox_with_its_forget_gate_held_at_one_is_nope():
    """w_f = 0 and b_f = 100: log σ(100) is 0 in fp32, so no key is forgotten and FoX adds nothing."""
    fox, nope = tiny("fox"), tiny("none")
    nope.load_state_dict({k: v for k, v in fox.state_dict().items() if not k.startswith("scheme.")})
    with torch.no_grad():
        for layer in fox.layer_schemes:
            layer.gate.weight.zero_()
            layer.gate.bias.fill_(100.0)
    idx = torch.randint(0, 13, (2, 40), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(fox(idx), nope(idx), rtol=0, atol=1e-6)
        fox.layer_schemes[1].gate.bias.fill_(0.0)  # and it does forget once the gate is below 1
        assert not torch.allclose(fox(idx), nope(idx), atol=1e-3)


@pytest.mark.parametrize("name", CONTENT)
def test_content_schemes_read_no_positions_so_randomized_training_positions_change_nothing(name):
    model = tiny(name)
    idx = torch.randint(0, 13, (2, 16))
    positions = torch.stack([torch.randperm(200)[:16].sort().values for _ in range(2)])
    with torch.no_grad():
        torch.testing.assert_close(model(idx, positions=positions), model(idx), rtol=0, atol=0)


@pytest.mark.parametrize("name", CONTENT)
@pytest.mark.parametrize("window", [{"window": 5}, {"chunk": 6}])
def test_a_windowed_kv_cache_keeps_the_inputs_fox_reads_and_gives_the_whole_contexts_logits(name, window):
    model = tiny(name, **window)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.5)
    cache = assert_cached_steps_are_the_full_forward(model)
    assert all(layer.inputs.size(1) <= 6 for layer in cache.layers)  # only the tokens still in view


class LargestTensor(TorchDispatchMode):
    """The most elements any operation's output has."""

    def __init__(self):
        super().__init__()
        self.most = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor):
                self.most = max(self.most, t.numel())
        return out


@pytest.mark.parametrize("name", CONTENT)
def test_evaluation_at_4096_tokens_builds_no_tensor_past_the_mask_budget(name, monkeypatch):
    """Memory linear in length: no operation outputs more than MASK_BUDGET elements, where one (T, T)
    score matrix per head would be 2 x 4096² = 33.5M."""
    monkeypatch.setattr(attention_module, "MASK_BUDGET", 1 << 20)
    model = tiny(name)
    idx = torch.randint(0, 13, (1, 4096))
    with torch.no_grad(), LargestTensor() as largest:
        model(idx)
    assert largest.most <= 1 << 20 < 2 * 4096 * 4096


@pytest.mark.parametrize("name", CONTENT)
def test_the_memory_model_counts_what_training_keeps_for_the_content_bias(name):
    """bias_activations (per sequence, per layer) is a lower bound within 20 % of the bytes autograd keeps
    for one layer's content attention over every pair, beyond q, k, v and the layer input."""
    length = 64
    scheme = build_scheme(name, H * D, H, block_size=length)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, H, length, D, generator=g, requires_grad=True) for _ in range(3))
    x = torch.randn(B, length, H * D, generator=g, requires_grad=True)
    kept: dict[int, int] = {}

    def pack(t):
        kept[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        content_attention(q, k, v, inputs=x, scheme=scheme)
    per_token = sum(t.numel() * 4 for t in (q, k, v, x))
    measured = sum(kept.values()) - per_token
    declared = 4 * B * scheme.bias_activations(length)
    assert 0.8 * measured <= declared <= measured


def test_a_longer_training_length_grows_copes_table_and_keeps_its_scores():
    """init_from at a longer length: rows past the old table start as its last row, which a count past
    it read when clamped, so every score is as before."""
    short = scheme_with_random_parameters("cope")
    longer = build_scheme("cope", H * D, H, block_size=20)
    longer.load_state_dict(longer.extend_state(short.state_dict()))
    q, k, v, x = inputs()
    seen = torch.ones(T, T, dtype=torch.bool).tril()
    assert longer.table.size(0) == 21
    torch.testing.assert_close(
        longer.content_bias(q, k, x, seen=seen), short.content_bias(q, k, x, seen=seen)
    )


def assert_cached_steps_are_the_full_forward(model):
    """A 4-token prompt, then one token at a time to 20: each step's logits are the full forward's."""
    idx = torch.randint(0, 13, (1, 20), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        cache = model.new_cache()
        model(idx[:, :4], cache=cache)
        steps = torch.cat([model(idx[:, t : t + 1], cache=cache)[:, -1] for t in range(4, 20)])
        uncached = torch.cat([model(idx[:, : t + 1])[:, -1] for t in range(4, 20)])
    torch.testing.assert_close(steps, uncached, rtol=0, atol=1e-5)
    return cache


def test_cope_and_fox_serve_as_layers_of_a_schedule_with_their_own_window_and_cache():
    model = tiny("schedule", pattern=["cope", {"name": "fox", "window": 5}])
    assert [layer.name for layer in model.layer_schemes] == ["cope", "fox"]
    assert_cached_steps_are_the_full_forward(model)
