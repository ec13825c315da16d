"""One exception type for everything a user can fix; the CLI turns it into one line and exit code 2."""


class UsageError(Exception):
    """Bad input: the message names the bad value and what is allowed."""


class PositionOutOfRange(UsageError):
    """A scheme was asked for positions it cannot represent (learned, past its table)."""


def require_positive_int(key: str, value) -> None:
    """`key` must be a positive integer (bools excluded): one clear line otherwise."""
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise UsageError(f"{key} must be a positive integer, got {value!r}")
