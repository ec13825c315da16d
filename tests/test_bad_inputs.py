"""Bad input: one line naming the value and what is allowed, exit code 2, no traceback, nothing written.

Most cases call the CLI's own entry point (cli.main, what the `posenc` script runs) in this process,
which is faithful for errors: they are raised and printed before any process-specific work starts.
A few run as real subprocesses to pin the exit code and stderr of the installed command.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import SMOKE, assert_one_line_error, assert_refused, invoke, posenc, run_cli
from posenc_cli.model.positional import SCHEMES
from posenc_cli.rundir.layout import CHECKPOINT
from posenc_cli.rundir.record import load_checkpoint, record_sha256


def files_under(path: Path) -> set[Path]:
    return set(path.rglob("*"))


@pytest.fixture
def workdir(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "empty.txt").write_text("  \n")
    (tmp_path / "binary.txt").write_bytes(b"abc\x00def")
    (tmp_path / "latin1.txt").write_bytes("café au lait".encode("latin-1"))
    (tmp_path / "notarun").mkdir()
    return tmp_path


# ---- Moved here from the files of each command (train, cli, eval, inspect, probe, sample, bench, data,
# composites): the same refusals, now in this process.


@pytest.mark.parametrize(
    "args, needles",
    [
        (["scheme=fourier"], ["scheme/fourier", "alibi", "rope"]),
        (["scheme=rope", "model.n_embd=12", "model.n_head=4"], ["even head_dim", "12/4"]),
        (["model.n_embd=30", "model.n_head=4"], ["model.n_embd=30", "not divisible"]),
        (["data=text", "data.path=no/such/file.txt"], ["data.path=no/such/file.txt", "does not exist"]),
        (["train.max_steps=0"], ["train.max_steps", "positive integer"]),
        (["model.no_such_key=1"], ["no_such_key"]),
        (["train.block_size=300000"], ["train.block_size=300000", "smaller split"]),
        (["-m", "scheme=rope,alibi", "model.n_embd=12", "model.n_head=4", *SMOKE], ["even head_dim"]),
        (["data.tokenizer=word"], ["data.tokenizer=word", "char, byte, bpe"]),
        (["hydra.run.dir=${oops}"], ["Interpolation key 'oops' not found", "hydra.run.dir"]),
        (["train.lr=${oops}"], ["Interpolation key 'oops' not found", "train.lr"]),
        (["scheme=fire", "scheme.per_layer=yes"], ["scheme.per_layer='yes'", "true or false"]),
        (
            ["scheme=rope+fire", "scheme.parts=[rope,{name:fire,per_layer:true}]"],
            ["fire+per-layer keeps its own instance per layer", "train it alone"],
        ),
        (["-m", "seed=0,1", "hydra.sweep.dir=${oops}"], ["Interpolation key 'oops'", "hydra.sweep.dir"]),
        (
            ["-m", "seed=0,1", "hydra.sweep.dir=${oops}", "--cfg", "all", "--resolve"],
            ["Interpolation key 'oops'"],
        ),
        (["scheme=rope+bogus"], ["Could not find 'scheme/rope+bogus'"]),
        (["scheme=sinusoidal+learned", "scheme.parts=[rope,alibi]"], ["use scheme=rope+alibi"]),
        (["scheme=sinusoidal+learned", "scheme.parts=[sinusoidal,{max_len:3}]"], ["has no name"]),
        (["scheme=sinusoidal", "scheme.scale_embeddings=yes"], ["scale_embeddings='yes' is not a boolean"]),
        (
            ["scheme=rope", "+scheme.scale_embeddings=true"],
            ["scale_embeddings is not an option of scheme=rope"],
        ),
    ],
)
def test_a_bad_override_or_sweep_point_is_one_line_and_no_run_starts(workdir, args, needles):
    before = files_under(workdir)
    assert_refused(*posenc("train", *args), *needles)
    assert files_under(workdir) == before


@pytest.mark.parametrize(
    "args, needles",
    [
        (["eval", "--mode", "slidng"], ["--mode", "'slidng'", "nonoverlap, sliding"]),
        (["eval", "--rope-scaling", "none,yran"], ["--rope-scaling", "'yran'", "yarn"]),
        (["eval", "--rope-scaling", "none,longrope+ntk"], ["'ntk' is a second frequency scaling"]),
        (["eval", "--rope-scaling", "yarn", "--rope-factor", "0"], ["--rope-factor"]),
        (["probe", "--lang", "fr"], ["--lang", "'fr'", "en, zh"]),
        (["eval", "--device", "gpu"], ["--device", "'gpu'", "cuda"]),
        (["sample", "RUN", "--prompt", "x", "--tokens", "many"], ["--tokens", "integer"]),
        (["train", "-sc", "install=tcsh"], ["install=tcsh", "bash, zsh, fish"]),
        (["inspect", "bogus"], ["choose one of: none, sinusoidal, learned, rope, alibi"]),
        (["bench", "--quick", "--scheme", "nope"], ["--scheme nope", "rope"]),
        (["bench", "--quick", "--peer-steps", "0"], ["--peer-steps must be a positive integer, got 0"]),
        (["bench", "--quick", "--peer-steps", "-5"], ["--peer-steps must be a positive integer, got -5"]),
    ],
)
def test_a_typo_in_an_option_is_one_line(workdir, args, needles):
    before = files_under(workdir)
    assert_refused(*posenc(*args), *needles)
    assert files_under(workdir) == before


def test_a_bad_run_length_or_corpus_for_a_trained_run_is_one_line(smoke_sweep, workdir):
    """eval, probe, inspect and sample on the runs of the shared tiny sweep."""
    rope = str(smoke_sweep / "3_rope_seed0")
    (workdir / "empty_run").mkdir()
    (workdir / "other.txt").write_text("ABC " * 600, encoding="utf-8")
    cases = [
        (["eval", rope, "--lengths", "512,abc"], ["'abc' is not a positive integer"]),
        (["eval", rope, "--lengths", "0"], ["'0' is not a positive integer"]),
        (["eval", rope, "--lengths", "100000000"], ["lengths up to"]),
        (["eval", rope, "--mode", "diagonal"], ["'diagonal' is not one of nonoverlap, sliding"]),
        (["eval", "empty_run"], ["is not a run"]),
        (["eval", rope, "--data", "other.txt", "--lengths", "128"], ["outside the run's vocabulary"]),
        (
            ["probe", str(smoke_sweep), "--lengths", "128"],
            ["cannot be probed", "'0123456789?", "data.passkey_rate"],
        ),
        (["inspect", "alibi", "--run", rope], ["trained with scheme rope"]),
        (["sample", "no/such/run", "--prompt", "the"], ["no/such/run", "not a directory"]),
        (["sample", rope, "--prompt", "the Q"], ["--prompt", "outside the run's vocabulary", "'Q'"]),
    ]
    before = files_under(workdir)
    for args, needles in cases:
        result = invoke(*args, "--out", "x") if args[0] in ("eval", "probe") else invoke(*args)
        assert_refused(result.code, result.stderr, *needles)
        assert result.stdout == "", args
    assert files_under(workdir) == before


TRAIN_CASES = {
    "unknown scheme lists the options": (
        ["scheme=fourier"],
        ["scheme/fourier", ", ".join(sorted(SCHEMES))],  # every registered scheme has its yaml
    ),
    "unknown group option": (["model=huge"], ["model/huge", "medium, small, tiny"]),
    "unknown override key": (["train.lrate=1e-3"], ["train.lrate"]),
    "zero size": (["model.n_layer=0"], ["model.n_layer", "positive integer", "got 0"]),
    "negative size": (["train.batch_size=-4"], ["train.batch_size", "got -4"]),
    "n_embd not divisible by n_head": (["model.n_head=3"], ["n_embd=128", "n_head=3"]),
    "odd head_dim with rope": (
        ["scheme=rope", "model.n_embd=6", "model.n_head=2"],
        ["rope", "even head_dim"],
    ),
    "block size past the corpus split": (
        ["train.block_size=300000"],
        ["train.block_size=300000", "<= 199999"],
    ),
    "missing text file": (
        ["data=text", "data.path=nowhere.txt"],
        ["data.path=nowhere.txt", "does not exist"],
    ),
    "empty text file": (["data=text", "data.path=empty.txt"], ["empty.txt", "empty"]),
    "binary text file": (["data=text", "data.path=binary.txt"], ["binary.txt", "binary"]),
    "non-UTF-8 text file": (["data=text", "data.path=latin1.txt"], ["latin1.txt", "UTF-8"]),
    "text corpus without a path": (["data=text"], ["data.path=FILE"]),
    "non-finite learning rate": (["train.lr=inf"], ["train.lr", "inf"]),
    "non-positive embedding init": (["model.embed_std=0"], ["model.embed_std", "0"]),
    "seed of the wrong type": (["seed=abc"], ["seed", "'abc'"]),
    "unknown device": (["device=tpu"], ["device=tpu", "auto, cpu, cuda, mps"]),
    "unknown launcher": (["-m", "hydra/launcher=slurmish"], ["hydra/launcher/slurmish", "joblib"]),
    "bad point inside a sweep": (["-m", "model.n_layer=1,0"], ["model.n_layer", "got 0"]),
    "resume from a directory that is not a run": (
        ["train.resume=notarun"],
        ["train.resume=notarun", "not a run"],
    ),
    "unknown flag": (["--epochs", "3"], ["--epochs"]),
    "rotary_fraction of 0": (
        ["scheme=rope", "scheme.rotary_fraction=0"],
        ["scheme.rotary_fraction", "> 0", "got 0"],
    ),
    "rotary_fraction past 1": (
        ["scheme=rope", "scheme.rotary_fraction=1.5"],
        ["scheme.rotary_fraction", "<= 1", "got 1.5"],
    ),
    "rotary_fraction not a number": (
        ["scheme=rope", "scheme.rotary_fraction=x"],
        ["scheme.rotary_fraction", "'x'"],
    ),
    "rotary_fraction leaving an odd number of dimensions": (
        ["scheme=rope", "model.n_embd=128", "model.n_head=4", "scheme.rotary_fraction=0.3"],
        ["scheme.rotary_fraction=0.3", "= 9 of head_dim 32", "multiple of 0.0625"],
    ),
    "keep_fraction below 0": (
        ["scheme=p_rope", "scheme.keep_fraction=-0.1"],
        ["scheme.keep_fraction", "got -0.1"],
    ),
    "keep_fraction past 1": (
        ["scheme=p_rope", "scheme.keep_fraction=2"],
        ["scheme.keep_fraction", "<= 1", "got 2"],
    ),
}


@pytest.mark.parametrize("args, needles", TRAIN_CASES.values(), ids=TRAIN_CASES.keys())
def test_train_refuses_bad_input_in_one_line_and_writes_nothing(workdir, args, needles):
    before = files_under(workdir)
    assert_refused(*posenc("train", *args), *needles)
    assert files_under(workdir) == before


@pytest.fixture
def broken_runs(smoke_sweep, workdir) -> dict[str, Path]:
    """Copies of a finished tiny run, each broken one way."""
    good = next(p for p in smoke_sweep.iterdir() if p.name.endswith("rope_seed0"))
    runs = {}
    for name in ("truncated", "garbage", "stale"):
        runs[name] = workdir / name
        shutil.copytree(good, runs[name])
    data = (good / CHECKPOINT).read_bytes()
    (runs["truncated"] / CHECKPOINT).write_bytes(data[: len(data) // 2])
    (runs["garbage"] / CHECKPOINT).write_bytes(b"not a zip file" * 100)
    payload = torch.load(good / CHECKPOINT, weights_only=True)
    payload["record"]["model_config"]["rotary_fraction"] = 0.5  # a field this version's model does not know
    torch.save(payload, runs["stale"] / CHECKPOINT)
    summary = json.loads((runs["stale"] / "summary.json").read_text())  # as the version that wrote it saw it
    summary["record_sha256"] = record_sha256(load_checkpoint(runs["stale"] / CHECKPOINT).record)
    (runs["stale"] / "summary.json").write_text(json.dumps(summary))
    runs["good"] = good
    return runs


def test_eval_refuses_bad_runs_and_lengths_in_one_line_and_writes_nothing(broken_runs, workdir):
    before = files_under(workdir)
    cases = [
        (["notarun"], ["notarun", "not a run"]),
        (["missing_dir"], ["missing_dir", "does not exist"]),
        ([str(broken_runs["truncated"])], ["truncated", "truncated or corrupted"]),
        ([str(broken_runs["garbage"])], ["garbage", "truncated or corrupted"]),
        ([str(broken_runs["stale"])], ["stale", "no longer matches"]),
    ]
    for runs, needles in cases:
        assert_refused(*posenc("eval", *runs, "--lengths", "64"), *needles)
    for lengths in ("0", "-64", "64,abc", "", "1e3", "64,,128"):
        assert_refused(*posenc("eval", str(broken_runs["good"]), f"--lengths={lengths}"), "--lengths")
    assert files_under(workdir) == before


def test_resuming_with_another_model_is_refused(broken_runs, workdir):
    assert_refused(
        *posenc("train", f"train.resume={broken_runs['good']}", "model.n_layer=2"), "its model.n_layer is"
    )


@pytest.mark.slow  # trains runs or starts processes
@pytest.mark.tiny_run  # make test keeps it: one of its few tiny CLI runs
def test_real_subprocess_errors(workdir):
    """The installed entry point: exit code 2, one stderr line, nothing on stdout, no outputs/."""
    for args in (
        ["train", "scheme=fourier"],
        ["train", *SMOKE, "model.n_head=5"],
        ["eval", "--lengths", "0,x"],
    ):
        result = run_cli(*args, cwd=workdir)
        assert_one_line_error(result)
        assert result.stdout == ""
    assert not (workdir / "outputs").exists()


LENGTH_ALPHABET = st.sampled_from(list("0123456789,-+. xe_") + ["", "١", "½", "\t"])
OVERRIDE_ALPHABET = st.sampled_from(
    list("abcdefghijklmnopqrstuvwxyz_.=,/+~$[]{}():'\"0123456789- ")
    + ["train.", "model.", "scheme=", "n_head="]
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(LENGTH_ALPHABET, min_size=0, max_size=12).map("".join))
def test_any_lengths_string_is_refused_in_one_line_or_reaches_run_selection(workdir, lengths):
    """Malformed --lengths: one line naming --lengths. Well-formed ones get as far as finding runs
    (there are none here), which is also one line. Never a traceback, never a file."""
    code, stderr = posenc("eval", f"--lengths={lengths}")
    assert_refused(code, stderr)
    assert "--lengths" in stderr or "no runs found" in stderr
    assert not (workdir / "outputs").exists()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(OVERRIDE_ALPHABET, min_size=1, max_size=10)
    .map("".join)
    .filter(lambda s: not s.lstrip().startswith("-"))
)
def test_any_malformed_override_is_refused_in_one_line(workdir, override):
    """`--cfg job` makes a valid override print its config instead of training; anything else is one line."""
    code, stderr = posenc("train", "--cfg", "job", *SMOKE, override)
    if code != 0:
        assert_refused(code, stderr)
    assert not (workdir / "outputs").exists()


def test_numeric_options_and_out_are_checked_before_any_work(broken_runs, workdir):
    good = str(broken_runs["good"])
    (workdir / "afile").write_text("x")
    cases = [
        (["eval", good, "--rope-scaling", "linear", "--rope-factor", "inf"], "--rope-factor"),
        (["eval", good, "--mode", "sliding", "--stride", "0"], "--stride"),
        (["eval", good, "--stride", "8"], "--mode sliding"),
        (["eval", good, "--out", ""], "--out"),
        (["eval", good, "--out", "afile"], "is a file"),
        (["eval", good, "--out", "afile/sub"], "under"),
        (["probe", good, "--seed=-1"], "--seed"),
        (["probe", good, "--out", "afile"], "is a file"),
        (["inspect", "rope", "--dim", "0"], "--dim"),
        (["inspect", "rope", "--heads", "0"], "--heads"),
        (["inspect", "rope", "--length", "0"], "--length"),
        (["inspect", "rope", "--length", "1000000"], "--length"),
        (["inspect", "sinusoidal", "--dim", "1", "--heads", "1"], "--dim"),
        (["inspect", "rope", "--out", "afile/x"], "under"),
        (["bench", "--quick", "--out", "afile"], "is a file"),
    ]
    before = files_under(workdir)
    for args, needle in cases:
        assert_refused(*posenc(*args), needle)
    assert files_under(workdir) == before


def test_every_output_path_and_sampling_option_is_checked_before_any_work(
    broken_runs, workdir, fixed_free_memory
):
    """--out of every command that writes (eval, probe, inspect, bench, export, sample): empty, a file
    where a directory goes or the reverse, under a file, or in a place that cannot be written (tried,
    not read from permission bits, which root ignores); and options that only mean something with
    another (--rope-factor without --rope-scaling, --layer without --run), seeds and temperatures."""

    good = str(broken_runs["good"])
    (workdir / "afile").write_text("x")
    sample = ["sample", good, "--prompt", "the ", "--tokens", "3"]
    cases = [
        (["export", good, "--out", ""], "--out is empty"),
        (["export", good, "--out", "afile/x"], "under"),
        ([*sample, "--out", ""], "--out is empty"),
        ([*sample, "--out", "notarun"], "is a directory"),
        ([*sample, "--out", "newdir/"], "is a directory"),
        ([*sample, "--out", "afile/x"], "under"),
        ([*sample, "--temperature", "inf"], "--temperature"),
        ([*sample, "--seed", "-1"], "--seed"),
        ([*sample, "--seed", str(2**64)], "--seed"),
        (["sample", good, "--prompt", "the ", "--tokens", str(10**11)], "1000000"),
        (["probe", good, "--seed", str(2**64)], "--seed"),
        (["eval", good, "--rope-factor", "2"], "--rope-scaling"),
        (["inspect", "rope", "--layer", "1"], "--run"),
    ]
    if Path("/proc").is_dir():  # a directory nobody can create files in, root included
        for command in (["eval", good], ["probe", good], ["inspect", "rope"], ["bench", "--quick"]):
            cases.append(([*command, "--out", "/proc/posenc/x"], "not writable"))
        cases += [(["export", good, "--out", "/proc/x"], "not writable")]
        cases += [([*sample, "--out", "/proc/x"], "not writable")]
    before = files_under(workdir)
    for args, needle in cases:
        assert_refused(*posenc(*args), needle)
    assert files_under(workdir) == before
    assert (workdir / "afile").read_text() == "x"


def test_values_that_once_raised_a_traceback_are_one_line_before_any_work(workdir):
    """Superscript digits (str.isdigit accepts them, int refuses them), a RoPE factor whose s^(d/(d-2))
    overflows, a probe with no bound on its trials, an --out through a symbolic link that leads nowhere
    (a loop, a dangling link, a path under either), a sample file inside a run directory: each is
    refused in one line before any run is read (none of these runs exists), and nothing is written."""
    (workdir / "loop").symlink_to("loop")
    (workdir / "dangling").symlink_to("nowhere")
    (workdir / "fake_run").mkdir()
    (workdir / "fake_run" / "summary.json").write_text("{}")
    cases = [
        (["eval", "r", "--lengths", "²"], "'²' is not a positive integer"),
        (["eval", "r", "--lengths", "256,¹"], "'¹' is not a positive integer"),
        (["probe", "r", "--lengths", "2⁵⁶"], "is not a positive integer"),
        (["eval", "r", "--rope-scaling", "ntk", "--rope-factor", "1e300"], "<= 10000"),
        (["probe", "r", "--trials", "100000000"], "--trials must be an integer between 1 and 10000"),
        (["sample", "r", "--prompt", "a", "--out", "fake_run/x.txt"], "inside the run directory"),
        (["eval", "r", "--out", "fake_run/sub"], "inside the run in"),
    ]
    for command in (["eval", "r"], ["probe", "r"], ["export", "r"], ["sample", "r", "--prompt", "a"]):
        for out in ("loop", "loop/x", "dangling", "dangling/x/y"):
            cases.append(([*command, "--out", out], "leads nowhere"))
    before = files_under(workdir)
    for args, needle in cases:
        assert_refused(*posenc(*args), needle)
    assert files_under(workdir) == before


LONG_NAME = "n" * 300  # past NAME_MAX (255 bytes on the usual file systems)

# eval's and probe's refusals before any run is read (run `r` does not exist), each also raised by the
# Python API with the same line (tests/test_api.py runs this table through posenc.evaluate and posenc.probe)
EVAL_PROBE_REFUSALS = {
    "a fixed name mistyped": (["eval", "r", "--mode", "slidng"], ["--mode 'slidng' is not one of"]),
    "a dtype eval does not have": (["eval", "r", "--dtype", "fp16"], ["--dtype 'fp16'", "fp32, bf16"]),
    "a device": (["probe", "r", "--device", "gpu"], ["--device 'gpu'"]),
    "a language": (["probe", "r", "--lang", "fr"], ["--lang 'fr'", "en, zh"]),
    "a needle task": (["probe", "r", "--task", "needle"], ["--task 'needle'"]),
    "a scaling in a comma list": (["eval", "r", "--rope-scaling", "none,yran"], ["'yran'"]),
    "an overflow in a comma list": (["eval", "r", "--learned-overflow", "dash,cut"], ["'cut'"]),
    "hf: options without an hf: model": (
        ["eval", "r", "--hf-context", "32"],
        ["--hf-context 32 is not read"],
    ),
    "a dtype without an hf: model": (["eval", "r", "--dtype", "bf16"], ["--dtype bf16 is not read"]),
    "a placement without an hf: model": (["probe", "r", "--device-map", "auto"], ["--device-map auto"]),
    "a text field without a dataset": (
        ["eval", "r", "--text-field", "body"],
        ["--text-field body is not read"],
    ),
    "a stride without sliding windows": (["eval", "r", "--stride", "8"], ["--mode sliding"]),
    "a factor without a scaling": (["eval", "r", "--rope-factor", "2"], ["--rope-scaling"]),
    "a part of a method mistyped": (["eval", "r", "--rope-scaling", "yarn+selfextend"], ["'selfextend'"]),
    "two scalings joined": (
        ["probe", "r", "--rope-scaling", "none,yarn+ntk"],
        ["'ntk'", "a second frequency scaling"],
    ),
    "two remaps joined": (["eval", "r", "--rope-scaling", "dca+rerope"], ["'rerope'", "a second remap"]),
    "a factor with no frequency scaling": (
        ["eval", "r", "--rope-scaling", "self_extend", "--rope-factor", "4"],
        ["--rope-factor 4", "frequency scaling"],
    ),
    "an extension's option without its method": (
        ["eval", "r", "--dca-chunk", "64"],
        ["--dca-chunk applies only with --rope-scaling dca"],
    ),
    "a leak without leaky_rerope": (
        ["probe", "r", "--rope-scaling", "rerope", "--rerope-leak", "4"],
        ["--rerope-leak", "leaky_rerope"],
    ),
    "a group below one": (
        ["eval", "r", "--rope-scaling", "self_extend", "--self-extend-group", "0"],
        ["--self-extend-group"],
    ),
    "a leak of one": (
        ["probe", "r", "--rope-scaling", "leaky_rerope", "--rerope-leak", "1"],
        ["--rerope-leak"],
    ),
    "a window of none": (
        ["eval", "r", "--rope-scaling", "rerope", "--rerope-window", "0"],
        ["--rerope-window"],
    ),
    "no tokens": (["eval", "r", "--max-tokens", "0"], ["--max-tokens"]),
    "documents without a dataset": (["eval", "r", "--documents"], ["--documents needs --data"]),
    "a tolerance below zero": (["eval", "r", "--ppl-tolerance", "-1"], ["--ppl-tolerance"]),
    "a threshold past one": (["probe", "r", "--retrieval-threshold", "2"], ["--retrieval-threshold"]),
    "no trials": (["probe", "r", "--trials", "0"], ["--trials"]),
    "a depth past the end": (["probe", "r", "--depths", "0.5,2"], ["--depths"]),
    "distractors of another task": (["probe", "r", "--distractors", "2"], ["--task multikey"]),
    "an hf: model without text": (["eval", "hf:gpt2"], ["needs --data"]),
    "an empty --out": (["eval", "r", "--out", ""], ["--out is empty"]),
    "an --out name too long": (["probe", "r", "--out", LONG_NAME], ["is 300 bytes", "at most"]),
}


@pytest.mark.parametrize("args, needles", EVAL_PROBE_REFUSALS.values(), ids=EVAL_PROBE_REFUSALS.keys())
def test_an_eval_or_probe_option_is_refused_in_one_line_before_any_run_is_read(workdir, args, needles):
    before = files_under(workdir)
    assert_refused(*posenc(*args), *needles)
    assert files_under(workdir) == before


def test_an_out_name_or_path_too_long_for_the_file_system_is_one_line_for_every_writer(workdir):
    """A name past NAME_MAX, or a path past PATH_MAX, was an OSError traceback from the first stat."""
    deep = "/".join(["d" * 200] * 25)  # 5,000 bytes: past PATH_MAX (4,096)
    for command in (["eval", "r"], ["probe", "r"], ["export", "r"], ["report", "r"], ["bench", "--quick"]):
        assert_refused(*posenc(*command, "--out", f"x/{LONG_NAME}"), f"the name {'n' * 24}", "is 300 bytes")
        assert_refused(*posenc(*command, "--out", deep), "the path is", "bytes long")
    assert_refused(*posenc("sample", "r", "--prompt", "a", "--out", f"{LONG_NAME}.txt"), "is 304 bytes")
    assert files_under(workdir) == {workdir / p for p in ("empty.txt", "binary.txt", "latin1.txt", "notarun")}


def test_an_output_of_the_longest_legal_name_is_written_and_posencs_temporary_names_are_refused(
    workdir, tmp_path_factory
):
    """A 255-byte name once failed after the work (posenc's temporary beside it added 25 bytes past
    NAME_MAX); and an output named as posenc's temporaries (.posenc-tmp-*) would be removed, unsaid, by
    the next command that cleans that directory."""
    from posenc_cli.core.atomic import TMP_PREFIX, write_text

    longest = tmp_path_factory.mktemp("own") / ("é" * 126 + "abc")  # 255 bytes in UTF-8
    write_text(longest, "kept\n")
    assert longest.read_text() == "kept\n" and list(longest.parent.iterdir()) == [longest]
    for command in (["eval", "r"], ["probe", "r"], ["export", "r"]):
        assert_refused(*posenc(*command, "--out", f"o/{TMP_PREFIX}x"), "are posenc's temporaries")
    assert_refused(*posenc("sample", "r", "--prompt", "a", "--out", f"{TMP_PREFIX}x.txt"), "temporaries")
    assert files_under(workdir) == {workdir / p for p in ("empty.txt", "binary.txt", "latin1.txt", "notarun")}


# CoPE's and FoX's options (test_content_schemes.py has their maths)
CONTENT_SCHEME_REFUSALS = {
    "a CoPE table smaller than the training length": (
        ["scheme=cope", "scheme.npos=64", "train.block_size=128"],
        ["scheme.npos=64", "train.block_size=128", "scheme.npos >= 129"],
    ),
    "a CoPE table of no rows": (["scheme=cope", "scheme.npos=0"], ["scheme.npos", "got 0"]),
    "a CoPE table of x rows": (["scheme=cope", "scheme.npos=x"], ["scheme.npos", "got 'x'"]),
    "an option FoX does not take": (
        ["scheme=fox", "+scheme.npos=8"],
        ["npos is not an option of scheme=fox"],
    ),
    "FoX's gates per layer in a composite": (["scheme=fox+rope"], ["fox keeps its own instance per layer"]),
}


@pytest.mark.parametrize(
    "args, needles", CONTENT_SCHEME_REFUSALS.values(), ids=CONTENT_SCHEME_REFUSALS.keys()
)
def test_a_bad_cope_or_fox_option_is_one_line_and_no_run_starts(workdir, args, needles):
    before = files_under(workdir)
    assert_refused(*posenc("train", *args), *needles)
    assert files_under(workdir) == before
