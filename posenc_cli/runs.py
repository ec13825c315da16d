"""Run directories: finding them, reading them, and rebuilding their models.

A run directory holds .hydra/, metrics.csv, checkpoint.pt, summary.json and train.log; everything
downstream (eval, probe, inspect) reads runs only through this module.
"""

from __future__ import annotations

import glob
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from posenc_cli.checkpoint import FILENAME, load_checkpoint
from posenc_cli.data import Corpus, corpus_kind, load_corpus, require_same_corpus
from posenc_cli.data.tokenizers import run_tokenizer
from posenc_cli.errors import UsageError
from posenc_cli.model import GPT, ModelConfig
from posenc_cli.model.positional.rope_scaling import METHODS
from posenc_cli.ownership import read_json


def is_run_dir(path: Path) -> bool:
    return (path / "summary.json").is_file() or (path / FILENAME).is_file()


def read_summary(run_dir: Path) -> dict[str, Any]:
    """summary.json as a dict; one line naming the file when it is missing, corrupt or not an object."""
    return read_json(run_dir / "summary.json")


@dataclass
class LoadedRun:
    """A trained run, seen the way `evaluate_runs` and `probe_runs` see any model (`hf.HFModel` is the
    other kind): a name, a scheme label, a training length, tokens for a text, a scorer, variants."""

    path: Path
    model: GPT
    tokenizer: Any  # a data.tokenizers.TokenizerBase
    train_len: int
    summary: dict[str, Any]
    checkpoint: dict[str, Any]
    active: GPT | None = None  # the model as evaluated now (use_variant); None: as trained

    @property
    def tokenizer_name(self) -> str:
        return self.tokenizer.kind

    @property
    def scheme(self) -> str:
        return self.model.cfg.scheme

    @property
    def label(self) -> str:
        """The scheme as reports name it: `rope+yarn` for a run trained with that scaling,
        `sinusoidal+unscaled` for one trained off its scale_embeddings default."""
        return self.model.scheme.label

    @property
    def seed(self) -> int:
        return int(self.checkpoint.get("seed", self.summary.get("seed", 0)))

    @property
    def training_precision(self) -> str:
        """What the run computed in while training (fp32, bf16-autocast); `unrecorded` for runs made
        before posenc recorded it."""
        return str(self.checkpoint.get("precision") or "unrecorded")

    def model_with(self, **scheme_options: Any) -> GPT:
        """This run's model, rebuilt with scheme options changed (eval's --rope-scaling); itself if none."""
        if not scheme_options:
            return self.model
        cfg = self.model.cfg.to_dict()
        model = GPT(ModelConfig(**{**cfg, "scheme_options": {**cfg["scheme_options"], **scheme_options}}))
        model.load_state_dict(self.model.state_dict())
        return model.eval()

    @property
    def max_len(self) -> int | None:
        return self.model.scheme.max_len

    def facts(self) -> dict:
        from posenc_cli.report import scheme_facts

        return scheme_facts(self.active or self.model)

    def data_key(self) -> str:
        return repr((sorted(self.checkpoint["data"].items()), self.tokenizer.fingerprint))

    def eval_tokens(self, text: str | None, cache: dict):
        """(token ids, weights): the ids of `text`, or of the run's validation split (shared through
        `cache` by runs trained on the same data and tokenizer); weights(start, n) gives the UTF-8 bytes
        and characters of tokens start..start+n-1, a (2, n) tensor."""
        from posenc_cli.data import token_window

        if text is not None:
            tokens = self.tokenizer.encode(text)
        else:
            tokens = run_corpus(self).val
        per_id = torch.from_numpy(
            np.stack([self.tokenizer.byte_counts, self.tokenizer.char_counts]).astype(np.float64)
        )
        return tokens, lambda start, n: per_id[:, token_window(tokens, start, n)]

    def check_fits(self, lengths: list[int]) -> None:
        """posenc's models are small; `posenc bench` measures their evaluation memory (< 0.5 GiB at 8k)."""

    def scorer(self, device):
        from posenc_cli.evaluate import LogitsScorer

        return LogitsScorer((self.active or self.model).to(device), device)

    def variants(self, methods: list[str], factor: float | None) -> list[dict]:
        """The scheme options to evaluate this run with: for a scheme that takes RoPE scaling, one set per
        method ('none': the run as trained); any other run once, as it is. A run trained with a scaling
        has it built in, and a second one on top is refused rather than composed."""
        scheme = self.model.scheme
        if not scheme.scalable or methods == ["none"]:
            return [{}]
        if scheme.scaling is not None:
            raise UsageError(
                f"--rope-scaling {','.join(methods)}: {self.path} was trained with scheme.scaling={scheme.scaling.method}, "
                "which its evaluation always applies; evaluate it without --rope-scaling (scalings do not compose)"
            )
        for method in methods:
            if method not in METHODS:
                raise UsageError(
                    f"--rope-scaling {method} exists for hf: models only; posenc's own rotary runs "
                    f"take {', '.join(METHODS)}"
                )
        return [
            {"scaling": m}
            if m == "none"
            else {"scaling": m, "scaling_factor": factor, "scaling_len": self.train_len}
            for m in methods
        ]

    def use_variant(self, options: dict) -> str:
        """Evaluate with these scheme options from now on (the checkpoint is untouched); its label."""
        self.active = self.model_with(**options)
        return self.active.scheme.label

    def check_probe(self) -> None:
        from posenc_cli.probe import check_vocab

        check_vocab(self.tokenizer, str(self.path))
        run_corpus(self)  # the text the run was trained on, unchanged: checked before any work

    def probe_trials(self, length: int, depth: float, trials: int, seed: int, cache: dict):
        """[(trials x `length` tokens, key tokens per trial)]: one batch with filler from the run's own
        validation text, the key scored through the tokens that cover its characters."""
        from posenc_cli.probe import make_trials, without_episodes

        filler = ("filler", self.data_key())
        if filler not in cache:
            cache[filler] = without_episodes(run_corpus(self).val, self.tokenizer)
        sequences, key_tokens, _ = make_trials(cache[filler], self.tokenizer, length, depth, trials, seed)
        return [(sequences, key_tokens)]


def load_run(run_dir: str | Path) -> LoadedRun:
    """Rebuild a run's model from its directory alone."""
    path = Path(run_dir)
    if not path.is_dir():
        raise UsageError(
            f"{path} is not a directory; give a run directory (one with {FILENAME} and summary.json)"
        )
    if not is_run_dir(path):
        raise UsageError(f"{path} is not a run: it has no {FILENAME} or summary.json")
    payload = load_checkpoint(path / FILENAME)
    check_fields(payload, path / FILENAME)
    try:
        model = GPT(ModelConfig(**payload["model_config"]))
        model.load_state_dict(payload["model"])
    except (TypeError, KeyError, RuntimeError, ValueError) as err:
        reason = " ".join(str(err).split())[:160]
        raise UsageError(
            f"{path / FILENAME} no longer matches this version's model code ({reason})"
        ) from None
    model.eval()
    stored = payload.get("tokenizer") or {"kind": "char", "chars": payload["vocab"]}  # older runs: chars only
    tokenizer = run_tokenizer(stored, path)
    return LoadedRun(path, model, tokenizer, int(payload["train_len"]), read_summary(path), payload)


CHECKPOINT_FIELDS = {
    "model_config": dict,
    "model": dict,
    "tokenizer": dict,
    "train_len": int,
    "data": dict,
    "seed": int,
}


def check_fields(payload: dict[str, Any], path: Path) -> None:
    """The fields a loaded run reads, each present with its type: one line naming the file otherwise."""
    older = "tokenizer" not in payload and isinstance(payload.get("vocab"), list)  # chars only, checked below
    for name, kind in CHECKPOINT_FIELDS.items():
        if name == "tokenizer" and older:
            if not payload["vocab"] or not all(isinstance(c, str) for c in payload["vocab"]):
                raise UsageError(f"{path} is damaged: its vocabulary is not a list of characters")
            continue
        value = payload.get(name)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise UsageError(
                f"{path} is damaged: its field {name!r} is {type(value).__name__}, not {kind.__name__}"
            )
    if payload["train_len"] <= 0:
        raise UsageError(f"{path} is damaged: its training length {payload['train_len']} is not positive")


_corpora: dict[str, Corpus] = {}  # one load per distinct data config and tokenizer in a command


def run_corpus(run: LoadedRun) -> Corpus:
    """The corpus a run was trained on, rebuilt from its data config with the run's tokenizer (shared by
    runs on the same data and tokenizer) and checked against the sha256 the run recorded (stream.scan's,
    the token cache's key): a corpus changed since training is refused, never scored."""
    data, stored = run.checkpoint["data"], run.checkpoint.get("corpus_sha256")
    if run.data_key() not in _corpora:
        if corpus_kind(data) != "synthetic":  # a changed file is refused before it is tokenized
            require_same_corpus(data, stored, str(run.path))
        _corpora[run.data_key()] = load_corpus(data, run.tokenizer)
    corpus = _corpora[run.data_key()]
    require_same_corpus(data, stored, str(run.path), now=corpus.sha256)
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
        raise UsageError(
            f"no runs found under {outputs}/; train some first (posenc train ...) or name run directories"
        )
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
                raise UsageError(
                    f"{match} is not a run or a sweep: no summary.json or {FILENAME} in or below it"
                )
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


def load_targets(names: list[str], verb: str, hf_options: dict) -> tuple[list, str]:
    """What eval and probe work on: the posenc runs among `names` (the latest runs when nothing is
    named) and each `hf:ID_OR_PATH`, loaded."""
    from posenc_cli.hf import is_hf, load_hf_model

    hf_names = list(dict.fromkeys(n for n in names if is_hf(n)))
    paths = [n for n in names if not is_hf(n)]
    runs, why = load_finished_runs(paths, verb) if paths or not hf_names else ([], "the models you named")
    return [*runs, *(load_hf_model(name, **hf_options) for name in hf_names)], why


def checked_out(out: str | None) -> Path | None:
    """--out as given, checked before any work: not empty, not a file, not under a file, not a run's own
    directory, and writable (tried, not guessed from permission bits). Nothing is left behind here; None
    (the default) stays None."""
    from posenc_cli.ownership import holds_run

    if out is None:
        return None
    path = writable_place("--out", out)
    if path.exists() and not path.is_dir():
        raise UsageError(f"--out {out} is a file; give a directory to write to")
    if path.is_dir() and holds_run(path):
        raise UsageError(
            f"--out {out} holds a run, whose directory only training writes; give another directory"
        )
    return path


def checked_out_file(out: str | Path | None, option: str = "--out") -> Path | None:
    """A file to write (sample --out), checked before any work: not empty, not a directory, not under a
    file, not one of a run's own files, in a writable place. An ordinary existing file is replaced."""
    from posenc_cli.ownership import holds_run

    if out is None:
        return None
    path = writable_place(option, str(out))
    if path.is_dir() or str(out).endswith("/"):
        raise UsageError(f"{option} {out} is a directory; give the path of a file to write")
    if path.exists() and holds_run(path.parent):
        raise UsageError(f"{option} {out} is a file of the run in {path.parent}; give another path")
    return path


def writable_place(option: str, out: str) -> Path:
    """`out` as a path whose nearest existing ancestor is a directory this process can create files in
    (a temporary directory is made and removed there: permission bits lie to root and on read-only or
    special file systems)."""
    import tempfile

    if not out.strip():
        raise UsageError(f"{option} is empty; give a path to write to (or leave {option} out)")
    path = Path(out)
    existing = next(p for p in (path, *path.parents) if p.exists() or p == Path("."))
    if path != existing and not existing.is_dir():
        raise UsageError(
            f"{option} {out} lies under {existing}, which is a file; give a directory to write to"
        )
    where = existing if existing.is_dir() else existing.parent
    try:
        Path(tempfile.mkdtemp(prefix=".posenc-write-check-", dir=where)).rmdir()
    except OSError as err:
        raise UsageError(
            f"{option} {out}: {where} is not writable ({err.strerror}); give another path"
        ) from None
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

    ui.err.print(
        f"{doing} {len(paths)} run(s), {why}:\n" + "\n".join(f"  {path}" for path in paths), highlight=False
    )
