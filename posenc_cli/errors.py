"""One exception type for everything a user can fix; the CLI turns it into one line and exit code 2."""


class UsageError(Exception):
    """Bad input: the message names the bad value and what is allowed."""


class PositionOutOfRange(UsageError):
    """A scheme was asked for positions it cannot represent (learned, past its table)."""
