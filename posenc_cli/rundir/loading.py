"""Loading a run: its model rebuilt from the directory alone, its tokenizer, its record, and the corpus
it was trained on (checked unchanged). Every command that reads a run loads it here."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from posenc_cli.core.device import EFFECTIVE_PRECISIONS
from posenc_cli.core.errors import UsageError
from posenc_cli.data import Corpus, DataConfig, data_config, load_corpus, require_same_corpus
from posenc_cli.data.corpus_config import SyntheticData, TaskData
from posenc_cli.data.tokenizers import run_tokenizer
from posenc_cli.model import GPT, ModelConfig
from posenc_cli.rundir.layout import CHECKPOINT, is_run_dir
from posenc_cli.rundir.record import (
    Checkpoint,
    RunRecord,
    TrainedText,
    check_own_checkpoint,
    load_checkpoint,
)
from posenc_cli.rundir.summary import RunSummary, read_summary


@dataclass
class LoadedRun:
    """A trained run as its directory records it: the model, its tokenizer, training length, summary
    and checkpoint (evaluation.run_target.RunTarget adds what evaluation asks of it)."""

    path: Path
    model: GPT
    tokenizer: Any  # a data.tokenizers.TokenizerBase
    train_len: int
    summary: RunSummary
    checkpoint: Checkpoint

    @property
    def record(self) -> RunRecord:
        return self.checkpoint.record

    @cached_property
    def data(self) -> DataConfig:
        """The data config the run was trained on, typed from its record."""
        return data_config(self.record.data)

    @property
    def trained_text(self) -> TrainedText:
        return TrainedText(self.record.corpus_sha256, self.data)

    @property
    def tokenizer_name(self) -> str:
        return self.tokenizer.kind

    @property
    def scheme(self) -> str:
        return self.model.cfg.scheme

    @property
    def seed(self) -> int:
        return self.record.seed

    @property
    def training_precision(self) -> str:
        """What the run computed in while training (core.device.EFFECTIVE_PRECISIONS); `unrecorded` for runs made
        before posenc recorded it, or whose record holds anything else."""
        recorded = self.record.precision
        return recorded if recorded in EFFECTIVE_PRECISIONS else "unrecorded"

    @property
    def max_len(self) -> int | None:
        return self.model.scheme.max_len

    def data_key(self) -> str:
        """What runs trained on the same corpus share: its data config and the tokenizer's fingerprint."""
        return repr((sorted(self.record.data.items()), self.tokenizer.fingerprint))


def load_run(run_dir: str | Path) -> LoadedRun:
    """Rebuild a run's model from its directory alone."""
    path = Path(run_dir)
    if not path.is_dir():
        raise UsageError(
            f"{path} is not a directory; give a run directory (one with {CHECKPOINT} and summary.json)"
        )
    if not is_run_dir(path):
        raise UsageError(f"{path} is not a run: it has no {CHECKPOINT} or summary.json")
    checkpoint = load_checkpoint(path / CHECKPOINT)
    summary = read_summary(path)
    check_own_checkpoint(path, checkpoint, summary)
    try:
        model = GPT(ModelConfig.from_dict(checkpoint.record.model_config))
        model.load_state_dict(checkpoint.model)
    except (TypeError, KeyError, RuntimeError, ValueError) as err:
        reason = " ".join(str(err).split())[:160]
        raise UsageError(
            f"{path / CHECKPOINT} no longer matches this version's model code ({reason})"
        ) from None
    model.eval()
    tokenizer = run_tokenizer(checkpoint.record.tokenizer, path)
    return LoadedRun(path, model, tokenizer, checkpoint.record.train_len, summary, checkpoint)


def require_text_run(run: LoadedRun) -> None:
    """A task run (data=task) has no text for perplexity, a probe or a sample to read: refused, naming
    what scores it."""
    if isinstance(run.data, TaskData):
        raise UsageError(
            f"{run.path} is a task run (data.task={run.data.task}), which has no text to "
            "score; evaluate it with posenc eval TASK_RUN... --lengths N,..."
        )


_corpora: dict[str, Corpus] = {}  # one load per distinct data config and tokenizer in a command


def run_corpus(run: LoadedRun) -> Corpus:
    """The corpus a run was trained on, rebuilt from its data config with the run's tokenizer (shared by
    runs on the same data and tokenizer) and checked against the sha256 the run recorded (stream.scan's,
    the token cache's key): a corpus changed since training is refused, never scored."""
    require_text_run(run)
    data, stored = run.data, run.record.corpus_sha256
    if run.data_key() not in _corpora:
        if not isinstance(data, SyntheticData):  # a changed file is refused before it is tokenized
            require_same_corpus(data, stored, str(run.path))
        _corpora[run.data_key()] = load_corpus(data, run.tokenizer)
    corpus = _corpora[run.data_key()]
    require_same_corpus(data, stored, str(run.path), now=corpus.sha256)
    return corpus
