"""Context extension by training: train.init_from, RoPE scaling while training (the formulas eval
uses), a learned table grown for a longer length, and randomized positions (Ruoss et al. 2023)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
import torch

from conftest import SMOKE, evaluate, posenc, train
from posenc_cli.core.errors import UsageError
from posenc_cli.data import data_config, load_corpus, random_positions
from posenc_cli.evaluation.run_target import RunTarget, RunVariant
from posenc_cli.model import GPT, ModelConfig, ModelSize
from posenc_cli.model.extension.method import ContextMethod
from posenc_cli.model.positional import build_scheme
from posenc_cli.model.positional.rope_scaling import RopeScaling
from posenc_cli.rundir.layout import CHECKPOINT
from posenc_cli.rundir.lineage import check_same_shape, initial_state, lineage, source_checkpoint
from posenc_cli.rundir.record import Checkpoint, RunRecord, save_checkpoint
from posenc_cli.training.launch import train_request
from posenc_cli.training.preflight import preflight

pytestmark = pytest.mark.slow  # trains or starts real processes: `make test-fast` leaves it out


def saved_run(tmp_path: Path, scheme: str, block_size: int = 32, **options) -> tuple[Path, GPT]:
    """A run directory holding only what init_from reads: a checkpoint of a random tiny model."""
    torch.manual_seed(0)
    corpus_cfg = dict(load_corpus_cfg())
    vocab = load_corpus(data_config(corpus_cfg)).tokenizer.chars
    model = GPT(
        ModelConfig(
            vocab_size=len(vocab),
            block_size=block_size,
            size=ModelSize(n_layer=1, n_head=2, n_embd=32),
            scheme=scheme,
            scheme_options=options,
        )
    ).eval()
    run = tmp_path / f"run_{scheme}"
    record = RunRecord(
        run_id=None,
        model_config=model.cfg.to_dict(),
        tokenizer={"kind": "char", "chars": list(vocab)},
        train_len=block_size,
        data=corpus_cfg,
        seed=0,
        corpus_sha256=None,
        precision=None,
        config=None,
    )
    empty = torch.zeros(0)
    save_checkpoint(
        run / CHECKPOINT,
        Checkpoint(
            record=record,
            step=0,
            elapsed=0.0,
            metrics=[],
            recent_losses=empty,
            train_loss=0.0,
            model=model.state_dict(),
            optimizer=None,
            data_rng=None,
            torch_rng=None,
        ),
    )
    return run, model


def load_corpus_cfg() -> dict:
    from posenc_cli.config.hydra_args import composing, parse_hydra_args

    with composing(parse_hydra_args([])) as compose_point:
        return {**compose_point(SMOKE)["data"]}


def initialised(run: Path, like: GPT, **changes) -> GPT:
    cfg = {**like.cfg.to_dict(), **changes}
    model = GPT(ModelConfig.from_dict(cfg)).eval()
    source, saved = source_checkpoint(run)
    model.load_state_dict(initial_state(source, saved, model))
    return model


@pytest.mark.parametrize("scheme", ["rope", "learned", "t5", "sinusoidal"])
def test_init_from_gives_identical_logits_at_step_0(scheme, tmp_path):
    run, source = saved_run(tmp_path, scheme)
    longer = initialised(run, source, block_size=128)  # a longer training length, no scaling added
    idx = torch.randint(source.cfg.vocab_size, (2, 32))
    with torch.no_grad():
        torch.testing.assert_close(longer(idx), source(idx), rtol=0, atol=0)


def test_a_grown_learned_table_repeats_the_trained_rows(tmp_path):
    run, source = saved_run(tmp_path, "learned")
    grown = initialised(run, source, block_size=80)
    old, new = source.scheme.table.weight, grown.scheme.table.weight
    assert new.shape == (80, old.size(1))
    torch.testing.assert_close(new, old[torch.arange(80) % 32])  # Longformer's copy: row p = row p mod 32


def test_scaling_while_training_is_the_eval_formula():
    """One implementation: the options a fine-tune gives (block 1,024, factor 4) and the options eval's
    --rope-scaling gives a 256-token run build the same RopeScaling, hence the same rotations."""
    trained = build_scheme("rope", 32, 2, block_size=1024, scaling="yarn", scaling_factor=4)
    rope = GPT(
        ModelConfig(
            vocab_size=11, block_size=256, size=ModelSize(n_layer=1, n_head=2, n_embd=32), scheme="rope"
        )
    )
    run = RunTarget(Path("run"), rope, None, 256, SimpleNamespace(), SimpleNamespace())
    (variant,) = RunTarget.variants(run, [ContextMethod("yarn")], 4.0)
    at_eval = build_scheme("rope", 32, 2, block_size=256, **variant.options)
    assert trained.scaling == at_eval.scaling == RopeScaling("yarn", 256, 4.0)
    positions = torch.arange(2048)
    for got, want in zip(trained.cos_sin(positions), at_eval.cos_sin(positions)):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert trained.label == "rope+yarn"


def test_a_baked_in_scaling_refuses_another_on_top():
    """A run fine-tuned with a scaling is evaluated as trained; a second scaling is a refused column, shown
    with why beside it, never composed."""
    cfg = ModelConfig(
        11,
        1024,
        ModelSize(n_layer=1, n_head=2, n_embd=32),
        "xpos",
        {"scaling": "linear", "scaling_factor": 4},
    )
    run = RunTarget(Path("ft"), GPT(cfg), None, 1024, SimpleNamespace(), SimpleNamespace())
    assert RunTarget.variants(run, [ContextMethod()], None) == [RunVariant()]  # evaluated as trained
    trained, second = RunTarget.variants(run, [ContextMethod(), ContextMethod("yarn")], None)
    assert (
        trained == RunVariant() and "scheme.scaling=linear" in second.why and "do not compose" in second.why
    )


def test_randomized_positions_are_sorted_distinct_in_range_and_seeded():
    draw = lambda seed: random_positions(8, 256, 2048, generator=torch.Generator().manual_seed(seed))  # noqa: E731
    positions = draw(0)
    assert positions.shape == (8, 256) and positions.dtype == torch.int64
    assert (positions.diff(dim=1) > 0).all()  # sorted and distinct
    assert positions.min() >= 0 and positions.max() < 2048
    assert torch.equal(draw(0), positions) and not torch.equal(draw(1), positions)
    assert not torch.equal(positions[0], positions[1])  # each sequence its own subset
    many = random_positions(64, 256, 2048, generator=torch.Generator().manual_seed(0))
    assert many.max() > 2000 and many[:, 0].float().mean() < 30  # the whole range is visited


@pytest.mark.parametrize(
    "overrides, needle",
    [
        (["train.positions=shuffled"], "train.positions=shuffled"),
        (["train.positions=randomized"], "train.max_position"),
        (["train.positions=randomized", "train.max_position=32"], "train.max_position"),
        (["train.max_position=512"], "train.positions=randomized"),
        (
            ["scheme=learned", "scheme.max_len=256", "train.positions=randomized", "train.max_position=512"],
            "scheme.max_len=256",
        ),
        (["scheme=rope", "scheme.scaling=llama3"], "llama3"),
        (["scheme=xpos", "scheme.scaling=linear", "scheme.scaling_factor=0"], "scheme.scaling_factor"),
        (["train.init_from=nowhere"], "train.init_from=nowhere"),
    ],
)
def test_bad_extension_overrides_are_refused_before_training(overrides, needle):
    with pytest.raises(UsageError, match=needle.replace(".", r"\.")):
        preflight(train_request([*SMOKE, *overrides]))


@pytest.mark.parametrize(
    "scheme, overrides, needle",
    [
        ("rope", ["scheme=alibi"], "scheme=rope"),
        ("rope", ["scheme=rope", "model.n_embd=64"], "model.n_embd=32"),
        ("t5", ["scheme=t5", "scheme.n_buckets=8"], "scheme.table.weight"),
        ("rope", ["scheme=rope", "data=text", "data.path=other.txt"], "vocabulary"),
    ],
)
def test_init_from_refuses_another_model_or_vocabulary(scheme, overrides, needle, tmp_path, monkeypatch):
    run, _ = saved_run(tmp_path, scheme)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "other.txt").write_text("abcd efgh " * 300, encoding="utf-8")
    with pytest.raises(UsageError, match=needle):
        preflight(
            train_request(
                [
                    *SMOKE,
                    "model.n_layer=1",
                    "model.n_head=2",
                    "model.n_embd=32",
                    f"train.init_from={run}",
                    *overrides,
                ]
            )
        )


def test_the_chain_goes_back_to_a_run_trained_from_scratch(tmp_path):
    a, b, c = (str(tmp_path / name) for name in "abc")
    for name, chain in [("a", None), ("b", [a]), ("c", [b, a])]:
        (tmp_path / name).mkdir()
        (tmp_path / name / "summary.json").write_text(json.dumps({"init_chain": chain} if chain else {}))
    assert lineage(tmp_path / "c") == [c, b, a]


def test_fine_tune_with_scaling_end_to_end(tmp_path, monkeypatch):
    """init_from a rope run at 64 tokens, fine-tune at 128 with linear scaling; a learned run with
    randomized positions; eval reads both as any run (the scaling built in, the learned table as long
    as max_position), and refuses --rope-scaling on top of a baked-in scaling in one line."""
    train(tmp_path, "train.max_steps=2", "scheme=rope", run="base")
    scaled = ["scheme.scaling=linear", "scheme.scaling_factor=2"]
    train(
        tmp_path,
        "train.max_steps=2",
        "scheme=rope",
        "train.init_from=base",
        "train.block_size=128",
        *scaled,
        run="ft",
    )
    summary = json.loads((tmp_path / "ft" / "summary.json").read_text())
    assert summary["scheme"] == "rope+linear"
    assert summary["init_from"] == str(tmp_path / "base")
    assert summary["init_chain"] == [str(tmp_path / "base")]
    randomized = ["train.positions=randomized", "train.max_position=256"]
    train(tmp_path, "train.max_steps=2", "scheme=learned", *randomized, run="rnd")
    df = evaluate(tmp_path, "ft", "rnd", "--lengths", "256", "--max-tokens", "1024", out="ev")
    df = df.set_index(["scheme", "eval_len"])
    assert sorted(df.index) == [("learned", 64), ("learned", 256), ("rope+linear", 128), ("rope+linear", 256)]
    assert df["ppl"].notna().all()  # learned past its training length: its table covers max_position
    monkeypatch.chdir(tmp_path)
    code, _ = posenc("eval", "ft", "--rope-scaling", "none,yarn", "--out", "ev2")
    refused = pd.read_csv(tmp_path / "ev2" / "ppl.csv").query("scheme == 'rope+yarn'")  # shown, never scored
    assert code == 0 and refused["ppl"].isna().all()
    assert refused["note"].str.contains("scheme.scaling=linear, which its evaluation always applies").all()


def test_drope_drops_the_scheme_and_starts_its_qk_norm_at_one(tmp_path):
    """train.init_from=ROPE_RUN scheme=none model.qk_norm=true: every weight of RUN but its scheme's, and
    QK-norm's new weights at 1 (DroPE's recalibration start)."""
    run, source = saved_run(tmp_path, "learned")  # a scheme with weights of its own, left behind
    dropped = initialised(run, source, scheme="none", scheme_options={}, qk_norm=True)
    kept = source.state_dict()
    for name, value in dropped.state_dict().items():
        if name.endswith(("q_norm.weight", "k_norm.weight")):
            assert torch.equal(value, torch.ones_like(value))
        else:
            assert torch.equal(value, kept[name]), name
    assert not any(name.startswith("scheme.") for name in dropped.state_dict())


def test_init_from_refuses_any_other_change_of_scheme_in_one_line(tmp_path):
    run, source = saved_run(tmp_path, "rope")
    cfg = {**source.cfg.to_dict(), "scheme": "alibi"}
    with pytest.raises(UsageError, match="init_from keeps the scheme \\(or drops it: scheme=none\\)"):
        check_same_shape(run, source_checkpoint(run)[1], cfg)
