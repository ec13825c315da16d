"""Who may write a run directory. A fresh run claims a directory nobody else has (an exclusive mkdir, a
suffix when the default name is taken); a directory that holds a run is only ever continued through
train.resume, which rebuilds the config from what posenc itself stored there (never from .hydra/);
and a run being trained holds a lock that refuses a second writer. Every refusal happens before Hydra
or training writes anything.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from posenc_cli.config.hydra_args import hydra_quoted, output_key, override_key, override_value
from posenc_cli.config.train_request import TrainRequest
from posenc_cli.core import ui
from posenc_cli.core.errors import UsageError
from posenc_cli.rundir.layout import HYDRA_RECORD, LOCK, holds_run, never_started

_held: dict[Path, int] = {}  # run directory -> open lock file descriptor, for this process's lifetime


def hold_lock(run_dir: Path) -> None:
    """Lock `run_dir` for the rest of this process (idempotent); refuse if another process holds it."""
    key = Path(run_dir).resolve()
    if key in _held:
        return
    try:
        import fcntl
    except ImportError:  # no advisory locks on this platform: the exclusive mkdir still separates runs
        return
    fd = os.open(key / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise UsageError(
            f"{run_dir} is being trained by another process right now; wait for it to finish, "
            "or stop it and then resume"
        ) from None
    _held[key] = fd


def is_locked(run_dir: Path) -> bool:
    """Whether another process is training `run_dir` now (checked without keeping the lock)."""
    if Path(run_dir).resolve() in _held or not (Path(run_dir) / LOCK).exists():
        return False
    try:
        hold_lock(run_dir)
    except UsageError:
        return True
    os.close(_held.pop(Path(run_dir).resolve()))
    return False


def warn_if_training(run_dir: Path, doing: str) -> None:
    """A run being trained moves its checkpoint on: say that what follows is of the one read just now."""
    if is_locked(run_dir):
        ui.err.print(
            f"posenc: warning: {run_dir} is being trained right now; {doing}", highlight=False, soft_wrap=True
        )


def resume_command(run_dir: Path) -> str:
    """The command that continues `run_dir`, quoted for the shell and for Hydra (a path with `,` `=`
    `[` or spaces included)."""
    return "posenc train " + shlex.quote(f"train.resume={hydra_quoted(str(run_dir))}")


def new_run_option(run_dir: Path) -> str:
    """The override that trains a new run into `run_dir`, quoted for the shell and for Hydra."""
    return shlex.quote(f"hydra.run.dir={hydra_quoted(str(run_dir))}")


def refuse_started_run(run_dir: Path) -> None:
    if holds_run(run_dir):
        raise UsageError(
            f"{run_dir} already holds a run, which is never started over; continue it with: "
            f"{resume_command(run_dir)}  (or choose another hydra.run.dir)"
        )
    if never_started(run_dir):  # said, as what it holds is replaced
        ui.err.print(
            f"posenc: note: {run_dir} holds the start of a run that never wrote its summary (its "
            f"{HYDRA_RECORD}/ alone, nothing trained); a new run takes its place",
            highlight=False,
            markup=False,
            soft_wrap=True,
        )


def refuse_current_directory(path: Path) -> None:
    if str(path) in ("", "."):
        raise UsageError(
            f"the run directory given is the current directory ({str(path)!r}), which a run never writes "
            "into; give hydra.run.dir=DIR (or hydra.sweep.dir=DIR) a directory of its own"
        )


def claim_new(path: Path, given: bool) -> Path:
    """Create the directory of a fresh run (or sweep): `path` itself if the user named it and it holds
    no run; for a default name, the first of path, path_2, path_3, ... that an exclusive mkdir wins."""
    refuse_current_directory(path)
    try:
        if given:
            refuse_started_run(path)
            path.mkdir(parents=True, exist_ok=True)
            return path
        path.parent.mkdir(parents=True, exist_ok=True)
        for n in range(1, 10_000):
            candidate = path if n == 1 else path.with_name(f"{path.name}_{n}")
            try:
                candidate.mkdir()
                return candidate
            except FileExistsError:
                continue
    except OSError as err:  # a file where a directory should be, no permission, ...
        raise UsageError(f"cannot create the directory {path}: {err.strerror}; choose another") from None
    raise UsageError(f"could not find a free directory name next to {path}")


def claim(request: TrainRequest, path: Path) -> list[str]:
    """The run (or sweep) directory of `posenc train`'s request, `path` (as the pre-flight composed it),
    claimed for this process: Hydra and the training write only there. Returns the override that sends
    Hydra there (none where it is the one given). Single runs are locked from here until the process exits."""
    key = output_key(request.parsed)
    given = request.gives(key)
    if request.multirun:
        refuse_current_directory(path)
        if given and path.is_dir() and any(holds_run(p) for p in path.iterdir() if p.is_dir()):
            raise UsageError(
                f"{path} already holds runs of a sweep, which are never started over; give another "
                "hydra.sweep.dir or resume its runs one by one with train.resume=RUN"
            )
        return [f"{key}={hydra_quoted(str(claim_new(path, given)))}"]
    if request.resume is not None:
        hold_lock(request.resume)
        return []
    run = claim_new(path, given)
    hold_lock(run)
    if holds_run(run):  # another process claimed and started it between our check and our lock
        refuse_started_run(run)
    return [f"{key}={hydra_quoted(str(run))}"] if not given else []


NOT_RESUMING = ("", "null", "None", "false", "False")  # train.resume values that start a fresh run


def resume_value(args: list[str]) -> str | None:
    """The last train.resume value given, however it was prefixed (+, ++), or None."""
    given = [override_value(a) for a in args if "=" in a and override_key(a) == "train.resume"]
    return given[-1] if given else None


def resuming(args: list[str]) -> bool:
    return resume_value(args) not in (None, *NOT_RESUMING)
