"""The typed config: every key of every group has a type, a default and a range check in one dataclass;
unknown keys are refused naming the nearest known one; sweeps keep Hydra's syntax and start fast."""

from __future__ import annotations

import dataclasses
from unittest import mock

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser

from posenc_cli.config.hydra_args import known_keys, parse_hydra_args, sweep_points
from posenc_cli.config.schema import DATA, OPTIONS, PosencConfig, TrainConfig
from posenc_cli.core.errors import UsageError
from posenc_cli.model.shape import ModelSize
from posenc_cli.rundir.claim import claim
from posenc_cli.training.launch import train_request
from posenc_cli.training.preflight import preflight, validate


def test_scheme_a_plus_b_and_a_scheme_option_compose_from_the_command_line():
    """Composites take options per part; scale_embeddings is an option of every additive scheme."""
    preflight(
        train_request(["scheme=sinusoidal+learned", "scheme.parts.1.max_len=512", "train.block_size=64"])
    )
    preflight(
        train_request(
            ["scheme=rope+alibi", "scheme.parts.0.layout=interleaved", "scheme.parts.1.slopes=chapter"]
        )
    )
    preflight(
        train_request(["scheme=sinusoidal+learned", "scheme.parts=[sinusoidal,{name:learned,max_len:300}]"])
    )
    preflight(train_request(["scheme=learned", "scheme.scale_embeddings=true"]))


BAD_VALUES = {  # override -> what the one line must name
    "device=cpu:abc": "device=cpu:abc",
    "device=cpu:-1": "device=cpu:-1",
    "device=cpu:1": "one CPU",
    "data=text data.path=[a,b]": "data.path",
    "data=text data.path=5": "data.path=5",
    "data.seed=-1": "data.seed",
    "data.seed=abc": "data.seed",
    "data.copy_min_distance=0": "data.copy_min_distance",
    "data.copy_max_distance=10": "data.copy_max_distance",
    "data.passkey_rate=abc": "data.passkey_rate",
    "data.copy_rate=-1": "data.copy_rate",
    "data.passkey_max_distance=4": "data.passkey_max_distance",
    "data.val_fraction=1": "data.val_fraction",
    "data.n_chars=0": "data.n_chars",
    "scheme=learned scheme.max_len=-5": "scheme.max_len",
    "scheme=learned scheme.max_len=0": "scheme.max_len",
    "scheme=t5 scheme.n_buckets=0": "scheme.n_buckets",
    "scheme=t5 scheme.n_buckets=-1": "scheme.n_buckets",
    "scheme=t5 scheme.max_distance=0": "scheme.max_distance",
    "scheme.base=0": "scheme.base",
    "scheme=sinusoidal scheme.base=-1": "scheme.base",
    "scheme=xpos scheme.gamma=-1": "scheme.gamma",
    "scheme=xpos scheme.scale_base=0": "scheme.scale_base",
    "scheme.base=nan": "scheme.base",
    # every number a scheme takes has finite bounds (scheme=fire scheme.c=1e308 trained to NaN)
    "scheme=fire scheme.c=1e308": "scheme.c must be a finite number >= 0.0001 and <= 10000",
    "scheme=fire scheme.c=1e-30": "scheme.c must be a finite number >= 0.0001",
    "scheme=fire scheme.threshold=1e308": "scheme.threshold must be a finite number >= 1 and <= 1e+12",
    "scheme.base=1e300": "scheme.base must be a finite number > 1 and <= 1e+12",
    "scheme=sinusoidal scheme.base=inf": "scheme.base must be a finite number > 1 and <= 1e+12",
    "scheme=xpos scheme.gamma=1e308": "scheme.gamma must be a finite number >= 0.001 and <= 1000",
    "scheme=xpos scheme.scale_base=1e308": "scheme.scale_base must be a finite number >= 1 and <= 1e+12",
    "scheme=xpos scheme.scale_base=2": "use scheme.scale_base >= 5",  # NaN at once: e^80 at 256 tokens
    "scheme.scaling=yarn scheme.yarn_beta=inf": "scheme.yarn_beta must be a finite number > 0 and <= 1e+06",
    "scheme.scaling=yarn scheme.scaling_len=0": "scheme.scaling_len must be an integer between 1 and",
    f"scheme=t5 scheme.max_distance={10**15}": "scheme.max_distance must be an integer between 17 and",
    f"scheme=t5 scheme.n_buckets={10**30}": "scheme.n_buckets must be an integer between 2 and",
    f"scheme=learned scheme.max_len={10**30}": "scheme.max_len must be an integer between 1 and",
    f"train.block_size={10**21}": "train.block_size must be an integer between 1 and",
    f"model.n_embd={10**21} model.n_head=1": "model.n_embd must be an integer between 1 and 1048576",
    "train.lr=inf": "train.lr",
    "train.warmup_steps=-1": "train.warmup_steps",
    "train.min_lr=1.0 train.lr=1e-5": "train.min_lr=1.0 is above train.lr=1e-05",
    "train.precision=fp8": "fp8",
    "train.threads=0": "train.threads",
    "train.max_steps=true": "train.max_steps",
    "seed=-1": "seed",
    "model.embed_std=-0.1": "model.embed_std",
}
TYPOS = {  # a misspelt key -> the known one the message suggests
    "+train.max_step=5": "max_steps",
    "train.lrate=1": "train.lr",
    "data.pth=x": "data.path",
    "+scheme.bsae=3": "base",
    "scheme.bsae=3": "scheme.base",
    "+model.n_layers=3": "n_layer",
}
TOO_BIG = [
    "model.n_embd=65536 model.n_head=1",
    "train.batch_size=1000000000",
    "data.n_chars=10000000000",
    "train.eval_batches=100000000",
]


def refusal(args: str) -> str:
    with pytest.raises(UsageError) as caught:
        preflight(train_request(args.split()))
    return str(caught.value)


@pytest.mark.parametrize("args, needle", BAD_VALUES.items(), ids=BAD_VALUES.keys())
def test_every_bad_value_of_every_group_is_one_line_naming_the_key(args, needle):
    message = refusal(args)
    assert needle in message and "\n" not in message


@pytest.mark.parametrize("args, suggestion", TYPOS.items(), ids=TYPOS.keys())
def test_unknown_keys_are_refused_with_the_nearest_known_one(args, suggestion):
    assert f"did you mean {suggestion}?" in refusal(args)


def test_unknown_top_level_key_and_a_key_of_another_corpus_are_refused():
    assert "foo is not a posenc key" in refusal("+foo=1")
    assert "data.n_chars is not a key of TextData" in refusal("data=text data.path=x data.n_chars=5")
    # every scheme takes the layer options (window, chunk, temperature); alibi its slopes too
    assert "scheme.base is not an option of scheme=none; known: chunk, sinks, temperature" in refusal(
        "scheme=none +scheme.base=2"
    )
    assert (
        "scheme.base is not an option of scheme=alibi; known: chunk, sinks, slopes, temperature"
        in refusal("scheme=alibi +scheme.base=2")
    )


@pytest.mark.parametrize("args", TOO_BIG)
def test_runs_that_cannot_fit_in_memory_are_refused_before_they_start(args, fixed_free_memory):
    assert "GiB free" in refusal(args)


def test_what_hydra_composes_by_default_is_the_dataclasses_defaults():
    """No yaml restates a default: the config `posenc train` composes with no overrides is the typed
    defaults, and the pre-flight turns it into those dataclasses."""
    from posenc_cli.config.hydra_args import composing, parse_hydra_args

    preflight(train_request([]))
    # the layer schedules need more layers than 1 or 2 (tests/test_layer_schedules.py)
    schedules = "exclude=[schedule,irope,rnope_swa,local_global]"
    preflight(
        train_request(
            [
                "-m",
                f"scheme=glob(*,{schedules})",
                "seed=range(0,3)",
                "model.n_layer=choice(1,2)",
                "--cfg",
                "job",
            ]
        )
    )
    with composing(parse_hydra_args([])) as compose_point:
        composed = compose_point([])
    assert composed["train"] == dataclasses.asdict(TrainConfig())
    assert composed["model"] == dataclasses.asdict(ModelSize())
    assert composed["data"] == dataclasses.asdict(DATA["synthetic"]())
    assert composed["scheme"]["name"] == "rope" and composed["seed"] == 0 and composed["device"] == "auto"
    typed = validate(composed)
    assert isinstance(typed, PosencConfig) and typed.train == TrainConfig() and typed.model == ModelSize()
    assert OPTIONS["model"]["tiny"] == ModelSize()  # the default model is the dataclass default
    assert "train.max_steps" in known_keys() and "scheme.n_buckets" in known_keys()


def test_sweep_syntax_expands_as_the_basic_sweeper_does_and_a_bad_point_is_found():
    from posenc_cli.config.hydra_args import composing, parse_hydra_args

    with composing(parse_hydra_args([])):
        points = sweep_points(["scheme=glob(ro*)", "seed=range(0,2)"])
    assert sorted(points) == [["scheme=rope", "seed=0"], ["scheme=rope", "seed=1"]]
    assert "model.n_layer" in refusal("-m model.n_layer=choice(1,0)")
    assert "interval()" in refusal("-m train.lr=interval(0.1,0.2)")


def test_a_10000_point_sweep_checks_a_bounded_spread_of_points_with_every_small_key_whole():
    from posenc_cli.config.hydra_args import VALUES_CHECKED_PER_KEY, composing, parse_hydra_args

    with composing(parse_hydra_args([])):
        points = sweep_points(["seed=range(0,10000)", "scheme=rope,alibi,t5"])
    seeds, schemes = {p[0] for p in points}, {p[1] for p in points}
    assert len(points) == VALUES_CHECKED_PER_KEY  # not 30,000 compositions
    assert {"seed=0", "seed=9999"} <= seeds and len(seeds) == VALUES_CHECKED_PER_KEY
    assert schemes == {"scheme=rope", "scheme=alibi", "scheme=t5"}
    preflight(train_request(["-m", "seed=range(0,10000)", "data.seed=range(0,100)", "experiment=smoke"]))
    message = refusal("-m seed=range(0,100) data.seed=range(-1,99)")  # one bad value among 10,000 points
    assert "data.seed" in message


@pytest.mark.parametrize(
    "args, needle",
    [
        (f"seed={2**64}", "seed must be an integer between 0 and"),
        (f"data.seed={2**64}", "data.seed"),
        ("data.vocab_size=0", "data.vocab_size"),  # in range even where the tokenizer ignores it
        ("experiment=smoke data.val_fraction=0.9999999", "smaller split has 0"),  # an empty training split
        ("experiment=smoke scheme=learned scheme.max_len=10", "scheme.max_len=10 is below train.block_size"),
        ("experiment=smoke scheme=sinusoidal+learned scheme.parts.1.max_len=10", "scheme.max_len=10"),
        ("scheme.scaling=linear scheme.scaling_factor=inf", "a number in [1, 10000]"),
        ("scheme.scaling=yarn scheme.scaling_factor=1e300", "a number in [1, 10000]"),  # once OverflowError
        ("experiment=smoke train.positions=randomized train.max_position=2000000000", "randomized positions"),
        ("scheme.scaling_factor=4", "scheme.scaling_factor applies only with a RoPE scaling"),
        ("scheme=learned train.positions=randomized train.max_position=100000000000", "scheme's parameters"),
        ("scheme=fire scheme.mlp_depth=100000", "scheme.mlp_depth must be an integer between 1 and 64"),
        (
            "scheme=fire scheme.mlp_width=4096 scheme.mlp_depth=64",
            "the scheme's bias over every pair",
        ),  # once OOM-killed
        ("+train.max_steps=5", "An item is already at 'train.max_steps'"),
        ("hydra.run.dir=runs/x\\${seed}y", "holds '${'"),  # once a traceback and a directory left locked
    ],
)
def test_values_that_once_failed_mid_run_or_were_ignored_are_refused_in_the_preflight(args, needle):
    """Each of these once passed the pre-flight and then failed inside training (after the run directory
    was written), trained with the value silently ignored, or named a wrong key ("An")."""
    assert needle in refusal(args)


def test_a_run_directory_named_by_hydra_s_own_interpolations_is_the_one_hydra_writes(tmp_path):
    """${hydra:...} in hydra.run.dir, a Hydra habit, was once refused ("HydraConfig was not set"): the
    pre-flight resolves it as Hydra's run does, and the directory it claims reads back through Hydra's
    grammar whatever characters the name holds (an override_dirname's = and ,)."""
    run = preflight(
        train_request([f"hydra.run.dir={tmp_path}/${{hydra:job.name}}_${{hydra:runtime.choices.scheme}}"])
    )
    assert run.directory == tmp_path / "train_rope"
    named = tmp_path / "scheme=rope,seed=3"
    args = ["-m", "scheme=rope,alibi", *claim(train_request(["-m", "scheme=rope,alibi"]), named)]
    assert parse_hydra_args(args).overrides[-1] == f'hydra.sweep.dir="{named}"' and named.is_dir()
    assert OverridesParser.create().parse_overrides([args[-1]])[0].value() == str(named)


def test_a_sweep_directory_named_by_one_job_s_values_is_refused(tmp_path):
    """A sweep's directory holds every job: the first job's override_dirname or choices would file them
    all under its name (Hydra refuses ${hydra:...} there too); hydra.sweep.subdir is for per-job names."""
    for named in ("${hydra:runtime.choices.scheme}", "${hydra.job.override_dirname}", "${hydra.job.num}"):
        message = refusal(f"-m scheme=rope,alibi hydra.sweep.dir={tmp_path}/{named}")
        assert "names one job's value" in message and "hydra.sweep.subdir" in message, message
    assert preflight(
        train_request(["-m", "scheme=rope,alibi", f"hydra.sweep.dir={tmp_path}/${{hydra.job.name}}"])
    ).directory == (tmp_path / "train")


def test_an_unusable_token_cache_directory_is_refused_before_training(tmp_path):
    text = tmp_path / "corpus.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 50, encoding="utf-8")
    (tmp_path / "afile").write_text("x")
    base = f"experiment=smoke data=text data.path={text}"
    assert "is a file" in refusal(f"{base} data.cache_dir={tmp_path / 'afile'}")
    assert "under" in refusal(f"{base} data.cache_dir={tmp_path / 'afile' / 'x'}")


def test_a_sweep_with_cfg_prints_every_job_and_with_info_describes_the_first(capsys):
    """Hydra refuses -m with --cfg or --info; posenc answers both, and the pre-flight composes one point."""
    from posenc_cli.config import hydra_args
    from posenc_cli.config.hydra_args import print_sweep

    with mock.patch.object(hydra_args, "compose", wraps=hydra_args.compose) as compose:
        preflight(train_request(["-m", "--cfg", "job", "seed=range(0,10000)"]))
    assert compose.call_count == 1  # one composition, not 10,000
    print_sweep(
        parse_hydra_args(["-m", "--cfg", "job", "experiment=smoke", "scheme=glob(ro*)", "seed=range(0,2)"])
    )
    printed = capsys.readouterr().out
    assert printed.count("# job ") == 2 and "# job 1: experiment=smoke scheme=rope seed=1" in printed
    from conftest import posenc

    code, stderr = posenc("train", "-m", "seed=0,1", "--info", "defaults")
    assert code == 0, stderr


@pytest.mark.slow  # trains
@pytest.mark.tiny_run  # make test keeps it: the claim that a job is composed and validated once
@pytest.mark.parametrize("sweep", [[], ["-m", "seed=0,1"]], ids=["run", "sweep"])
def test_a_plain_train_composes_and_validates_each_job_once_and_trains_the_config_it_validated(
    tmp_path, monkeypatch, sweep
):
    """Every Hydra composition (the compose API's and Hydra's main alike go through its config loader)
    and every validation is counted: a run is composed once and validated once, a sweep through the basic
    launcher once per job plus its own composition (its launcher, directory and multirun.yaml), and each
    job trains the very config the pre-flight validated."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    from conftest import invoke
    from posenc_cli.training import job
    from posenc_cli.training import preflight as checks

    composed, validated, trained = [], [], []
    load, check, train = ConfigLoaderImpl.load_configuration, checks.validate, job.train_run
    monkeypatch.setattr(
        ConfigLoaderImpl,
        "load_configuration",
        lambda self, *a, **k: composed.append(k) or load(self, *a, **k),
    )
    for module in (checks, job):  # the pre-flight's, and a job's under Hydra's main
        monkeypatch.setattr(module, "validate", lambda cfg: validated.append(check(cfg)) or validated[-1])
    monkeypatch.setattr(job, "train_run", lambda cfg, *a, **k: trained.append(cfg) or train(cfg, *a, **k))
    monkeypatch.chdir(tmp_path)
    tiny = ["experiment=smoke", "device=cpu", "train.max_steps=2", "train.eval_interval=2", "train.threads=1"]
    result = invoke("train", *sweep, *tiny)
    assert result.code == 0, result.stderr
    jobs = 2 if sweep else 1
    assert len(validated) == len(trained) == jobs
    assert all(ran is checked for ran, checked in zip(trained, validated))  # nothing validated is discarded
    assert len(composed) == jobs + (1 if sweep else 0)
    assert [cfg.seed for cfg in trained] == ([0, 1] if sweep else [0])
    pattern = "outputs/sweeps/*/*/.hydra/config.yaml" if sweep else "outputs/runs/*/.hydra/config.yaml"
    assert len(list(tmp_path.glob(pattern))) == jobs  # Hydra's record of each job, written by run_job


def test_no_experiment_preset_trips_its_own_warmup_warning():
    """A preset's warm-up fits in its steps: `posenc train` warns when train.warmup_steps is longer than
    train.max_steps (training/run_summary.py), and a preset must not trip its own warning."""
    import yaml

    from conftest import ROOT

    defaults = TrainConfig()
    presets = sorted((ROOT / "configs" / "experiment").glob("*.yaml"))
    assert {p.stem for p in presets} >= {"smoke", "demo", "probe", "extend"}
    for preset in presets:
        train = yaml.safe_load(preset.read_text()).get("train") or {}
        warmup = train.get("warmup_steps", defaults.warmup_steps)
        assert warmup <= train.get("max_steps", defaults.max_steps), preset.name
