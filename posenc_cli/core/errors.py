"""One exception type for everything a user can fix; the CLI turns it into one line and exit code 2.
The require_* checks are the only range checks: configs, schemes and CLI options all call them."""

from __future__ import annotations

import difflib
import math
import re
from typing import Any, Iterable


class UsageError(Exception):
    """Bad input: the message names the bad value and what is allowed."""


class PositionOutOfRange(UsageError):
    """A scheme was asked for positions it cannot represent (learned, past its table)."""


def require_positive_int(key: str, value: Any) -> None:
    """`key` must be a positive integer (bools excluded): one clear line otherwise."""
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise UsageError(f"{key} must be a positive integer, got {value!r}")


def require_int(key: str, value: Any, at_least: int = 0, *, at_most: int | None = None) -> None:
    """An integer in [at_least, at_most] (bools excluded)."""
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= at_least
    if not ok or (at_most is not None and value > at_most):
        limits = f"between {at_least} and {at_most}" if at_most is not None else f">= {at_least}"
        raise UsageError(f"{key} must be an integer {limits}, got {value!r}")


def require_bool(key: str, value: Any) -> None:
    """true or false, not a word or number YAML would also accept as one."""
    if not isinstance(value, bool):
        raise UsageError(f"{key}={value!r} is not a boolean; choose true or false")


SEED_MAX = 2**63 - 1  # torch, numpy and a checkpoint's int64 all take seeds up to here


def require_seed(key: str, value: Any) -> None:
    """A seed: an integer from 0 to SEED_MAX (the one rule for seed, data.seed, --seed)."""
    require_int(key, value, at_most=SEED_MAX)


def require_number(
    key: str,
    value: Any,
    *,
    above: float | None = None,
    at_least: float | None = None,
    below: float | None = None,
    at_most: float | None = None,
) -> None:
    """A finite int or float inside the given bounds (bools, inf and nan excluded)."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    ok = ok and (above is None or value > above) and (at_least is None or value >= at_least)
    ok = ok and (below is None or value < below) and (at_most is None or value <= at_most)
    if not ok:
        bounds = [
            f"> {above:g}" if above is not None else "",
            f">= {at_least:g}" if at_least is not None else "",
            f"< {below:g}" if below is not None else "",
            f"<= {at_most:g}" if at_most is not None else "",
        ]
        limits = " and ".join(b for b in bounds if b)
        raise UsageError(f"{key} must be a finite number{' ' + limits if limits else ''}, got {value!r}")


def nearest(name: str, known: Iterable[str]) -> str:
    """'; did you mean X?' for the closest known name, or the list of known names when none is close."""
    known = sorted(known)
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    return f"; did you mean {close[0]}?" if close else f"; known: {', '.join(known)}"


def require_choice(
    option: str, value: Any, choices: Iterable[str], *, comma_list: bool = False, also: str = ""
) -> None:
    """`value` one of `choices` (each part of it, for a comma list; or matching the regex `also`): the one
    check of a fixed-name option, which the command line runs while parsing and the Python API before
    any work, so both say the same line."""
    choices = tuple(choices)
    parts = str(value).split(",") if comma_list else [value]
    for part in parts:
        name = part.strip() if isinstance(part, str) else part
        if name not in choices and not (also and isinstance(name, str) and re.fullmatch(also, name)):
            raise UsageError(f"{option} {part!r} is not one of {', '.join(choices)}")
