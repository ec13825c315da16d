"""The `posenc` entry point: every command registered on the app, parser errors as one line and exit 2."""

from __future__ import annotations

import atexit
import os
import sys
import threading

import typer

from posenc_cli.cli import (  # noqa: F401 - each registers its command on the app
    bench_command,
    eval_command,
    export_command,
    inspect_command,
    probe_command,
    report_command,
    sample_command,
    schemes_command,
)
from posenc_cli.cli.app import HELP_OPTION_NAMES, app, reflow
from posenc_cli.cli.completion import click_core, click_exceptions
from posenc_cli.cli.train_command import TrainCommand
from posenc_cli.core import ui
from posenc_cli.core.errors import UsageError
from posenc_cli.core.file_sets import release_directories
from posenc_cli.core.ui import INTERRUPTED, fail

# how `posenc --help` lists the commands: in the order a user meets them (each module registers its own)
WORKFLOW_ORDER = ("train", "eval", "probe", "report", "sample", "export", "schemes", "inspect", "bench")


def command():
    """The click command behind `app`, with help texts reflowed and flags (--help too) shown bare."""

    group = typer.main.get_command(app)
    group.commands = {name: group.commands[name] for name in WORKFLOW_ORDER}
    for cmd in [group, *group.commands.values()]:
        if not isinstance(cmd, TrainCommand):  # its help reflows itself, importing torch only when shown
            cmd.help = reflow(cmd.help or "")
        for param in [
            *cmd.params,
            cmd.get_help_option(click_core.Context(cmd, help_option_names=HELP_OPTION_NAMES)),
        ]:
            if getattr(param, "is_flag", False):
                param.metavar = ""
    return group


def main() -> None:
    """The `posenc` entry point: parser errors, like every error a user can fix, are one line and exit 2.
    The output directories a command owned are given up however it ends (one it made and left empty,
    a refusal's, goes)."""
    try:
        dispatch()
    finally:
        release_directories()


def console_main() -> None:
    """`posenc` as a process (the console script, `python -m posenc_cli`): main(), then an exit without
    Python's teardown of every module once torch is loaded, which takes 0.6-0.8 s after the work is done
    (`python -c "import torch"` exits that much later than it imports). The atexit handlers (logging's,
    trackers') still run and the output is flushed; every file posenc writes is closed before its
    command returns. Python's own exit where another thread is still to be joined (joblib's launcher
    leaves its executor's) or a profiler or tracer (cProfile, coverage) writes its results at exit."""
    try:
        main()
        code = 0
    except SystemExit as done:
        code = 0 if done.code is None else done.code
        if not isinstance(code, int) or not quick_exit_is_safe():
            raise
    if quick_exit_is_safe():
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):  # a closed pipe (posenc ... | head): nothing left to say there
                pass
        os._exit(code)


def quick_exit_is_safe() -> bool:
    others = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon]
    watched = sys.getprofile() is not None or sys.gettrace() is not None
    return "torch" in sys.modules and not others and not watched


def dispatch() -> None:

    try:
        code = command().main(prog_name="posenc", standalone_mode=False)
    except click_exceptions.NoArgsIsHelpError as err:
        ui.out.print(err.format_message(), highlight=False, markup=False, end="")
        raise SystemExit(0) from None
    except click_exceptions.ClickException as err:
        fail(err.format_message() if isinstance(err, click_exceptions.UsageError) else err)
    except typer.Abort:
        ui.err.print("posenc: aborted")
        raise SystemExit(1) from None
    except UsageError as err:
        fail(err)
    except KeyboardInterrupt:
        code = INTERRUPTED
    if code == INTERRUPTED:  # Typer returns a Ctrl-C inside a command as this code, silently
        ui.err.print("posenc: interrupted")
    raise SystemExit(code if isinstance(code, int) else 0)
