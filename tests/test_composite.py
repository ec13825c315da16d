"""scheme=A+B: a composite is its parts through the same three hooks, and nothing else.

Laws: a composite of one part is that part; what each part adds to the embeddings is added; rotations
apply in order; biases sum; parameters add up, max_len is the tightest part's, the relative-position
kind the strongest part's. And `scheme=A+B` composes from the command line for any known A and B.
"""

from __future__ import annotations

import pytest
import torch

from posenc_cli.config import preflight
from posenc_cli.errors import UsageError
from posenc_cli.model.positional import SCHEMES, build_scheme
from posenc_cli.model.positional.composite import Composite

DIM, HEADS, LENGTH = 32, 4, 24
POSITIONS = torch.arange(LENGTH)


def fresh(name: str, **options):
    torch.manual_seed(0)  # the same initial parameters for a scheme alone and inside a composite
    return build_scheme(name, DIM, HEADS, LENGTH, **options)


def composite(*parts):
    torch.manual_seed(0)
    name = "+".join(p if isinstance(p, str) else p["name"] for p in parts)
    return Composite(DIM, HEADS, LENGTH, name=name, parts=list(parts), build=build_scheme)


def hooks(scheme):
    g = torch.Generator().manual_seed(1)
    x, q, k = (
        torch.randn(2, LENGTH, DIM, generator=g),
        *torch.randn(2, 2, HEADS, LENGTH, DIM // HEADS, generator=g),
    )
    bias = scheme.bias(torch.arange(LENGTH)) if scheme.adds_bias else None
    return scheme.embed(x, POSITIONS), scheme.rotate(q, k, POSITIONS), bias


@pytest.mark.parametrize("name", list(SCHEMES))
def test_a_composite_of_one_part_is_that_part(name):
    alone, wrapped = fresh(name), composite(name)
    (x1, (q1, k1), b1), (x2, (q2, k2), b2) = hooks(alone), hooks(wrapped)
    assert torch.equal(x1, x2) and torch.equal(q1, q2) and torch.equal(k1, k2)
    assert (b1 is None and b2 is None) or torch.equal(b1, b2)
    for fact in (
        "kind",
        "relative",
        "max_len",
        "positional_params",
        "adds_bias",
        "preserves_norms",
        "param_formula",
    ):
        assert getattr(wrapped, fact) == getattr(alone, fact), fact


def test_embeddings_add_in_any_order():
    both, sinusoidal, learned = composite("sinusoidal", "learned"), fresh("sinusoidal"), fresh("learned")
    learned.load_state_dict(both.parts[1].state_dict())
    x = torch.randn(2, LENGTH, DIM)
    added = x + (sinusoidal.embed(x, POSITIONS) - x) + (learned.embed(x, POSITIONS) - x)
    assert torch.allclose(both.embed(x, POSITIONS), added, atol=1e-6)
    swapped = composite("learned", "sinusoidal")
    swapped.parts[0].load_state_dict(both.parts[1].state_dict())
    assert torch.allclose(swapped.embed(x, POSITIONS), added, atol=1e-6)


def test_rotations_apply_in_order_and_biases_sum():
    rotated = composite("rope", {"name": "xpos", "base": 500.0})
    q, k = torch.randn(2, 1, HEADS, LENGTH, DIM // HEADS)
    expected = fresh("xpos", base=500.0).rotate(*fresh("rope").rotate(q, k, POSITIONS), POSITIONS)
    for got, want in zip(rotated.rotate(q, k, POSITIONS), expected):
        assert torch.allclose(got, want, atol=1e-6)
    biased = composite("alibi", "t5", "kerple")
    distance = torch.arange(LENGTH)
    assert torch.allclose(biased.bias(distance), sum(part.bias(distance) for part in biased.parts))
    assert biased.adds_bias and not composite("sinusoidal", "rope").adds_bias


def test_facts_follow_the_parts():
    table = composite("sinusoidal", "learned", {"name": "learned", "max_len": 16}, "t5")
    assert (
        table.positional_params
        == sum(p.positional_params for p in table.parts)
        == (24 + 16) * DIM + 32 * HEADS
    )
    assert table.max_len == 16  # the tightest table
    assert table.param_formula == "max_len·d + max_len·d + buckets·h"
    assert composite("sinusoidal", "rope").max_len is None
    assert composite("learned", "none").relative == "none"
    assert composite("sinusoidal", "learned").relative == "implicit"
    assert composite("learned", "alibi").relative == "explicit"
    assert composite("sinusoidal", "learned").kind == "additive"
    assert not composite("rope", "xpos").preserves_norms


def test_scheme_a_plus_b_composes_from_the_command_line():
    preflight(["scheme=sinusoidal+learned", "scheme.parts.1.max_len=512", "train.block_size=64"])
    preflight(["scheme=rope+alibi", "scheme.parts.0.layout=interleaved", "scheme.parts.1.slopes=chapter"])
    preflight(["scheme=sinusoidal+learned", "scheme.parts=[sinusoidal,{name:learned,max_len:300}]"])


@pytest.mark.parametrize(
    "args, needle",
    [
        (["scheme=rope+bogus"], "Could not find 'scheme/rope+bogus'"),
        (["scheme=sinusoidal+learned", "scheme.parts=[rope,alibi]"], "use scheme=rope+alibi"),
        (["scheme=sinusoidal+learned", "scheme.parts=[sinusoidal,{max_len:3}]"], "has no name"),
    ],
)
def test_bad_composites_are_one_clear_error(args, needle):
    with pytest.raises(UsageError, match=needle.replace("+", r"\+").replace("[", r"\[")):
        preflight(args)


def test_trained_composite_and_interleaved_runs_evaluate_like_any_other(tmp_path):
    """End to end: sinusoidal+learned and the chapter's interleaved RoPE train, and eval scores them;
    --learned-overflow window fills the table's "—" with learned+window numbers, labelled so."""
    import pandas as pd

    from conftest import SMOKE, run_cli

    for name, *options in (("sinusoidal+learned",), ("rope", "scheme.layout=interleaved")):
        result = run_cli(
            "train",
            *SMOKE,
            f"scheme={name}",
            *options,
            "train.threads=1",
            f"hydra.run.dir=runs/{name}",
            cwd=tmp_path,
        )
        assert result.returncode == 0, result.stderr
    result = run_cli(
        "eval",
        "runs/sinusoidal+learned",
        "runs/rope",
        "--lengths",
        "128",
        "--learned-overflow",
        "dash,window",
        "--max-tokens",
        "1024",
        "--out",
        "ev",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    ppl = pd.read_csv(tmp_path / "ev" / "ppl.csv").set_index(["scheme", "eval_len"])["ppl"]
    assert ppl[("sinusoidal+learned", 128)] != ppl[("sinusoidal+learned", 128)]  # NaN: past its table of 64
    assert ppl[("sinusoidal+learned+window", 64)] == ppl[("sinusoidal+learned", 64)]
    assert 1 < ppl[("sinusoidal+learned+window", 128)] < 40 and 1 < ppl[("rope+interleaved", 128)] < 40
    assert "sliding windows of 64 tokens" in (tmp_path / "ev" / "comparison.md").read_text()
