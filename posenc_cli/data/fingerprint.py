"""What a run was trained on, as a fingerprint: the sha256 of the corpus text (for a UTF-8 file, the
file's own sha256) and the vocabulary. A run stores both; whatever reads the corpus again (eval, probe,
inspect, resume) calls `require_same_corpus` first, so a changed file is refused, never scored."""

from __future__ import annotations

import hashlib
from typing import Any, Sequence

from posenc_cli.errors import UsageError


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def require_same_corpus(data: dict[str, Any], sha256: str, vocab: Sequence[str], stored_sha256: str | None,
                        stored_vocab: Sequence[str], where: str) -> None:
    """Refuse (one line naming `where`, the run) when the corpus `data` gives now is not the one the run
    recorded: another text (sha256) or another vocabulary. Runs from before fingerprints: vocabulary only."""
    source = f"data.path={data.get('path')}" if data.get("path") else f"data={data.get('name')}"
    if stored_sha256 is not None and sha256 != stored_sha256:
        raise UsageError(f"{where} was trained on another text than {source} holds now (sha256 {stored_sha256[:12]} "
                         f"then, {sha256[:12]} now); restore the file or train again")
    if tuple(vocab) != tuple(stored_vocab):
        raise UsageError(f"{where}: the vocabulary {source} gives now differs from the run's own; "
                         "restore the file or train again")
