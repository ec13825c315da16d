"""The command line as its ecosystem has it: --version, -h everywhere, choices checked by the parser,
and shell completion for commands, options and train's Hydra overrides."""

from __future__ import annotations

import sys

import pytest

from conftest import assert_one_line_error, run_cli
from posenc_cli import __version__
from posenc_cli.cli import main
from posenc_cli.completion import hydra_completions

COMMANDS = ("train", "eval", "probe", "sample", "export", "schemes", "inspect", "bench")


def test_version(tmp_path):
    result = run_cli("--version", cwd=tmp_path)
    assert result.returncode == 0 and result.stdout.startswith(f"posenc {__version__}")


def posenc_in_process(capsys, monkeypatch, *args: str) -> tuple[int, str]:
    """`posenc ARGS` in this process (help needs no torch): exit code and stdout."""
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setattr(sys, "argv", ["posenc", *args])
    with pytest.raises(SystemExit) as exited:
        main()
    return exited.value.code, capsys.readouterr().out


def test_every_command_takes_h_and_lists_fixed_choices_and_bare_flags(capsys, monkeypatch):
    for command in COMMANDS:
        code, out = posenc_in_process(capsys, monkeypatch, command, "-h")
        assert code == 0 and "Usage: posenc " + command in out, command
    eval_help = posenc_in_process(capsys, monkeypatch, "eval", "-h")[1]
    for listed in (
        "[nonoverlap|sliding]",
        "[en|zh]",
        "[auto|cpu|cuda|mps]",
        "[none|linear|ntk|dynamic|yarn|llama3],...",
    ):
        assert listed in eval_help
    assert "<bool>" not in posenc_in_process(capsys, monkeypatch, "bench", "-h")[1]


def test_train_help_is_single_spaced_and_names_every_launcher(capsys, monkeypatch):
    text = posenc_in_process(capsys, monkeypatch, "train", "--help")[1]
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if "Examples:" in line)
    assert all(line.strip() for line in lines[start : start + 6]), (
        "example lines are separated by blank lines"
    )
    for launcher in ("basic", "joblib", "submitit_local", "submitit_slurm"):
        assert any(line.strip().startswith(launcher) and "posenc train -m" in line for line in lines), (
            launcher
        )
    assert "logger=[csv,tensorboard]" in text


@pytest.mark.parametrize(
    "args, needles",
    [
        (["eval", "--mode", "slidng"], ["--mode", "'slidng'", "nonoverlap, sliding"]),
        (["eval", "--rope-scaling", "none,yran"], ["--rope-scaling", "'yran'", "yarn"]),
        (["probe", "--lang", "fr"], ["--lang", "'fr'", "en, zh"]),
        (["eval", "--device", "gpu"], ["--device", "'gpu'", "cuda"]),
        (["sample", "RUN", "--prompt", "x", "--tokens", "many"], ["--tokens", "integer"]),
    ],
)
def test_typos_in_options_are_caught_by_the_parser_in_one_line(tmp_path, args, needles):
    assert_one_line_error(run_cli(*args, cwd=tmp_path), *needles)
    assert not any(tmp_path.iterdir())


def test_completion_script_and_hydra_completion_of_overrides(tmp_path):
    script = run_cli("train", "-sc", "install=bash", cwd=tmp_path)
    assert script.returncode == 0
    assert "_POSENC_COMPLETE=complete_bash" in script.stdout and script.stdout.rstrip().endswith("posenc")
    # what the installed script asks when the user types `posenc train scheme=al<TAB>` (bash splits at '=')
    env = {"_POSENC_COMPLETE": "complete_bash", "COMP_WORDS": "posenc train scheme = al", "COMP_CWORD": "4"}
    assert run_cli(cwd=tmp_path, env=env).stdout.split() == ["alibi"]
    env = {"_POSENC_COMPLETE": "complete_bash", "COMP_WORDS": "posenc ev", "COMP_CWORD": "1"}
    assert run_cli(cwd=tmp_path, env=env).stdout.split() == ["eval"]
    assert_one_line_error(
        run_cli("train", "-sc", "install=tcsh", cwd=tmp_path), "install=tcsh", "bash, zsh, fish"
    )


def test_hydra_completion_of_groups_options_and_keys():
    assert {"scheme=", "model.", "logger=", "train."} <= set(hydra_completions([], ""))
    assert hydra_completions(["scheme=alibi"], "model.n_l") == ["model.n_layer="]
    assert hydra_completions(["logger"], "") == ["=csv", "=tensorboard", "=wandb"]  # bash: `logger =<TAB>`
    assert hydra_completions(["scheme", "="], "ro") == ["rope"]
    assert hydra_completions(["--cfg"], "") == ["job", "hydra", "all"]
