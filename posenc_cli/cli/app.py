"""The `posenc` command line. Each command is a thin door into one module; errors a user can fix
become one line on stderr and exit code 2."""

from __future__ import annotations

import inspect
import re
from typing import Any, Callable, List

import typer

from posenc_cli.core import ui
from posenc_cli.core.choices import CHAPTER_SCHEMES, DEVICES, INDEXED_DEVICE
from posenc_cli.core.errors import require_choice
from posenc_cli.core.option_groups import DEVICE_HELP, FORCE_HELP
from posenc_cli.core.options import Option, options_of

HELP_OPTION_NAMES = ["-h", "--help"]
app = typer.Typer(
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
    context_settings={"help_option_names": HELP_OPTION_NAMES},
    help="Train small GPTs with different positional encodings and measure how far past their training "
    "length each one holds up.\n\nQuick start: [bold]posenc train -m scheme="
    + ",".join(CHAPTER_SCHEMES)
    + "[/bold] "
    "then [bold]posenc eval --lengths 512,1024,2048[/bold].\n\n"
    "Shell completion (commands, options and train's config groups and keys): [bold]posenc --install-completion[/bold].",
)


def choice(
    default: str, choices: tuple[str, ...], help: str, *names: str, comma_list: bool = False, also: str = ""
) -> Any:
    """An option whose values are fixed names: --help lists them, shells complete them, and a typo is
    refused while parsing. comma_list: a comma list of those names. also: a regex of further values."""

    def check(context: typer.Context, param: typer.CallbackParam, value: str | None) -> str | None:
        if value is not None:  # the check the Python API runs too: one line, the same words
            require_choice(param.opts[0], value, choices, comma_list=comma_list, also=also)
        return value

    def complete(incomplete: str) -> list[str]:
        done, _, last = incomplete.rpartition(",") if comma_list else ("", "", incomplete)
        return [f"{done},{c}" if done else c for c in choices if c.startswith(last)]

    metavar = "[" + "|".join(choices) + "]" + (",..." if comma_list else "")
    return typer.Option(default, *names, help=help, metavar=metavar, callback=check, autocompletion=complete)


def flag(help: str, *names: str) -> Any:
    """A boolean that is on when given: shown in --help as a bare flag."""
    return typer.Option(False, *names, help=help, metavar="")


def version_callback(value: bool) -> None:
    if value:
        from posenc_cli import __version__
        from posenc_cli.core.version import code_version

        version = code_version()
        ui.out.print(
            f"posenc {__version__}" + (f" ({version})" if version.startswith("git:") else ""), highlight=False
        )
        raise typer.Exit()


@app.callback()
def posenc(
    version: bool = typer.Option(
        False,
        "--version",
        "-V",
        help="Print the version (and the git commit in a checkout) and exit.",
        callback=version_callback,
        is_eager=True,
        metavar="",
    ),
) -> None:
    """Train small GPTs with different positional encodings and measure how far past their training length each one holds up."""


def device_option() -> Any:
    """--device, as every command that runs a model declares it (eval's and probe's: core.option_groups)."""
    return choice("auto", DEVICES, DEVICE_HELP, "--device", also=INDEXED_DEVICE)


def runs_argument(hf_note: str = "") -> Any:
    """RUNS, as eval and probe take them; hf_note: what an hf: model needs besides its name."""
    return typer.Argument(
        None,
        help="Run directories, sweep directories, globs, or hf:ID_OR_PATH (a Hugging Face causal LM"
        f"{hf_note}) (default: the latest runs).",
    )


def parameter(item: Option) -> inspect.Parameter:
    """One option of a group (core.options) as the keyword parameter Typer reads: its names, default,
    help, and for fixed names their check while parsing, metavar and completion."""
    names, spec = (item.flag, *item.spec.short), item.spec
    if item.type is bool:
        declared = flag(spec.help, *names)
    elif spec.choice is not None:
        c = spec.choice
        declared = choice(item.default, c.names, spec.help, *names, comma_list=c.comma_list, also=c.also)
    else:
        declared = typer.Option(
            item.default, *names, help=spec.help, metavar=spec.metavar, autocompletion=spec.complete
        )
    return inspect.Parameter(
        item.name, inspect.Parameter.KEYWORD_ONLY, default=declared, annotation=item.type
    )


def with_options(options: type, runs: Any) -> Callable[[Callable], Callable]:
    """A command's signature made from its options class (core.option_groups): RUNS, then every option of
    its groups, so that the command line declares each option as its group defines it, and nothing else."""

    def made(command: Callable) -> Callable:
        first = inspect.Parameter(
            "runs", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=runs, annotation=List[str]
        )
        command.__signature__ = inspect.Signature([first, *map(parameter, options_of(options))])
        command.__annotations__ = {}
        return command

    return made


def force_option() -> Any:
    """--force, as every command that writes an output set declares it (eval's and probe's: core.option_groups)."""
    return flag(FORCE_HELP, "--force")


def reflow(text: str) -> str:
    """Help as written in the source -> as shown: a paragraph's lines joined into one, lines that start
    with spaces (examples, lists) kept as they are."""
    return re.sub(r"(?<=\S)\n(?=\S)", " ", inspect.cleandoc(text))
