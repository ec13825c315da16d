"""Shell completion: Typer's for commands and options, Hydra's for `train`'s overrides, in one script.

`posenc --install-completion` (or `eval "$(posenc train -sc install=bash)"`, Hydra's spelling) installs
it; for `posenc train <TAB>` the script asks this module, which asks Hydra's own completion plugin
for the config groups, options and keys that fit what is typed.
"""

from __future__ import annotations

try:  # typer >= 0.20 vendors its click
    from typer._click import core as click_core
    from typer._click import exceptions as click_exceptions
    from typer._click.shell_completion import CompletionItem
except ImportError:  # older typer uses click itself
    from click import core as click_core
    from click import exceptions as click_exceptions
    from click.shell_completion import CompletionItem

from posenc_cli.core.errors import UsageError

__all__ = ["CompletionItem", "click_core", "click_exceptions", "hydra_completions", "hydra_shell_completion"]
SHELLS = ("bash", "zsh", "fish")
PROG_NAME, COMPLETE_VAR = "posenc", "_POSENC_COMPLETE"


HYDRA_VALUE_FLAGS = (
    "--cfg",
    "-c",
    "--package",
    "-p",
    "--config-name",
    "-cn",
    "--config-path",
    "-cp",
    "--config-dir",
    "-cd",
    "--experimental-rerun",
)


def hydra_completions(words: list[str], incomplete: str) -> list[str]:
    """Hydra's completions of `incomplete` after the override `words` already typed. bash splits words at
    '=' (`scheme`, `=`, `ro`) and click drops a lone '=': the words are joined back, and the part bash
    already shows is cut off."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra._internal.core_plugins.bash_completion import BashCompletion
    from hydra._internal.utils import create_config_search_path

    # imported when the command runs, so that --help leaves torch unimported; the schema and the
    # composite source register themselves with Hydra, which completes keys and scheme=A+B through them
    from posenc_cli.config import composite_schemes, schema  # noqa: F401
    from posenc_cli.config.location import config_dir

    if words and words[-1] in HYDRA_VALUE_FLAGS:
        return (
            [c for c in ("job", "hydra", "all") if c.startswith(incomplete)]
            if words[-1] in ("--cfg", "-c")
            else []
        )
    words = rejoin(words)
    shown = ""
    if words and words[-1].endswith("="):  # bash: `scheme`, `=`, `al`
        shown = words.pop()
        incomplete = shown + incomplete
    elif (
        incomplete in ("", "=")
        and words
        and "=" not in words[-1]
        and not words[-1].startswith("-")
        and (len(words) < 2 or words[-2] not in HYDRA_VALUE_FLAGS)
    ):  # `scheme` then a lone '=' click dropped
        shown = words.pop()
        incomplete = shown + "="
    typed = " ".join(words)
    loader = ConfigLoaderImpl(config_search_path=create_config_search_path(str(config_dir())))
    try:
        matches = BashCompletion(loader)._query(config_name="config", line=f"{typed} {incomplete}".lstrip())
    except (Exception, SystemExit):  # a half-typed line Hydra cannot parse: offer nothing, no traceback
        return []
    return [m[len(shown) :] for m in matches if m.startswith(shown)]


def rejoin(words: list[str]) -> list[str]:
    """bash's words split at '=' joined back: ["scheme", "=", "rope", "seed", "="] -> ["scheme=rope", "seed="]."""
    joined: list[str] = []
    for word in words:
        if joined and (word == "=" or joined[-1].endswith("=")):
            joined[-1] += word
        else:
            joined.append(word)
    return joined


def hydra_shell_completion(args: list[str]) -> bool:
    """Hydra's `-sc install=SHELL` / `-sc uninstall=SHELL` for `posenc train`: print the script that
    completes commands, options and overrides alike (Hydra's own script would ask `posenc -sc`, which
    is not a Hydra app). False when the arguments ask for no completion."""
    flags = [
        i
        for i, a in enumerate(args)
        if a in ("-sc", "--shell-completion") or a.startswith("--shell-completion=")
    ]
    if not flags:
        return False
    i = flags[0]
    value = (
        args[i].split("=", 1)[1] if args[i].startswith("--shell-completion=") else (args[i + 1 :] or [""])[0]
    )
    action, _, shell = value.partition("=")
    if action not in ("install", "uninstall") or shell not in SHELLS:
        raise UsageError(
            f"-sc {value or '(nothing)'} is not known; use -sc install=SHELL or -sc uninstall=SHELL "
            f"with SHELL one of: {', '.join(SHELLS)}"
        )
    if action == "uninstall":
        print(f"complete -e -c {PROG_NAME}" if shell == "fish" else f"complete -r {PROG_NAME}")
        return True
    from typer.completion import get_completion_script

    print(get_completion_script(prog_name=PROG_NAME, complete_var=COMPLETE_VAR, shell=shell))
    return True
