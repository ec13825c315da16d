"""The command line as its ecosystem has it: --version, -h everywhere, choices checked by the parser,
and shell completion for commands, options and train's Hydra overrides."""

from __future__ import annotations

import os
import subprocess
import sys
from unittest import mock

import pytest

from conftest import BEYOND_CHAPTERS, ROOT, invoke, run_cli
from posenc_cli import __version__
from posenc_cli.cli import schemes_command
from posenc_cli.cli.completion import hydra_completions
from posenc_cli.core.option_groups import ROPE_METHOD_PARTS

COMMANDS = ("train", "eval", "probe", "sample", "export", "schemes", "inspect", "bench")


def test_version():
    result = invoke("--version")
    assert result.code == 0 and result.stdout.startswith(f"posenc {__version__}")


def posenc_in_process(*args: str) -> tuple[int, str]:
    """`posenc ARGS` in this process: exit code and stdout."""
    result = invoke(*args)
    return result.code, result.stdout


def test_every_command_takes_h_and_lists_fixed_choices_and_bare_flags():
    for command in COMMANDS:
        code, out = posenc_in_process(command, "-h")
        assert code == 0 and "Usage: posenc " + command in out, command
    eval_help = posenc_in_process("eval", "-h")[1]
    for listed in (
        "[nonoverlap|sliding]",
        "[en|zh]",
        "[auto|cpu|cuda|mps]",
        "[dash|window],...",
    ):
        assert listed in eval_help
    for method in ROPE_METHOD_PARTS:  # --rope-scaling's names, joined by + (checked by one parser)
        assert method in eval_help and method in posenc_in_process("probe", "-h")[1]
    inspect_help = posenc_in_process("inspect", "-h")[1]
    assert "[half|interleaved]" in inspect_help and "[paper|chapter]" in inspect_help
    assert "<bool>" not in posenc_in_process("bench", "-h")[1]


def test_the_command_list_and_other_commands_help_do_not_import_torch():
    # torch's import is seconds on a small CPU; only train's help (its scheme and group lists) needs it
    code = (
        "import sys; from posenc_cli.cli.main import command; group = command(); "
        "[group.get_command(None, name).get_short_help_str() for name in group.list_commands(None)]; "
        "print('torch' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


def test_train_help_is_single_spaced_and_names_every_launcher():
    text = posenc_in_process("train", "--help")[1]
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


def test_completion_script_and_hydra_completion_of_overrides():
    script = invoke("train", "-sc", "install=bash")
    assert script.code == 0
    assert "_POSENC_COMPLETE=complete_bash" in script.stdout and script.stdout.rstrip().endswith("posenc")
    # what the installed script asks when the user types `posenc train scheme=al<TAB>` (bash splits at '=')
    env = {"_POSENC_COMPLETE": "complete_bash", "COMP_WORDS": "posenc train scheme = al", "COMP_CWORD": "4"}
    assert invoke(env=env).stdout.split() == ["alibi"]
    env = {"_POSENC_COMPLETE": "complete_bash", "COMP_WORDS": "posenc ev", "COMP_CWORD": "1"}
    assert invoke(env=env).stdout.split() == ["eval"]


@pytest.mark.slow
def test_a_fresh_process_completes_options_and_keys_as_the_installed_script_asks(tmp_path):
    """In a new process nothing has registered the schema or scheme=A+B with Hydra yet: completion
    must do it itself (it offered nothing while only an in-process test covered it)."""
    for words, cword, expected in (
        ("posenc train scheme = al", "4", "alibi"),
        ("posenc train model.n_l", "2", "model.n_layer="),
    ):
        env = {"_POSENC_COMPLETE": "complete_bash", "COMP_WORDS": words, "COMP_CWORD": cword}
        assert run_cli(cwd=tmp_path, env=env).stdout.split() == [expected]


def test_hydra_completion_of_groups_options_and_keys():
    assert {"scheme=", "model.", "logger=", "train."} <= set(hydra_completions([], ""))
    assert hydra_completions(["scheme=alibi"], "model.n_l") == ["model.n_layer="]
    assert hydra_completions(["logger"], "") == ["=csv", "=tensorboard", "=wandb"]  # bash: `logger =<TAB>`
    assert hydra_completions(["scheme", "="], "ro") == ["rope"]
    assert hydra_completions(["--cfg"], "") == ["job", "hydra", "all"]


def test_schemes_lists_every_scheme_beyond_the_chapters_too():
    result = invoke("schemes")
    assert result.code == 0, result.stderr
    for name in BEYOND_CHAPTERS:
        assert name in result.stdout


def test_the_fixed_choices_the_command_line_lists_are_the_ones_the_code_accepts():
    # the names live in core.choices so --help leaves torch unimported; the code keys its rules by them
    from posenc_cli.core.choices import ALIBI_SLOPES, ROPE_LAYOUTS
    from posenc_cli.model.positional.alibi import SLOPE_RULES
    from posenc_cli.model.positional.rope import LAYOUTS

    assert set(ROPE_LAYOUTS) == set(LAYOUTS) and set(ALIBI_SLOPES) == set(SLOPE_RULES)


def test_a_bad_fixed_choice_is_refused_while_parsing_naming_what_is_allowed():
    for args, allowed in (
        (("eval", "--learned-overflow", "dash,truncate"), "dash, window"),
        (("inspect", "rope", "--layout", "paired"), "half, interleaved"),
        (("inspect", "alibi", "--slopes", "steep"), "paper, chapter"),
    ):
        result = invoke(*args)
        assert result.code == 2 and allowed in result.stderr and "Traceback" not in result.stderr, args


def test_every_command_that_writes_an_output_set_takes_force():
    for name in ("eval", "probe", "export", "bench", "report"):
        assert "--force" in posenc_in_process(name, "-h")[1], name


@pytest.mark.slow  # starts a process
def test_a_refused_override_is_answered_without_importing_torch(tmp_path):
    """Start-up (issue #33): the override is composed before torch (3 s of its 3.3 s) is imported."""
    code = (
        "import sys\nsys.argv = ['posenc', 'train', 'scheme=roep']\nfrom posenc_cli.cli.main import main\n"
        "try:\n    main()\nexcept SystemExit as stop:\n    print(stop.code, 'torch' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert result.stdout.split() == ["2", "False"], result.stderr
    assert "scheme/roep" in result.stderr and not (tmp_path / "outputs").exists()


def test_a_ctrl_c_inside_a_command_says_so_and_exits_130():
    """Typer turns a KeyboardInterrupt inside a command into exit code 130 and says nothing; a Ctrl-C in a
    run's first seconds (while torch imports) once ended `posenc train` with no word."""
    with mock.patch.object(schemes_command, "scheme_rows", side_effect=KeyboardInterrupt):
        result = invoke("schemes")
    assert result.code == 130 and result.stderr == "posenc: interrupted\n", result


@pytest.mark.slow  # starts processes
@pytest.mark.tiny_run  # make test keeps it: one of its few tiny CLI runs
def test_a_process_that_loaded_torch_ends_with_its_exit_code_its_output_and_its_atexit_handlers(tmp_path):
    """console_main skips Python's teardown once torch is loaded, never the exit code, what the command
    printed (to a pipe too), or an atexit handler (logging's and trackers' run there)."""
    code = (
        "import atexit, sys, torch\n"
        "atexit.register(lambda: open('atexit_ran', 'w').write('yes'))\n"
        "sys.argv = ['posenc', *sys.argv[1:]]\n"
        "from posenc_cli.cli.main import console_main\nconsole_main()\n"
    )
    for args, status in ((["schemes"], 0), (["eval", "--lengths", "0"], 2)):
        (tmp_path / "atexit_ran").unlink(missing_ok=True)
        result = subprocess.run(
            [sys.executable, "-c", code, *args],
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == status, result.stderr
        assert (tmp_path / "atexit_ran").read_text() == "yes"
        if status == 0:
            assert "alibi" in result.stdout and result.stdout.endswith("\n")
        else:
            assert result.stderr.startswith("posenc: error: ") and result.stderr.count("\n") == 1


def test_train_composes_its_first_point_from_the_directory_cp_names_and_refuses_one_it_cannot_read(tmp_path):
    import shutil

    from posenc_cli.config.hydra_args import check_first_point
    from posenc_cli.config.location import config_dir
    from posenc_cli.core.errors import UsageError

    shutil.copytree(config_dir(), tmp_path / "configs")
    shutil.copy(tmp_path / "configs" / "config.yaml", tmp_path / "configs" / "mine.yaml")
    check_first_point(["-cp", str(tmp_path / "configs"), "-cn", "mine", "experiment=smoke"])  # no refusal
    for cp, said in ((str(tmp_path / "absent"), "no such config directory"), ("../configs", "absolute")):
        with pytest.raises(UsageError, match=said):
            check_first_point(["-cp", cp, "experiment=smoke"])


def test_output_to_a_reader_that_stopped_early_ends_quietly_as_sigpipe_does():
    """`posenc schemes | head -1`: what is left to print goes nowhere, no traceback, and the exit code
    is the shell's for SIGPIPE (141), not rich's default 1, which reads as posenc failing."""
    from posenc_cli.core.ui import BROKEN_PIPE, PipeConsole

    read_end, write_end = os.pipe()
    os.close(read_end)
    with os.fdopen(write_end, "w") as stream:
        console = PipeConsole(file=stream)
        with pytest.raises(SystemExit) as ended:
            console.print("a table's row\n" * 1000)
        assert ended.value.code == BROKEN_PIPE == 141 and console.quiet
        console.print("more")  # quiet from then on: nothing raised
