"""The pre-flight: every job of `posenc train` checked before Hydra starts one (keys, ranges, scheme
options, corpus, lengths, memory, init_from and resume), so a bad override is one line and no run."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
from omegaconf import DictConfig, OmegaConf

from posenc_cli.config.hydra_args import composing, sweep_points
from posenc_cli.config.hydra_jobs import output_directory, refuse_per_job_sweep_dir, task_config
from posenc_cli.config.memory_model import check_run_memory, scheme_footprint
from posenc_cli.config.resumable import restated_values, resumed_config
from posenc_cli.config.schema import PosencConfig, anchored_paths, check_keys
from posenc_cli.config.train_request import TrainRequest
from posenc_cli.core.device import cpu_bf16, resolve_device, resumed_precision
from posenc_cli.core.errors import (
    UsageError,
)
from posenc_cli.core.paths import writable_place
from posenc_cli.data import DataConfig, corpus_tokenizer, data_record, require_same_corpus, stream
from posenc_cli.data.binary import load_bin
from posenc_cli.data.corpus_config import BinData, SyntheticData, TaskData, TextData
from posenc_cli.data.hf_datasets import hf_source
from posenc_cli.model import GPT
from posenc_cli.rundir.layout import SUMMARY
from posenc_cli.rundir.lineage import (
    check_same_shape,
    check_same_vocabulary,
    initial_state,
    lineage,
    saved_tokenizer,
    source_checkpoint,
)
from posenc_cli.rundir.resume import stored_record
from posenc_cli.rundir.summary import read_summary
from posenc_cli.training.session import model_config
from posenc_cli.training.tracking import check_loggers


def validate(cfg: DictConfig | dict[str, Any]) -> PosencConfig:
    """Everything checkable without training: keys, ranges, divisibility, scheme options, corpus, lengths,
    and whether the run fits in memory."""
    cfg = OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else cfg
    typed_cfg = check_keys(cfg)
    tc, mc = typed_cfg.train, typed_cfg.model
    max_len, positional, bias, per_sequence = scheme_footprint(
        typed_cfg.scheme, mc.n_embd, mc.n_head, block_size=tc.block_size, n_layer=mc.n_layer
    )
    trained_positions = tc.max_position or tc.block_size  # positions 0 .. this - 1 are trained on
    if max_len is not None and max_len < trained_positions:
        given = "train.max_position" if tc.max_position else "train.block_size"
        raise UsageError(
            f"scheme.max_len={max_len} is below {given}={trained_positions}: positions up to "
            f"{trained_positions - 1} are trained on; use scheme.max_len >= {trained_positions} (or null)"
        )
    device = resolve_device(typed_cfg.device)
    if device.type == "cpu":  # a bad POSENC_CPU_BF16 is one line before any directory, whatever is asked
        cpu_bf16()
    check_loggers(typed_cfg.logger)
    n_chars, split_len = corpus_size(typed_cfg.data)
    if split_len is not None and tc.block_size + 1 > split_len:
        raise UsageError(
            f"train.block_size={tc.block_size} does not fit the corpus: its smaller split has {split_len} "
            "characters; use "
            + (f"train.block_size <= {split_len - 1}, " if split_len > 1 else "")
            + "a larger corpus or another data.val_fraction"
        )
    cache_dir = getattr(typed_cfg.data, "cache_dir", None)
    if cache_dir is not None:  # the token cache is written while training: a bad place is found now
        if Path(writable_place("data.cache_dir", cache_dir)).is_file():
            raise UsageError(f"data.cache_dir={cache_dir} is a file; give a directory for the token cache")
    in_memory = isinstance(typed_cfg.data, SyntheticData)  # the others stream into a memory-mapped cache
    check_run_memory(
        typed_cfg,
        n_chars if in_memory else None,
        device,
        positional=positional,
        bias=bias,
        per_sequence=per_sequence,
    )
    if tc.init_from:
        validate_init_from(typed_cfg)
    if tc.resume and (Path(tc.resume) / SUMMARY).is_file():  # a changed corpus: before tokenizing
        stored = read_summary(Path(tc.resume)).description
        require_same_corpus(typed_cfg.data, stored and stored.corpus_sha256, tc.resume)
        record = stored and stored.precision
        if record and record.effective is not None:  # the checkpoint's own
            resumed_precision(device, tc.precision, record.effective, run=tc.resume)  # is checked on load
    return typed_cfg


@dataclass
class Job:
    """One job of `posenc train`, composed and validated once: what it trains on, and the composition
    Hydra's run_job names its directory from and writes to .hydra/."""

    whole: DictConfig  # Hydra's composition, Hydra's own config included
    config: PosencConfig  # the validated config the job trains on


@dataclass
class Preflight:
    """What the pre-flight checked: where Hydra will write, and the jobs it composed and validated."""

    directory: Path | None  # the run's or the sweep's; None when nothing will run (--cfg, --info, --help)
    jobs: dict[tuple[str, ...], Job] = field(default_factory=dict)  # by their points (a large sweep's spread)
    sweep: DictConfig | None = None  # a sweep's own composition: its launcher, directory and multirun.yaml


def preflight(request: TrainRequest, first: DictConfig | None = None) -> Preflight:
    """Validate every job that `posenc train`'s request would launch; raise UsageError on the first bad one.
    The directory Hydra will write to is read from the first composition (a sweep's own), so that
    claiming it does not compose the config again. `first`: the first job's composition, Hydra's config
    included, where check_first_point made it for the request's arguments."""
    parsed, resume = request.parsed, request.resume
    if parsed.help or parsed.hydra_help or parsed.shell_completion:
        return Preflight(None)
    with composing(parsed) as compose_point:
        points = sweep_points(parsed.overrides) if parsed.multirun else [parsed.overrides]
        if parsed.cfg or parsed.info:  # nothing runs: the first point composes or is one line (with -m,
            compose_point(points[0])  # print_sweep composes each point as it prints it)
            return Preflight(None)
        checked = Preflight(None)
        for overrides in points:
            known = first if first is not None and not checked.jobs else None
            job = checked_job(compose_point, overrides, whole=known, resume=resume)
            checked.jobs[tuple(overrides)] = job
            if checked.directory is None:
                if parsed.multirun:
                    checked.sweep = compose_point(parsed.overrides, sweep=True)
                    refuse_per_job_sweep_dir(checked.sweep)
                checked.directory = output_directory(checked.sweep or job.whole, parsed)
        return checked


def checked_job(
    compose_point: Callable[..., Any],
    overrides: list[str],
    *,
    whole: DictConfig | None = None,
    resume: Path | None = None,
) -> Job:
    """The job of one point composed as Hydra's run composes it (unless `whole` is that composition) and
    validated as it trains: local paths anchored, and a resume's config the run's stored one with what
    may change (checked against the composition with no overrides)."""
    if whole is None:
        whole = compose_point(overrides, select="")
    plain = anchored_paths(task_config(whole))
    if resume is not None:
        defaults = anchored_paths(compose_point([]))
        stored = stored_record(resume)[0]
        restated_values(plain, defaults, overrides, run=str(resume), stored=stored)
        plain = resumed_config(plain, overrides, stored=stored)
    return Job(whole, validate(plain))


def validate_init_from(cfg: PosencConfig) -> None:
    """train.init_from: RUN exists and its weights fit this run (same scheme, shape and vocabulary)."""
    source, saved = source_checkpoint(cfg.train.init_from)
    if (source / SUMMARY).is_file():
        lineage(source)  # its recorded ancestry is readable: checked before any directory
    theirs = saved_tokenizer(source, saved)
    with torch.device("meta"):
        model = GPT(model_config(cfg, len(theirs)))
    check_same_shape(source, saved, model.cfg.to_dict())  # before any corpus is read or tokenized
    initial_state(source, saved, model)
    if saved.record.data != data_record(cfg.data):  # another corpus: its vocabulary must be RUN's
        check_same_vocabulary(source, saved, corpus_tokenizer(cfg.data))


def corpus_size(data: DataConfig) -> tuple[int | None, int | None]:
    """(characters in the corpus, characters in its smaller split, training or validation), read in a streaming pass
    without tokenizing: the split bounds its tokens for char and bpe (a BPE token covers at least one
    character). None where there is nothing to bound (byte tokens; pre-tokenized arrays, checked here by
    loading their headers and checked again once loaded)."""
    if isinstance(data, BinData):
        load_bin(data)
        return None, None
    if isinstance(data, TaskData):  # instances are made per batch: no text to bound the window
        return None, None
    if isinstance(data, SyntheticData):
        source, n = None, data.n_chars
    elif isinstance(data, TextData):
        source = stream.file_source(data.path)
        n = stream.scan(source)[1]
    else:
        source = hf_source(data)[0]
        n = stream.scan(source)[1]
    first_val = (
        stream.split_point(n, data.val_fraction)
        if source is None
        else stream.validation_start(source, n, data.val_fraction)
    )
    return n, None if data.tokenizer == "byte" else min(first_val, n - first_val)
