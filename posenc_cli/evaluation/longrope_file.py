"""--longrope-factors FILE: LongRoPE's λ per rotary pair, one decimal number a line (LongRoPE's searched
`long_factor`, as Phi-3's config lists them). Read as posenc reads every file it is given: a regular file
only (a FIFO would block, a device never end), at most MAX_FACTORS_BYTES, each line parsed strictly as a
decimal number (no expression, no nan, no inf, nothing evaluated), each at least 1 and at most
rope_scaling.MAX_FACTOR, non-decreasing from the highest frequency to the lowest, as LongRoPE's search
keeps them. Their count is checked against each model's rotary pairs where the model is known."""

from __future__ import annotations

import os
import re
import stat

from posenc_cli.core.errors import UsageError
from posenc_cli.model.positional.rope_scaling import MAX_FACTOR, LongRopeFactors

MAX_FACTORS_BYTES = 1 << 16  # 64 KiB: thousands of factors, past any head's pairs (Phi-3's 48)
NUMBER = re.compile(r"[0-9]+(\.[0-9]*)?([eE][+-]?[0-9]+)?|\.[0-9]+([eE][+-]?[0-9]+)?")


def file_bytes(path: str) -> bytes:
    """The bytes of the regular file `path`, refused in one line past MAX_FACTORS_BYTES or when it is
    not a regular file; opened without waiting, checked on the open file, so what is read was checked."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags)
    except OSError as error:
        raise UsageError(f"--longrope-factors {path}: cannot be read ({error.strerror})") from None
    with os.fdopen(fd, "rb") as file:
        if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
            raise UsageError(
                f"--longrope-factors {path}: not a regular file (a directory, a FIFO or a device)"
            )
        data = file.read(MAX_FACTORS_BYTES + 1)
    if len(data) > MAX_FACTORS_BYTES:
        raise UsageError(
            f"--longrope-factors {path}: larger than {MAX_FACTORS_BYTES >> 10} KiB; a factors file is one number "
            "per rotary pair"
        )
    return data


def parse_factors(text: str, source: str) -> LongRopeFactors:
    """One factor per line (a final newline allowed): each a plain decimal number in [1, MAX_FACTOR], the
    whole non-decreasing; anything else refused in one line naming the line."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if not lines:
        raise UsageError(
            f"--longrope-factors {source}: no factors; give one number per rotary pair, a line each"
        )
    values = []
    for number, line in enumerate(lines, 1):
        where = f"--longrope-factors {source} line {number}"
        if not NUMBER.fullmatch(line.strip()):
            raise UsageError(
                f"{where}: {line[:40]!r} is not a decimal number; give one factor (>= 1) per line"
            )
        value = float(line)
        if not 1 <= value <= MAX_FACTOR:
            raise UsageError(
                f"{where}: {value:g} is outside [1, {MAX_FACTOR:g}]; LongRoPE stretches, never shrinks"
            )
        if values and value < values[-1]:
            raise UsageError(
                f"{where}: {value:g} is below the line before ({values[-1]:g}); LongRoPE's factors are "
                "non-decreasing from the highest frequency to the lowest"
            )
        values.append(value)
    return LongRopeFactors(tuple(values), source)


def read_factors(path: str) -> LongRopeFactors:
    """The factors of the file `path`, verified (see the module docstring)."""
    try:
        text = file_bytes(path).decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"--longrope-factors {path}: not UTF-8 text; give one number per line") from None
    return parse_factors(text, path)
