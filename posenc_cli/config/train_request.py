"""`posenc train ARGS` read once (training.launch.train_request): Hydra's command line as its main takes
it, Hydra's parser's reading of it, the run a resume continues and this process's rank under torchrun.
Everything past the read takes this request, never the argument list."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from posenc_cli.config.hydra_args import override_key
from posenc_cli.core.choices import MULTIRUN_FLAGS


@dataclass(frozen=True)
class TrainRequest:
    """What `posenc train` was asked: `args`, Hydra's command line (the user's, with a resume's and a
    rank's overrides); `parsed`, Hydra's parser's reading of it (its flags and overrides); `resume`, the
    run continued in place (None: a fresh run or sweep); `rank`, this process's under torchrun (None:
    not under torchrun)."""

    args: tuple[str, ...]
    parsed: argparse.Namespace
    resume: Path | None = None
    rank: int | None = None

    @property
    def overrides(self) -> list[str]:
        return list(self.parsed.overrides)

    @property
    def multirun(self) -> bool:
        return bool(self.parsed.multirun)

    def gives(self, key: str) -> bool:
        """Whether an override sets `key` (hydra.run.dir=..., ++hydra.run.dir=...)."""
        return any(override_key(o) == key for o in self.overrides if "=" in o)

    def first_point(self, point: list[str]) -> TrainRequest:
        """The request of one job of a sweep, `point` its overrides: what `-m --info` describes (Hydra
        refuses -m with --info), the other flags kept."""
        flags = [a for a in self.args if a not in MULTIRUN_FLAGS and a not in self.overrides]
        parsed = argparse.Namespace(**{**vars(self.parsed), "multirun": False, "overrides": point})
        return TrainRequest((*point, *flags), parsed, self.resume, self.rank)
