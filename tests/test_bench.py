"""`posenc bench --quick` runs end to end on the real training path and writes its tables; MFU is
against the peak of the run's own precision and never printed above 100 %; the FLOP count is the
stated formula; the nanoGPT side-by-side says when its peer is absent; each scheme's step and evaluation
are measured against rope at the depth the scheme builds at."""

from __future__ import annotations

import math
import re
from types import SimpleNamespace
from unittest import mock

import pandas as pd
import pytest
import torch

from conftest import assert_refused, posenc, run_cli
from posenc_cli.bench import peak as peak_module
from posenc_cli.bench import peer as peer_module
from posenc_cli.bench import sampling as sampling_module
from posenc_cli.bench import scheme_costs
from posenc_cli.bench import train_speed as train_speed_module
from posenc_cli.bench.bench_targets import STARTUP_TARGETS, load_targets, mfu_text, precision_auto, targets
from posenc_cli.bench.cost_cases import EXTENSIONS, WHY, CostCase, budget_note, cost_cases
from posenc_cli.bench.peak import Peak, flops_per_token, sized_operands, step_gemms
from posenc_cli.bench.peer import side_by_side, speedup
from posenc_cli.bench.processes import TINY_MODEL
from posenc_cli.bench.startup import startup_cases
from posenc_cli.bench.step_profile import category
from posenc_cli.bench.train_speed import at_depth, compose
from posenc_cli.config.schema import check_keys
from posenc_cli.core.choices import PRECISIONS
from posenc_cli.core.errors import UsageError
from posenc_cli.model import GPT, ModelConfig, ModelSize
from posenc_cli.model.positional import SCHEMES
from posenc_cli.training.session import model_config


def fake_peer(root):
    """A stand-in for ../shared/peers/nanogpt: a run.sh that logs like nanoGPT, and a text beside it."""
    peer = root / "peers" / "nanogpt"
    peer.mkdir(parents=True)
    (peer / "run.sh").write_text('echo "iter $1: loss 2.5000, time 1.00ms"\n', encoding="utf-8")
    (root / "data").mkdir()
    (root / "data" / "tinyshakespeare.txt").write_text("To be, or not to be: that is the question.\n" * 100)
    return peer


@pytest.mark.slow
def test_bench_quick_times_posenc_train_and_writes_csv_and_markdown(tmp_path):
    result = run_cli(
        "bench",
        "--quick",
        "--scheme",
        "rope",
        "--scheme",
        "alibi",
        "--nanogpt",  # relative, as the default is: it once failed, run from the side-by-side's own directory
        str(fake_peer(tmp_path / "shared").relative_to(tmp_path)),
        "--peer-steps",
        "3",
        "--out",
        "bench",
        cwd=tmp_path,
        timeout=900,
    )  # seconds on a quiet machine; the timeout allows for a loaded one
    assert result.returncode == 0, result.stderr
    df = pd.read_csv(tmp_path / "bench" / "bench.csv")
    assert set(df["section"]) == {
        "gemm",
        "train",
        "precision",
        "peer",
        "eval",
        "sample",
        "startup",
        "main_job",
        "step_profile",
        "cost",
    }
    main_job = df[df["section"] == "main_job"]
    assert main_job["config"].tolist()[-1] == "total" and (main_job["seconds"] > 0).all()
    precision = df[df["section"] == "precision"]
    assert sorted(precision["config"].unique()) == ["default", "nanogpt-recipe"]
    # the suite's CPU emulates bf16: one pinned bf16 training shows it, the second is left out
    emulated = sorted(set(PRECISIONS) - {"bf16-fp32-attention"})
    assert (precision.groupby("config")["asked"].apply(sorted) == [emulated] * 2).all()
    auto = precision[precision["asked"] == "auto"]
    assert (
        auto["reason"].str.contains("emulates bf16").all() and (auto["precision"] == "fp32").all()
    )  # the suite's CPU
    peer = df[df["section"] == "peer"]
    assert sorted(peer["config"]) == ["nanogpt", "posenc"] and (peer["steps"] == 3).all()
    assert peer.loc[peer["config"] == "nanogpt", "train_loss"].tolist() == [2.5]  # read from its log
    gemm = df[df["section"] == "gemm"]
    assert sorted(gemm["precision"]) == ["bf16", "fp32", "fp32"] and (gemm["gflops"] > 0).all()
    assert gemm["config"].tolist()[-1] == "step shapes fp32"  # the runs computed in fp32: its peak alone
    profiled = df[df["section"] == "step_profile"].set_index("config")
    parts = ["matmuls", "attention", "optimizer step", "other ops", "between ops"]
    assert profiled.index.tolist() == [*parts, "step"] and (profiled["ms_per_step"] > 0).all()
    assert profiled.loc[parts, "ms_per_step"].sum() == pytest.approx(profiled.loc["step", "ms_per_step"])
    train = df[df["section"] == "train"]
    assert sorted(train["scheme"]) == ["alibi", "rope"]
    assert (train["steps"] == 4).all()  # --quick: two eval intervals of 2 steps, run by train.train
    assert (train["tokens_per_s"] > 0).all() and (train["loop_tokens_per_s"] > 0).all()
    assert set(train["precision"]) <= {"fp32", "bf16"} and (train["mfu_step"] > 0).all()
    evals = df[df["section"] == "eval"]
    assert sorted(evals["multiple"].unique()) == [1, 8, 32]
    assert (evals["peak_rss_mib"] > evals["eval_rss_mib"]).all()
    assert (df.loc[(df["scheme"] == "rope") & df["section"].isin(["train", "eval"]), "vs_rope"] == 1).all()
    costs = df[df["section"] == "cost"]
    plain = costs[costs["variant"].fillna("") == ""]  # each scheme as configured; then rope's variants
    assert plain["scheme"].tolist() == ["rope", "alibi"] and (plain["step_vs_rope"] > 0).all()
    sample = df[df["section"] == "sample"]
    assert sorted(sample["config"]) == ["kv cache", "kv cache", "whole context", "whole context"]
    assert (sample["tokens_per_s"] > 0).all() and (
        sample.loc[sample["config"] == "whole context", "vs_baseline"] == 1
    ).all()
    markdown = (tmp_path / "bench" / "bench.md").read_text(encoding="utf-8")
    assert set(df.loc[df["section"] == "startup", "config"]) == set(STARTUP_TARGETS)
    for heading in (
        "## Training",
        "## Where an fp32 step's time goes",
        "## Precision: what auto chose, beside every pinned precision",
        "## Beside nanoGPT",
        "## Evaluation",
        "## Each scheme against rope: time and peak memory",
        "## Sampling",
        "## Start-up",
        "## Targets",
    ):
        assert heading in markdown
    assert re.search(r"posenc's speed / nanoGPT's: \*\*[\d.]+×\*\*", markdown), markdown
    assert all(float(p) <= 100 for p in re.findall(r"([\d.]+)%", markdown))
    assert "## Targets" in result.stdout


@pytest.mark.slow
def test_mfu_is_against_the_peak_of_the_runs_precision_and_never_shown_above_100_percent():
    peak = Peak(size=4, repeats=1)
    peak.flops = {"fp32": 100.0, "bf16": 400.0}
    row = {"tokens_per_s": 10.0, "flops_per_token": 10.0}
    assert peak.with_mfu({**row, "precision": "bf16"})["mfu"] == 0.25
    assert peak.with_mfu({**row, "precision": "fp32"})["mfu"] == 1.0
    assert mfu_text(0.25) == "25.0%"
    assert "%" not in mfu_text(1.2)


@pytest.mark.slow
def test_mfu_at_the_step_shapes_is_against_the_step_shape_peak_of_the_runs_precision():
    peak = Peak(size=4, repeats=1)
    peak.flops, peak.step_flops = {"fp32": 400.0, "bf16": 800.0}, {"fp32": 200.0}
    row = {"tokens_per_s": 10.0, "flops_per_token": 10.0}
    assert peak.with_mfu({**row, "precision": "fp32"})["mfu_step"] == 0.5
    assert math.isnan(peak.with_mfu({**row, "precision": "bf16"})["mfu_step"])  # not measured: no MFU


@pytest.mark.slow
def test_the_step_gemms_are_every_linear_forward_and_its_two_backward_gemms():
    mc = ModelConfig(vocab_size=50, block_size=16, size=ModelSize(n_layer=2, n_head=2, n_embd=8))
    rows = 4 * 16
    gemms = step_gemms(mc, rows)
    linear_weights = sum(m.weight.numel() for m in GPT(mc).modules() if isinstance(m, torch.nn.Linear))
    assert sum(g.flops for g in gemms) == 3 * 2 * rows * linear_weights  # 6·N·rows over the linears
    assert {(g.m, g.k, g.n) for g in gemms if g.name.startswith("lm head")} == {
        (rows, 8, 50),
        (rows, 50, 8),
        (50, rows, 8),
    }


def event(name, parent=None):
    return SimpleNamespace(name=name, cpu_parent=parent)


@pytest.mark.slow
def test_an_op_is_in_the_category_its_call_stack_names_innermost_first():
    step = event("Optimizer.step#AdamW.step")
    backward = event("autograd::engine::evaluate_function: MmBackward0")
    attention = event("ScaledDotProductFlashAttentionForCpuBackward0")
    assert category(event("aten::t", event("aten::linear"))) == "matmuls"
    assert category(event("aten::mm", backward)) == "matmuls"
    assert category(event("aten::empty", attention)) == "attention"
    assert category(event("aten::copy_", step)) == "optimizer step"
    assert category(event("aten::_fused_adamw_")) == "optimizer step"
    assert category(event("aten::gelu_backward", event("GeluBackward0"))) == "other ops"


@pytest.mark.slow
@pytest.mark.parametrize("gflops, expected", [(100.0, 512), (1.0, 256)])
def test_a_slow_precision_is_timed_on_a_smaller_matmul(monkeypatch, gflops, expected):
    # one matmul's time at `gflops`: at 1 GFLOP/s (bf16 emulated on an AVX2 CPU) 512 would take 0.27 s
    monkeypatch.setattr(peak_module, "timed_mm", lambda a, b: 2 * len(a) ** 3 / (gflops * 1e9))
    a, b = sized_operands(torch.bfloat16, size=512, seconds=0.1)
    assert a.shape == b.shape == (expected, expected) and a.dtype == torch.bfloat16


@pytest.mark.slow
def test_a_peer_that_fails_costs_its_own_section_and_keeps_its_whole_pairs(tmp_path):
    """A nanoGPT run that fails (once: a relative peer path run from another directory, a traceback that
    lost every section measured before it) ends the side-by-side with a line saying why."""
    calls = []

    def run(steps, **_):
        calls.append(steps)
        if len(calls) == 3:
            raise RuntimeError("nanoGPT's run.sh failed:\nTraceback ...\nMemoryError")
        return {"config": "nanogpt" if len(calls) % 2 else "posenc", "seconds": 1.0}

    info = {}
    with (
        mock.patch.object(peer_module, "run_nanogpt", run),
        mock.patch.object(peer_module, "run_posenc", run),
    ):
        rows = side_by_side(fake_peer(tmp_path), SimpleNamespace(peer_pairs=3, peer_steps=5), info)
    assert [row["pair"] for row in rows] == [0, 0] and len(calls) == 3
    assert info["peer_stopped"] == (
        "The side-by-side stopped in pair 2: nanoGPT's run.sh failed: ... MemoryError "
        "(1 whole pair before it kept)."
    )


@pytest.mark.slow
def test_side_by_side_says_when_the_peer_is_absent(tmp_path):
    info = {}
    assert side_by_side(tmp_path / "nanogpt", effort=None, info=info) == []
    assert "skipped" in info["peer"] and str(tmp_path / "nanogpt") in info["peer"]
    walls = pd.DataFrame(
        [
            {"section": "peer", "pair": p, "config": c, "seconds": s}
            for p, (n, q) in enumerate([(20.0, 10.0), (18.0, 12.0), (30.0, 10.0)])
            for c, s in (("nanogpt", n), ("posenc", q))
        ]
    )
    assert speedup(walls) == 2.0  # median of 2.0, 1.5, 3.0


@pytest.mark.slow
@pytest.mark.parametrize("scheme", ["learned", "rope"])
def test_flops_per_token_counts_non_positional_parameters_once(scheme):
    V, L, d, T = 11, 3, 16, 24
    model = GPT(
        ModelConfig(vocab_size=V, block_size=T, size=ModelSize(n_layer=L, n_head=2, n_embd=d), scheme=scheme)
    )
    # tied embedding once; per block qkv 3d², proj d², MLP 8d², two LayerNorms 4d; final LayerNorm 2d
    n = V * d + L * (12 * d * d + 4 * d) + 2 * d
    assert model.n_params - model.n_positional_params == n
    assert flops_per_token(non_positional_params=n, n_layer=L, n_embd=d, seq_len=T) == 6 * n + 12 * L * d * T


@pytest.mark.slow
def test_every_startup_case_is_checked_against_its_target_and_a_slow_one_is_not_met(tmp_path):
    goal = load_targets()
    assert set(startup_cases(tmp_path)) == set(STARTUP_TARGETS) and set(STARTUP_TARGETS.values()) <= set(goal)
    rows = [
        {"section": "startup", "config": case, "seconds": goal[key] + 0.01}
        for case, key in STARTUP_TARGETS.items()
    ]
    checked = targets(
        pd.DataFrame(rows).reindex(
            columns=[
                "section",
                "config",
                "seconds",
                "scheme",
                "tokens_per_s",
                "multiple",
                "peak_rss_mib",
                "vs_rope",
                "mfu",
                "vs_baseline",
            ]
        )
    )
    assert [met for *_, met in checked] == ["**no**"] * len(STARTUP_TARGETS)


@pytest.mark.slow
def test_sampling_reports_the_pair_with_the_median_speed_up(monkeypatch):
    """Three alternated (cached, uncached) pairs with speed-ups 4×, 12× and 20×: the 12× pair is shown,
    not the one a busy moment bent either way."""
    speeds = iter([40.0, 10.0, 240.0, 20.0, 120.0, 6.0] * 2)  # per scheme: cached, uncached, in turn
    monkeypatch.setattr(sampling_module, "sampling_speed", lambda model, tokens, cached: next(speeds))
    effort = SimpleNamespace(sample_pairs=3, sample_tokens=5, overrides=("experiment=smoke",))
    rows = sampling_module.bench_sampling(effort)
    cached = [r for r in rows if r["config"] == "kv cache"]
    assert [r["vs_baseline"] for r in cached] == [12.0, 12.0]


@pytest.mark.slow
@pytest.mark.parametrize(("fastest_pinned", "met"), [("bf16-autocast-fp32-attention", True), ("fp32", False)])
def test_auto_meets_its_target_when_it_computed_in_the_fastest_pinned_precision_whatever_the_noise(
    fastest_pinned, met
):
    """auto 7 % below the fastest pinned run: a miss only if it chose another precision."""
    rows = [
        {"asked": "auto", "effective": "bf16-autocast-fp32-attention", "tokens_per_s": 93.0, "vs_best": 0.93},
        {"asked": "pinned a", "effective": fastest_pinned, "tokens_per_s": 100.0, "vs_best": 1.0},
        {"asked": "pinned b", "effective": "bf16-autocast", "tokens_per_s": 90.0, "vs_best": 0.9},
    ]
    df = pd.DataFrame([{**r, "section": "precision", "config": "default"} for r in rows])
    assert precision_auto(df, {"precision_auto_slack": 0.05})[2] is met


@pytest.mark.slow
def test_the_benchmark_keeps_autos_choices_in_a_cache_of_its_own_never_the_users(monkeypatch, tmp_path):
    import posenc_cli.bench as bench
    from posenc_cli.training.precision_choice import CACHE_ENV, cache_path

    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "users.json"))
    seen = []

    def startup(repeats):
        seen.append(cache_path())
        cache_path().write_text("{}")  # what a run choosing its precision would write
        return []

    monkeypatch.setattr(bench, "bench_startup", startup)
    bench.run_bench(quick=True, startup_only=True)
    assert seen and seen[0] != tmp_path / "users.json" and not seen[0].exists()
    assert cache_path() == tmp_path / "users.json" and not cache_path().exists()


@pytest.mark.slow
@pytest.mark.parametrize("cpu", ["emulated", "native"])
def test_pinned_bf16_trains_a_few_steps_only_where_bf16_is_emulated(monkeypatch, tmp_path, cpu):
    """An AVX2 CPU's bf16 is ~100x slower than its fp32: three eval intervals of the default config there
    would take over an hour, so the bench times a few steps of it; on a native-bf16 CPU every precision,
    auto included, trains the same steps."""
    monkeypatch.setattr(train_speed_module, "cpu_bf16", lambda: cpu)
    asked = []

    def timed(overrides, effort):
        precision = overrides[-1].removeprefix("train.precision=")
        asked.append((precision, tuple(o for o in overrides if o in train_speed_module.EMULATED_BF16_RUN)))
        return {"tokens_per_s": 100.0, "asked": precision}

    monkeypatch.setattr(train_speed_module, "timed_training", timed)
    rows = train_speed_module.bench_precision(SimpleNamespace(), tmp_path / "cache.json")
    assert len(rows) == len(asked) == 2 * (len(PRECISIONS) - (cpu == "emulated"))
    short = {precision for precision, extra in asked if extra == train_speed_module.EMULATED_BF16_RUN}
    assert short == ({"bf16"} if cpu == "emulated" else set())
    assert all(extra in ((), train_speed_module.EMULATED_BF16_RUN) for _, extra in asked)


@pytest.mark.slow
def test_a_named_peer_without_nanogpt_and_a_bad_cpu_bf16_are_refused_before_any_work(tmp_path, monkeypatch):
    """The default peer may be absent (users have no ../shared: the report says so); one named on the
    command line must be there. Neither refusal writes --out."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "peer").mkdir()
    assert_refused(*posenc("bench", "--quick", "--nanogpt", "peer", "--out", "b"), "--nanogpt peer", "'none'")
    with mock.patch.dict("os.environ", {"POSENC_CPU_BF16": "sometimes"}):
        assert_refused(*posenc("bench", "--quick", "--out", "b"), "POSENC_CPU_BF16=sometimes", "emulated")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["peer"]


@pytest.mark.slow
def test_a_benchmark_training_stopped_by_a_signal_ends_the_benchmark_as_ctrl_c(monkeypatch):
    """train() answers SIGTERM/SIGINT by saving and exiting 130 with a resume hint; inside the benchmark
    the run is a temporary one, so the benchmark stops as at Ctrl-C instead (posenc: interrupted)."""

    def stopped(cfg, work):
        raise SystemExit(130)

    monkeypatch.setattr(train_speed_module, "train", stopped)
    with pytest.raises(KeyboardInterrupt):
        train_speed_module.timed_training(
            ["scheme=rope"], SimpleNamespace(overrides=("experiment=smoke",), train_intervals=1)
        )


@pytest.mark.slow
@pytest.mark.parametrize(("bf16_steps", "said"), [(6, True), (300, False)])
def test_the_precision_table_says_bf16_was_shortened_only_when_it_was(bf16_steps, said):
    from posenc_cli.bench.markdown import precision_section

    rows = [
        {
            "asked": asked,
            "effective": asked,
            "steps": steps,
            "tokens_per_s": 1.0,
            "vs_best": 1.0,
            "reason": "",
        }
        for asked, steps in (("auto", 300), ("fp32", 300), ("bf16", bf16_steps))
    ]
    text = "\n".join(
        precision_section(pd.DataFrame([{**r, "section": "precision", "config": "d"} for r in rows]))
    )
    assert ("pinned bf16 trained a few steps only" in text) is said


# ---- each scheme against rope (bench/scheme_costs.py): fast, on the tiny model, measurements faked


def test_every_scheme_is_benchmarked_at_a_depth_it_builds_at_and_a_preset_at_the_one_it_needs():
    """The default model has 2 layers: irope's every 4th layer needs 4, local_global's every 6th needs 6;
    any other scheme (new ones included, being in SCHEMES) keeps the default depth if it builds there."""
    for scheme in SCHEMES:
        overrides = at_depth([f"scheme={scheme}"])
        cfg = check_keys(compose(overrides))
        with torch.device("meta"):
            GPT(model_config(cfg, 32))  # builds: no refusal for its depth
        if cfg.model.n_layer != 2:
            assert overrides[-1] == f"model.n_layer={cfg.model.n_layer}"
            with pytest.raises(UsageError, match="model.n_layer"):
                GPT(model_config(check_keys(compose([f"scheme={scheme}"])), 32))
    assert check_keys(compose(at_depth(["scheme=irope"]))).model.n_layer == 4
    assert check_keys(compose(at_depth(["scheme=local_global"]))).model.n_layer == 6
    assert at_depth(["scheme=rope"]) == ["scheme=rope"]


def test_the_cost_table_has_one_row_per_scheme_each_against_rope_at_the_schemes_depth(monkeypatch):
    """Each scheme's row at its depth; after rope's, its sinks and window rows (trained and evaluated) and
    the extensions' (evaluated only, rope's own model extended against it plain)."""
    measured = []

    def measure(ours, theirs, effort, *, step=True):
        layers = {type(a.remap).__name__ for a in ours.model.attention if a.remap is not None}
        measured.append((ours.cfg.scheme_name, ours.cfg.model.n_layer, step, *sorted(layers)))
        assert theirs.cfg.scheme_name == "rope" and theirs.cfg.model.n_layer == ours.cfg.model.n_layer
        return {"ms_per_step": 2.0, "rope_ms_per_step": 1.0, "step_vs_rope": 2.0} if step else {}

    monkeypatch.setattr(scheme_costs, "measure", measure)
    effort = SimpleNamespace(overrides=TINY_MODEL, cost_pairs=1)
    rows = scheme_costs.bench_costs(["rope", "learned", "irope"], effort)
    assert measured == [
        ("rope", 1, True),
        *[("rope", 1, True)] * 3,  # sinks, window, window and sinks
        ("rope", 1, False, "String"),
        ("rope", 1, False, "SelfExtend"),
        ("rope", 1, False, "DualChunk"),
        ("learned", 1, True),
        ("irope", 4, True),
    ]
    assert [(r["scheme"], r["variant"], r["n_layer"], r["deeper"]) for r in rows] == [
        ("rope", "", 1, False),
        ("rope", "scheme.sinks=true", 1, False),
        ("rope", "scheme.window=4", 1, False),  # a quarter of --quick's 16
        ("rope", "scheme.window=4 scheme.sinks=true", 1, False),
        ("rope", "--rope-scaling string", 1, False),
        ("rope", "--rope-scaling self_extend", 1, False),
        ("rope", "--rope-scaling dca", 1, False),
        ("learned", "", 1, False),
        ("irope", "", 4, True),
    ]
    assert rows[7]["note"].startswith("eval: cannot represent positions")  # learned past its table at 8×
    table = "\n".join(scheme_costs.costs_section(pd.DataFrame(rows)))
    body = [line for line in table.splitlines() if line.startswith("| ") and "step ms" not in line]
    assert [line.split(" | ")[0] for line in body] == [
        "| rope",
        "| rope scheme.sinks=true",
        "| rope scheme.window=4",
        "| rope scheme.window=4 scheme.sinks=true",
        "| rope --rope-scaling string",
        "| rope --rope-scaling self_extend",
        "| rope --rope-scaling dca",
        "| learned",
        "| irope (n_layer=4)",
    ]
    assert sum(" | 2.00× | " in line for line in body) == 6  # the extensions' rows have no step


@pytest.mark.parametrize(
    ("case", "found", "said"),
    [
        (CostCase("alibi"), {"step_vs_rope": 1.2, "eval_vs_rope": 1.9}, ""),
        (
            CostCase("stickbreaking"),
            {"step_vs_rope": 1.6, "eval_vs_rope": 6.0},
            "step 1.60× > 1.5×, eval 6.00× > 2×: its",
        ),
        (
            CostCase("rope", method="string", adds="string"),
            {"eval_vs_rope": 2.8},
            "eval 2.80× > 2×: two parts",
        ),
        (CostCase("rope", ("scheme.sinks=true",), adds="sinks"), {"step_vs_rope": 1.7}, "no reason recorded"),
    ],
)
def test_a_row_past_its_budget_says_by_how_much_and_why_or_that_no_reason_is_recorded(case, found, said):
    note = budget_note(case, found)
    assert note.startswith(said) if said != "no reason recorded" else note.endswith(said)
    assert (note == "") == (said == "")


def test_every_scheme_and_every_row_beside_rope_has_a_case_and_a_reason_names_a_row_there_is():
    cases = cost_cases(list(SCHEMES), 256)
    assert [c.scheme for c in cases if not c.variant] == list(SCHEMES)
    assert {c.adds for c in cases if c.adds} == {"sinks", "window", "window+sinks", *EXTENSIONS}
    assert set(WHY) <= set(SCHEMES) | {c.adds for c in cases}  # no reason for a row the table never has


def test_alternated_calls_flip_their_order_pair_by_pair_and_report_the_median_pair_ratio(monkeypatch):
    calls, clock = [], iter([3.0, 1.0, 2.0, 2.0, 9.0, 1.0])  # per pair: the first call's time, the second's

    def seconds(call):
        call()
        return next(clock)

    monkeypatch.setattr(scheme_costs, "seconds", seconds)
    ms, rope_ms, vs_rope = scheme_costs.alternated(
        lambda: calls.append("ours"), lambda: calls.append("rope"), pairs=3, warm_up=1
    )
    assert calls == ["ours", "rope", "ours", "rope", "rope", "ours", "ours", "rope"]
    # pairs (ours, rope): (3, 1), (2, 2) flipped, (9, 1): ratios 3, 1, 9
    assert (ms, rope_ms, vs_rope) == (3000.0, 1000.0, 3.0)


def test_peak_tensor_memory_is_the_most_alive_at_once_during_the_call_not_the_sum():
    def work():
        big = torch.ones(4 * 2**20, dtype=torch.uint8)  # 4 MiB
        del big
        return torch.ones(2 * 2**20, dtype=torch.uint8)  # then 2 MiB

    assert 4.0 <= scheme_costs.peak_tensor_mib(work) < 4.1


@pytest.mark.slow
def test_bench_costs_alone_measures_each_scheme_and_its_rope_in_one_run(tmp_path):
    result = run_cli(
        "bench",
        "--quick",
        "--costs",
        "--scheme",
        "alibi",
        "--scheme",
        "irope",
        "--scheme",
        "rope",  # and its sinks, window and extension rows
        "--out",
        "b",
        cwd=tmp_path,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr
    df = pd.read_csv(tmp_path / "b" / "bench.csv")
    assert set(df["section"]) == {"cost"} and df["scheme"].tolist() == [
        "alibi",
        "irope",
        "rope",
        *["rope"] * 6,
    ]
    assert df["n_layer"].tolist() == [1, 4, *[1] * 7]  # --quick's 1-layer model; irope at the depth it needs
    trained = df[~df["variant"].fillna("").str.startswith("--rope-scaling")]
    for column in ("step_vs_rope", "train_peak_vs_rope"):
        assert (trained[column] > 0).all() and df[column].isna().sum() == 3, (
            column
        )  # the extensions: eval only
    for column in ("eval_vs_rope", "eval_peak_vs_rope"):
        assert (df[column] > 0).all(), column
    markdown = (tmp_path / "b" / "bench.md").read_text(encoding="utf-8")
    assert (
        "## Each scheme against rope: time and peak memory" in markdown
        and "| irope (n_layer=4) |" in markdown
        and "| rope scheme.sinks=true |" in markdown
        and "| rope --rope-scaling string | — |" in markdown
    )
    assert "Command: `posenc bench --quick --costs" in markdown and "torch " in markdown
    assert "## Targets" not in markdown and "## Beside nanoGPT" not in markdown
