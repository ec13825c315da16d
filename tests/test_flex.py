"""FlexAttention as the executor's backend: for every layer it expresses (a window, a chunk, a bias of the
distance, a temperature) it computes what the executor's own paths compute, new queries after cached
keys included; every other layer is left to the executor. Run eagerly here (no compile: a CPU compile
takes about a minute); tests/test_cuda.py runs it compiled on a GPU."""

from __future__ import annotations

import pytest
import torch

from posenc_cli.model import flex as flex_module
from posenc_cli.model.attention import attend
from posenc_cli.model.flex import attention_backend, flex_attend, flex_takes
from posenc_cli.model.layer_attention import LayerAttention
from posenc_cli.model.positional import SCHEMES, build_scheme

CASES = [(name, {}) for name, cls in SCHEMES.items() if cls.kind not in ("schedule", "content")] + [
    ("alibi", {"window": 8}),
    ("t5", {"chunk": 16}),
    ("rope", {"window": 5, "chunk": 16, "temperature": "llama4", "temperature_floor": 8}),
    ("rope", {"sinks": True}),
]


@pytest.mark.parametrize(("name", "options"), CASES, ids=[f"{n}{o or ''}" for n, o in CASES])
def test_flex_computes_what_the_executor_computes_for_every_layer_it_takes(name, options, monkeypatch):
    monkeypatch.setattr(flex_module, "compiled_flex", lambda: flex_module.eager_flex())
    scheme = build_scheme(name, 32, 2, block_size=32, **options)
    layer = LayerAttention.of(scheme)
    q, k, v = (torch.randn(2, 2, 40, 16, generator=torch.Generator().manual_seed(s)) for s in range(3))
    with torch.no_grad():
        own = attend(q, k, v, layer=layer)
        newest = attend(q[:, :, -3:], k, v, layer=layer)
        with attention_backend("flex"):
            flexed = attend(q, k, v, layer=layer)
            flexed_newest = attend(q[:, :, -3:], k, v, layer=layer)
    torch.testing.assert_close(flexed, own, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(flexed_newest, newest, rtol=1e-5, atol=1e-5)
    if flex_takes(layer, positions=None) and layer.temperature is None:  # attend scales the queries first
        direct = flex_attend(q, k, v, layer=layer, first=0, compiled=False)
        torch.testing.assert_close(direct, own, rtol=1e-5, atol=1e-5)


def test_flex_takes_windows_and_distance_biases_and_leaves_the_rest_to_the_executor():
    takes = {
        name: flex_takes(LayerAttention.of(build_scheme(name, 32, 2, block_size=32)), positions=None)
        for name in ("none", "rope", "alibi", "t5", "fire", "cope", "fox", "stickbreaking")
    }
    assert takes == {
        "none": True,
        "rope": True,
        "alibi": True,
        "t5": True,
        "fire": False,
        "cope": False,
        "fox": False,
        "stickbreaking": False,
    }
