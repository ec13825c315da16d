"""The one home of install hints: the pip command that adds an optional extra, spelled for how posenc is
installed. From a source checkout (an editable install) `pip install -e '.[hf]'` (the checkout's path
where the shell is elsewhere); from an installed package `pip install 'posenc[hf]'`."""

from __future__ import annotations

import functools
import importlib.util
import re
from pathlib import Path

EXTRAS = ("cluster", "track", "data", "hf")  # pyproject.toml's optional dependencies that hints name


@functools.lru_cache(maxsize=1)
def source_checkout() -> Path | None:
    """The checkout posenc runs from (its pyproject.toml names the project posenc), or None: installed."""
    root = Path(__file__).resolve().parents[2]  # posenc_cli/core/install.py -> the checkout
    try:
        pyproject = (root / "pyproject.toml").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    return root if re.search(r'^name\s*=\s*"posenc"\s*$', pyproject, re.MULTILINE) else None


def install_hint(extra: str) -> str:
    """`pip install -e '.[extra]'` in a checkout, `pip install 'posenc[extra]'` for a package."""
    if extra not in EXTRAS:
        raise ValueError(f"{extra!r} is not one of posenc's extras {EXTRAS}")
    root = source_checkout()
    if root is None:
        return f"pip install 'posenc[{extra}]'"
    where = "." if Path.cwd().resolve() == root else str(root)
    return f"pip install -e '{where}[{extra}]'"


def both_hints(extra: str) -> str:
    """Both spellings, for a help text that is read before anyone knows how posenc was installed."""
    if extra not in EXTRAS:
        raise ValueError(f"{extra!r} is not one of posenc's extras {EXTRAS}")
    return f"pip install 'posenc[{extra}]', or in a checkout pip install -e '.[{extra}]'"


def needs(extra: str, *modules: str) -> str:
    """What a help text says of an extra: its install hint while one of `modules` is missing, else that it
    is installed (a hint for what is already there misleads)."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    return (
        f"{', '.join(missing)} missing: {install_hint(extra)}" if missing else f"the {extra} extra, installed"
    )
