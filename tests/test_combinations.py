"""Every scheme of the registry × every --rope-scaling method: a finite number or a one-line refusal.

The matrix is generated from SCHEMES and the method names of core.choices, never a hand-kept list, so
a new scheme or method is covered by adding it. Each scheme is built at the depth its defaults need,
plainly and with a window where it takes one, and a composite; each method alone and joined. Beside the
matrix, the identities that tie the attention paths together hold for every scheme: a window at least
T long is full attention, an extension inside its window is plain attention, a KV cache gives the full
forward's logits, and a column's numbers do not depend on the order the columns were asked in.
`make test` walks the tiny matrix; `make test-slow` the wide one (every scaling joined with every remap).
"""

from __future__ import annotations

import itertools
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from posenc_cli.core.choices import CONTEXT_REMAPS, LOGN, ROPE_SCALING
from posenc_cli.core.errors import UsageError
from posenc_cli.evaluation.run_target import RunTarget, RunVariant
from posenc_cli.evaluation.target import RefusedColumn
from posenc_cli.model import GPT, ModelConfig
from posenc_cli.model.extension.method import ExtensionSettings, parse_methods
from posenc_cli.model.positional import SCHEMES
from posenc_cli.model.shape import ModelSize

TRAIN_LEN, VOCAB = 16, 11
# the remaps' defaults at L = 16 leave every method a pair past its exact window at 3L
SETTINGS = ExtensionSettings()


def scheme_cases() -> list[tuple[str, dict]]:
    """Every registered scheme at its defaults, a windowed one where the scheme takes a window (a
    schedule sets its windows per layer), and a composite."""
    cases = [(name, {}) for name in SCHEMES]
    cases += [(name, {"window": 4}) for name, cls in SCHEMES.items() if cls.kind != "schedule"]
    cases += [("rope+alibi", {}), ("irope", {"chunk": 8}), ("rope", {"temperature": "logn"})]
    return cases + [
        ("rope", {"sinks": True}),
        ("alibi", {"sinks": True, "window": 4}),
        ("rnope_swa", {"sinks": True}),
    ]


def method_texts(wide: bool) -> list[str]:
    """Each method alone; joined: every scaling with every remap and log-n (wide), or one of each (tiny)."""
    scalings = [s for s in ROPE_SCALING if s != "none"]
    alone = ["none", *scalings, *CONTEXT_REMAPS, LOGN]
    if not wide:
        return alone + [f"yarn+{CONTEXT_REMAPS[0]}+{LOGN}", f"{CONTEXT_REMAPS[-1]}+{LOGN}"]
    joined = [f"{s}+{r}" for s, r in itertools.product(scalings, CONTEXT_REMAPS)]
    return alone + joined + [f"{r}+{LOGN}" for r in CONTEXT_REMAPS]


def tiny_run(name: str, options: dict) -> RunTarget:
    """A run as evaluation reads it: a GPT at the depth the scheme needs, trained at TRAIN_LEN."""
    depth = max(2, SCHEMES[name].layers_needed if name in SCHEMES else 1)
    cfg = ModelConfig(VOCAB, TRAIN_LEN, ModelSize(n_layer=depth, n_head=2, n_embd=16), name, dict(options))
    torch.manual_seed(0)
    model = GPT(cfg).eval()
    return RunTarget(Path(f"{name}_run"), model, None, TRAIN_LEN, SimpleNamespace(), SimpleNamespace())


TOKENS = torch.randint(0, VOCAB, (1, 3 * TRAIN_LEN), generator=torch.Generator().manual_seed(1))


def scored(run: RunTarget, column) -> torch.Tensor:
    run.use_variant(column)
    tokens = TOKENS if run.max_len is None else TOKENS[:, : run.max_len]
    with torch.no_grad():
        return (run.active or run.model)(tokens)


def check_pair(name: str, options: dict, text: str) -> None:
    """One cell: each column finite, or refused with a one-line reason; labels never shared."""
    run = tiny_run(name, options)
    try:
        columns = run.variants(parse_methods(text, SETTINGS), None)
    except UsageError as refused:  # a method no posenc run takes (an option that does not fit): one line
        assert "\n" not in str(refused)
        return
    labels = [run.use_variant(column) for column in columns]
    assert len(set(labels)) == len(labels), labels  # no column pooled with another
    for column in columns:
        if isinstance(column, RefusedColumn):
            assert column.why and "\n" not in column.why
        else:
            assert torch.isfinite(scored(run, column)).all(), (name, options, text)


SCHEME_CASES = scheme_cases()


@pytest.mark.parametrize("text", method_texts(wide=False))
@pytest.mark.parametrize(("name", "options"), SCHEME_CASES, ids=[f"{n}{o or ''}" for n, o in SCHEME_CASES])
def test_every_scheme_and_method_computes_a_finite_number_or_refuses_in_one_line(name, options, text):
    check_pair(name, options, text)


@pytest.mark.slow
@pytest.mark.parametrize("text", sorted(set(method_texts(wide=True)) - set(method_texts(wide=False))))
@pytest.mark.parametrize(("name", "options"), SCHEME_CASES, ids=[f"{n}{o or ''}" for n, o in SCHEME_CASES])
def test_every_scheme_and_joined_method_computes_a_finite_number_or_refuses_in_one_line(name, options, text):
    check_pair(name, options, text)


@pytest.mark.parametrize(("name", "options"), SCHEME_CASES, ids=[f"{n}{o or ''}" for n, o in SCHEME_CASES])
def test_a_columns_numbers_do_not_depend_on_the_order_of_the_columns(name, options):
    """Each column scored after every other column equals it scored first: nothing a column sets stays."""
    texts = ["none", "self_extend", "yarn"]
    alone = {}
    for text in texts:
        run = tiny_run(name, options)
        (column,) = run.variants(parse_methods(text, SETTINGS), None)[-1:]
        alone[text] = None if isinstance(column, RefusedColumn) else scored(run, column)
    for order in (texts, texts[::-1]):
        run = tiny_run(name, options)
        columns = run.variants(parse_methods(",".join(order), SETTINGS), None)
        for text, column in zip(order, columns[-len(order) :]):
            if alone[text] is not None and isinstance(column, RunVariant):
                assert torch.equal(scored(run, column), alone[text]), (name, text, order)


@pytest.mark.parametrize("name", [n for n, cls in SCHEMES.items() if cls.kind != "schedule"])
def test_a_window_at_least_the_sequence_long_is_full_attention_bit_for_bit(name):
    run = tiny_run(name, {})
    windowed = tiny_run(name, {"window": TRAIN_LEN})
    tokens = TOKENS[:, :TRAIN_LEN]
    with torch.no_grad():
        assert torch.equal(windowed.model(tokens), run.model(tokens))


@pytest.mark.parametrize("text", [*CONTEXT_REMAPS, LOGN])
@pytest.mark.parametrize("name", [n for n in SCHEMES if n not in ("learned",)])
def test_an_extension_within_its_exact_window_is_plain_attention(name, text):
    """A sequence no longer than the remap's exact window (and log-n's training length) is scored as
    trained, on every layer that takes the extension."""
    run = tiny_run(name, {})
    (method,) = parse_methods(text, SETTINGS)
    try:
        extended = run.model.with_extension(method.extension(TRAIN_LEN))
    except UsageError:
        return  # no layer takes it: the refusal is the matrix's
    within = TOKENS[:, :2]  # inside every default window at L = 16 (Self-Extend's W = 4, DCA's chunk 10)
    with torch.no_grad():
        assert torch.equal(extended(within), run.model(within))


@pytest.mark.parametrize(("name", "options"), SCHEME_CASES, ids=[f"{n}{o or ''}" for n, o in SCHEME_CASES])
def test_a_kv_cache_gives_the_full_forwards_logits(name, options):
    """Token by token through the cache, under the scheme's window, as one forward over all of them."""
    model = tiny_run(name, options).model
    tokens = TOKENS[:, : model.scheme.max_len or 2 * TRAIN_LEN]
    with torch.no_grad():
        whole = model(tokens)
        cache = model.new_cache()
        steps = [model(tokens[:, i : i + 1], cache=cache) for i in range(tokens.size(1))]
    torch.testing.assert_close(torch.cat(steps, 1), whole, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(("name", "options"), SCHEME_CASES, ids=[f"{n}{o or ''}" for n, o in SCHEME_CASES])
def test_inspect_draws_the_attention_each_layer_computes(name, options):
    """`posenc inspect --run --layer`'s weights (the executor's per-pair reference, from the block's own
    weights), times the layer's values, are what the model's attention computes for every layer: its
    window, chunk, temperature and sinks included; no weight falls outside the window."""
    from posenc_cli.inspection.checks import layer_attention
    from posenc_cli.model.attention import attend

    model = tiny_run(name, options).model
    tokens = TOKENS[:, : model.scheme.max_len or 2 * TRAIN_LEN]
    positions = torch.arange(tokens.size(1))
    with torch.no_grad():
        x = model.scheme.embed(model.tok(tokens), positions)
        for index, (block, scheme, layer) in enumerate(
            zip(model.blocks, model.layer_schemes, model.attention)
        ):
            weights, v = layer_attention(model, tokens, index)
            inputs = block.ln_1(x)
            q, k, _ = block.attn.project(inputs)
            q, k = scheme.rotate(q, k, positions)
            computed = attend(q, k, v, layer=layer, inputs=inputs if layer.reads_content else None)
            torch.testing.assert_close(weights @ v, computed, rtol=1e-4, atol=1e-5)
            seen = layer.window.visible(positions[:, None], positions)
            assert (weights.masked_select(~seen) == 0).all()
            x = block(x, positions, scheme, layer)


EXPORT_CASES = [(name, {}) for name in SCHEMES] + [("rope", {"sinks": True}), ("alibi", {"window": 16})]


@pytest.mark.slow  # trains, exports and evaluates each scheme as a user does
@pytest.mark.parametrize(("name", "options"), EXPORT_CASES, ids=[f"{n}{o or ''}" for n, o in EXPORT_CASES])
def test_an_export_scores_as_its_run_in_every_column(name, options, tmp_path):
    """`posenc export RUN` then `posenc eval hf:EXPORT` gives the run's own numbers, column by column: as
    trained, with an extension, and a column refused for the run is refused for its export."""
    from conftest import evaluate, train
    from posenc_cli.hf.export import export_run
    from posenc_cli.rundir.loading import load_run

    depth = max(2, SCHEMES[name].layers_needed)
    overrides = [f"scheme={name}", f"model.n_layer={depth}", *(f"scheme.{k}={v}" for k, v in options.items())]
    run = train(tmp_path, *overrides)
    export_run(run, tmp_path / "export")
    chars = load_run(run).tokenizer.chars  # a text both read whole: the run's own characters
    (tmp_path / "text.txt").write_text("".join(chars[(i * 7 + i // 5) % len(chars)] for i in range(3000)))
    asked = [
        "--data",
        str(tmp_path / "text.txt"),
        "--lengths",
        "64,128",
        "--rope-scaling",
        "none,self_extend",
    ]
    ours = evaluate(tmp_path, str(run), *asked, out="ours")
    theirs = evaluate(tmp_path, f"hf:{tmp_path / 'export'}", *asked, out="theirs")

    def columns(table):
        extended = table["scheme"].str.contains("self_extend")
        return {(bool(e), int(n)): p for e, n, p in zip(extended, table["eval_len"], table["ppl"])}

    got, want = columns(theirs), columns(ours)
    assert got.keys() == want.keys() or set(got) <= set(want), (got, want)
    for key, ppl in got.items():
        assert ppl == pytest.approx(want[key], rel=1e-4, nan_ok=True), key
