"""Per-step metrics and experiment trackers: metrics.csv holds the whole curve, TensorBoard and an
offline Weights & Biases run receive the same numbers (tags grouped Lightning-style), config and summary;
a sweep's runs carry HParams; eval and probe send their numbers into the runs' own trackers."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from conftest import SMOKE, evaluate, invoke, run_cli, train
from posenc_cli.core.errors import UsageError
from posenc_cli.core.install import install_hint
from posenc_cli.training.tracking import COLUMNS, TAGS, check_loggers, hparams_of, run_name

pytestmark = pytest.mark.slow  # trains or starts real processes: `make test-fast` leaves it out

STEPS, LOG, EVAL = 20, 5, 10  # experiment=smoke trains 20 steps and validates every 10


def offline_env(tmp: Path) -> dict[str, str]:
    """wandb's own directories and $HOME inside the test's tmp dir, and no way to the network."""
    return {
        "HOME": str(tmp / "home"),
        "WANDB_MODE": "offline",
        "WANDB_CACHE_DIR": str(tmp / "wandb-cache"),
        "WANDB_CONFIG_DIR": str(tmp / "wandb-config"),
        "WANDB_DATA_DIR": str(tmp / "wandb-data"),
        "WANDB_API_KEY": "",
        "HTTPS_PROXY": "http://127.0.0.1:9",
        "HTTP_PROXY": "http://127.0.0.1:9",
    }


@pytest.fixture(scope="module")
def tracked_run(tmp_path_factory) -> Path:
    """One smoke run logged to metrics.csv, TensorBoard and an offline wandb run at once (list form)."""
    cwd = tmp_path_factory.mktemp("tracked")
    (cwd / "home").mkdir()
    result = run_cli(
        "train",
        *SMOKE,
        "train.threads=1",
        f"train.log_interval={LOG}",
        "hydra.run.dir=run",
        "logger=[csv,tensorboard,wandb]",
        "logger.wandb.mode=offline",
        cwd=cwd,
        env=offline_env(cwd),
    )
    assert result.returncode == 0, result.stderr
    return cwd / "run"


def test_metrics_csv_has_a_row_per_log_interval_and_validation_where_measured(tracked_run):
    metrics = pd.read_csv(tracked_run / "metrics.csv")
    assert tuple(metrics.columns) == COLUMNS
    assert metrics["step"].tolist() == list(range(LOG, STEPS + 1, LOG))
    for column in ("train_loss", "lr", "tokens_per_s", "grad_norm"):
        assert metrics[column].notna().all() and (metrics[column] > 0).all(), column
    validated = metrics["step"] % EVAL == 0
    assert (
        metrics.loc[validated, "val_loss"].notna().all() and metrics.loc[~validated, "val_loss"].isna().all()
    )
    summary = json.loads((tracked_run / "summary.json").read_text())
    assert summary["final_val_loss"] == metrics["val_loss"].iloc[-1]
    assert summary["code_version"].startswith(("git:", "posenc "))


def test_tensorboard_scalars_match_metrics_csv_under_lightning_style_tags(tracked_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tracked_run / "tensorboard"), size_guidance={"tensors": 0})
    events.Reload()
    metrics = pd.read_csv(tracked_run / "metrics.csv")
    for column in COLUMNS[1:]:
        measured = metrics[["step", column]].dropna()
        logged = events.Scalars(TAGS[column])
        assert [e.step for e in logged] == measured["step"].tolist(), column
        assert [e.value for e in logged] == pytest.approx(measured[column].tolist(), rel=1e-6), column
    texts = {
        tag: events.Tensors(f"{tag}/text_summary")[0].tensor_proto.string_val[0].decode()
        for tag in ("config", "summary")
    }
    assert '"block_size": 64' in texts["config"] and '"status": "finished"' in texts["summary"]


def test_wandb_offline_writes_an_offline_run_directory_and_nothing_in_home(tracked_run):
    (offline,) = (tracked_run / "wandb").glob("offline-run-*")
    (record,) = offline.glob("run-*.wandb")
    content = record.read_bytes()
    for key in ("val/loss", "train/grad_norm", "final_val_loss", "block_size"):  # metrics, summary, config
        assert key.encode() in content, key
    assert not any((tracked_run.parent / "home").iterdir())


def test_a_tracker_whose_package_is_missing_names_the_extra(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a)
    )
    hint = re.escape(install_hint("track"))  # pip install -e '.[track]' in a checkout
    with pytest.raises(UsageError, match=f"logger=wandb needs the wandb package: {hint}"):
        check_loggers({"csv": {}, "wandb": {"mode": "offline"}})


def test_a_bad_wandb_mode_or_logger_is_refused():
    with pytest.raises(
        UsageError, match="logger.wandb.mode=ofline is not known; choose one of: online, offline"
    ):
        check_loggers({"wandb": {"mode": "ofline"}})
    with pytest.raises(UsageError, match="logger=mlflow is not known"):
        check_loggers({"mlflow": {}})


def test_sweep_runs_are_named_after_their_overrides():
    overrides = ["scheme=rope", "seed=1", "logger=wandb", "hydra/launcher=joblib", "train.threads=1"]
    assert run_name(overrides, Path("sweep/1_rope_seed1"), in_sweep=True) == "scheme=rope,seed=1"
    assert run_name(overrides, Path("runs/2026_rope_seed1"), in_sweep=False) == "2026_rope_seed1"
    assert run_name(["hydra.sweep.dir=s"], Path("s/0_rope_seed0"), in_sweep=True) == "0_rope_seed0"


def test_a_resumed_tensorboard_log_keeps_the_checkpoints_step_and_drops_what_followed_it(tmp_path):
    """A run killed after its step-4 checkpoint had logged steps 5 and 6; the resume logs them again.
    Every step appears once, the checkpoint's own included."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from posenc_cli.training.tracking import TensorBoardLogger

    first = TensorBoardLogger(tmp_path, 0)
    for step in range(1, 7):
        first.log_metrics({"step": step, "train_loss": float(step)})
    first.close()
    resumed = TensorBoardLogger(tmp_path, 4)
    for step in (5, 6):
        resumed.log_metrics({"step": step, "train_loss": 10.0 + step})
    resumed.close()
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    logged = [(e.step, e.value) for e in events.Scalars("train/loss")]
    assert logged == [(1, 1.0), (2, 2.0), (3, 3.0), (4, 4.0), (5, 15.0), (6, 16.0)]


def events_of(tensorboard_dir: Path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tensorboard_dir), size_guidance={"tensors": 0, "images": 0, "scalars": 0})
    events.Reload()
    return events


def hparams_logged(events) -> tuple[dict, list[str]]:
    """(hparam -> value, the metrics the HParams view compares on) of a run's events."""
    from tensorboard.plugins.hparams import plugin_data_pb2

    content = {
        tag: plugin_data_pb2.HParamsPluginData.FromString(data)
        for tag, data in events.PluginTagToContent("hparams").items()
    }
    start = content["_hparams_/session_start_info"].session_start_info.hparams
    values = {key: value.string_value or value.number_value for key, value in start.items()}
    return values, [m.name.tag for m in content["_hparams_/experiment"].experiment.metric_infos]


@pytest.fixture(scope="module")
def tracked_sweep(tmp_path_factory) -> Path:
    """A two-run sweep logged to TensorBoard, then evaluated (with a RoPE scaling) into its trackers."""
    cwd = tmp_path_factory.mktemp("tracked_sweep")
    result = run_cli(
        "train", "-m", *SMOKE, "scheme=rope,alibi", "train.lr=0.002", "train.threads=1",
        "logger=tensorboard", "hydra.sweep.dir=sweep", cwd=cwd,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    evaluate(cwd, "sweep", "--lengths", "64,128", "--max-tokens", "512", "--rope-scaling", "none,yarn")
    return cwd / "sweep"


def test_a_sweeps_runs_carry_their_swept_values_as_hparams_compared_on_val_loss(tracked_sweep):
    for run, scheme in (("0_rope_seed0", "rope"), ("1_alibi_seed0", "alibi")):
        values, metrics = hparams_logged(events_of(tracked_sweep / run / "tensorboard"))
        assert values == {"experiment": "smoke", "scheme": scheme, "train.lr": pytest.approx(0.002)}
        assert metrics == ["val/loss"]


def test_eval_logs_each_length_into_the_runs_own_tensorboard_at_its_checkpoint_step(tracked_sweep):
    ppl = pd.read_csv(tracked_sweep.parent / "eval" / "ppl.csv")
    for run in ("0_rope_seed0", "1_alibi_seed0"):
        events = events_of(tracked_sweep / run / "tensorboard")
        rows = ppl[ppl["run"].str.endswith(run)]
        suffix = {"rope": "", "alibi": "", "rope+yarn": "+yarn"}
        expected = {f"eval/ppl@{r.eval_len}{suffix[r.scheme]}": r.ppl for r in rows.itertuples()}
        logged = {tag: events.Scalars(tag) for tag in events.Tags()["scalars"] if tag.startswith("eval/")}
        assert {tag: e[-1].value for tag, e in logged.items()} == pytest.approx(expected, rel=1e-6)
        assert {e[-1].step for e in logged.values()} == {STEPS}
        assert {"eval/ppl_vs_length", "eval/loss_by_position"} <= set(events.Tags()["images"])
    assert len(expected) == 2  # alibi takes no scaling: one column


def test_results_of_models_without_a_tracker_go_nowhere(tmp_path):
    from types import SimpleNamespace

    from posenc_cli.evaluation.labels import Label
    from posenc_cli.report.results_file import ResultsSection
    from posenc_cli.report.tracked import send_to_trackers

    schemes = [Label(("rope",)), Label(("learned",), model="gpt2")]
    ppl = pd.DataFrame({"run": [str(tmp_path), "hf:gpt2"], "scheme": schemes})
    ppl = ppl.assign(eval_len=64, ppl=2.0)
    targets = [
        {"kind": "run", "path": str(tmp_path), "step": 20, "run_id": "x", "config": {"logger": {"csv": {}}}},
        {"kind": "hf", "model_id": "hf:gpt2", "name_or_path": "gpt2", "revision": None},
    ]
    section = ResultsSection("eval", {"ppl": ppl}, {}, [SimpleNamespace(targets=targets)])
    send_to_trackers(section, [])
    assert list(tmp_path.iterdir()) == []


def test_hparams_are_a_runs_overrides_with_the_configs_values_less_where_and_how_it_runs():
    config = {"scheme": {"name": "rope"}, "train": {"lr": 0.001, "block_size": 64}, "seed": 2}
    overrides = ["scheme=rope", "train.lr=1e-3", "+seed=2", "train.threads=1", "hydra.sweep.dir=s"]
    assert hparams_of(overrides + ["logger=tensorboard"], config) == {
        "scheme": "rope",
        "train.lr": 0.001,
        "seed": 2,
    }


def test_eval_resumes_the_runs_offline_wandb_run_by_id_and_says_how_to_sync_it(tracked_run):
    pytest.importorskip("wandb")
    cwd = tracked_run.parent
    result = run_cli(
        "eval", "run", "--lengths", "64", "--max-tokens", "256", "--out", "eval_wandb",
        cwd=cwd, env=offline_env(cwd),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    run_id = json.loads((tracked_run / "summary.json").read_text())["run_id"]
    trained, evaluated = sorted((tracked_run / "wandb").glob("offline-run-*"))
    assert trained.name.endswith(run_id) and evaluated.name.endswith(run_id)  # one W&B run, resumed
    (record,) = evaluated.glob("run-*.wandb")
    assert b"eval/ppl@64" in record.read_bytes() and b"eval/ppl_vs_length" in record.read_bytes()
    (line,) = [line for line in result.stderr.splitlines() if "wandb sync" in line]
    assert line.endswith(f"wandb sync {evaluated.resolve()}")


def test_a_tracker_that_cannot_be_written_is_one_line_and_the_results_stand(tmp_path, capsys):
    from posenc_cli.training.tracking import TrackedResults, send_results

    (tmp_path / "tensorboard").write_text("a file where the run's event directory should be")
    send_results(
        {"tensorboard": {"subdir": "tensorboard"}},
        tmp_path,
        TrackedResults(20, {"eval/ppl@64": 2.0}),
        run_id="x",
    )
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"{tmp_path}: results not sent to its tracker: ")


def test_probe_logs_retrieval_by_length_and_its_figures_into_the_runs_tensorboard(tmp_path):
    run = train(
        tmp_path, "experiment=probe", "experiment=smoke", "data.passkey_rate=0.3", "train.block_size=128",
        "logger=tensorboard",
    )  # fmt: skip
    result = invoke("probe", str(run), "--lengths", "128,256", "--trials", "2", "--out", str(tmp_path / "p"))
    assert result.code == 0, result.stderr
    probe = pd.read_csv(tmp_path / "p" / "probe.csv")
    events = events_of(run / "tensorboard")
    for length, rows in probe.groupby("length"):
        expected = (rows["accuracy"] * rows["trials"]).sum() / rows["trials"].sum()
        (logged,) = events.Scalars(f"probe/accuracy@{length}")
        assert (logged.step, logged.value) == (STEPS, pytest.approx(expected))
    assert {"probe/probe_summary", "probe/probe_rope"} <= set(events.Tags()["images"])


@pytest.mark.parametrize(
    ("env", "mode"), [("offline", "offline"), ("dryrun", "offline"), ("disabled", "disabled")]
)
def test_wandb_mode_offline_in_the_environment_holds_over_the_configs_default_online(
    env, mode, tmp_path, monkeypatch
):
    import wandb

    from posenc_cli.training.tracking import WandbLogger

    asked = {}
    monkeypatch.setattr(wandb, "init", lambda **kwargs: asked.update(kwargs))
    monkeypatch.setenv("WANDB_MODE", env)
    WandbLogger(tmp_path, "run", mode="online")
    assert asked["mode"] == mode
