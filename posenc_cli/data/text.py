"""Any UTF-8 text file as a character-level corpus."""

from __future__ import annotations

from pathlib import Path

from posenc_cli.errors import UsageError


def read_text_file(path: str | Path, what: str = "data.path") -> str:
    """Read a UTF-8 text file, turning every way it can be unusable into one clear line."""
    p = Path(path).expanduser()
    if not p.exists():
        raise UsageError(f"{what}={path} does not exist; give the path of a UTF-8 text file")
    if not p.is_file():
        raise UsageError(f"{what}={path} is not a file; give the path of a UTF-8 text file")
    raw = p.read_bytes()
    if not raw.strip():
        raise UsageError(f"{what}={path} is empty; give a UTF-8 text file with some text in it")
    if b"\x00" in raw:
        raise UsageError(f"{what}={path} looks binary (it contains NUL bytes); give a UTF-8 text file")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise UsageError(f"{what}={path} is not valid UTF-8 (bad byte at offset {err.start}); re-encode it as UTF-8") from None
