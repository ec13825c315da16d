"""Paths every command shares: the outputs/ root, the timestamped default directory, and whether a place
can be written (tried, not guessed)."""

from __future__ import annotations

import os
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
    require_short_names(option, path)
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


def require_short_names(option: str, path: Path) -> None:
    """Every name in `path` within the file system's NAME_MAX, and the whole with room for a file inside
    within PATH_MAX: refused here, in one line, rather than as an OSError from the first write."""
    base = next((p for p in path.absolute().parents if os.path.isdir(p)), Path("/"))
    name_max, path_max = limit(base, "PC_NAME_MAX", 255), limit(base, "PC_PATH_MAX", 4096)
    for part in path.parts:
        if part.startswith(TMP_PREFIX):  # posenc's temporaries are removed when found: never a user's output
            raise UsageError(
                f"{option} {path}: names starting with {TMP_PREFIX} are posenc's temporaries, removed "
                "whenever posenc finds them; give another name"
            )
        if len(os.fsencode(part)) > name_max:
            raise UsageError(
                f"{option} {path}: the name {part[:24]}… is {len(os.fsencode(part))} bytes, and a name here "
                f"may have at most {name_max}; give a shorter one"
            )
    if len(os.fsencode(path.absolute())) + 1 + name_max > path_max:
        raise UsageError(
            f"{option} {path}: the path is {len(os.fsencode(path.absolute()))} bytes long, too long for files "
            f"inside it (at most {path_max} bytes in all here); give a shorter one"
        )


def limit(directory: Path, name: str, fallback: int) -> int:
    """os.pathconf's `name` for `directory`, or `fallback` where the system does not say."""
    try:
        return os.pathconf(directory, name)
    except (OSError, ValueError, AttributeError):
        return fallback


def timestamped_dir(kind: str) -> Path:
    """The default output directory of a command: outputs/<kind>/<local time>."""
    import datetime

    return OUTPUTS / kind / datetime.datetime.now().strftime(TIMESTAMP)
