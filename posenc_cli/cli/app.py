"""The `posenc` command line. Each command is a thin door into one module; errors a user can fix
become one line on stderr and exit code 2."""

from __future__ import annotations

import inspect
import re
from typing import Any

import typer

from posenc_cli.core import ui
from posenc_cli.core.choices import (
    CHAPTER_SCHEMES,
    CONTEXT_REMAPS,
    DEVICES,
    HF_ROPE_SCALING,
    INDEXED_DEVICE,
    LOGN,
    PPL_TOLERANCE,
    RETRIEVAL_THRESHOLD,
    ROPE_SCALING,
)
from posenc_cli.core.errors import require_choice

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


DEVICE_HELP = "Where the model runs (auto: cuda, then mps, then cpu; cuda:N also works)."


def device_option() -> Any:
    """--device, as every command that runs a model declares it."""
    return choice("auto", DEVICES, DEVICE_HELP, "--device", also=INDEXED_DEVICE)


def runs_argument(hf_note: str = "") -> Any:
    """RUNS, as eval and probe take them; hf_note: what an hf: model needs besides its name."""
    return typer.Argument(
        None,
        help="Run directories, sweep directories, globs, or hf:ID_OR_PATH (a Hugging Face causal LM"
        f"{hf_note}) (default: the latest runs).",
    )


def lengths_option(default: str, help: str) -> Any:
    """--lengths (-l): a comma list of lengths, as eval and probe take it."""
    return typer.Option(default, "--lengths", "-l", help=help)


ROPE_METHOD_PARTS = ROPE_SCALING + HF_ROPE_SCALING + CONTEXT_REMAPS + (LOGN,)  # --rope-scaling's names


def rope_scaling_option(scored: str) -> Any:
    """--rope-scaling, as eval and probe take it: each RoPE-based run is `scored` once per method. --help
    lists and shells complete its names; the names joined by + are checked by one parser, the one the
    Python API runs too (model.extension.method.parse_methods, before any model is loaded)."""

    def complete(incomplete: str) -> list[str]:
        cut = max(incomplete.rfind(","), incomplete.rfind("+")) + 1
        return [incomplete[:cut] + name for name in ROPE_METHOD_PARTS if name.startswith(incomplete[cut:])]

    return typer.Option(
        "none",
        "--rope-scaling",
        help=f"Comma list of RoPE context-extension methods: each RoPE-based run is {scored} once per method "
        "(labelled rope+yarn, rope+self_extend (G=8, W=64) etc.), no retraining; a run without a rotary scheme "
        f"once, as trained. A METHOD is a frequency scaling ({', '.join(ROPE_SCALING)}; "
        f"{', '.join(HF_ROPE_SCALING)} for hf: models only, which go through transformers' own "
        f"rope_parameters), a training-free extension of attention ({', '.join(CONTEXT_REMAPS)}) or {LOGN} "
        "(log-n query scaling), or one of each joined by + (yarn+logn, ntk+dca).",
        metavar="METHOD[+METHOD],...",
        autocompletion=complete,
    )


EXTENSION_HELP = {  # the training-free extensions' parameters (model/extension), as eval and probe take them
    "--self-extend-group": "With --rope-scaling self_extend: the group size G, distant keys sharing positions "
    "floor(pos/G) (default 8).",
    "--self-extend-window": "With --rope-scaling self_extend: the neighbour window W, at most the training "
    "length; nearer keys keep their exact positions (default: a quarter of the training length).",
    "--rerope-window": "With --rope-scaling rerope or leaky_rerope: the window w, at most the training length; "
    "farther distances are clipped at w (default: an eighth of the training length).",
    "--rerope-leak": "With --rope-scaling leaky_rerope: k, above 1; past the window distances grow with slope "
    "1/k (default 16).",
    "--dca-chunk": "With --rope-scaling dca: Dual Chunk Attention's chunk size s (default: 5/8 of the training "
    "length).",
    "--dca-local": "With --rope-scaling dca: the local window w across neighbouring chunks; s + w at most the "
    "training length (default: 1/8 of the training length).",
}


def extension_option(name: str) -> Any:
    """One of EXTENSION_HELP's options, as eval and probe take it: refused without its method."""
    return typer.Option(None, name, help=EXTENSION_HELP[name])


def rope_factor_option(default: str) -> Any:
    """--rope-factor, as eval and probe take it; `default` says what s is without it."""
    return typer.Option(
        None,
        "--rope-factor",
        help=f"Scale factor s for --rope-scaling, from 1 to 10,000 (default: {default}).",
    )


def ppl_tolerance_option(where: str = "") -> Any:
    """--ppl-tolerance: the perplexity half of the effective-length rule (report.effective_length)."""
    return typer.Option(
        PPL_TOLERANCE,
        "--ppl-tolerance",
        help="Effective length (comparison.md): the longest length up to which perplexity stays within this "
        f"fraction of its value at the reference length{where}.",
    )


def retrieval_threshold_option(where: str = "") -> Any:
    """--retrieval-threshold: the retrieval half of the effective-length rule (report.effective_length)."""
    return typer.Option(
        RETRIEVAL_THRESHOLD,
        "--retrieval-threshold",
        help="Effective length (comparison.md): the longest length up to which at least this share of keys "
        f"(0-1] is retrieved, depths and seeds averaged{where}.",
    )


def force_option() -> Any:
    """--force, as every command that writes an output set declares it."""
    return flag(
        "Write into --out even where it holds another kind of output set (an export, eval's tables, bench's): "
        "the files that set's manifest.json lists are removed once the new set is written, and no other file.",
        "--force",
    )


def reflow(text: str) -> str:
    """Help as written in the source -> as shown: a paragraph's lines joined into one, lines that start
    with spaces (examples, lists) kept as they are."""
    return re.sub(r"(?<=\S)\n(?=\S)", " ", inspect.cleandoc(text))
