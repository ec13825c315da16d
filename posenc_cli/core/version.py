"""Which code produced a run: the git commit when posenc runs from a checkout, else the package version."""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path

from posenc_cli import __version__


@functools.lru_cache(maxsize=1)
def code_version() -> str:
    """`git:<commit>` (with `+dirty` for uncommitted changes to tracked files) or `posenc <version>`."""
    checkout = Path(__file__).resolve().parents[2]  # posenc_cli/core/version.py -> the checkout

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(checkout), *args], capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()

    try:
        if Path(git("rev-parse", "--show-toplevel")).resolve() != checkout:
            raise ValueError("posenc is installed inside another repository, not run from its own checkout")
        dirty = "+dirty" if git("status", "--porcelain", "--untracked-files=no") else ""
        return f"git:{git('rev-parse', 'HEAD')}{dirty}"
    except (OSError, ValueError, subprocess.SubprocessError):
        return f"posenc {__version__}"
