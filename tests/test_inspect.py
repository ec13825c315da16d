"""`posenc inspect` and `posenc schemes`: every check passes for the real scheme and fails for a
deliberately broken one, figures are written, and the recomputed attention is the model's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from conftest import invoke
from posenc_cli.cli.schemes_command import scheme_rows
from posenc_cli.core.errors import UsageError
from posenc_cli.inspection import checks as ins
from posenc_cli.inspection.figures import rotation_angles
from posenc_cli.inspection.inspect_scheme import inspect_scheme
from posenc_cli.model.positional import SCHEMES, build_scheme
from posenc_cli.model.positional.alibi import ALiBi
from posenc_cli.model.positional.base import NoPE, PositionalScheme, per_head
from posenc_cli.model.positional.learned import Learned
from posenc_cli.model.positional.rope import RoPE
from posenc_cli.model.positional.sinusoidal import Sinusoidal, sinusoidal_table
from posenc_cli.rundir.loading import load_run
from posenc_cli.rundir.selection import find_runs

DIM, HEADS, LENGTH = 32, 4, 32


def make(cls, **options):
    return cls(DIM, HEADS, LENGTH, **options)


# ---- broken variants: each breaks one claim ----------------------------------------------------


class LeakyNoPE(NoPE):
    """Claims no positions but adds them."""

    def embed(self, x, positions):
        return x + 0.1 * positions[:, None].float()


class IdleRoPE(RoPE):
    """Forgets to rotate: attention is blind to order again."""

    def rotate(self, q, k, positions):
        return q, k


class MismatchedRoPE(RoPE):
    """Rotates k twice as fast as q: q_m·k_n is no longer a function of m − n."""

    def rotate(self, q, k, positions):
        q, _ = super().rotate(q, k, positions)
        _, k = super().rotate(q, k, positions * 2)
        return q, k


class StretchingRoPE(RoPE):
    """Rotates, then scales with position: relative but not norm-preserving."""

    def rotate(self, q, k, positions):
        q, k = super().rotate(q, k, positions)
        return q * (1 + positions[:, None] / 64), k / (1 + positions[:, None] / 64)


class MismatchedSinusoidal(Sinusoidal):
    """Each cosine uses a different frequency from its sine partner (base 100 instead of 10000)."""

    def embed(self, x, positions):
        pe = sinusoidal_table(positions, self.n_embd)
        pe[:, 1::2] = sinusoidal_table(positions, self.n_embd, base=100.0)[:, 1::2]
        return x * self.n_embd**0.5 + pe


class LoudSinusoidal(Sinusoidal):
    def embed(self, x, positions):
        return x * self.n_embd**0.5 + 2 * sinusoidal_table(positions, self.n_embd)


class WrappingSinusoidal(Sinusoidal):
    """Positions modulo 8: position 8 looks like position 0."""

    def embed(self, x, positions):
        return super().embed(x, positions % 8)


class BatchCountingLearned(Learned):
    """Counts positions across the flattened batch, so row b gets other vectors than row 0."""

    def __init__(self, *args):
        super().__init__(*args, max_len=4 * LENGTH)

    def embed(self, x, positions):
        offsets = torch.arange(x.size(0))[:, None] * x.size(1)
        return x + self.table(positions[None, :] + offsets)


class UncheckedLearned(Learned):
    """Indexes its table without a bounds check: past max_len it crashes with IndexError."""

    def embed(self, x, positions):
        return x + self.table(positions)


class ClampingLearned(Learned):
    """Silently reuses the last row for every position past the table."""

    def embed(self, x, positions):
        return x + self.table(positions.clamp(max=self.max_len - 1))


class WrongSlopesALiBi(ALiBi):
    def __init__(self, *args):
        super().__init__(*args)
        self.slopes = torch.linspace(0.5, 0.1, self.n_head)


class IndexedALiBi(ALiBi):
    """Reads where a distance sits in the tensor it is given, not its value: fine on a whole matrix of
    distances, wrong on the one-per-distance vector the model builds its mask from."""

    def bias(self, distance):
        flat = torch.arange(distance.numel()).view_as(distance) % 7
        return super().bias(distance) * (1 + flat.float() / 16)


class LogBias(ALiBi):
    """A KERPLE-like logarithmic bias: relative, but not a straight line."""

    def bias(self, distance):
        return -per_head(self.slopes, distance) * torch.log1p(distance.clamp(min=0).float())


class TrainedSlopes(ALiBi):
    """A linear bias whose slopes are trained (KERPLE's power form at exponent 1): no geometric rule."""

    def __init__(self, *args):
        super().__init__(*args)
        self.trained = torch.nn.Parameter(self.slopes.clone())

    def bias(self, distance):
        return -per_head(self.trained, distance) * distance.clamp(min=0)


class LearnedDistanceBias(PositionalScheme):
    """A T5-like newcomer: one trained scalar per head and distance. Not registered anywhere."""

    name, kind, relative, adds_bias = "t5_like", "bias", "explicit", True

    def __init__(self, *args):
        super().__init__(*args)
        self.table = torch.nn.Embedding(self.block_size, self.n_head)

    def bias(self, distance):
        return self.table(distance.clamp(0, self.block_size - 1)).movedim(-1, 0)


# ---- every check: passes for the real scheme, fails for the broken one --------------------------

CASES = [
    (ins.check_permutation, NoPE, LeakyNoPE),
    (ins.check_permutation, RoPE, IdleRoPE),
    (ins.check_same_across_batch, Learned, BatchCountingLearned),
    (ins.check_unique, Sinusoidal, WrappingSinusoidal),
    (ins.check_bounded, Sinusoidal, LoudSinusoidal),
    (ins.check_shift_linear, Sinusoidal, MismatchedSinusoidal),
    (ins.check_norms, RoPE, StretchingRoPE),
    (ins.check_relative, RoPE, MismatchedRoPE),
    (ins.check_bias_attention, ALiBi, IndexedALiBi),
    (ins.check_linear_slopes, ALiBi, WrongSlopesALiBi),
]


@pytest.mark.parametrize(
    "check, good, broken", CASES, ids=[f"{c.__name__}-{b.__name__}" for c, _, b in CASES]
)
def test_check_passes_for_the_scheme_and_fails_for_a_broken_variant(check, good, broken):
    assert check(make(good), LENGTH).passed
    result = check(make(broken), LENGTH)
    assert not result.passed, result


@pytest.mark.parametrize(
    "broken, measured", [(UncheckedLearned, "crashed: IndexError"), (ClampingLearned, "silently")]
)
def test_past_max_len_is_a_clear_error_not_a_crash_or_silence(broken, measured):
    good = ins.check_past_max_len(make(Learned))
    assert good.passed and "max_len=32" in good.note
    bad = ins.check_past_max_len(make(broken))
    assert not bad.passed and bad.measured.startswith(measured)


def test_measured_numbers_are_the_maths():
    """The checks measure what they say: exact properties come out at round-off, breaks far above it."""
    assert float(ins.check_relative(make(RoPE), LENGTH).measured) < 1e-6
    assert float(ins.check_relative(make(MismatchedRoPE), LENGTH).measured) > 0.1
    slopes = ins.check_linear_slopes(make(ALiBi), LENGTH)
    assert slopes.note.endswith("0.25, 0.0625, 0.01562, 0.003906")  # 2^(-8h/4) for h = 1..4
    assert ins.check_linear_slopes(make(LogBias), LENGTH) is None  # not linear: no slope rule to hold it to
    assert ins.check_bias_attention(make(LogBias), LENGTH).passed


def test_checks_dispatch_on_kind_and_hooks_not_names():
    newcomer = ins.run_checks(make(LearnedDistanceBias), LENGTH)
    assert [c.claim.split(":")[0] for c in newcomer] == [
        "positions break permutation equivariance",
        "attention with the bias built per distance = the pair-by-pair formula",
    ]
    assert all(c.passed for c in newcomer)
    assert ins.check_linear_slopes(make(TrainedSlopes), LENGTH) is None  # trained slopes claim no rule

    class Renamed(MismatchedRoPE):
        name = "some_new_rotary"

    claims = [c.claim for c in ins.run_checks(make(Renamed), LENGTH)]
    assert any("m − n" in c for c in claims) and any("norms" in c for c in claims)
    for name in SCHEMES:
        built = build_scheme(name, DIM, HEADS, block_size=LENGTH)
        # a layer schedule's hooks are its layers': each is checked as the scheme it is
        for scheme in built.for_layers(built.least_depth) if built.kind == "schedule" else [built]:
            checks = ins.run_checks(scheme, LENGTH)
            # the chapter's "farther → larger difference" is false past the wrap of the fastest pairs
            assert checks and all(c.passed or c.claim.startswith("farther") for c in checks), (name, checks)


def test_farther_differs_more_holds_until_the_fastest_pairs_wrap():
    """Mean over x of ‖R_k x − x‖² is Σ_i 2(1 − cos kθ_i)·E‖x_i‖²: it rises while Σ_i θ_i sin(kθ_i) > 0,
    which for d = 8 (θ = 1, 0.1, 0.01, 0.001) ends between k = 3 and 4, and for d = 32 between 4 and 5."""
    for dim, holds_to in ((DIM, 3), (128, 4)):
        check = ins.check_farther_differs_more(build_scheme("rope", dim, HEADS, block_size=128), 128)
        assert not check.passed and check.measured == f"holds up to k = {holds_to}"
    curve = ins.difference_by_distance(make(RoPE), LENGTH)
    assert curve[0] == 0 and (curve[:4].diff() > 0).all() and curve[4] < curve[3]


def test_rotary_demo_keeps_norms_and_is_farther_at_3_than_at_1():
    for layout in ("half", "interleaved"):
        demo = ins.rotary_demo(make(RoPE, layout=layout))
        assert demo["‖rope(x, 1)‖"] == pytest.approx(demo["‖x‖"]) == pytest.approx(demo["‖rope(x, 3)‖"])
        assert 0 < demo["|rope(x, 1) − rope(x, 0)|"] < demo["|rope(x, 3) − rope(x, 0)|"]


@pytest.mark.parametrize("rule", ["paper", "chapter"])
def test_linear_slopes_name_the_rule_they_follow(rule):
    check = ins.check_linear_slopes(make(ALiBi, slopes=rule), LENGTH)
    assert check.passed and f"nearest {rule}" in check.claim


def test_rotation_angles_are_read_from_the_hook():
    rope = make(RoPE)
    angles = rotation_angles(rope, LENGTH)  # (pairs, T)
    assert torch.allclose(angles[:, 1], rope.inv_freq.to(angles.dtype), rtol=1e-5)
    assert torch.allclose(angles[:, -1], (LENGTH - 1) * rope.inv_freq.to(angles.dtype), rtol=1e-4)


@pytest.mark.slow  # trains runs or starts processes
def test_figures_are_written(tmp_path: Path):
    expected = {
        "none": set(),
        "sinusoidal": {
            "pe_heatmap.png",
            "pe_waveforms.png",
            "pe_cosine.png",
            "pe_past_length.png",
            "pe_dot_by_offset.png",
        },
        "learned": {"pe_heatmap.png", "pe_waveforms.png", "pe_cosine.png"},
        "rope": {"rotary_angles.png", "rotary_logit_vs_distance.png", "rotary_difference_vs_distance.png"},
        "alibi": {"bias_matrices.png", "bias_vs_distance.png"},
    }
    for name, files in expected.items():
        result = inspect_scheme(name=name, dim=DIM, length=LENGTH, heads=HEADS, out=tmp_path / name)
        assert {p.name for p in result.figures} == files
        for path in result.figures:
            assert path.read_bytes().startswith(b"\x89PNG") and path.stat().st_size > 2000


def test_recomputed_attention_is_the_models(smoke_sweep: Path):
    """layer_attention rebuilds weights from the block's qkv; multiplied by v and projected, they must
    give exactly what the model's attention block outputs, for every scheme."""
    for run_dir in find_runs(smoke_sweep):
        model = load_run(run_dir).model
        idx = torch.randint(model.cfg.vocab_size, (2, 24), generator=torch.Generator().manual_seed(0))
        seen = {}
        handle = model.blocks[0].attn.register_forward_hook(
            lambda module, args, output: seen.update(y=output)
        )
        with torch.no_grad():
            model(idx)
        handle.remove()
        probs, v = ins.layer_attention(model, idx, 0)
        assert torch.allclose(probs.sum(-1), torch.ones(()), atol=1e-5)
        assert probs.triu(1).abs().max() == 0  # causal
        y = model.blocks[0].attn.proj((probs @ v).transpose(1, 2).reshape(2, 24, -1))
        assert torch.allclose(y, seen["y"], atol=1e-5), run_dir.name


# ---- the command line --------------------------------------------------------------------------


def test_cli_inspect_fresh_schemes(tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name, *options in (("sinusoidal",), ("alibi", "--slopes", "chapter")):
        result = invoke(
            "inspect", name, *options, "--dim", "32", "--heads", "4", "--length", "32", "--out", name
        )
        assert result.code == 0, result.stderr
        assert "PASS" in result.stdout and "0 FAIL" in result.stdout and result.stdout.count("FAIL") == 1
        assert sorted((tmp_path / name).glob("*.png"))
    assert (
        "nearest chapter" in result.stdout
    )  # alibi --slopes chapter: its slopes, and both rules side by side
    assert re.search(r"4\s+0\.00390625\s+0\.0625", result.stdout)  # head 4: paper 2^-8, chapter 2^-4


def test_cli_inspect_rope_in_the_chapters_layout(tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = invoke(
        "inspect", "rope", "--layout", "interleaved", "--dim", "32", "--heads", "4", "--length", "32"
    )
    assert result.code == 0, result.stderr
    assert "rope (layout=interleaved)" in result.stdout and "holds up to k = 3" in result.stdout
    assert "The chapter's demo" in result.stdout and "|rope(x, 3) − rope(x, 0)|" in result.stdout


def test_default_out_is_outputs_inspect_scheme(tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    inspect_scheme(name="rope", dim=DIM, length=LENGTH, heads=HEADS)
    assert (tmp_path / "outputs" / "inspect" / "rope" / "rotary_angles.png").is_file()


def test_cli_inspect_a_trained_run(smoke_sweep: Path, tmp_path: Path, monkeypatch):
    (learned,) = [r for r in find_runs(smoke_sweep) if r.name.endswith("learned_seed0")]
    monkeypatch.chdir(tmp_path)
    result = invoke("inspect", "--run", str(learned), "--length", "200", "--head", "1", "--out", "figs")
    assert result.code == 0, result.stderr
    assert (
        "past max_len" in result.stdout and "length=64" in result.stdout
    )  # capped at the table, then refused
    names = {p.name for p in (tmp_path / "figs").glob("*.png")}
    assert {"pe_cosine.png", "attention_layer0_head1.png"} <= names


@pytest.mark.parametrize(
    "kwargs, needle",
    [
        (dict(name="rope", dim=30, heads=4), "--dim 30"),
        (dict(name="rope", length=2), "--length"),
        (dict(name=None), "name a scheme"),
        (dict(name=None, run=True, layer=5), "--layer 5"),
        (dict(name=None, run=True, dim=64), "--dim 64"),
        (
            dict(name="sinusoidal", options={"layout": "half"}),
            "--layout half: scheme sinusoidal has no such option",
        ),
        (dict(name="rope", options={"layout": "diagonal"}), "scheme.layout=diagonal"),
        (dict(name=None, run=True, options={"slopes": "chapter"}), "--slopes applies to a fresh scheme"),
    ],
)
def test_inspect_usage_errors_name_the_bad_value(smoke_sweep: Path, tmp_path: Path, kwargs, needle):
    (rope,) = [r for r in find_runs(smoke_sweep) if r.name.endswith("rope_seed0")]
    args = (
        dict(
            name=None,
            dim=None,
            length=None,
            heads=None,
            out=tmp_path,
            run=None,
            layer=0,
            head=0,
            options=None,
        )
        | kwargs
    )
    args["run_dir"] = rope if args.pop("run") else None
    with pytest.raises(UsageError, match=re.escape(needle)):
        inspect_scheme(**args)


def test_cli_schemes_fits_80_columns():
    result = invoke("schemes", env={"COLUMNS": "80"})
    assert result.code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80 and "…" not in result.stdout
    for name, cls in SCHEMES.items():
        assert any(line.split()[:2] == [name, cls.kind] for line in lines if line.split()), name
    shown = set(result.stdout.split())  # a word folded mid-way ("extrapolat", "ion") is not among them
    texts = [text for row in scheme_rows() for text in row.values() if isinstance(text, str)]
    split = [word for text in texts for word in text.split() if word not in shown]
    assert split == []


@pytest.mark.slow  # trains a run
def test_inspect_of_a_per_layer_fire_run_draws_the_bias_of_the_layer_it_is_given(tmp_path):
    """scheme.per_layer: each block its own FIRE, so --layer picks whose bias is drawn (found by a hostile
    pass: layer 0's was drawn for every layer)."""
    from conftest import train

    run = train(tmp_path, "model.n_layer=2", "scheme=fire", "scheme.per_layer=true")
    drawn = {}
    for layer in (0, 1):
        result = inspect_scheme(name=None, run_dir=run, layer=layer, out=tmp_path / f"layer{layer}")
        assert result.label.endswith(f", layer {layer}")
        drawn[layer] = result.scheme
    assert drawn[0] is not drawn[1]
    assert not torch.equal(drawn[0].mlp[0].weight, drawn[1].mlp[0].weight)
