"""Paths every command shares: the outputs/ root, the timestamped default directory, and whether a place
can be written (tried, not guessed)."""

from __future__ import annotations

from pathlib import Path

from posenc_cli.core.atomic import TMP_PREFIX
from posenc_cli.core.errors import UsageError

OUTPUTS = Path(
    "outputs"
)  # where runs, sweeps, evaluations and caches land, relative to the working directory
TIMESTAMP = (
    "%Y-%m-%d_%H-%M-%S"  # a default directory's name: sorts by time (configs/config.yaml: Hydra's too)
)


def writable_place(option: str, out: str) -> Path:
    """`out` as a path whose nearest existing ancestor is a directory this process can create files in
    (a temporary directory is made and removed there: permission bits lie to root and on read-only or
    special file systems), and no symbolic link on the way that leads nowhere."""
    import tempfile

    if not out.strip():
        raise UsageError(f"{option} is empty; give a path to write to (or leave {option} out)")
    path = Path(out)
    for link in (path, *path.parents):
        if link.is_symlink() and not link.exists():  # exists() follows the link: dangling, or a loop
            raise UsageError(
                f"{option} {out}: {link} is a symbolic link that leads nowhere (dangling, or a loop); "
                "give a real path"
            )
    existing = next(p for p in (path, *path.parents) if p.exists() or p == Path("."))
    if path != existing and not existing.is_dir():
        raise UsageError(
            f"{option} {out} lies under {existing}, which is a file; give a directory to write to"
        )
    where = existing if existing.is_dir() else existing.parent
    try:
        Path(tempfile.mkdtemp(prefix=f"{TMP_PREFIX}write-check-", dir=where)).rmdir()
    except OSError as err:
        raise UsageError(
            f"{option} {out}: {where} is not writable ({err.strerror}); give another path"
        ) from None
    return path


def timestamped_dir(kind: str) -> Path:
    """The default output directory of a command: outputs/<kind>/<local time>."""
    import datetime

    return OUTPUTS / kind / datetime.datetime.now().strftime(TIMESTAMP)
