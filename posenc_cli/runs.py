"""Run directories: finding them, reading them, and rebuilding their models.

A run directory holds .hydra/, metrics.csv, checkpoint.pt, summary.json and train.log; everything
downstream (eval, probe, inspect) reads runs only through this module.
"""

from __future__ import annotations

import glob
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from posenc_cli.checkpoint import FILENAME, load_checkpoint
from posenc_cli.data import Corpus, load_corpus
from posenc_cli.data.fingerprint import require_same_corpus
from posenc_cli.data.vocab import Vocab
from posenc_cli.errors import UsageError
from posenc_cli.model import GPT, ModelConfig
from posenc_cli.ownership import read_json


def is_run_dir(path: Path) -> bool:
    return (path / "summary.json").is_file() or (path / FILENAME).is_file()


def read_summary(run_dir: Path) -> dict[str, Any]:
    """summary.json as a dict; one line naming the file when it is missing, corrupt or not an object."""
    return read_json(run_dir / "summary.json")


@dataclass
class LoadedRun:
    path: Path
    model: GPT
    vocab: Vocab
    train_len: int
    summary: dict[str, Any]
    checkpoint: dict[str, Any]

    @property
    def scheme(self) -> str:
        return self.model.cfg.scheme

    @property
    def label(self) -> str:
        """The scheme as reports name it: `rope+yarn` for a run trained with that scaling."""
        return self.model.scheme.label

    @property
    def seed(self) -> int:
        return int(self.checkpoint.get("seed", self.summary.get("seed", 0)))

    def model_with(self, **scheme_options: Any) -> GPT:
        """This run's model, rebuilt with scheme options changed (eval's --rope-scaling); itself if none."""
        if not scheme_options:
            return self.model
        cfg = self.model.cfg.to_dict()
        model = GPT(ModelConfig(**{**cfg, "scheme_options": {**cfg["scheme_options"], **scheme_options}}))
        model.load_state_dict(self.model.state_dict())
        return model.eval()


def load_run(run_dir: str | Path) -> LoadedRun:
    """Rebuild a run's model from its directory alone."""
    path = Path(run_dir)
    if not path.is_dir():
        raise UsageError(f"{path} is not a directory; give a run directory (one with {FILENAME} and summary.json)")
    if not is_run_dir(path):
        raise UsageError(f"{path} is not a run: it has no {FILENAME} or summary.json")
    payload = load_checkpoint(path / FILENAME)
    check_fields(payload, path / FILENAME)
    try:
        model = GPT(ModelConfig(**payload["model_config"]))
        model.load_state_dict(payload["model"])
    except (TypeError, KeyError, RuntimeError, ValueError) as err:
        reason = " ".join(str(err).split())[:160]
        raise UsageError(f"{path / FILENAME} no longer matches this version's model code ({reason})") from None
    model.eval()
    return LoadedRun(path, model, Vocab(tuple(payload["vocab"])), payload["train_len"], read_summary(path), payload)


CHECKPOINT_FIELDS = {"model_config": dict, "model": dict, "vocab": list, "train_len": int, "data": dict, "seed": int}


def check_fields(payload: dict[str, Any], path: Path) -> None:
    """The fields a loaded run reads, each present with its type: one line naming the file otherwise."""
    for name, kind in CHECKPOINT_FIELDS.items():
        value = payload.get(name)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise UsageError(f"{path} is damaged: its field {name!r} is {type(value).__name__}, not {kind.__name__}")
    if not payload["vocab"] or not all(isinstance(c, str) for c in payload["vocab"]) or payload["train_len"] <= 0:
        raise UsageError(f"{path} is damaged: its vocabulary or training length is not valid")


_corpora: dict[str, Corpus] = {}  # one load per distinct data config in a command


def run_corpus(run: LoadedRun) -> Corpus:
    """The corpus a run was trained on, rebuilt from its data config and checked against the run's
    fingerprint (text sha256 and vocabulary): a file changed since training is refused, never scored."""
    import json

    data = run.checkpoint["data"]
    key = json.dumps(data, sort_keys=True, default=str)
    if key not in _corpora:
        _corpora[key] = load_corpus(data)
    corpus = _corpora[key]
    require_same_corpus(data, corpus.sha256, corpus.vocab.chars, run.checkpoint.get("corpus_sha256"),
                        run.vocab.chars, str(run.path))
    return corpus


def find_runs(path: Path) -> list[Path]:
    """A run directory itself, or every run directory below `path` (a sweep, or outputs/)."""
    if is_run_dir(path):
        return [path]
    return sorted({p.parent for p in path.rglob("summary.json")} | {p.parent for p in path.rglob(FILENAME)})


def latest_runs(outputs: Path) -> tuple[list[Path], str]:
    """The default selection, and a sentence saying why: the newest sweep if it is newer than every
    single run, otherwise the newest single run of each scheme (names start with a sortable time)."""
    sweeps = sorted(p for p in (outputs / "sweeps").glob("*") if p.is_dir() and find_runs(p))
    singles = sorted(p for p in (outputs / "runs").glob("*") if is_run_dir(p))
    if not sweeps and not singles:
        raise UsageError(f"no runs found under {outputs}/; train some first (posenc train ...) or name run directories")
    if sweeps and (not singles or sweeps[-1].name >= singles[-1].name[: len(sweeps[-1].name)]):
        return find_runs(sweeps[-1]), f"the latest sweep, {sweeps[-1]}"
    newest: dict[str, Path] = {}
    for run in singles:
        try:
            newest[read_summary(run).get("scheme", run.name)] = run
        except UsageError:  # an unreadable summary: finished_runs names it and skips it
            newest[run.name] = run
    return sorted(newest.values()), f"the latest single run of each scheme under {outputs / 'runs'}"


def select_runs(paths: list[str], outputs: Path = Path("outputs")) -> tuple[list[Path], str]:
    """Run directories from paths, sweep directories or globs; the latest runs when none are given."""
    if not paths:
        return latest_runs(outputs)
    selected: list[Path] = []
    for given in paths:
        matches = [Path(p) for p in sorted(glob.glob(given))] or [Path(given)]
        for match in matches:
            if not match.exists():
                raise UsageError(f"{given} does not exist; give run directories, sweep directories or a glob")
            found = find_runs(match) if match.is_dir() else []
            if not found:
                raise UsageError(f"{match} is not a run or a sweep: no summary.json or {FILENAME} in or below it")
            selected += [r for r in found if r.resolve() not in {s.resolve() for s in selected}]
    return selected, "the runs you named"


def finished_runs(paths: list[str], verb: str) -> tuple[list[Path], str]:
    """select_runs without the runs that have not finished training (each skipped one is named on
    stderr); `verb` (evaluate, probe) words the error when none is left."""
    from posenc_cli import ui

    selected, why = select_runs(paths)
    finished = []
    for path in selected:
        try:
            status = read_summary(path).get("status")
        except UsageError as err:
            if len(selected) == 1:
                raise
            ui.err.print(f"skipping {path}: {err}", highlight=False, soft_wrap=True)
            continue
        if status != "finished":
            ui.err.print(f"skipping {path}: its status is {status}")
        else:
            finished.append(path)
    if not finished:
        raise UsageError(f"none of the selected runs has finished training; nothing to {verb}")
    return finished, why


def load_finished_runs(paths: list[str], verb: str) -> tuple[list[LoadedRun], str]:
    """The finished runs among `paths` (or the latest), loaded, and why those were chosen."""
    finished, why = finished_runs(paths, verb)
    return [load_run(p) for p in finished], why


def checked_out(out: str | None) -> Path | None:
    """--out as given, checked before any work: not empty, not a file, not under a file, writable.
    Nothing is created here; None (the default) stays None."""
    import os

    if out is None:
        return None
    if not out.strip():
        raise UsageError("--out is empty; give a directory to write to (or leave --out out for the default)")
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise UsageError(f"--out {out} is a file; give a directory to write to")
    existing = next(p for p in (path, *path.parents) if p.exists())
    if not existing.is_dir():
        raise UsageError(f"--out {out} lies under {existing}, which is a file; give a directory to write to")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(f"--out {out}: {existing} is not writable; give a directory you can write to")
    return path


def default_out(kind: str) -> Path:
    """A fresh outputs/<kind>/<local time> directory of this command alone (a suffix if the name is taken)."""
    from posenc_cli.ownership import claim_new

    return claim_new(timestamped_dir(kind), given=False)


def timestamped_dir(kind: str) -> Path:
    """The default output directory of a command: outputs/<kind>/<local time>."""
    import datetime

    return Path("outputs") / kind / datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S")


def announce(paths: list[Path], why: str, doing: str) -> None:
    """Say on stderr which runs a command works on and why those (after its checks passed)."""
    from posenc_cli import ui

    ui.err.print(f"{doing} {len(paths)} run(s), {why}:\n" + "\n".join(f"  {path}" for path in paths), highlight=False)
